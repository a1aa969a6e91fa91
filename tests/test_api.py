"""The Python API in one process (world size 1): argument checking and error messages."""

import array

import numpy as np
import pytest
import torch

import ringcomm


@pytest.fixture(scope="module")
def comm():
    communicator = ringcomm.init(timeout=10)
    yield communicator
    communicator.shutdown()


def test_single_process_world(comm):
    assert (comm.rank, comm.size, comm.local_size) == (0, 1, 1)
    x = np.arange(5, dtype=np.float32)
    assert comm.allreduce(x) is x
    assert np.array_equal(x, np.arange(5))
    assert np.array_equal(comm.allgather(x), x)
    for algorithm in ("auto", "ring", "tree", "direct"):
        comm.allreduce(x, algorithm=algorithm)
    # Tensor counts in any sequence, a NumPy array's included.
    for counts in ([2, 3], (2, 3), np.array([2, 3])):
        assert comm.allreduce(x, op=ringcomm.ADASUM, tensor_counts=counts) is x


def test_buffer_protocol_and_dlpack_inputs(comm):
    data = bytearray(b"\x01\x02\x03")
    comm.allreduce(data, op=ringcomm.MAX)
    assert data == bytearray(b"\x01\x02\x03")
    t = torch.ones(3, 4, requires_grad=True)
    comm.allreduce(t.detach())
    out = comm.allgather(torch.arange(6, dtype=torch.int64).reshape(2, 3))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 3)


@pytest.mark.parametrize(
    "bad,error,words",
    [
        (np.zeros(4, np.complex64), TypeError, "complex64"),
        (np.zeros(4, np.uint16), TypeError, "uint16"),
        (np.zeros(4, np.uint32), TypeError, "uint32"),
        (np.zeros((4, 4), np.float32)[:, 1], ValueError, "contiguous"),
        (torch.zeros(4, 4).t(), ValueError, "contiguous"),
        ("a string", TypeError, "str"),
    ],
)
def test_bad_inputs_say_what_is_wrong(comm, bad, error, words):
    with pytest.raises(error, match=words):
        comm.allreduce(bad)


class DlpackOnly:
    """An array seen only through DLPack (as a library other than NumPy and torch offers it)."""

    def __init__(self, array, takes_max_version=True):
        self._array = array
        self._takes_max_version = takes_max_version

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()

    def __dlpack__(self, *, stream=None, **versions):
        if versions and not self._takes_max_version:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        return self._array.__dlpack__(**versions)


def test_dlpack_versioned_and_legacy_producers(comm):
    # NumPy exports read-only arrays only in DLPack 1.x's versioned capsule, which carries the flag.
    frozen = np.ones(4, np.float32)
    frozen.setflags(write=False)
    with pytest.raises(ValueError, match="x is read-only"):
        comm.allreduce(DlpackOnly(frozen))
    assert np.array_equal(comm.allgather(DlpackOnly(frozen)), frozen)
    # A producer from before DLPack 1.0 takes no max_version: asked again without it.
    legacy = np.arange(4, dtype=np.int32)
    comm.allreduce(DlpackOnly(legacy, takes_max_version=False), op=ringcomm.MAX)
    assert np.array_equal(legacy, np.arange(4))


class Uint8CodedBool:
    """A bool array from a DLPack producer older than kDLBool (DLPack 0.8), which exported bools
    as 8-bit unsigned integers: its own dtype says bool."""

    dtype = "torch.bool"

    def __init__(self, flags):
        self._bytes = torch.tensor(flags, dtype=torch.uint8)

    def __dlpack_device__(self):
        return self._bytes.__dlpack_device__()

    def __dlpack__(self, *, stream=None, **versions):
        return self._bytes.__dlpack__(**versions)


def test_int16_and_bool_from_every_kind_of_array(comm):
    # The buffer protocol ('h', '?'), DLPack (kDLInt 16, kDLBool) from NumPy and torch, and an
    # older producer's uint8-coded bools. One rank: the result is the input, in its own dtype.
    shorts = [-32768, -1, 0, 7, 32767]
    for x in (
        np.array(shorts, np.int16),
        array.array("h", shorts),
        torch.tensor(shorts, dtype=torch.int16),
        DlpackOnly(np.array(shorts, np.int16)),
    ):
        for op in (ringcomm.SUM, ringcomm.AVG, ringcomm.MIN, ringcomm.MAX, ringcomm.PROD):
            comm.allreduce(x, op=op)
        assert np.array_equal(comm.allgather(x), shorts)
        assert comm.allgather(x).dtype in (np.int16, torch.int16)
    flags = [True, False, True]
    for x in (np.array(flags), torch.tensor(flags), DlpackOnly(np.array(flags))):
        for op in (ringcomm.SUM, ringcomm.MIN, ringcomm.MAX, ringcomm.PROD):
            comm.allreduce(x, op=op)
        assert comm.allgather(x).tolist() == flags
        with pytest.raises(ValueError, match="avg is not defined for bool"):
            comm.allreduce(x, op=ringcomm.AVG)
    # Seen as bool, not uint8: avg is refused, which it is not for bytes.
    with pytest.raises(ValueError, match="avg is not defined for bool"):
        comm.allreduce(Uint8CodedBool(flags), op=ringcomm.AVG)
    comm.allreduce(Uint8CodedBool(flags), op=ringcomm.MAX)


def test_read_only_input_for_in_place(comm):
    x = np.zeros(4, np.float32)
    x.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        comm.allreduce(x)


def test_bad_arguments(comm):
    x = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="out must hold 4 elements; it holds 3"):
        comm.allreduce(x, out=np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="dtype"):
        comm.allreduce(x, out=np.zeros(4, np.float64))
    with pytest.raises(ValueError, match="algorithm"):
        comm.allreduce(x, algorithm="butterfly")
    with pytest.raises(ValueError, match="op must be"):
        comm.allreduce(x, op="median")
    with pytest.raises(ValueError, match="root must be in"):
        comm.broadcast(x, root=3)
    with pytest.raises(ValueError, match="peer"):
        comm.send(x, dest=0)
    with pytest.raises(ValueError, match="timeout"):
        comm.allreduce(x, timeout=-1)
    with pytest.raises(
        ValueError, match=r"x \(size \* len\(out\)\) must hold 3 elements; it holds 4"
    ):
        comm.reduce_scatter(x, out=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="ranks other than the root|must pass"):
        comm.scatter(None, root=0)


def test_bad_membership_arguments_name_the_argument(comm):
    """shrink, split, survivors and grow refuse what the core cannot take, saying which argument
    and what it takes, rather than pybind11's "incompatible function arguments", a TypeError
    about iteration, or a color of 1.9 quietly taken as 1."""
    with pytest.raises(TypeError, match=r"exclude must be a list of ranks \(ints from 0 to 0\)"):
        comm.shrink(exclude=2)
    with pytest.raises(TypeError, match="exclude must be a list of ranks"):
        comm.shrink(exclude="0")  # not ranks "0", one by one
    with pytest.raises(ValueError, match=r"exclude\[0\] must be in \[0, 0\].*got 1099511627776"):
        comm.shrink(exclude=[2**40])
    with pytest.raises(TypeError, match=r"exclude\[0\] must be an int.*got 1.5"):
        comm.shrink(exclude=[1.5])
    with pytest.raises(ValueError, match=r"color must be in \[-2147483648, 2147483647\]"):
        comm.split(2**31)
    with pytest.raises(TypeError, match="color must be an int.*got 1.9"):
        comm.split(1.9)
    with pytest.raises(TypeError, match="color must be an int.*got True"):
        comm.split(True)
    with pytest.raises(ValueError, match=r"key must be in \[-2147483648, 2147483647\]"):
        comm.split(0, key=-(2**31) - 1)
    with pytest.raises(TypeError, match="key must be an int.*got 0.5"):
        comm.split(0, key=0.5)
    with pytest.raises(ValueError, match=r"expect must be in \[0, 2147483647\]"):
        comm.grow(expect=2**40)
    with pytest.raises(TypeError, match="expect must be an int"):
        comm.grow(expect=1.5)
    for call in (comm.shrink, comm.survivors, comm.grow):
        with pytest.raises(TypeError, match="timeout must be a number of seconds.*got '5'"):
            call(timeout="5")
        with pytest.raises(ValueError, match="timeout must be positive seconds; got -1"):
            call(timeout=-1)
    with pytest.raises(TypeError, match="timeout must be a number of seconds.*got True"):
        comm.shrink(timeout=True)  # not one second


def test_torch_grow_group_checks_its_arguments_as_the_core_does():
    c10d = pytest.importorskip("ringcomm.c10d")
    with pytest.raises(ValueError, match=r"expect must be in \[0, 2147483647\]"):
        c10d.grow_group(expect=-1)
    with pytest.raises(TypeError, match="expect must be an int.*got 1.5"):
        c10d.grow_group(expect=1.5)
    with pytest.raises(TypeError, match="timeout must be a number of seconds.*got '5'"):
        c10d.grow_group(timeout="5")


def test_membership_arguments_take_numpy_integers(comm):
    alone = comm.split(np.int64(7), key=np.int32(-3))
    assert alone.size == 1
    shrunk = alone.shrink(exclude=np.array([], dtype=np.int64), timeout=np.float32(5))
    assert shrunk.size == 1
    assert comm.survivors(timeout=np.float64(5)) == [0]
    assert comm.split(-1) is None
    shrunk.shutdown()
    alone.shutdown()


def test_shared_arrays_are_checked_and_zeroed():
    with pytest.raises(ValueError, match="shape: expected non-negative integers"):
        ringcomm.empty((3, -1))
    with pytest.raises(ValueError, match="shape: expected non-negative integers"):
        ringcomm.empty(2.5)
    # More than memory and swap together: refused at once, as np.empty refuses it, rather than
    # a success whose pages fail at their first touch.
    with pytest.raises(MemoryError, match=r"shape \(1048576, 1073741824\) and dtype uint8"):
        ringcomm.empty((1 << 20, 1 << 30), np.uint8)
    with pytest.raises(MemoryError, match="more than this machine's memory"):
        ringcomm.empty(1 << 62, np.float32)  # over 2**63 bytes
    zeros = ringcomm.zeros((3, 1000), np.float64)
    assert zeros.shape == (3, 1000) and zeros.dtype == np.float64 and not zeros.any()
    assert ringcomm.empty(0).size == 0


def test_async_work(comm):
    x = np.ones(1000, np.float64)
    work = comm.allreduce(x, async_op=True)
    assert work.wait() is x
    assert work.is_completed()


def test_calls_after_shutdown_raise():
    communicator = ringcomm.init(timeout=10)
    communicator.shutdown()
    communicator.shutdown()  # idempotent
    with pytest.raises(ringcomm.CommunicatorClosed, match="shut down"):
        communicator.allreduce(np.zeros(2, np.float32))
    with pytest.raises(ValueError):  # like an operation on a closed file
        communicator.barrier()


def test_bad_configuration_names_the_variable(monkeypatch):
    monkeypatch.setenv("RINGCOMM_TRANSPORT", "carrier-pigeon")
    with pytest.raises(ValueError, match="transport must be one of"):
        ringcomm.init()
    monkeypatch.setenv("RINGCOMM_TRANSPORT", "auto")
    monkeypatch.setenv("RINGCOMM_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="RINGCOMM_TIMEOUT"):
        ringcomm.init()


@pytest.mark.parametrize("value", ["inf", "1e300", "9.3e9"])
def test_very_long_timeouts_mean_no_deadline(monkeypatch, value):
    monkeypatch.setenv("RINGCOMM_TIMEOUT", value)
    comm = ringcomm.init()
    x = np.ones(3, np.float32)
    comm.allreduce(x, timeout=float(value))
    comm.shutdown()
    comm = ringcomm.init(timeout=float(value))
    comm.allreduce(x)
    comm.shutdown()


@pytest.mark.parametrize("value,words", [("0", "> 0"), ("nan", "number"), ("-1", "non-negative")])
def test_bad_timeouts_are_refused_naming_the_variable(monkeypatch, value, words):
    monkeypatch.setenv("RINGCOMM_TIMEOUT", value)
    with pytest.raises(ValueError, match=f"RINGCOMM_TIMEOUT.*{words}"):
        ringcomm.init()
    monkeypatch.delenv("RINGCOMM_TIMEOUT")
    with pytest.raises(ValueError, match="timeout"):
        ringcomm.init(timeout=float(value))


def test_a_store_reads_many_keys_at_once():
    """Store.try_get_many: each key's value or None, in order. One request for ringcomm's
    TcpStore and for torch's store behind the torchrun adapter (multi_get, where every key is
    there); a Python store without it answers through get(), a key at a time."""
    from datetime import timedelta

    import torch.distributed as dist

    from ringcomm import _core
    from ringcomm._environment import TorchStoreAdapter

    secret = b"api-test-secret-0123456789abcdef"
    server = _core.TcpStoreServer("127.0.0.1", 0, secret)
    tcp = _core.TcpStore("127.0.0.1", server.port, 5.0, secret)
    torch_store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=5))

    class PlainStore(_core.Store):
        def __init__(self):
            super().__init__()
            self.values = {}

        def set(self, key, value):
            self.values[key] = value

        def get(self, key, timeout):
            if key not in self.values:
                raise TimeoutError(key)
            return self.values[key]

        def add(self, key, delta):
            raise NotImplementedError

    for store in (tcp, TorchStoreAdapter(torch_store), PlainStore()):
        store.set("view/0", b"zero")
        store.set("view/2", b"two")
        assert store.try_get_many(["view/0", "view/1", "view/2"], 1.0) == [b"zero", None, b"two"]
        assert store.try_get_many(["view/2", "view/0"], 1.0) == [b"two", b"zero"]
        assert store.try_get_many([], 1.0) == []
    server.stop()
    assert tcp.try_get_many(["view/0"], 0.5) == [None]  # a store gone answers nothing
