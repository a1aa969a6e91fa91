"""The Python face of a communicator: collectives on any array, blocking or asynchronous."""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence, Union

from ringcomm import _arguments, _core, _log, _tuning
from ringcomm._buffers import empty_like, shape_of, split_shape, stacked_shape
from ringcomm._devices import set_call_stream
from ringcomm._environment import LaunchEnvironment, detect
from ringcomm.ops import SUM, as_op

_ALGORITHMS = {"auto", "ring", "tree", "direct", "hierarchical"}
_COMPRESSIONS = {
    None: "none",
    "none": "none",
    "fp16": "fp16",
    "float16": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "int8": "int8",
    "fp8": "fp8",
    "mxfp8": "fp8",
}
_TRANSPORTS = {"auto", "tcp", "shm", "ucx"}


class Work:
    """A collective in flight (``async_op=True``). ``wait()`` returns the collective's result."""

    def __init__(self, work: "_core.Work", result: Any, keepalive: tuple):
        self._work = work
        self._result = result
        self._keepalive = keepalive  # the arrays the engine is reading and writing

    def is_completed(self) -> bool:
        """Whether the collective has finished (successfully or not); never blocks."""
        return self._work.is_completed()

    def wait(self, timeout: Optional[float] = None) -> Any:
        """Blocks until the collective finishes and returns its result (what the blocking call
        would have returned); raises the collective's error if it failed.

        ``timeout`` (seconds) bounds this wait only: a RuntimeError when it passes, the
        collective still in flight. None waits until it is done, which the collective's own
        deadline (``init(timeout=...)``) bounds.
        """
        self._work.wait(0.0 if timeout is None else timeout)
        self._keepalive = ()
        return self._result

    def result(self) -> Any:
        """The collective's result, waiting for it as :meth:`wait` does (torch's name)."""
        return self.wait()


_ALGORITHM_VALUES = {name: _core.parse_algorithm(name) for name in _ALGORITHMS}


_COMPRESSION_VALUES = {key: _core.parse_compression(name) for key, name in _COMPRESSIONS.items()}


def _check_compression(compression) -> "_core.Compression":
    value = _COMPRESSION_VALUES.get(compression)
    if value is None:
        raise ValueError(
            f"compression must be None, 'fp16', 'bf16', 'int8' or 'fp8'; got {compression!r}"
        )
    return value


def _check_algorithm(algorithm: str) -> "_core.Algorithm":
    value = _ALGORITHM_VALUES.get(algorithm)
    if value is None:
        raise ValueError(f"algorithm must be one of {sorted(_ALGORITHMS)}; got {algorithm!r}")
    return value


class Communicator:
    """A group of ranks that run collectives together: :func:`init` makes one, and
    :meth:`split` and :meth:`shrink` make others from it.

    Every collective takes ``name=``: what the caller calls the data; error messages quote it.

    Collectives take NumPy arrays, torch tensors, CuPy arrays, or anything with ``__dlpack__``,
    ``__cuda_array_interface__`` or the buffer protocol. ``out=None`` means in place where the
    shapes allow it (allreduce, broadcast, reduce) and a new array otherwise. ``async_op=True``
    returns a :class:`Work`.

    CUDA arrays (a ringcomm built with CUDA): the collective runs after the work queued on
    ``stream`` (default: the array library's current stream) and that stream waits for its
    result; when the call returns (or ``wait()`` does) the result is ordered on the stream, not
    necessarily computed yet, as with NCCL. send/recv take CUDA arrays too, on the same terms
    (:meth:`send`, :meth:`recv`).
    """

    def __init__(self, core: "_core.Communicator", environment: Optional[LaunchEnvironment] = None):
        self._core = core
        self._environment = environment  # keeps a store server alive on the rank that hosts it

    # ---- identity -------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        """This process's index in the communicator, from 0 to ``size - 1``."""
        return self._core.rank

    @property
    def size(self) -> int:
        """The number of ranks in the communicator."""
        return self._core.size

    @property
    def local_rank(self) -> int:
        """This rank's index among the ranks on its host (Horovod's ``local_rank``)."""
        return self._core.local_rank

    @property
    def local_size(self) -> int:
        """The number of ranks on this rank's host."""
        return self._core.local_size

    @property
    def cross_rank(self) -> int:
        """The index of this rank's host among the hosts of the communicator (Horovod's
        ``cross_rank``)."""
        return self._core.host_index

    @property
    def cross_size(self) -> int:
        """The number of hosts the communicator spans."""
        return self._core.host_count

    def transport_to(self, peer: int) -> str:
        """How this rank reaches ``peer``: ``"shm"`` (shared memory, same host), ``"tcp"`` or
        ``"ucx"``; for diagnostics and tests."""
        return self._core.transport_to(peer)

    def choose_algorithm(self, nbytes: int) -> str:
        """The all-reduce algorithm ``algorithm="auto"`` picks for ``nbytes`` bytes on this
        communicator (``"ring"``, ``"tree"``, ``"direct"`` or ``"hierarchical"``), after
        ``RINGCOMM_ALGORITHM`` and what ``ringcomm-bench tune`` measured; every rank picks the
        same."""
        return self._core.choose_allreduce_algorithm(nbytes).name

    def __repr__(self) -> str:
        return f"<ringcomm.Communicator rank {self.rank} of {self.size}>"

    # ---- plumbing -------------------------------------------------------------------------
    @staticmethod
    def _timeout(timeout: Optional[float]) -> float:
        return _arguments.optional_seconds(timeout)

    @staticmethod
    def _finish(work, result, keepalive: tuple, async_op: bool):
        """The collective's result, or (async_op) a Work that holds the arrays until it is done."""
        return Work(work, result, keepalive) if async_op else result

    # Each collective checks shapes and allocates here, the bindings decode the arrays, and then
    # the call either waits (blocking: it returns the result) or returns a Work holding the arrays.

    # ---- collectives ----------------------------------------------------------------------
    def allreduce(
        self,
        x,
        out=None,
        op=SUM,
        algorithm: str = "auto",
        async_op: bool = False,
        timeout: Optional[float] = None,
        name: Optional[str] = None,
        compression: Optional[str] = None,
        prescale: float = 1.0,
        postscale: float = 1.0,
        stream=None,
        tensor_counts: Sequence[int] = (),
    ):
        """Reduces ``x`` over all ranks into ``out`` (default: ``x`` itself).

        ``compression="fp16"`` or ``"bf16"`` (float32 sum/avg): values travel as 16-bit floats
        and are accumulated in float32 at every hop; ``"int8"`` or ``"fp8"`` (OCP's mxfp8): as
        8 bits with a scale per block of 32 values, a quarter of the bytes. Every rank ends with
        the same bits. A NaN or an infinity spoils only its own place, not its block: the result
        is non-finite there (int8: the same inf, -inf or NaN as float32; fp8: NaN, e4m3 having no
        infinity) and finite elsewhere (docs/guides/algorithms.md). ``prescale`` multiplies the
        input first
        (e.g. ``1 / comm.size`` keeps fp16 partial sums from overflowing), ``postscale`` the
        result.

        ``op=ADASUM`` (floating-point types, a power-of-two number of ranks): Horovod's adaptive
        summation. ``tensor_counts``: ``x`` holds several tensors back to back, of these many
        elements, each combined with coefficients of its own (a fused Adasum; ADASUM only).
        """
        set_call_stream(stream)
        work = self._core.allreduce(
            x,
            out,
            as_op(op),
            _check_algorithm(algorithm),
            self._timeout(timeout),
            not async_op,
            _check_compression(compression),
            float(prescale),
            float(postscale),
            name or "",
            # No new list per call where there is nothing in it: this is the small-message path.
            [int(n) for n in tensor_counts] if len(tensor_counts) else (),
        )
        result = x if out is None else out
        return Work(work, result, (x, out)) if async_op else result

    def reduce_scatter(
        self,
        x,
        out=None,
        op=SUM,
        async_op: bool = False,
        timeout: Optional[float] = None,
        name: Optional[str] = None,
        stream=None,
    ):
        """Reduces ``x`` over all ranks; rank r receives block r of its first axis."""
        if out is None:
            out = empty_like(x, split_shape(x, self.size, "x"))
        set_call_stream(stream)
        work = self._core.reduce_scatter(
            x, out, as_op(op), self._timeout(timeout), not async_op, name or ""
        )
        return self._finish(work, out, (x, out), async_op)

    def allgather(
        self,
        x,
        out=None,
        async_op: bool = False,
        timeout: Optional[float] = None,
        name: Optional[str] = None,
        stream=None,
    ):
        """Concatenates every rank's ``x`` along the first axis, in rank order."""
        if out is None:
            out = empty_like(x, stacked_shape(x, self.size))
        set_call_stream(stream)
        work = self._core.allgather(x, out, self._timeout(timeout), not async_op, name or "")
        return self._finish(work, out, (x, out), async_op)

    def broadcast(
        self,
        x,
        root: int = 0,
        async_op: bool = False,
        timeout: Optional[float] = None,
        name: Optional[str] = None,
        stream=None,
    ):
        """Copies the root's ``x`` into every rank's ``x``."""
        set_call_stream(stream)
        work = self._core.broadcast(x, root, self._timeout(timeout), not async_op, name or "")
        return self._finish(work, x, (x,), async_op)

    def reduce(
        self,
        x,
        out=None,
        op=SUM,
        root: int = 0,
        async_op: bool = False,
        timeout: Optional[float] = None,
        name: Optional[str] = None,
        stream=None,
    ):
        """Reduces ``x`` over all ranks into the root's ``out`` (default: its ``x``).

        Returns the result on the root and None on the other ranks.
        """
        set_call_stream(stream)
        work = self._core.reduce(
            x, out, as_op(op), root, self._timeout(timeout), not async_op, name or ""
        )
        result = (x if out is None else out) if self.rank == root else None
        return self._finish(work, result, (x, out), async_op)

    def alltoall(
        self,
        x,
        out=None,
        async_op: bool = False,
        timeout: Optional[float] = None,
        name: Optional[str] = None,
        stream=None,
    ):
        """Block j (along the first axis) of rank i's ``x`` lands in block i of rank j's ``out``."""
        split_shape(x, self.size, "x")
        if out is None:
            out = empty_like(x, shape_of(x))
        set_call_stream(stream)
        work = self._core.alltoall(x, out, self._timeout(timeout), not async_op, name or "")
        return self._finish(work, out, (x, out), async_op)

    def gather(
        self,
        x,
        out=None,
        root: int = 0,
        async_op: bool = False,
        timeout: Optional[float] = None,
        name: Optional[str] = None,
        stream=None,
    ):
        """The root receives every rank's ``x``, concatenated in rank order; others get None."""
        if self.rank != root:
            out = None
        elif out is None:
            out = empty_like(x, stacked_shape(x, self.size))
        set_call_stream(stream)
        work = self._core.gather(x, out, root, self._timeout(timeout), not async_op, name or "")
        return self._finish(work, out, (x, out), async_op)

    def scatter(
        self,
        x=None,
        out=None,
        root: int = 0,
        async_op: bool = False,
        timeout: Optional[float] = None,
        name: Optional[str] = None,
        stream=None,
    ):
        """Rank r receives block r (along the first axis) of the root's ``x``.

        Ranks other than the root pass ``out`` (their block's shape and dtype); the root may
        omit it.
        """
        if self.rank == root:
            if x is None:
                raise ValueError("scatter: the root must pass x")
            if out is None:
                out = empty_like(x, split_shape(x, self.size, "x"))
        else:
            if out is None:
                raise ValueError("scatter: ranks other than the root must pass out")
            x = None
        set_call_stream(stream)
        work = self._core.scatter(x, out, root, self._timeout(timeout), not async_op, name or "")
        return self._finish(work, out, (x, out), async_op)

    def barrier(
        self, async_op: bool = False, timeout: Optional[float] = None, name: Optional[str] = None
    ):
        """Returns once every rank has called it (with ``async_op=True``, a :class:`Work`
        that completes then)."""
        work = self._core.barrier(self._timeout(timeout), not async_op, name or "")
        return self._finish(work, None, (), async_op)

    def send(
        self,
        x,
        dest: int,
        tag: int = 0,
        async_op: bool = False,
        timeout: Optional[float] = None,
        name: Optional[str] = None,
        stream=None,
    ):
        """Sends ``x`` to ``dest``; the matching ``recv`` must use the same size and tag.

        A CUDA array is sent once the work queued on ``stream`` before the call has run; it goes
        to the network as device memory where the link takes it (UCX built with CUDA), and
        through a pinned host copy otherwise."""
        set_call_stream(stream)
        work = self._core.send(x, dest, tag, self._timeout(timeout), not async_op, name or "")
        return self._finish(work, None, (x,), async_op)

    def recv(
        self,
        x,
        source: int,
        tag: int = 0,
        async_op: bool = False,
        timeout: Optional[float] = None,
        name: Optional[str] = None,
        stream=None,
    ):
        """Receives into ``x`` from ``source``.

        A CUDA array is written after the work queued on ``stream`` before the call, and that
        stream waits for it, as a collective's result."""
        set_call_stream(stream)
        work = self._core.recv(x, source, tag, self._timeout(timeout), not async_op, name or "")
        return self._finish(work, x, (x,), async_op)

    # ---- membership -----------------------------------------------------------------------
    def shrink(
        self, exclude: Optional[Sequence[int]] = None, timeout: Optional[float] = None
    ) -> "Communicator":
        """A new communicator of the ranks still alive, renumbered in their old order: called
        by every survivor after a failure (MPI ULFM's ``MPIX_Comm_shrink``), or to drop the
        ranks in ``exclude`` on purpose (every caller names the same ones).

        The survivors agree on who goes on without the rendezvous store or this communicator's
        links, so any rank may be the one lost, rank 0 included; every survivor gets the same
        members, also when another rank dies meanwhile. This communicator is left as it is
        (after a failure it raises :class:`CommunicatorClosed`).

        Partitions: only a side with more survivors than ranks it cannot reach (ranks whose
        processes are known to be gone do not count) goes on; elsewhere this raises
        :class:`MembershipError`, as on a rank the others went on without. ``timeout``
        (seconds; default the communicator's) bounds the whole call: :class:`TimeoutError` when
        it passes without a decision.
        """
        exclude = _arguments.ranks(exclude, "exclude", self.size)
        core = self._core.shrink(exclude, self._timeout(timeout))
        return Communicator(core, self._environment)

    def survivors(self, timeout: Optional[float] = None) -> list[int]:
        """Collective over the ranks still alive: the ranks of this communicator that go on, as
        every survivor agrees (the agreement of :meth:`shrink` without a new communicator), for
        callers that must name the lost ranks themselves. Raises as :meth:`shrink` does."""
        return list(self._core.survivors(self._timeout(timeout)))

    def grow(self, expect: int = 0, timeout: Optional[float] = None) -> "Communicator":
        """Collective over the members: admits the processes that asked to join (:func:`join`,
        or :func:`init` in a process started with ``RINGCOMM_JOIN``) into a new communicator of
        the members, in their order, then the newcomers. Returns this communicator itself
        where nobody asked (one small all-reduce: cheap to call every step), else the grown one
        (this one stays as it is). ``expect``: wait, by the timeout, until at least this many
        have asked (a replacement the launcher started).

        The members agree as :meth:`shrink`'s survivors do: a member or a newcomer that dies
        meanwhile is left out, and every member and newcomer ends with the same communicator.
        Raises what an all-reduce of this communicator raises where a member is lost (shrink
        first), ``TimeoutError`` where fewer than ``expect`` asked in time. Give the newcomers
        the state they need next, for example with :meth:`broadcast` from rank 0."""
        expect = _arguments.whole_number(expect, "expect", 0, meaning=" (a count of newcomers)")
        core = self._core.grow(expect, self._timeout(timeout))
        return self if core is None else Communicator(core, self._environment)

    @property
    def address(self) -> str:
        """Where a new process finds this rank to join the job (``"host:port"`` of its mailbox):
        any member's will do for :func:`join`. Empty for a communicator of one rank made by
        :func:`init`, which newcomers cannot reach."""
        return self._core.address

    def split(self, color: int, key: int = 0) -> Optional["Communicator"]:
        """Collective (MPI's ``Comm_split``): a communicator of the ranks that pass the same
        ``color``, numbered by ``key`` and then by rank; ``None`` for a negative color."""
        color = _arguments.whole_number(color, "color", meaning=" (negative: this rank joins none)")
        key = _arguments.whole_number(key, "key")
        core = self._core.split(color, key)
        return None if core is None else Communicator(core, self._environment)

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


# Where the members of the job's first communicator keep their addresses on the launcher's store,
# for a process that replaces a lost rank (RINGCOMM_JOIN=1).
DOOR_KEY = "ringcomm/door"


def init(
    timeout: Optional[float] = None,
    transport: Optional[str] = None,
    algorithm: Optional[str] = None,
) -> Communicator:
    """Joins the job this process was launched into (ringcomm-run, torchrun, mpirun, or none).

    ``timeout`` (seconds) bounds rendezvous and, by default, every collective; ``transport``
    ("auto", "tcp", "shm", "ucx") and ``algorithm`` ("auto", "ring", "tree", "direct",
    "hierarchical") override the RINGCOMM_TRANSPORT / RINGCOMM_ALGORITHM environment variables.

    In a process started to replace a lost rank (``RINGCOMM_JOIN`` set, as ``ringcomm-run
    --keep-survivors --replace`` does), it joins the running job instead: see :func:`join`.
    """
    if os.environ.get("RINGCOMM_JOIN"):
        return join(timeout=timeout, transport=transport, algorithm=algorithm)
    config = _configured(timeout, transport, algorithm)
    given_secret = bool(config.secret)
    environment = detect(config.timeout, config.secret)
    config.secret = environment.secret
    _core.configure_observability(config, environment.rank)  # the rank in the log's prefix
    if _log.enabled(_log.INFO, "INIT"):
        _log.info(
            "INIT",
            f"launched by {environment.launcher}: rank {environment.rank} of {environment.size}",
        )
    if _log.enabled(_log.INFO, "AUTH"):
        source = "given (RINGCOMM_SECRET or _FILE)" if given_secret else "made for this job"
        _log.info("AUTH", f"job secret {source}, {len(config.secret)} bytes")
    _tuning.apply(config, environment.size)  # what `ringcomm-bench tune` measured, if anything
    if environment.scope:
        core = _core.Communicator.create_in_scope(
            environment.store, environment.scope, environment.rank, environment.size, config
        )
    else:
        core = _core.Communicator.create(
            environment.store, environment.rank, environment.size, config
        )
    environment.met()
    if core.size > 1:
        core.publish_door(_board() or environment.store, DOOR_KEY)
    return Communicator(core, environment)


def _board(secret: bytes = b"") -> Optional["_core.Store"]:
    """Where the members keep their addresses for newcomers, where set apart from the job's
    store: RINGCOMM_DOOR_DIR, a directory every host sees (under mpirun and srun, whose stores
    die with a rank); with ``secret``, else the launcher's store (RINGCOMM_STORE)."""
    if os.environ.get("RINGCOMM_DOOR_DIR"):
        return _core.FileStore(os.environ["RINGCOMM_DOOR_DIR"])
    if secret and os.environ.get("RINGCOMM_STORE"):
        host, _, port = os.environ["RINGCOMM_STORE"].rpartition(":")
        return _core.TcpStore(host.strip("[]"), int(port), 30.0, secret)
    return None


def _configured(
    timeout: Optional[float], transport: Optional[str], algorithm: Optional[str]
) -> "_core.Config":
    """The core's Config from the environment, with init()'s and join()'s arguments over it."""
    config = _core.Config.from_environment()
    if timeout is not None:
        config.timeout = _arguments.seconds(timeout)
    if transport is not None:
        if transport not in _TRANSPORTS:
            raise ValueError(f"transport must be one of {sorted(_TRANSPORTS)}; got {transport!r}")
        config.transport = _core.parse_transport(transport)
    if algorithm is not None:
        config.algorithm = _check_algorithm(algorithm)
    # The log's level and file from here on (the rank joins its prefix once it is known).
    _core.configure_observability(config)
    return config


def join(
    address: Union[str, Sequence[str], None] = None,
    timeout: Optional[float] = None,
    transport: Optional[str] = None,
    algorithm: Optional[str] = None,
) -> Communicator:
    """A new process joins a running job: it proves the job's secret (``RINGCOMM_SECRET``) to a
    member, asks to join, and returns once the members have called :meth:`Communicator.grow`,
    with its communicator of the grown job (its rank after the members').

    ``address``: members' addresses (:attr:`Communicator.address`, ``"host:port"``), any one
    of which will do; by default ``RINGCOMM_JOIN``'s, or the addresses the members keep, which
    follow them through shrinks and grows: in ``RINGCOMM_DOOR_DIR`` (a directory every host sees,
    set for the whole job, under mpirun and srun), or on the launcher's store
    (``RINGCOMM_STORE``, under ringcomm-run).
    ``timeout`` bounds the wait for the members to admit it. Raises ``TransportError`` where no
    member proves the secret (another job's addresses, or another secret)."""
    config = _configured(timeout, transport, algorithm)
    if not config.secret:
        raise RuntimeError(
            "ringcomm.join: no job secret: set RINGCOMM_SECRET (or RINGCOMM_SECRET_FILE) to the "
            "job's, which ringcomm-run passes to the processes it starts"
        )
    if address is None:
        given = os.environ.get("RINGCOMM_JOIN", "")
        address = [] if given in ("", "1") else given.split(",")
    addresses = [address] if isinstance(address, str) else [str(a) for a in address]
    board = None
    try:
        board = _board(config.secret)
    except _core.RingcommError:
        if not addresses:
            raise
        # The members' own mailboxes will say what is wrong (a wrong secret, their log).
    if not addresses and board is None:
        raise ValueError(
            "ringcomm.join: no way to find the members: pass address= (any member's "
            "Communicator.address), or set RINGCOMM_JOIN=host:port, RINGCOMM_DOOR_DIR to the "
            "members' (under mpirun and srun), or RINGCOMM_STORE to the launcher's store"
        )
    core = _core.Communicator.join(addresses, board, DOOR_KEY, config, config.timeout)
    if board is not None and core.size > 1:
        core.publish_door(board, DOOR_KEY)
    environment = LaunchEnvironment(
        core.rank, core.size, board, "ringcomm-join", config.secret, [board] if board else []
    )
    return Communicator(core, environment)
