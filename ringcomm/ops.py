"""Reduction operators, with mpi4py's names (``ringcomm.SUM`` ...)."""

from ringcomm._core import ReduceOp

#: The sum (bool: logical or; integers wrap around).
SUM = ReduceOp.SUM
#: The sum divided by the world size; integer types truncate, bool refuses it.
AVG = ReduceOp.AVG
#: The minimum (bool: logical and).
MIN = ReduceOp.MIN
#: The maximum (bool: logical or).
MAX = ReduceOp.MAX
#: The product (bool: logical and; integers wrap around).
PROD = ReduceOp.PROD
#: Horovod's adaptive summation (all-reduce only, floating-point types, a power-of-two number of
#: ranks): pairs of vectors a, b become (1 - a.b/2|a|^2) a + (1 - a.b/2|b|^2) b, up a binary tree.
ADASUM = ReduceOp.ADASUM

_BY_NAME = {
    "sum": SUM,
    "avg": AVG,
    "mean": AVG,
    "min": MIN,
    "max": MAX,
    "prod": PROD,
    "product": PROD,
    "adasum": ADASUM,
}


def as_op(op) -> ReduceOp:
    if type(op) is ReduceOp:
        return op
    if isinstance(op, str) and op.lower() in _BY_NAME:
        return _BY_NAME[op.lower()]
    raise ValueError(
        f"op must be one of ringcomm.SUM, AVG, MIN, MAX, PROD, ADASUM (or their names); got {op!r}"
    )
