"""
ringcomm's C++ core (private: use the ringcomm package)
"""
from __future__ import annotations
# made with pybind11 3.1.0, pybind11-stubgen 3.0.0
import builtins
import collections.abc
import numpy
import numpy.typing
import typing
import typing_extensions
__all__: list[str] = ['Algorithm', 'Communicator', 'CommunicatorClosed', 'Compression', 'Config', 'DataType', 'FileStore', 'HashStore', 'JoinPolicy', 'LogLevel', 'MembershipError', 'MismatchError', 'PeerError', 'PrefixStore', 'ReduceOp', 'RingcommError', 'Store', 'TcpStore', 'TcpStoreServer', 'TensorOp', 'TensorQueue', 'TensorQueueStats', 'TensorRequest', 'TensorWork', 'TimeoutError', 'TransportError', 'TransportKind', 'Work', 'build_info', 'built_with_cuda', 'configure_observability', 'feed_back_error', 'horovod_timeline_active', 'log', 'log_enabled', 'mps_running', 'parse_algorithm', 'parse_compression', 'parse_join_policy', 'parse_log_level', 'parse_log_subsystems', 'parse_transport', 'read_dlpack', 'round_to_wire', 'shared_buffer', 'start_horovod_timeline', 'stop_horovod_timeline', 'ucx_info', 'view_array']
class RingcommError(RuntimeError):
    """Base class of ringcomm's errors."""

class PeerError(RingcommError):
    """A collective failed because of a peer; see .peer, .rank, .operation, .elapsed."""

    peer: int
    rank: int
    operation: str
    elapsed: float

class TimeoutError(PeerError, builtins.TimeoutError):
    """A deadline passed while waiting for the peer named in the message."""

class TransportError(PeerError, ConnectionError):
    """A peer died, aborted or closed its connection."""

class MismatchError(PeerError):
    """Ranks called different collectives, or with different sizes or types."""

class CommunicatorClosed(RingcommError, ValueError):
    """The communicator was shut down or poisoned by an earlier failure."""

class MembershipError(RingcommError):
    """shrink() on a side that may not go on."""

class LogLevel:
    """
    Members:
    
      NONE
    
      WARN
    
      INFO
    
      TRACE
    """
    INFO: typing.ClassVar[LogLevel]
    NONE: typing.ClassVar[LogLevel]
    TRACE: typing.ClassVar[LogLevel]
    WARN: typing.ClassVar[LogLevel]
    __members__: typing.ClassVar[dict[str, LogLevel]]
    @typing.overload
    def __eq__(self, other: LogLevel) -> builtins.bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> builtins.bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: LogLevel) -> builtins.bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> builtins.bool:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class DataType:
    """
    Members:
    
      int8
    
      uint8
    
      int16
    
      int32
    
      int64
    
      float16
    
      bfloat16
    
      float32
    
      float64
    
      bool
    """
    __members__: typing.ClassVar[dict[str, DataType]]
    bfloat16: typing.ClassVar[DataType]
    bool: typing.ClassVar[DataType]
    float16: typing.ClassVar[DataType]
    float32: typing.ClassVar[DataType]
    float64: typing.ClassVar[DataType]
    int16: typing.ClassVar[DataType]
    int32: typing.ClassVar[DataType]
    int64: typing.ClassVar[DataType]
    int8: typing.ClassVar[DataType]
    uint8: typing.ClassVar[DataType]
    @typing.overload
    def __eq__(self, other: DataType) -> builtins.bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> builtins.bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: DataType) -> builtins.bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> builtins.bool:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class ReduceOp:
    """
    Members:
    
      SUM
    
      AVG
    
      MIN
    
      MAX
    
      PROD
    
      ADASUM
    """
    ADASUM: typing.ClassVar[ReduceOp]
    AVG: typing.ClassVar[ReduceOp]
    MAX: typing.ClassVar[ReduceOp]
    MIN: typing.ClassVar[ReduceOp]
    PROD: typing.ClassVar[ReduceOp]
    SUM: typing.ClassVar[ReduceOp]
    __members__: typing.ClassVar[dict[str, ReduceOp]]
    @typing.overload
    def __eq__(self, other: ReduceOp) -> builtins.bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> builtins.bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: ReduceOp) -> builtins.bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> builtins.bool:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class Algorithm:
    """
    Members:
    
      auto
    
      ring
    
      tree
    
      direct
    
      hierarchical
    """
    __members__: typing.ClassVar[dict[str, Algorithm]]
    auto: typing.ClassVar[Algorithm]
    direct: typing.ClassVar[Algorithm]
    hierarchical: typing.ClassVar[Algorithm]
    ring: typing.ClassVar[Algorithm]
    tree: typing.ClassVar[Algorithm]
    @typing.overload
    def __eq__(self, other: Algorithm) -> builtins.bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> builtins.bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: Algorithm) -> builtins.bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> builtins.bool:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class Compression:
    """
    Members:
    
      none
    
      fp16
    
      bf16
    
      int8
    
      fp8
    """
    __members__: typing.ClassVar[dict[str, Compression]]
    bf16: typing.ClassVar[Compression]
    fp16: typing.ClassVar[Compression]
    fp8: typing.ClassVar[Compression]
    int8: typing.ClassVar[Compression]
    none: typing.ClassVar[Compression]
    @typing.overload
    def __eq__(self, other: Compression) -> builtins.bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> builtins.bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: Compression) -> builtins.bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> builtins.bool:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class TransportKind:
    """
    Members:
    
      auto
    
      tcp
    
      shm
    
      ucx
    """
    __members__: typing.ClassVar[dict[str, TransportKind]]
    auto: typing.ClassVar[TransportKind]
    shm: typing.ClassVar[TransportKind]
    tcp: typing.ClassVar[TransportKind]
    ucx: typing.ClassVar[TransportKind]
    @typing.overload
    def __eq__(self, other: TransportKind) -> builtins.bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> builtins.bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: TransportKind) -> builtins.bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> builtins.bool:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class Config:
    algorithm: Algorithm
    horovod_timeline: str
    horovod_timeline_mark_cycles: builtins.bool
    host_id: str
    listen_address: str
    log_file: str
    log_level: LogLevel
    secret: bytes
    socket_interface: str
    trace_file: str
    transport: TransportKind
    tuning_directory: str
    @staticmethod
    def describe_environment() -> list:
        ...
    @staticmethod
    def from_environment() -> Config:
        ...
    def __copy__(self) -> Config:
        ...
    @property
    def cycle_time(self) -> float:
        ...
    @cycle_time.setter
    def cycle_time(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def fusion_threshold_bytes(self) -> int:
        ...
    @fusion_threshold_bytes.setter
    def fusion_threshold_bytes(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def link_bandwidth(self) -> float:
        ...
    @link_bandwidth.setter
    def link_bandwidth(self, arg0: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def link_latency(self) -> float:
        ...
    @link_latency.setter
    def link_latency(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def log_subsystems(self) -> int:
        ...
    @log_subsystems.setter
    def log_subsystems(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def mps_pipe_directory(self) -> str:
        ...
    @property
    def segment_bytes(self) -> int:
        ...
    @segment_bytes.setter
    def segment_bytes(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def shm_allreduce_rules(self) -> list[tuple[int, Algorithm]]:
        ...
    @shm_allreduce_rules.setter
    def shm_allreduce_rules(self, arg0: collections.abc.Sequence[tuple[typing.SupportsInt | typing.SupportsIndex, Algorithm]]) -> None:
        ...
    @property
    def shm_ring_bytes(self) -> int:
        ...
    @shm_ring_bytes.setter
    def shm_ring_bytes(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def shm_slot_bytes(self) -> int:
        ...
    @shm_slot_bytes.setter
    def shm_slot_bytes(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def socket_buffer_bytes(self) -> int:
        ...
    @socket_buffer_bytes.setter
    def socket_buffer_bytes(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def spin_count(self) -> int:
        ...
    @spin_count.setter
    def spin_count(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def tcp_allreduce_rules(self) -> list[tuple[int, Algorithm]]:
        ...
    @tcp_allreduce_rules.setter
    def tcp_allreduce_rules(self, arg0: collections.abc.Sequence[tuple[typing.SupportsInt | typing.SupportsIndex, Algorithm]]) -> None:
        ...
    @property
    def timeout(self) -> float:
        ...
    @timeout.setter
    def timeout(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def trace_max_events(self) -> int:
        ...
    @trace_max_events.setter
    def trace_max_events(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class Store:
    def __init__(self) -> None:
        ...
    def add(self, key: str, delta: typing.SupportsInt | typing.SupportsIndex) -> int:
        ...
    def get(self, key: str, timeout: typing.SupportsFloat | typing.SupportsIndex = 300.0) -> bytes:
        ...
    def set(self, key: str, value: bytes) -> None:
        ...
    def try_get_many(self, keys: collections.abc.Sequence[str], within: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> list:
        """
        Each key's value, or None where it is missing or the store did not answer within `within` seconds: one round trip for a TcpStore. Never raises.
        """
class HashStore(Store):
    def __init__(self) -> None:
        ...
class FileStore(Store):
    def __init__(self, directory: str) -> None:
        ...
class PrefixStore(Store):
    def __init__(self, prefix: str, store: Store) -> None:
        ...
class TcpStore(Store):
    def __init__(self, host: str, port: typing.SupportsInt | typing.SupportsIndex, timeout: typing.SupportsFloat | typing.SupportsIndex, secret: bytes) -> None:
        ...
    @property
    def local_address(self) -> str:
        ...
class TcpStoreServer:
    def __init__(self, host: str, port: typing.SupportsInt | typing.SupportsIndex, secret: bytes) -> None:
        ...
    def stop(self) -> None:
        ...
    @property
    def port(self) -> int:
        ...
    @property
    def refused_connections(self) -> int:
        ...
class Work:
    def is_completed(self) -> builtins.bool:
        ...
    def wait(self, timeout: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        ...
class Communicator:
    @staticmethod
    def create(store: Store, rank: typing.SupportsInt | typing.SupportsIndex, size: typing.SupportsInt | typing.SupportsIndex, config: Config) -> Communicator:
        ...
    @staticmethod
    def create_in_scope(store: Store, scope: str, rank: typing.SupportsInt | typing.SupportsIndex, size: typing.SupportsInt | typing.SupportsIndex, config: Config) -> Communicator:
        ...
    @staticmethod
    def join(addresses: collections.abc.Sequence[str], board: Store | None, door_key: str, config: Config, timeout: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> Communicator:
        ...
    def abort(self, reason: str = 'abort() called') -> None:
        ...
    def allgather(self, x: typing.Any, out: typing.Any, timeout: typing.SupportsFloat | typing.SupportsIndex, blocking: builtins.bool, name: str) -> typing.Any:
        ...
    def allreduce(self, x: typing.Any, out: typing.Any, op: ReduceOp, algorithm: Algorithm, timeout: typing.SupportsFloat | typing.SupportsIndex, blocking: builtins.bool, compression: Compression, prescale: typing.SupportsFloat | typing.SupportsIndex, postscale: typing.SupportsFloat | typing.SupportsIndex, name: str, tensor_counts: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> typing.Any:
        ...
    def alltoall(self, x: typing.Any, out: typing.Any, timeout: typing.SupportsFloat | typing.SupportsIndex, blocking: builtins.bool, name: str) -> typing.Any:
        ...
    def barrier(self, timeout: typing.SupportsFloat | typing.SupportsIndex, blocking: builtins.bool, name: str) -> typing.Any:
        ...
    def broadcast(self, x: typing.Any, root: typing.SupportsInt | typing.SupportsIndex, timeout: typing.SupportsFloat | typing.SupportsIndex, blocking: builtins.bool, name: str) -> typing.Any:
        ...
    def choose_allreduce_algorithm(self, bytes: typing.SupportsInt | typing.SupportsIndex) -> Algorithm:
        ...
    def duplicate(self) -> Communicator:
        ...
    def gather(self, x: typing.Any, out: typing.Any, root: typing.SupportsInt | typing.SupportsIndex, timeout: typing.SupportsFloat | typing.SupportsIndex, blocking: builtins.bool, name: str) -> typing.Any:
        ...
    def grow(self, expect: typing.SupportsInt | typing.SupportsIndex = 0, timeout: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> Communicator:
        ...
    def publish_door(self, board: Store, key: str) -> None:
        ...
    def recv(self, x: typing.Any, peer: typing.SupportsInt | typing.SupportsIndex, tag: typing.SupportsInt | typing.SupportsIndex, timeout: typing.SupportsFloat | typing.SupportsIndex, blocking: builtins.bool, name: str) -> typing.Any:
        ...
    def reduce(self, x: typing.Any, out: typing.Any, op: ReduceOp, root: typing.SupportsInt | typing.SupportsIndex, timeout: typing.SupportsFloat | typing.SupportsIndex, blocking: builtins.bool, name: str) -> typing.Any:
        ...
    def reduce_scatter(self, x: typing.Any, out: typing.Any, op: ReduceOp, timeout: typing.SupportsFloat | typing.SupportsIndex, blocking: builtins.bool, name: str) -> typing.Any:
        ...
    def scatter(self, x: typing.Any, out: typing.Any, root: typing.SupportsInt | typing.SupportsIndex, timeout: typing.SupportsFloat | typing.SupportsIndex, blocking: builtins.bool, name: str) -> typing.Any:
        ...
    def send(self, x: typing.Any, peer: typing.SupportsInt | typing.SupportsIndex, tag: typing.SupportsInt | typing.SupportsIndex, timeout: typing.SupportsFloat | typing.SupportsIndex, blocking: builtins.bool, name: str) -> typing.Any:
        ...
    def shrink(self, exclude: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], timeout: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> Communicator:
        ...
    def shutdown(self) -> None:
        ...
    def split(self, color: typing.SupportsInt | typing.SupportsIndex, key: typing.SupportsInt | typing.SupportsIndex) -> Communicator:
        ...
    def survivors(self, timeout: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> list[int]:
        ...
    def transport_to(self, peer: typing.SupportsInt | typing.SupportsIndex) -> str:
        ...
    @property
    def address(self) -> str:
        ...
    @property
    def config(self) -> Config:
        ...
    @property
    def former_ranks(self) -> list[int]:
        ...
    @property
    def host_count(self) -> int:
        ...
    @property
    def host_index(self) -> int:
        ...
    @property
    def local_rank(self) -> int:
        ...
    @property
    def local_size(self) -> int:
        ...
    @property
    def rank(self) -> int:
        ...
    @property
    def size(self) -> int:
        ...
class TensorOp:
    """
    Members:
    
      allreduce
    
      allgather
    
      broadcast
    
      reducescatter
    
      alltoall
    """
    __members__: typing.ClassVar[dict[str, TensorOp]]
    allgather: typing.ClassVar[TensorOp]
    allreduce: typing.ClassVar[TensorOp]
    alltoall: typing.ClassVar[TensorOp]
    broadcast: typing.ClassVar[TensorOp]
    reducescatter: typing.ClassVar[TensorOp]
    @typing.overload
    def __eq__(self, other: TensorOp) -> builtins.bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> builtins.bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: TensorOp) -> builtins.bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> builtins.bool:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class TensorRequest:
    def __init__(self, op: TensorOp, name: str, x: typing.Any, *, out: typing.Any = None, shape: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], reduce_op: ReduceOp = ReduceOp.SUM, compression: Compression = Compression.none, prescale: typing.SupportsFloat | typing.SupportsIndex = 1.0, postscale: typing.SupportsFloat | typing.SupportsIndex = 1.0, root: typing.SupportsInt | typing.SupportsIndex = 0, splits: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] = []) -> None:
        ...
    @property
    def name(self) -> str:
        ...
class TensorWork(Work):
    def order_on(self, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Makes a cudaStream_t (an int) wait until a device request's results are written; nothing for host requests. Call after wait().
        """
    @property
    def gathered(self) -> numpy.typing.NDArray[numpy.uint8]:
        ...
    @property
    def last_joined(self) -> int:
        ...
    @property
    def rows(self) -> list[int]:
        ...
class TensorQueueStats:
    @property
    def allreduces(self) -> int:
        ...
    @property
    def cycles(self) -> int:
        ...
    @property
    def fused_tensors(self) -> int:
        ...
class JoinPolicy:
    """
    Members:
    
      zeros
    
      contributors
    """
    __members__: typing.ClassVar[dict[str, JoinPolicy]]
    contributors: typing.ClassVar[JoinPolicy]
    zeros: typing.ClassVar[JoinPolicy]
    @typing.overload
    def __eq__(self, other: JoinPolicy) -> builtins.bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> builtins.bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: JoinPolicy) -> builtins.bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> builtins.bool:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class TensorQueue:
    @staticmethod
    def create(comm: Communicator, join_policy: JoinPolicy = JoinPolicy.zeros) -> TensorQueue:
        ...
    def join(self, device: typing.SupportsInt | typing.SupportsIndex = -1) -> TensorWork:
        ...
    def shutdown(self) -> None:
        ...
    def stats(self) -> TensorQueueStats:
        ...
    def submit(self, request: TensorRequest) -> TensorWork:
        ...
    def submit_all(self, requests: collections.abc.Sequence[TensorRequest]) -> list[TensorWork]:
        ...
    @property
    def rank(self) -> int:
        ...
    @property
    def size(self) -> int:
        ...
def _set_call_stream(stream: typing.SupportsInt | typing.SupportsIndex | None) -> None:
    """
    Starts a collective's call on this thread: its cudaStream_t as an int, or None for the array library's current stream (private).
    """
def build_info() -> dict:
    ...
def built_with_cuda() -> builtins.bool:
    """
    Whether this ringcomm was built with CUDA (RINGCOMM_BUILD_CUDA=ON).
    """
def configure_observability(config: Config, rank: typing.SupportsInt | typing.SupportsIndex = -1) -> None:
    ...
def feed_back_error(x: typing.Any, residual: typing.Any, compression: Compression) -> None:
    """
    Error feedback in one pass: x += residual, x rounded to the wire format (as one run), residual = what the rounding took away.
    """
def horovod_timeline_active() -> builtins.bool:
    ...
def log(level: LogLevel, subsystem: str, text: str) -> None:
    ...
def log_enabled(level: LogLevel, subsystem: str) -> builtins.bool:
    ...
def mps_running(pipe_directory: str) -> builtins.bool:
    ...
def parse_algorithm(text: str) -> Algorithm:
    ...
def parse_compression(text: str) -> Compression:
    ...
def parse_join_policy(text: str) -> JoinPolicy:
    ...
def parse_log_level(text: str) -> LogLevel:
    ...
def parse_log_subsystems(text: str) -> int:
    ...
def parse_transport(text: str) -> TransportKind:
    ...
def read_dlpack(arg0: typing_extensions.CapsuleType) -> dict:
    ...
def round_to_wire(x: typing.Any, compression: Compression) -> None:
    """
    Rounds a float32 array in place to what the wire format carries, as one run.
    """
def shared_buffer(bytes: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.uint8]:
    ...
def start_horovod_timeline(path: str, mark_cycles: builtins.bool = False) -> None:
    ...
def stop_horovod_timeline() -> None:
    ...
def ucx_info() -> dict:
    ...
def view_array(obj: typing.Any, name: str = 'x', writable: builtins.bool = False) -> tuple[int, int, DataType]:
    ...
