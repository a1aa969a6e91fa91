"""Reduction operators, with mpi4py's names (``ringcomm.SUM`` ...)."""

from ringcomm._core import ReduceOp

SUM = ReduceOp.SUM
AVG = ReduceOp.AVG  # sum divided by the world size; integer types truncate
MIN = ReduceOp.MIN
MAX = ReduceOp.MAX
PROD = ReduceOp.PROD

_BY_NAME = {
    "sum": SUM,
    "avg": AVG,
    "mean": AVG,
    "min": MIN,
    "max": MAX,
    "prod": PROD,
    "product": PROD,
}


def as_op(op) -> ReduceOp:
    if type(op) is ReduceOp:
        return op
    if isinstance(op, str) and op.lower() in _BY_NAME:
        return _BY_NAME[op.lower()]
    raise ValueError(
        f"op must be one of ringcomm.SUM, AVG, MIN, MAX, PROD (or their names); got {op!r}"
    )
