"""``--device cuda``: buffers in GPU memory, and the GPU's own copy bandwidth as the reference.

Every rank of a run puts its buffers on one GPU (rank r on device r % device count: with one GPU,
all ranks share it, as on the machines this was written for). Each timed call includes waiting
for the device (the benchmark synchronises the current stream after every collective), as
nccl-tests do.

The reference is the bandwidth of a device-to-device copy measured in the same run: copying N
bytes reads N and writes N, so the device's read+write bandwidth is B_mem = 2 N / time, and the
single-device limit on all-reduce busbw is B_mem (p-1)/p^2, as for host memory.

The staged path (RINGCOMM_CUDA_PATH=staged, the path that crosses hosts) moves each rank's N
bytes over the host link once each way; with p ranks on one GPU, p N bytes each way share it. Its
reference is the pinned host<->device copy bandwidth, measured in the same run, and the report
gives p N / time as a share of the slower direction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

DEVICES = ("cpu", "cuda")
_COPY_BYTES = 256 << 20  # large enough to leave every cache
_COPY_TRIALS = 5
_COPIES_PER_TRIAL = 10


def cuda_problem() -> Optional[str]:
    """Why --device cuda cannot run here, or None when it can."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (pip install torch, a CUDA build)"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} was built without CUDA"
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    from ringcomm import _devices

    if not _devices.built_with_cuda():
        return (
            "ringcomm was built without CUDA; rebuild it with "
            "pip install -Ccmake.define.RINGCOMM_BUILD_CUDA=ON -e ."
        )
    return None


@dataclass
class DeviceCopy:
    name: str  # the GPU
    copy_gbps: float  # bytes copied per second, best trial
    buffer_bytes: int

    @property
    def gbps(self) -> float:
        """Read+write bandwidth: what a copy of N bytes moves, 2 N, per second."""
        return 2.0 * self.copy_gbps


def measure_copy(nbytes: int = _COPY_BYTES) -> DeviceCopy:
    """Device-to-device copy bandwidth of GPU 0, timed with CUDA events, best of several."""
    import torch

    device = torch.device("cuda", 0)
    source = torch.ones(nbytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    target.copy_(source)  # warm up
    best = 0.0
    for _ in range(_COPY_TRIALS):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(_COPIES_PER_TRIAL):
            target.copy_(source)
        stop.record()
        stop.synchronize()
        seconds = start.elapsed_time(stop) / 1e3 / _COPIES_PER_TRIAL
        best = max(best, nbytes / seconds / 1e9)
    return DeviceCopy(torch.cuda.get_device_name(device), best, nbytes)


@dataclass
class HostLink:
    to_device_gbps: float  # pinned host -> device, bytes per second, best trial
    to_host_gbps: float  # device -> pinned host
    buffer_bytes: int

    @property
    def slower_gbps(self) -> float:
        return min(self.to_device_gbps, self.to_host_gbps)


def measure_host_link(nbytes: int = _COPY_BYTES) -> HostLink:
    """Pinned host<->device copy bandwidth of GPU 0, each direction on its own, best of several."""
    import torch

    device = torch.device("cuda", 0)
    host = torch.ones(nbytes, dtype=torch.uint8).pin_memory()
    on_device = torch.empty(nbytes, dtype=torch.uint8, device=device)

    def best(copy) -> float:
        copy()  # warm up
        fastest = 0.0
        for _ in range(_COPY_TRIALS):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(_COPIES_PER_TRIAL):
                copy()
            stop.record()
            stop.synchronize()
            seconds = start.elapsed_time(stop) / 1e3 / _COPIES_PER_TRIAL
            fastest = max(fastest, nbytes / seconds / 1e9)
        return fastest

    to_device = best(lambda: on_device.copy_(host, non_blocking=True))
    to_host = best(lambda: host.copy_(on_device, non_blocking=True))
    return HostLink(to_device, to_host, nbytes)


def reference_lines(copy: DeviceCopy, collective: str, nranks: int, limit: float) -> list[str]:
    from ringcomm.bench.collectives import limit_formula

    return [
        f"# device: {copy.name}; device-to-device copy: {copy.copy_gbps:.1f} GB/s "
        f"({copy.buffer_bytes >> 20} MiB, best of {_COPY_TRIALS}), so B_mem = 2 x copy = "
        f"{copy.gbps:.1f} GB/s read+write",
        f"# single-device limit: {collective} busbw <= {limit_formula(collective)} = "
        f"{limit:.2f} GB/s (p = {nranks} ranks on one GPU)",
    ]


def copy_ratio_lines(outcomes: Sequence, copy: DeviceCopy) -> list[str]:
    """Each implementation's busbw as a share of the device's copy bandwidth, per size."""
    return _ratio_lines(
        "busbw / device-to-device copy bandwidth",
        outcomes,
        lambda row: row["busbw"] / copy.copy_gbps,
    )


def host_link_lines(link: HostLink) -> list[str]:
    return [
        f"# pinned host<->device copies: host to device {link.to_device_gbps:.1f} GB/s, device to "
        f"host {link.to_host_gbps:.1f} GB/s ({link.buffer_bytes >> 20} MiB, best of "
        f"{_COPY_TRIALS}): the reference of the staged path"
    ]


def host_link_ratio_lines(outcomes: Sequence, link: HostLink, nranks: int) -> list[str]:
    """What the staged path moves over the host link, p N bytes each way per all-reduce, per
    second, as a share of the slower pinned direction (1.0: the link is the limit)."""
    return _ratio_lines(
        "host-link bytes per second (p N each way / time) / slower pinned copy bandwidth",
        outcomes,
        lambda row: nranks * row["algbw"] / link.slower_gbps,
    )


def _ratio_lines(heading: str, outcomes: Sequence, ratio: Callable[[dict], float]) -> list[str]:
    """A section under ``heading``: a line per implementation that has results, its ``ratio``
    of each size's row."""
    lines = [f"\n## {heading}"]
    for outcome in outcomes:
        if not outcome.rows:
            continue
        ratios = ", ".join(f"{row['size']}: {ratio(row):.3f}" for row in outcome.rows)
        lines.append(f"{outcome.implementation}: {ratios}")
    return lines


def use_rank_device(rank: int) -> None:
    """Makes this rank's GPU current (rank r on device r % device count)."""
    import torch

    torch.cuda.set_device(rank % torch.cuda.device_count())


def tensor(count: int, dtype: str):
    import torch

    return torch.empty(count, dtype=getattr(torch, dtype), device="cuda")


def synchronize() -> None:
    import torch

    torch.cuda.current_stream().synchronize()
