"""Collectives on CUDA arrays: the device path of the core (src/device) and its Python face.

The multi-process tests need a CUDA device and a ringcomm built with CUDA
(``pip install -Ccmake.define.RINGCOMM_BUILD_CUDA=ON -e .``); elsewhere they skip, saying which
is missing. Several ranks share one GPU, as on the machines these tests are written for. The
tests after them need no GPU: what a build without CUDA says, how CUDA arrays are decoded, and
how streams are named.
"""

import ctypes
import functools
import importlib.util
import subprocess
import sys

import numpy as np
import pytest
from harness import assert_all_succeeded, free_port, run_job, ucx_info

import ringcomm
from ringcomm import _core, _devices
from ringcomm.bench import device as bench_device

# Elements of the case that spans several pipeline chunks and splits unevenly: 1 MiB chunks here
# (16 MiB by default), so that the float32 case spans six; each chunk's host all-reduce takes the
# single-copy path (from 64 KiB here, 8 MiB by default), and at 2 and 3 ranks a slice is large
# enough for 2 threads (RINGCOMM_REDUCE_THREADS).
LARGE_COUNT = 1_500_007
CHUNKS = {
    "RINGCOMM_CUDA_CHUNK_BYTES": str(1 << 20),
    "RINGCOMM_SHM_CMA_MIN_BYTES": str(64 << 10),
    "RINGCOMM_REDUCE_THREADS": "2",
}


@functools.lru_cache(maxsize=None)
def cuda_devices() -> int:
    """CUDA devices this machine has, asked of the driver itself (torch may be a CPU build)."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def require_cuda(library: str) -> None:
    if cuda_devices() == 0:
        pytest.skip("no CUDA device")
    if not _devices.built_with_cuda():
        pytest.skip(
            "ringcomm was built without CUDA (pip install -Ccmake.define.RINGCOMM_BUILD_CUDA=ON)"
        )
    if library == "torch":
        import torch

        if not torch.cuda.is_available():
            pytest.skip(f"torch {torch.__version__} has no CUDA")
    elif importlib.util.find_spec("cupy") is None:
        pytest.skip("CuPy is not installed")


CASES = [
    (library, path, size)
    for library in ("torch", "cupy")
    for path in ("staged", "ipc")
    for size in (2, 3, 4)
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "library,path,size", CASES, ids=[f"{lib}-{path}-{size}ranks" for lib, path, size in CASES]
)
def test_collectives_on_cuda_arrays(library, path, size):
    require_cuda(library)
    outcomes = run_job(
        size,
        "cuda_collectives.py",
        [library, str(LARGE_COUNT)],
        env={"RINGCOMM_CUDA_PATH": path, **CHUNKS},
        deadline=500,
    )
    assert_right_and_alike(outcomes)


HOST_CASES = [(library, path) for library in ("torch", "cupy") for path in ("auto", "ipc")]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "library,path", HOST_CASES, ids=[f"{lib}-{path}" for lib, path in HOST_CASES]
)
def test_collectives_on_cuda_arrays_across_hosts(library, path):
    """4 ranks as 2 hosts of 2 (RINGCOMM_HOSTID): ipc reduces within each host through CUDA IPC
    and stages each rank's reduced slice across hosts; auto, with the ranks sharing a GPU without
    MPS, finds IPC unavailable and sends the same messages across hosts from host memory."""
    require_cuda(library)
    outcomes = run_job(
        4,
        "cuda_collectives.py",
        [library, str(LARGE_COUNT)],
        env={"RINGCOMM_CUDA_PATH": path, **CHUNKS},
        per_rank_env={rank: {"RINGCOMM_HOSTID": f"host{rank // 2}"} for rank in range(4)},
        deadline=500,
    )
    assert_right_and_alike(outcomes)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("library", ["torch", "cupy"])
def test_cuda_arrays_over_ucx(library):
    """Every collective, and sends and receives, at 2 ranks with RINGCOMM_TRANSPORT=ucx. A send
    or receive of a device buffer goes to UCX as device memory where UCX has CUDA lanes (the
    libucx-cu12 wheel, which tests/gpu/run.sh builds against when .whl/ carries it), and is
    staged through pinned memory otherwise; the log says which."""
    require_cuda(library)
    ucx = ucx_info()
    if ucx is None:
        pytest.skip("this ringcomm was built without UCX, or no UCX library loads here")
    major, minor = (int(part) for part in ucx["version"].split(".")[:2])
    # UCX 1.20 and newer only: older ones need the buffer's context current where they progress.
    direct = "device memory: none" not in ucx["lanes"] and (major, minor) >= (1, 20)
    outcomes = run_job(
        2,
        "cuda_collectives.py",
        [library, str(LARGE_COUNT)],
        env={
            "RINGCOMM_TRANSPORT": "ucx",
            "RINGCOMM_DEBUG": "INFO",
            "RINGCOMM_DEBUG_SUBSYS": "CUDA",
            **CHUNKS,
        },
        deadline=500,
    )
    assert_right_and_alike(outcomes)
    said = "goes to the network as device memory" if direct else "is staged through pinned host"
    for outcome in outcomes:
        assert said in outcome.stderr, f"rank {outcome.rank}: {outcome.stderr[-2000:]}"


def assert_right_and_alike(outcomes) -> None:
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"][:20])
    reference = outcomes[0].result["digests"]
    assert reference
    for outcome in outcomes[1:]:
        assert outcome.result["digests"] == reference, f"rank {outcome.rank} holds other bits"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("size", [2, 4])
def test_torch_backend_on_cuda_tensors(size):
    require_cuda("torch")
    outcomes = run_job(
        size,
        "torch_cuda_backend.py",
        env={"TEST_MASTER_PORT": str(free_port())},
        deadline=500,
    )
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"][:20])
    assert len({outcome.result["digests"]["ddp"] for outcome in outcomes}) == 1


@pytest.mark.timeout(600)
@pytest.mark.parametrize("size", [2, 4])
def test_horovod_api_on_cuda_tensors(size):
    require_cuda("torch")
    # A small fusion threshold at 4 ranks: the optimizer's gradients split over several fusions.
    env = {"RINGCOMM_FUSION_THRESHOLD": "65536"} if size == 4 else None
    outcomes = run_job(size, "horovod_cuda.py", env=env, deadline=500)
    assert_all_succeeded(outcomes)
    for outcome in outcomes:
        assert outcome.result["failures"] == [], "\n".join(outcome.result["failures"][:20])
    reference = outcomes[0].result["digests"]
    for outcome in outcomes[1:]:
        assert outcome.result["digests"] == reference, f"rank {outcome.rank} holds other bits"


# ---- no GPU needed -------------------------------------------------------------------------


def test_bench_on_cuda_says_why_it_cannot_run():
    problem = bench_device.cuda_problem()
    if problem is None:
        pytest.skip("CUDA is available here: the benchmark runs (see bench/RESULTS.md)")
    done = subprocess.run(
        [sys.executable, "-m", "ringcomm.bench", "allreduce", "--device", "cuda", "-np", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--device cuda: {problem}" in done.stderr


class FakeCudaArray:
    """Something that says it is a CUDA array, without a GPU: for the checks that come before
    any memory is touched."""

    def __init__(self, typestr="<f4", shape=(4,), strides=None, read_only=False, stream=None):
        self.__cuda_array_interface__ = {
            "version": 3,
            "data": (0x7F0000000000, read_only),
            "shape": shape,
            "typestr": typestr,
            "strides": strides,
        }
        if stream is not None:
            self.__cuda_array_interface__["stream"] = stream


@pytest.fixture(scope="module")
def comm():
    communicator = ringcomm.init(timeout=10)
    yield communicator
    communicator.shutdown()


def test_a_build_without_cuda_says_how_to_rebuild(comm):
    if _devices.built_with_cuda():
        pytest.skip("this ringcomm was built with CUDA")
    for call in (
        lambda: comm.allreduce(FakeCudaArray()),
        lambda: comm.broadcast(FakeCudaArray()),
        lambda: comm.allgather(FakeCudaArray(), out=np.zeros(4, np.float32)),
    ):
        with pytest.raises(ValueError, match="built without CUDA.*RINGCOMM_BUILD_CUDA=ON"):
            call()
    # Nothing of the refused call carries over to the next one.
    x = np.ones(4, np.float32)
    comm.allreduce(x)
    assert np.array_equal(x, np.ones(4))


def test_cuda_array_interface_typestrs_of_every_dtype(comm):
    # Decoded before anything else: an accepted typestr gets as far as "built without CUDA".
    if _devices.built_with_cuda():
        pytest.skip("this ringcomm was built with CUDA: the fake would be taken for device memory")
    for typestr in ("|i1", "|u1", "<i2", "<i4", "<i8", "<f2", "<f4", "<f8", "|b1"):
        with pytest.raises(ValueError, match="built without CUDA"):
            comm.allreduce(FakeCudaArray(typestr=typestr), op=ringcomm.MAX)
    with pytest.raises(TypeError, match="u2"):
        comm.allreduce(FakeCudaArray(typestr="<u2"))


class DeclaresCudaArray(np.ndarray):
    """Host memory that says it is on a CUDA device, as CuPy 14 arrays do while also offering
    the buffer protocol (for unified-memory systems): ringcomm must go by the declared device,
    never read it as host memory or blame its dtype."""

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA, device 0

    def __dlpack__(self, *, stream=None, max_version=None):
        return np.asarray(self).__dlpack__(max_version=max_version)


def test_arrays_that_declare_a_device_are_not_read_as_host_memory(comm):
    if _devices.built_with_cuda():
        pytest.skip("this ringcomm was built with CUDA: the fake would be taken for device memory")
    for dtype in (np.float32, np.int8, np.int16, np.bool_):
        fake = np.zeros(4, dtype).view(DeclaresCudaArray)
        with pytest.raises(ValueError, match="built without CUDA"):
            comm.allreduce(fake)


@pytest.mark.parametrize(
    "fake,error,words",
    [
        (FakeCudaArray(typestr="<c8"), TypeError, "c8"),
        (FakeCudaArray(typestr=">f4"), TypeError, "big-endian"),
        (FakeCudaArray(shape=(4, 4), strides=(4, 16)), ValueError, "contiguous"),
        (FakeCudaArray(read_only=True), ValueError, "read-only"),
    ],
)
def test_cuda_array_interface_is_checked_before_use(comm, fake, error, words):
    with pytest.raises(error, match=words):
        comm.allreduce(fake)
    x = np.ones(4, np.float32)
    comm.allreduce(x)  # the failed call left nothing behind
    assert np.array_equal(x, np.ones(4))


def test_streams_are_named_by_objects_or_integers():
    class TorchLikeStream:
        cuda_stream = 1234

    class CupyLikeStream:
        ptr = 5678

    assert _devices.stream_handle(TorchLikeStream()) == 1234
    assert _devices.stream_handle(CupyLikeStream()) == 5678
    assert _devices.stream_handle(42) == 42
    with pytest.raises(TypeError, match="stream must be"):
        _devices.stream_handle("default")
    assert _devices.current_stream(FakeCudaArray(stream=99)) == 99
    assert _devices.current_stream(FakeCudaArray()) == 0  # the legacy default stream


def test_stream_argument_on_host_arrays_is_harmless(comm):
    x = np.ones(4, np.float32)
    comm.allreduce(x, stream=0)
    assert np.array_equal(x, np.ones(4))


def test_built_with_cuda_is_reported():
    assert isinstance(_core.built_with_cuda(), bool)
