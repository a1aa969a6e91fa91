"""What every implementation runs: one JSON file the parent writes and each rank reads."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Optional

# Deadline for a whole run (all sizes) of one implementation, so that a hung peer cannot stall the
# benchmark: start-up, plus per size a fixed part and a part per GB of buffer per rank. Each size
# touches its buffers about ten times (fill, probe, warmup, >= 3 timed calls, check); 40 s per GB
# allows for that at 0.25 GB/s, well below any machine's memory bandwidth, even oversubscribed.
_START_SECONDS = 90.0
_PER_SIZE_SECONDS = 15.0
_SECONDS_PER_RANK_GB = 40.0


@dataclass
class Plan:
    collective: str
    sizes: list[int]  # requested bytes (nccl-tests' size), before rounding
    dtype: str = "float32"
    op: str = "sum"
    check: bool = False
    iters: Optional[int] = None  # None: adaptive
    warmup: Optional[int] = None  # None: adaptive
    min_time: float = 0.3  # seconds of timed calls per size when adaptive
    # ringcomm all-reduce schedules: one, or several timed in turns in one set of ranks
    # (timing.measure_interleaved), the first one's table being the run's results.
    algorithms: list[str] = field(default_factory=lambda: ["auto"])
    # ringcomm's transports (auto, tcp, shm, ucx): one, or several timed in turns in one set of
    # ranks, each through a communicator of its own (ringcomm_worker.run), as the algorithms are.
    transports: list[str] = field(default_factory=lambda: ["auto"])
    # ringcomm all-reduce wire formats (none, fp16, bf16, int8, fp8): one, or several timed in
    # turns in one set of ranks and compared per size, as the algorithms are.
    compressions: list[str] = field(default_factory=lambda: ["none"])
    device: str = "cpu"  # where the buffers are: cpu, or cuda (device.py)
    memory: str = "private"  # ringcomm's CPU buffers: private, or shared (ringcomm.empty)
    op_timeout: float = 120.0  # seconds one collective may take before it fails
    timeout: float = 600.0  # seconds a whole run may take before its ranks exit

    def varied(self) -> Optional[str]:
        """Which of ringcomm's options has several values, timed in turns: "algorithm",
        "compression" or "transport" (the CLI lets only one list several), or None."""
        axes = {
            "algorithm": self.algorithms,
            "compression": self.compressions,
            "transport": self.transports,
        }
        return next((axis for axis, names in axes.items() if len(names) > 1), None)

    def save(self, path) -> None:
        with open(path, "w") as f:
            json.dump(asdict(self), f, indent=1)

    @classmethod
    def load(cls, path) -> "Plan":
        with open(path) as f:
            return cls(**json.load(f))


def run_deadline(sizes: list[int], nranks: int) -> float:
    """A default for Plan.timeout: long enough for a slow machine, short enough to notice a hang."""
    moved_gb = sum(sizes) * nranks / 1e9
    return _START_SECONDS + _PER_SIZE_SECONDS * len(sizes) + _SECONDS_PER_RANK_GB * moved_gb
