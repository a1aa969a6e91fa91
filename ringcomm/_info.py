"""``python -m ringcomm info`` (``ringcomm-info``): what this ringcomm is and sees, to paste into a
bug report.

    python -m ringcomm info            # tables on a terminal, plain text otherwise
    python -m ringcomm info --plain    # plain text, always
    python -m ringcomm info --json     # one JSON object

It reports the build (CUDA and its architectures, the CPU kernels chosen on this machine), the
torch.distributed backend's state for the installed torch, the transports (shared memory, TCP and
the interfaces), the GPUs and CUDA MPS, the configuration in effect (each variable the core reads,
its value and whether it came from the environment or is the default: read by the core's own
Config, not parsed again here) and, under a launcher, the rank as ringcomm detects it. It meets
no other rank and changes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from typing import Any, Optional, Sequence

# Variables read outside the core's Config, by the Python package: who reads them, and what they
# say (the documentation's reference lists them beside the core's).
_LAUNCHER = "ringcomm-run (ringcomm/_environment.py)"
_ELASTIC = "the elastic driver (ringcomm/elastic/worker.py)"
PYTHON_VARIABLES = {
    "RINGCOMM_RANK": (_LAUNCHER, "this process's rank, set by ringcomm-run"),
    "RINGCOMM_WORLD_SIZE": (_LAUNCHER, "the job's number of ranks, set by ringcomm-run"),
    "RINGCOMM_LOCAL_RANK": (_LAUNCHER, "this rank's index among its host's ranks"),
    "RINGCOMM_LOCAL_WORLD_SIZE": (_LAUNCHER, "the number of ranks on this host"),
    "RINGCOMM_STORE": (_LAUNCHER, "host:port of the rendezvous store the launcher serves"),
    "RINGCOMM_JOIN": (
        _LAUNCHER,
        "set in a process that replaces a lost rank: init() joins the running job (grow) instead "
        "of starting one; 1 finds the members on the launcher's store, or host:port[,host:port] "
        "names members (any member's Communicator.address)",
    ),
    "RINGCOMM_DOOR_DIR": (
        "ringcomm.init() and ringcomm.c10d (ringcomm/communicator.py)",
        "a directory every host sees where the members keep their addresses for newcomers "
        "(RINGCOMM_JOIN): for jobs under mpirun or srun, whose stores die with a rank",
    ),
    "RINGCOMM_ELASTIC": (_ELASTIC, "1 in a worker of an elastic ringcomm-run"),
    "RINGCOMM_ELASTIC_HOST": (_ELASTIC, "the host an elastic worker runs for"),
    "RINGCOMM_ELASTIC_SLOT": (_ELASTIC, "an elastic worker's slot on its host"),
    "RINGCOMM_ELASTIC_GENERATION": (_ELASTIC, "the elastic job's generation it started in"),
    "HOROVOD_DYNAMIC_PROCESS_SETS": (
        "ringcomm.torch (process_sets.py)",
        "1: process sets may be added and removed after init(), as in Horovod",
    ),
    "HOROVOD_ELASTIC_TIMEOUT": (
        "ringcomm-run (ringcomm/elastic/driver.py)",
        "an elastic job's default --elastic-timeout: seconds to wait for --min-np slots (600)",
    ),
}
# Horovod's names for variables of the core's Config, read where ringcomm's own is unset
# (src/common/config.cc, variable(name, horovodName)): a Horovod job keeps its tuning.
HOROVOD_ALIASES = {
    "RINGCOMM_CYCLE_TIME": "HOROVOD_CYCLE_TIME",
    "RINGCOMM_FUSION_THRESHOLD": "HOROVOD_FUSION_THRESHOLD",
}
_SECRET_VARIABLES = ("RINGCOMM_SECRET",)
# A variable nothing reads is shown with its value (a typo is worth seeing), unless its name
# suggests a secret.
_SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "KEY", "CREDENTIAL")
_NVIDIA_SMI_TIMEOUT = 10.0  # seconds: a wedged driver must not hang a bug report


def _try(function, *args) -> Any:
    """function(*args), or the error as text: one failing probe must not hide the others."""
    try:
        return function(*args)
    except Exception as error:  # noqa: BLE001 (a report shows what failed, and goes on)
        return {"error": f"{type(error).__name__}: {error}"}


def _version_of(module_name: str) -> Optional[str]:
    try:
        from importlib import metadata

        return metadata.version(module_name)
    except Exception:  # noqa: BLE001
        return None


def _ringcomm() -> dict:
    import ringcomm
    from ringcomm import _core, _host

    return {
        "version": ringcomm.__version__,
        "location": os.path.dirname(ringcomm.__file__),
        "core": _core.__file__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpu": _host.cpu_model(),
        "cores": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "numpy": _version_of("numpy"),
        "torch": _version_of("torch"),
        "mpi4py": _version_of("mpi4py"),
        "rich": _version_of("rich"),
    }


def _cuda_version(number: int) -> Optional[str]:
    return f"{number // 1000}.{number % 1000 // 10}" if number else None


def _build() -> dict:
    from ringcomm import _core

    info = dict(_core.build_info())
    info["cuda_runtime_version"] = _cuda_version(info["cuda_runtime_version"])
    info["cuda_driver_version"] = _cuda_version(info["cuda_driver_version"])
    return info


def _torch_backend() -> dict:
    if _version_of("torch") is None:
        return {"torch": None, "state": "torch is not installed"}
    import torch

    from ringcomm.c10d import _build as build

    built = build.built_module(torch)
    return {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "extension": str(built) if built else None,
        "state": "built for this torch"
        if built
        else "not built yet: the first init_process_group('ringcomm') compiles it (about a "
        "minute); `python -m ringcomm.c10d` builds it now",
    }


def _interfaces() -> list:
    """Each network interface, its IPv4 address and link speed where the kernel says them."""
    import fcntl
    import struct

    siocgifaddr = 0x8915  # <linux/sockios.h>
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            entry: dict = {"name": name, "address": None, "speed_mbps": None, "mtu": None}
            try:
                request = struct.pack("256s", name.encode()[:15])
                reply = fcntl.ioctl(probe.fileno(), siocgifaddr, request)
                entry["address"] = socket.inet_ntoa(reply[20:24])
            except OSError:
                pass  # no IPv4 address
            for key, file in (("speed_mbps", "speed"), ("mtu", "mtu")):
                try:
                    with open(f"/sys/class/net/{name}/{file}") as sysfs:
                        value = int(sysfs.read().strip())
                    entry[key] = value if value > 0 else None
                except (OSError, ValueError):
                    pass
            found.append(entry)
    return found


def _transports() -> dict:
    shm: dict = {"path": "/dev/shm"}
    try:
        stats = os.statvfs("/dev/shm")
        shm.update(
            available=True,
            size_bytes=stats.f_blocks * stats.f_frsize,
            free_bytes=stats.f_bavail * stats.f_frsize,
        )
    except OSError as error:
        shm.update(available=False, error=str(error))
    return {
        "shm": shm,
        "cross_memory": _try(_cross_memory),
        "tcp": {"available": True},
        "ucx": _try(_ucx),
        "interfaces": _try(_interfaces),
    }


def _ucx() -> dict:
    """The UCX library that loads here (RINGCOMM_TRANSPORT=ucx) and the lanes it offers, or why
    none does."""
    from ringcomm import _core

    if not _core.build_info()["ucx"]:
        return {"version": None, "lanes": None, "why_not": None}
    found = _core.ucx_info()
    return {k: v or None for k, v in found.items()}


def _cross_memory() -> dict:
    """Whether this process may read another of its user's processes' memory (process_vm_readv),
    as the direct schedule's single-copy path does (RINGCOMM_SHM_CMA): tried on the parent at
    address 0, which fails with EFAULT where reading is allowed and EPERM where Yama's
    ptrace_scope or a seccomp profile forbids it. Ranks probe each other again at setup."""
    import ctypes
    import errno

    scope = None
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as file:
            scope = int(file.read().strip())
    except (OSError, ValueError):
        pass
    libc = ctypes.CDLL(None, use_errno=True)
    iovec = ctypes.c_void_p * 2  # (base, length)
    buffer = ctypes.create_string_buffer(8)
    local, remote = iovec(ctypes.addressof(buffer), 8), iovec(0, 8)
    got = libc.process_vm_readv(os.getppid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    code = ctypes.get_errno() if got < 0 else 0
    return {
        "allowed": code in (0, errno.EFAULT),
        "error": None if code in (0, errno.EFAULT) else os.strerror(code),
        "yama_ptrace_scope": scope,
    }


def _gpus() -> dict:
    """The GPUs, through torch or CuPy when present, else nvidia-smi, else none."""
    if _version_of("torch") is not None:
        import torch

        if torch.cuda.is_available():
            devices = []
            for index in range(torch.cuda.device_count()):
                properties = torch.cuda.get_device_properties(index)
                free, total = torch.cuda.mem_get_info(index)
                devices.append(
                    {
                        "index": index,
                        "name": properties.name,
                        "capability": f"{properties.major}.{properties.minor}",
                        "memory_total_bytes": total,
                        "memory_free_bytes": free,
                    }
                )
            return {"source": "torch", "devices": devices}
    if _version_of("cupy") is not None or _version_of("cupy-cuda12x") is not None:
        try:
            import cupy

            devices = []
            for index in range(cupy.cuda.runtime.getDeviceCount()):
                properties = cupy.cuda.runtime.getDeviceProperties(index)
                with cupy.cuda.Device(index):
                    free, total = cupy.cuda.runtime.memGetInfo()
                devices.append(
                    {
                        "index": index,
                        "name": properties["name"].decode(),
                        "capability": f"{properties['major']}.{properties['minor']}",
                        "memory_total_bytes": total,
                        "memory_free_bytes": free,
                    }
                )
            return {"source": "cupy", "devices": devices}
        except Exception:  # noqa: BLE001 (no device, or no driver: try nvidia-smi)
            pass
    smi = shutil.which("nvidia-smi")
    if smi:
        done = subprocess.run(
            [smi, "--query-gpu=index,name,memory.total,memory.free,compute_cap",
             "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=_NVIDIA_SMI_TIMEOUT,
        )  # fmt: skip
        devices = []
        for line in done.stdout.splitlines():
            fields = [f.strip() for f in line.split(",")]
            if len(fields) >= 4 and fields[0].isdigit():
                devices.append(
                    {
                        "index": int(fields[0]),
                        "name": fields[1],
                        "capability": fields[4] if len(fields) > 4 else None,
                        "memory_total_bytes": _mebibytes(fields[2]),
                        "memory_free_bytes": _mebibytes(fields[3]),
                    }
                )
        return {"source": "nvidia-smi", "devices": devices}
    return {"source": None, "devices": []}


def _mebibytes(text: str) -> Optional[int]:
    try:
        return int(float(text) * 1024 * 1024)
    except ValueError:
        return None


def _mps() -> dict:
    from ringcomm import _core

    directory = _try(lambda: _core.Config.from_environment().mps_pipe_directory)
    if isinstance(directory, dict):  # a malformed variable: CUDA's own default
        directory = os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps"
    return {"pipe_directory": directory, "running": bool(_core.mps_running(directory))}


def _configuration() -> list:
    """Every variable ringcomm reads: the core's (its Config says the value in effect and where it
    came from), the launch variables the Python package reads, and any other RINGCOMM_* or
    HOROVOD_* that is set but that nothing reads (a typo, or a Horovod knob ringcomm lacks)."""
    from ringcomm import _core

    rows = []
    for variable in _core.Config.describe_environment():
        row = dict(variable)
        row["read_by"] = "core"
        rows.append(row)
    known = {row["name"] for row in rows} | set(HOROVOD_ALIASES.values())
    for name, (reader, _) in PYTHON_VARIABLES.items():
        if name in os.environ:
            value = "(set)" if name in _SECRET_VARIABLES else os.environ[name]
            rows.append(
                {"name": name, "value": value, "source": "environment", "error": "",
                 "read_by": reader}
            )  # fmt: skip
        known.add(name)
    for name in sorted(os.environ):
        if name.startswith(("RINGCOMM_", "HOROVOD_")) and name not in known:
            hidden = any(word in name for word in _SECRET_WORDS)
            rows.append(
                {"name": name, "value": "(set, not shown)" if hidden else os.environ[name],
                 "source": "environment", "error": "",
                 "read_by": "nothing: not a variable this ringcomm reads"}
            )  # fmt: skip
    return rows


def _launch() -> dict:
    from ringcomm import _environment

    identity = _environment.identify()
    return {
        "launcher": identity.launcher,
        "rank": identity.rank,
        "size": identity.size,
        "local_rank": identity.local_rank,
        "local_size": identity.local_size,
        "host": identity.host,
        "store": identity.store,
    }


def collect() -> dict:
    """The whole report, as plain data (what --json prints)."""
    return {
        "ringcomm": _try(_ringcomm),
        "build": _try(_build),
        "torch_backend": _try(_torch_backend),
        "transports": _try(_transports),
        "gpus": _try(_gpus),
        "mps": _try(_mps),
        "launch": _try(_launch),
        "configuration": _try(_configuration),
    }


# ---- rendering -----------------------------------------------------------------------------


def _size(count: Optional[int]) -> str:
    if count is None:
        return "?"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return "?"


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if value is True:
        return "yes"
    if value is False:
        return "no"
    return str(value)


def _sections(report: dict) -> list:
    """(title, [(key, value)]) for the key-value sections, and (title, header, rows) tables."""
    sections: list = []

    def pairs(title, data, keys=None):
        if isinstance(data, dict) and "error" in data and len(data) == 1:
            sections.append((title, [("error", data["error"])]))
            return
        items = [(k, data.get(k)) for k in keys] if keys else list(data.items())
        sections.append((title, [(k, _text(v)) for k, v in items]))

    pairs("ringcomm", report["ringcomm"])
    build = report["build"]
    if "error" not in build:
        build = dict(build)
        if not build.get("cuda"):
            for key in ("cuda_architectures", "cuda_runtime_version", "cuda_driver_version"):
                build.pop(key, None)
    pairs("build", build)
    pairs("torch.distributed backend", report["torch_backend"])

    transports = report["transports"]
    if "error" in transports and len(transports) == 1:
        pairs("transports", transports)
    else:
        shm = transports["shm"]
        shm_text = (
            f"{shm['path']}: {_size(shm['size_bytes'])}, {_size(shm['free_bytes'])} free"
            if shm.get("available")
            else f"unavailable ({shm.get('error')})"
        )
        cross = transports.get("cross_memory", {})
        cross_text = (
            "yes (large direct all-reduces reach into peers' buffers: one copy)"
            if cross.get("allowed")
            else f"no ({cross.get('error')}; Yama ptrace_scope {cross.get('yama_ptrace_scope')}):"
            " direct all-reduces stage every size"
        )
        ucx = transports.get("ucx", {})
        ucx_text = (
            f"UCX {ucx['version']}; {ucx['lanes']}"
            if ucx.get("version")
            else ucx.get("why_not")
            or ucx.get("error")
            or "not in this build (install libucx-dev, or a cluster's UCX, and reinstall)"
        )
        sections.append(
            (
                "transports",
                [
                    ("shm", shm_text),
                    ("cross-memory attach", cross_text),
                    ("tcp", "yes"),
                    ("ucx", ucx_text),
                ],
            )
        )
        interfaces = transports["interfaces"]
        if isinstance(interfaces, list):
            rows = [
                [i["name"], _text(i["address"]), _text(i["mtu"]),
                 f"{i['speed_mbps']} Mb/s" if i["speed_mbps"] else "-"]
                for i in interfaces
            ]  # fmt: skip
            sections.append(("interfaces", ["interface", "IPv4 address", "MTU", "speed"], rows))
        else:
            sections.append(("interfaces", [("error", interfaces.get("error"))]))

    gpus = report["gpus"]
    if "error" in gpus and len(gpus) == 1:
        pairs("GPUs", gpus)
    elif not gpus["devices"]:
        sections.append(("GPUs", [("devices", "none")]))
    else:
        rows = [
            [str(d["index"]), d["name"], _text(d["capability"]),
             _size(d["memory_total_bytes"]), _size(d["memory_free_bytes"])]
            for d in gpus["devices"]
        ]  # fmt: skip
        sections.append(
            (f"GPUs (from {gpus['source']})", ["#", "name", "capability", "memory", "free"], rows)
        )
    pairs("CUDA MPS", report["mps"])
    pairs("launch (as ringcomm detects it)", report["launch"])

    configuration = report["configuration"]
    if isinstance(configuration, list):
        rows = []
        for row in configuration:
            value = row["value"] if row["value"] != "" else "(none)"
            if row.get("error"):
                value += f"  INVALID: {row['error']}"
            reader = "" if row["read_by"] == "core" else row["read_by"]
            rows.append([row["name"], value, row["source"], reader])
        sections.append(("configuration", ["variable", "value", "source", "read by"], rows))
    else:
        pairs("configuration", configuration)
    return sections


def render_plain(report: dict) -> str:
    lines = []
    for section in _sections(report):
        title = section[0]
        lines.append(f"## {title}")
        if len(section) == 2:
            width = max((len(k) for k, _ in section[1]), default=0)
            lines.extend(f"{k.ljust(width)}  {v}" for k, v in section[1])
        else:
            header, rows = section[1], section[2]
            widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
            for row in [header, *rows]:
                lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
        lines.append("")
    return "\n".join(lines)


def render_rich(report: dict, console) -> None:
    from rich import box
    from rich.table import Table

    for section in _sections(report):
        if len(section) == 2:
            table = Table(title=section[0], title_justify="left", show_header=False, box=box.SIMPLE)
            table.add_column(style="bold")
            table.add_column()
            for key, value in section[1]:
                table.add_row(key, value)
        else:
            table = Table(title=section[0], title_justify="left", box=box.SIMPLE_HEAD)
            for column in section[1]:
                table.add_column(column)
            for row in section[2]:
                table.add_row(*row)
        console.print(table)


def build_parser() -> argparse.ArgumentParser:
    """ringcomm-info's arguments (the documentation's reference is generated from them)."""
    parser = argparse.ArgumentParser(
        prog="ringcomm-info",
        description="What this ringcomm is and sees (build, transports, GPUs, configuration, "
        "launch), to paste into a bug report.",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="one JSON object")
    output.add_argument("--plain", action="store_true", help="plain text, even on a terminal")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    report = collect()
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=False))
    elif args.plain or not sys.stdout.isatty():
        print(render_plain(report))
    else:
        from rich.console import Console

        render_rich(report, Console())
    return 0


if __name__ == "__main__":
    sys.exit(main())
