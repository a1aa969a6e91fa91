"""Horovod's own examples/pytorch/pytorch_synthetic_benchmark.py on ringcomm, unchanged but for
its import line, beside the same loop on DDP with gloo, in one invocation:

    python bench/horovod_synthetic.py -np 4 -- --batch-size 8 --num-iters 3

The script is read at run time from a Horovod repository (default: the bare mirror at
/work/.mirror/horovod+horovod/repo; --horovod-repo to point elsewhere) and never stored here;
without one this says so and exits 0. ``import horovod.torch as hvd`` becomes ``import
ringcomm.torch as hvd`` and nothing else changes; it runs under ``mpirun -np N`` (MPICH from
PyPI). DDP runs bench/ddp_synthetic_benchmark.py under torchrun with the same arguments.

torchvision: where ``import torchvision`` fails (PyPI's torchvision 0.28.0 needs torch's CUDA
libraries, absent from torch 2.13.0+cpu), bench/torchvision_shim stands in for its package so
that its real model classes load without its compiled operators; this prints which it used.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MIRROR = Path("/work/.mirror/horovod+horovod/repo")
SCRIPT = "examples/pytorch/pytorch_synthetic_benchmark.py"
IMPORT = "import horovod.torch as hvd"
TOTAL = re.compile(r"Total img/sec on (\d+) \w+\(s\): ([\d.]+) \+-([\d.]+)")


def horovod_script(repo: Path) -> str | None:
    if not repo.exists():
        return None
    shown = subprocess.run(
        ["git", "-C", str(repo), "show", f"HEAD:{SCRIPT}"], capture_output=True, text=True
    )
    return shown.stdout if shown.returncode == 0 else None


def on_ringcomm(source: str) -> str:
    if source.count(IMPORT) != 1:
        raise SystemExit(f"expected exactly one '{IMPORT}' line in {SCRIPT}")
    return source.replace(IMPORT, "import ringcomm.torch as hvd")


def torchvision_path() -> list:
    """Extra PYTHONPATH entries: none when torchvision imports, else the stand-in."""
    probe = subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True)
    if probe.returncode == 0:
        print("torchvision: the installed package")
        return []
    print("torchvision: installed, but it does not import beside this torch; its models are")
    print("  served by bench/torchvision_shim:", probe.stderr.decode().strip().splitlines()[-1])
    return [str(HERE / "torchvision_shim")]


def run(command: list, env: dict) -> tuple:
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    found = TOTAL.search(done.stdout)
    if done.returncode != 0 or not found:
        sys.stdout.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"failed: {' '.join(command)}")
    print(found.group(0), flush=True)
    return float(found.group(2)), float(found.group(3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-np", type=int, default=4)
    parser.add_argument("--horovod-repo", type=Path, default=MIRROR)
    parser.add_argument("script_args", nargs="*", help="passed to both scripts (after --)")
    args = parser.parse_args()

    source = horovod_script(args.horovod_repo)
    if source is None:
        print(f"no Horovod repository at {args.horovod_repo}: nothing to run")
        return
    mpirun = Path(sys.executable).with_name("mpirun")
    torchrun = Path(sys.executable).with_name("torchrun")
    if not mpirun.exists() or not torchrun.exists():
        raise SystemExit("needs mpirun (pip install mpich) and torchrun beside this Python")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *torchvision_path(), env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "pytorch_synthetic_benchmark.py"
        script.write_text(on_ringcomm(source))
        ringcomm = run(
            [str(mpirun), "-np", str(args.np), sys.executable, str(script), *args.script_args],
            env,
        )
    ddp = run(
        [
            str(torchrun),
            "--nproc-per-node",
            str(args.np),
            str(HERE / "ddp_synthetic_benchmark.py"),
            *args.script_args,
        ],
        env,
    )
    print(f"ringcomm.torch (Horovod's script): {ringcomm[0]:.1f} +-{ringcomm[1]:.1f} img/s total")
    print(f"DDP on gloo:                        {ddp[0]:.1f} +-{ddp[1]:.1f} img/s total")
    print(f"ratio ringcomm / gloo: {ringcomm[0] / ddp[0]:.2f}")


if __name__ == "__main__":
    main()
