"""Measured all-reduce choices for this host: the file ``ringcomm-bench tune`` writes and
``ringcomm.init()`` reads.

One file per host and world size, ``tuning-<host>-p<size>.json``, in RINGCOMM_TUNING_DIR (by
default ``$XDG_CACHE_HOME/ringcomm``, ``~/.cache/ringcomm``; ``off``: no file is read). It says,
for ranks connected through shared memory (shm) and through TCP on this host (tcp), which
algorithm is fastest up to which message size; the core follows it for ``algorithm="auto"`` when
every rank is on this host (Config::shmAllreduceRules, src/tuning), in communicators of
ringcomm.init(), of ringcomm.torch's process sets and of the torch.distributed backend. A file
from another machine (another hostname or machine id, as in a shared home directory), from
another ringcomm, CPU or core count, or older than _STALE_DAYS is ignored with a warning: the
cost model decides then, as without a file.

Beside them, ``link-<host>.json``: the network between this host and others, as ``ringcomm-bench
tune`` measured it in a job across hosts (latency, and what a host's link carries each way). A
communicator spanning hosts whose rank 0 is on this host uses it for ``algorithm="auto"``
instead of measuring the link as it is created (Config::linkLatency, linkBandwidth).
"""

from __future__ import annotations

import json
import os
import socket
import time
import warnings
from pathlib import Path
from typing import Optional

FORMAT = 1
_STALE_DAYS = 30  # hardware, kernels and neighbours change; re-measure at least this often
# The last rule's bound: every size (JSON has no infinity; the core takes size_t).
EVERY_SIZE = (1 << 63) - 1
_ALGORITHMS = ("ring", "tree", "direct")
# A new algorithm takes over from the one that won at the size before only where it is more than
# this much faster, so that the rules do not flip back and forth on noise between two algorithms
# that are equally fast (either is then as good). Timed in turns in one set of ranks (tune does),
# the same schedule timed twice differs by 1% at 2 ranks on the 2-core VM and by up to 5% at 4
# and 8 (auto against itself forced: bench/RESULTS.md, Issue 13). The margin is also how much
# slower than the fastest the rules may leave "auto", so it stays below those 5% (it was 10%).
_SWITCH_MARGIN = 0.03


def directory() -> Optional[Path]:
    """Where this host's tuning files are (Config::tuningDirectory, RINGCOMM_TUNING_DIR), or None
    when tuning files are off."""
    from ringcomm import _core

    found = _core.Config.from_environment().tuning_directory
    return Path(found) if found else None


def tuning_file_name(world_size: int, host: Optional[str] = None) -> str:
    return f"tuning-{host or socket.gethostname()}-p{world_size}.json"


def path_for(world_size: int, host: Optional[str] = None) -> Optional[Path]:
    """This host's tuning file for ``world_size``, or None when tuning files are off."""
    found = directory()
    return None if found is None else found / tuning_file_name(world_size, host)


def machine_id() -> str:
    """What tells this machine from another with the same hostname."""
    for candidate in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            return Path(candidate).read_text().strip()
        except OSError:
            continue
    return ""


def identity() -> dict:
    """What a tuning file must match to apply here."""
    from ringcomm import _core
    from ringcomm._version import __version__

    cpu = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in cpuinfo if "model name" in line), ""
            )
    except OSError:
        pass
    return {
        "host": socket.gethostname(),
        "machine_id": machine_id(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ringcomm": __version__,
        "kernels": _core.build_info()["reduce_kernels"],
    }


def rules_from_times(times: dict) -> list:
    """{algorithm: {size: time_us}} -> [(most bytes, fastest algorithm), ...], sorted by size;
    the last rule holds every larger size.

    The winner at a measured size is the fastest algorithm there, except that the previous
    size's winner stays unless another beats it by _SWITCH_MARGIN. Where the winner changes
    between two measured sizes, the rule's bound is where the two algorithms' times cross, each
    interpolated linearly in size between the two (time = alpha + size / bandwidth is linear in
    size); without a crossing in between (the old winner stayed on the margin), the larger size's
    winner takes over just above the smaller size."""
    winners: list[tuple] = []  # (size, winner, {algorithm: time_us})
    for size in sorted({size for by_size in times.values() for size in by_size}):
        timed = {a: t[size] for a, t in times.items() if size in t and t[size] > 0}
        if not timed:
            continue
        best = min(timed, key=lambda algorithm: timed[algorithm])
        previous = winners[-1][1] if winners else None
        if previous in timed and timed[previous] <= timed[best] * (1 + _SWITCH_MARGIN):
            best = previous
        winners.append((size, best, timed))
    rules: list = []
    for here, above in zip(winners, winners[1:]):
        if here[1] != above[1]:
            rules.append((_crossing(here, above), here[1]))
    if winners:
        rules.append((EVERY_SIZE, winners[-1][1]))
    return rules


def _crossing(here: tuple, above: tuple) -> int:
    """The largest size, from here's up to below above's, at which here's winner is still
    estimated no slower than above's (rules_from_times)."""
    (low, old, low_times), (high, new, high_times) = here, above
    if not all(a in t for a in (old, new) for t in (low_times, high_times)):
        return low
    gap_low = low_times[old] - low_times[new]  # < 0: the old winner was faster at low
    gap_high = high_times[old] - high_times[new]  # > 0: the new one is faster at high
    if not gap_low < 0 < gap_high:
        return low
    return min(high - 1, int(low + (high - low) * -gap_low / (gap_high - gap_low)))


def write(path: Path, world_size: int, transports: dict) -> None:
    """transports: {"shm"|"tcp": {"rules": [...], ...what was measured}}."""
    document = {
        "format": FORMAT,
        "world_size": world_size,
        "created": time.time(),
        **identity(),
        "transports": transports,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(document, indent=1))
    os.replace(partial, path)  # a job starting now reads the old file or the new, never half


def _problem(document: dict, world_size: int) -> Optional[str]:
    """Why a tuning file does not apply here, or None."""
    if document.get("format") != FORMAT or document.get("world_size") != world_size:
        return "it is in another format or for another world size"
    here = identity()
    if (document.get("host"), document.get("machine_id")) != (here["host"], here["machine_id"]):
        return f"it was measured on another machine ({document.get('host')})"
    for key, what in (("ringcomm", "ringcomm"), ("cpu", "CPU"), ("cores", "core count"),
                      ("kernels", "CPU kernels")):  # fmt: skip
        if document.get(key) != here[key]:
            return f"it was measured with another {what} ({document.get(key)}, now {here[key]})"
    age_days = (time.time() - float(document.get("created", 0))) / 86400
    if age_days > _STALE_DAYS:
        return f"it is {age_days:.0f} days old (older than {_STALE_DAYS})"
    return None


def link_file_name(host: Optional[str] = None) -> str:
    return f"link-{host or socket.gethostname()}.json"


def link_path(host: Optional[str] = None) -> Optional[Path]:
    """This host's link file, or None when tuning files are off."""
    found = directory()
    return None if found is None else found / link_file_name(host)


def write_link(path: Path, latency_s: float, bytes_per_s: float, measured: dict) -> None:
    """The link as a job across hosts measured it (ringcomm-bench tune under a launcher)."""
    document = {
        "format": FORMAT,
        "created": time.time(),
        "host": socket.gethostname(),
        "machine_id": machine_id(),
        "latency_us": latency_s * 1e6,
        "bandwidth_gbps": bytes_per_s / 1e9,
        **measured,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(document, indent=1))
    os.replace(partial, path)


def load_link() -> Optional[tuple[float, float]]:
    """(latency in seconds, bytes per second) from this host's link file, or None: no file,
    tuning files off, or one from another machine or older than _STALE_DAYS (with a warning)."""
    path = link_path()
    if path is None:
        return None
    try:
        document = json.loads(path.read_text())
        latency, bandwidth = float(document["latency_us"]), float(document["bandwidth_gbps"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        warnings.warn(f"ringcomm: ignoring link file {path}: {error}", stacklevel=4)
        return None
    here = (socket.gethostname(), machine_id())
    age_days = (time.time() - float(document.get("created", 0))) / 86400
    problem = None
    if document.get("format") != FORMAT:
        problem = "it is in another format"
    elif (document.get("host"), document.get("machine_id")) != here:
        problem = f"it was measured on another machine ({document.get('host')})"
    elif age_days > _STALE_DAYS:
        problem = f"it is {age_days:.0f} days old (older than {_STALE_DAYS})"
    if problem is not None:
        warnings.warn(
            f"ringcomm: ignoring link file {path}: {problem}; re-measure with `ringcomm-bench "
            "tune` under your launcher across hosts (the link is measured at creation meanwhile)",
            stacklevel=4,
        )
        return None
    return latency * 1e-6, bandwidth * 1e9


def load_rules(world_size: int) -> Optional[dict]:
    """{"shm": rules, "tcp": rules} from this host's file for ``world_size``, or None: no file,
    tuning files off, or one that does not apply here (with a warning saying why and how to
    re-measure)."""
    path = path_for(world_size)
    if path is None:
        return None
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        warnings.warn(f"ringcomm: ignoring tuning file {path}: {error}", stacklevel=4)
        return None
    problem = _problem(document, world_size)
    if problem is not None:
        warnings.warn(
            f"ringcomm: ignoring tuning file {path}: {problem}; re-measure with "
            f"`ringcomm-bench tune -np {world_size}` (the cost model decides meanwhile)",
            stacklevel=4,
        )
        return None
    rules = {}
    for transport in ("shm", "tcp"):
        entries = document.get("transports", {}).get(transport, {}).get("rules", [])
        rules[transport] = [
            (int(most), algorithm) for most, algorithm in entries if algorithm in _ALGORITHMS
        ]
    return rules


def rules_for(config, world_size: int) -> dict:
    """{"shm": rules, "tcp": rules} that ``algorithm="auto"`` should follow with ``config`` (a
    _core.Config) and ``world_size`` ranks: this host's file's, or empty lists (an algorithm is
    forced, one rank, no file or one that does not apply)."""
    from ringcomm import _core

    none: dict[str, list] = {"shm": [], "tcp": []}
    if config.algorithm != _core.Algorithm.auto or world_size < 2:
        return none
    return load_rules(world_size) or none


def apply(config, world_size: int) -> None:
    """Puts this host's measured rules and link into a _core.Config (ringcomm.init(); the
    torch.distributed backend passes rules_for()'s and load_link()'s to its communicator's
    Config the same way)."""
    from ringcomm import _core

    rules = rules_for(config, world_size)

    def parsed(entries):
        return [(most, _core.parse_algorithm(algorithm)) for most, algorithm in entries]

    config.shm_allreduce_rules = parsed(rules["shm"])
    config.tcp_allreduce_rules = parsed(rules["tcp"])
    # The link as measured from this host, unless RINGCOMM_LINK_* said it (rank 0's counts).
    link = load_link() if config.link_latency == 0 and config.link_bandwidth == 0 else None
    if link is not None:
        config.link_latency, config.link_bandwidth = link
