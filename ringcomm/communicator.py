"""The Python face of a communicator: collectives on any array, blocking or asynchronous."""

from __future__ import annotations

from typing import Any, Optional

from ringcomm import _core
from ringcomm._buffers import Buffer, as_buffer, empty_like
from ringcomm._environment import LaunchEnvironment, detect
from ringcomm.ops import SUM, as_op

_ALGORITHMS = {"auto", "ring", "tree", "direct"}
_TRANSPORTS = {"auto", "tcp", "shm"}


class Work:
    """A collective in flight (``async_op=True``). ``wait()`` returns the collective's result."""

    def __init__(self, work: "_core.Work", result: Any, keepalive: tuple):
        self._work = work
        self._result = result
        self._keepalive = keepalive  # the arrays the engine is reading and writing

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def wait(self, timeout: Optional[float] = None) -> Any:
        self._work.wait(0.0 if timeout is None else timeout)
        self._keepalive = ()
        return self._result

    def result(self) -> Any:
        return self.wait()


def _check_algorithm(algorithm: str) -> "_core.Algorithm":
    if algorithm not in _ALGORITHMS:
        raise ValueError(f"algorithm must be one of {sorted(_ALGORITHMS)}; got {algorithm!r}")
    return _core.parse_algorithm(algorithm)


def _check_same_type(a: Buffer, b: Buffer, a_name: str, b_name: str) -> None:
    if a.dtype != b.dtype:
        raise TypeError(f"{b_name} has dtype {b.dtype.name} but {a_name} has {a.dtype.name}")


def _leading_split(buffer: Buffer, parts: int, name: str) -> tuple:
    """Shape of one of `parts` equal pieces of `buffer` along its first axis."""
    shape = buffer.shape or (1,)
    if shape[0] % parts != 0:
        raise ValueError(f"{name} has {shape[0]} rows along its first axis, which does not split "
                         f"evenly across {parts} ranks")
    return (shape[0] // parts,) + tuple(shape[1:])


class Communicator:
    """A group of ranks that run collectives together.

    Collectives take NumPy arrays, torch CPU tensors, or anything with ``__dlpack__`` or the
    buffer protocol. ``out=None`` means in place where the shapes allow it (allreduce, broadcast,
    reduce) and a new array otherwise. ``async_op=True`` returns a :class:`Work`.
    """

    def __init__(self, core: "_core.Communicator", environment: Optional[LaunchEnvironment] = None):
        self._core = core
        self._environment = environment  # keeps a store server alive on the rank that hosts it

    # ---- identity -------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._core.rank

    @property
    def size(self) -> int:
        return self._core.size

    @property
    def local_rank(self) -> int:
        return self._core.local_rank

    @property
    def local_size(self) -> int:
        return self._core.local_size

    @property
    def cross_rank(self) -> int:
        return self._core.host_index

    @property
    def cross_size(self) -> int:
        return self._core.host_count

    def transport_to(self, peer: int) -> str:
        return self._core.transport_to(peer)

    def choose_algorithm(self, nbytes: int) -> str:
        return self._core.choose_allreduce_algorithm(nbytes).name

    def __repr__(self) -> str:
        return f"<ringcomm.Communicator rank {self.rank} of {self.size}>"

    # ---- plumbing -------------------------------------------------------------------------
    @staticmethod
    def _timeout(timeout: Optional[float]) -> float:
        if timeout is None:
            return 0.0
        if timeout <= 0:
            raise ValueError(f"timeout must be positive seconds; got {timeout}")
        return float(timeout)

    @staticmethod
    def _finish(work, result, async_op: bool, keepalive: tuple):
        if async_op:
            return Work(work, result, keepalive)
        return result

    # ---- collectives ----------------------------------------------------------------------
    def allreduce(self, x, out=None, op=SUM, algorithm: str = "auto", async_op: bool = False,
                  timeout: Optional[float] = None):
        """Reduces ``x`` over all ranks into ``out`` (default: ``x`` itself)."""
        src = as_buffer(x, "x", writable=out is None)
        result = x if out is None else out
        dst = src if out is None else as_buffer(out, "out", writable=True)
        if out is not None:
            _check_same_type(src, dst, "x", "out")
            if dst.count != src.count:
                raise ValueError(f"out has {dst.count} elements but x has {src.count}")
        work = self._core.allreduce(src.address, dst.address, src.count, src.dtype, as_op(op),
                                    _check_algorithm(algorithm), self._timeout(timeout), not async_op)
        return self._finish(work, result, async_op, (src, dst))

    def reduce_scatter(self, x, out=None, op=SUM, async_op: bool = False,
                       timeout: Optional[float] = None):
        """Reduces ``x`` over all ranks; rank r receives rows r*n/size..(r+1)*n/size."""
        src = as_buffer(x, "x")
        if out is None:
            out = empty_like(x, _leading_split(src, self.size, "x"))
        dst = as_buffer(out, "out", writable=True)
        _check_same_type(src, dst, "x", "out")
        if src.count != dst.count * self.size:
            raise ValueError(f"x must hold size * len(out) = {dst.count * self.size} elements; "
                             f"it holds {src.count}")
        work = self._core.reduce_scatter(src.address, dst.address, dst.count, src.dtype, as_op(op),
                                         self._timeout(timeout), not async_op)
        return self._finish(work, out, async_op, (src, dst))

    def allgather(self, x, out=None, async_op: bool = False, timeout: Optional[float] = None):
        """Concatenates every rank's ``x`` along the first axis, in rank order."""
        src = as_buffer(x, "x")
        if out is None:
            shape = src.shape or (1,)
            out = empty_like(x, (shape[0] * self.size,) + tuple(shape[1:]))
        dst = as_buffer(out, "out", writable=True)
        _check_same_type(src, dst, "x", "out")
        if dst.count != src.count * self.size:
            raise ValueError(f"out must hold size * len(x) = {src.count * self.size} elements; "
                             f"it holds {dst.count}")
        work = self._core.allgather(src.address, dst.address, src.count, src.dtype,
                                    self._timeout(timeout), not async_op)
        return self._finish(work, out, async_op, (src, dst))

    def broadcast(self, x, root: int = 0, async_op: bool = False, timeout: Optional[float] = None):
        """Copies the root's ``x`` into every rank's ``x``."""
        buf = as_buffer(x, "x", writable=True)
        work = self._core.broadcast(buf.address, buf.count, buf.dtype, root, self._timeout(timeout),
                                    not async_op)
        return self._finish(work, x, async_op, (buf,))

    def reduce(self, x, out=None, op=SUM, root: int = 0, async_op: bool = False,
               timeout: Optional[float] = None):
        """Reduces ``x`` over all ranks into the root's ``out`` (default: its ``x``)."""
        src = as_buffer(x, "x", writable=out is None and self.rank == root)
        dst = src
        if out is not None:
            dst = as_buffer(out, "out", writable=True)
            _check_same_type(src, dst, "x", "out")
            if dst.count != src.count:
                raise ValueError(f"out has {dst.count} elements but x has {src.count}")
        result = (x if out is None else out) if self.rank == root else None
        work = self._core.reduce(src.address, dst.address, src.count, src.dtype, as_op(op), root,
                                 self._timeout(timeout), not async_op)
        return self._finish(work, result, async_op, (src, dst))

    def alltoall(self, x, out=None, async_op: bool = False, timeout: Optional[float] = None):
        """Block j (along the first axis) of rank i's ``x`` lands in block i of rank j's ``out``."""
        src = as_buffer(x, "x")
        _leading_split(src, self.size, "x")
        if out is None:
            out = empty_like(x, src.shape)
        dst = as_buffer(out, "out", writable=True)
        _check_same_type(src, dst, "x", "out")
        if dst.count != src.count:
            raise ValueError(f"out has {dst.count} elements but x has {src.count}")
        work = self._core.alltoall(src.address, dst.address, src.count // self.size, src.dtype,
                                   self._timeout(timeout), not async_op)
        return self._finish(work, out, async_op, (src, dst))

    def gather(self, x, out=None, root: int = 0, async_op: bool = False,
               timeout: Optional[float] = None):
        """The root receives every rank's ``x``, concatenated in rank order; others get None."""
        src = as_buffer(x, "x")
        dst, result = None, None
        if self.rank == root:
            if out is None:
                shape = src.shape or (1,)
                out = empty_like(x, (shape[0] * self.size,) + tuple(shape[1:]))
            dst = as_buffer(out, "out", writable=True)
            _check_same_type(src, dst, "x", "out")
            if dst.count != src.count * self.size:
                raise ValueError(f"out must hold size * len(x) = {src.count * self.size} elements; "
                                 f"it holds {dst.count}")
            result = out
        work = self._core.gather(src.address, dst.address if dst else 0, src.count, src.dtype, root,
                                 self._timeout(timeout), not async_op)
        return self._finish(work, result, async_op, (src, dst))

    def scatter(self, x=None, out=None, root: int = 0, async_op: bool = False,
                timeout: Optional[float] = None):
        """Rank r receives block r (along the first axis) of the root's ``x``.

        Non-root ranks pass ``out`` (their block's shape and dtype); the root may omit it.
        """
        src = None
        if self.rank == root:
            if x is None:
                raise ValueError("scatter: the root must pass x")
            src = as_buffer(x, "x")
            if out is None:
                out = empty_like(x, _leading_split(src, self.size, "x"))
        elif out is None:
            raise ValueError("scatter: ranks other than the root must pass out")
        dst = as_buffer(out, "out", writable=True)
        if src is not None:
            _check_same_type(src, dst, "x", "out")
            if src.count != dst.count * self.size:
                raise ValueError(f"x must hold size * len(out) = {dst.count * self.size} elements; "
                                 f"it holds {src.count}")
        work = self._core.scatter(src.address if src else 0, dst.address, dst.count, dst.dtype, root,
                                  self._timeout(timeout), not async_op)
        return self._finish(work, out, async_op, (src, dst))

    def barrier(self, async_op: bool = False, timeout: Optional[float] = None):
        work = self._core.barrier(self._timeout(timeout), not async_op)
        return self._finish(work, None, async_op, ())

    def send(self, x, dest: int, tag: int = 0, async_op: bool = False,
             timeout: Optional[float] = None):
        """Sends ``x`` to ``dest``; the matching ``recv`` must use the same size and tag."""
        buf = as_buffer(x, "x")
        work = self._core.send(buf.address, buf.nbytes, dest, tag, self._timeout(timeout), not async_op)
        return self._finish(work, None, async_op, (buf,))

    def recv(self, x, source: int, tag: int = 0, async_op: bool = False,
             timeout: Optional[float] = None):
        """Receives into ``x`` from ``source``."""
        buf = as_buffer(x, "x", writable=True)
        work = self._core.recv(buf.address, buf.nbytes, source, tag, self._timeout(timeout), not async_op)
        return self._finish(work, x, async_op, (buf,))

    # ---- lifetime -------------------------------------------------------------------------
    def abort(self, reason: str = "abort() called") -> None:
        """Fails pending and future collectives here, and makes peers fail fast too."""
        self._core.abort(reason)

    def shutdown(self) -> None:
        """Waits for queued collectives, then releases sockets and shared memory."""
        self._core.shutdown()

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def init(timeout: Optional[float] = None, transport: Optional[str] = None,
         algorithm: Optional[str] = None) -> Communicator:
    """Joins the job this process was launched into (ringcomm-run, torchrun, mpirun, or none).

    ``timeout`` (seconds) bounds rendezvous and, by default, every collective; ``transport``
    ("auto", "tcp", "shm") and ``algorithm`` ("auto", "ring", "tree", "direct") override the
    RINGCOMM_TRANSPORT / RINGCOMM_ALGORITHM environment variables.
    """
    config = _core.Config.from_environment()
    if timeout is not None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive seconds; got {timeout}")
        config.timeout = float(timeout)
    if transport is not None:
        if transport not in _TRANSPORTS:
            raise ValueError(f"transport must be one of {sorted(_TRANSPORTS)}; got {transport!r}")
        config.transport = _core.parse_transport(transport)
    if algorithm is not None:
        config.algorithm = _check_algorithm(algorithm)
    environment = detect(config.timeout)
    core = _core.Communicator.create(environment.store, environment.rank, environment.size, config)
    return Communicator(core, environment)
