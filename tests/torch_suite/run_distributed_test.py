"""Run PyTorch's own distributed test suite against a torch.distributed backend.

The suite ships inside the torch wheel (torch/testing/_internal/distributed/distributed_test.py,
class DistributedTest._DistTestBase, about 285 tests) and is driven by environment variables that
are read when it is imported (BACKEND, WORLD_SIZE, TEMP_DIR, INIT_METHOD). PyTorch's own driver is
test/distributed/test_distributed_spawn.py (not in the wheel); torch_ucc ran it for UCC the same
way. This script is such a driver for the ringcomm process-group backend:

    python tests/torch_suite/run_distributed_test.py                        # BACKEND=ringcomm
    python tests/torch_suite/run_distributed_test.py --backend gloo -k test_broadcast
    python tests/torch_suite/run_distributed_test.py -k test_all_reduce_sum -k test_barrier \
        --timeout 120 --json /tmp/suite.json
    python tests/torch_suite/run_distributed_test.py --list                 # what would run/skip

-k takes unittest name patterns (fnmatch; a pattern without a wildcard matches as a substring, so
`-k '*.test_broadcast'` selects that one test). Every test spawns WORLD_SIZE fresh processes that
import torch and this file again, so run it by path, not with -m, and expect a few seconds per test.
It needs torch's test dependency `expecttest`. Exit status: 0 when nothing failed or errored.

For a backend that is not built into torch (anything but gloo, nccl, ucc, mpi, xccl) the runner
imports the module of that name first (so `import ringcomm` registers "ringcomm", in this process
and in every spawned rank) and, before the suite is imported, adds the backend to torch's feature
sets DistTestCases.backend_feature (ddp, subgroup, plugin, gpu by default; see --features) so
that it gets the CPU tests gloo gets. Tests that torch gates on the literal name "gloo" stay
skipped unless named with --as-gloo; --skip-collective and --expect-profiling declare what the
backend lacks or has. Tests that torch's decorators would skip inside the ranks (no GPU, fewer
than 8 ranks, odd world size) are skipped up front with torch's message (--no-preskip spawns them
as torch's driver does). The ranks' stderr carries torch's profiler chatter ("USDT: ..."); filter
it with grep -v if it is in the way. pytest does not collect this file (see conftest.py beside
it), and importing it does nothing unless the runner itself set it up.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import inspect
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
import traceback
import unittest

# The configuration travels to the spawned ranks in this variable: each rank re-imports this file
# as __mp_main__ and must rebuild the same test class, with the backend registered.
CONFIG_ENV = "RINGCOMM_TORCH_SUITE_CONFIG"

BUILTIN_BACKENDS = ("gloo", "nccl", "ucc", "mpi", "xccl")
# DistTestCases.backend_feature keys; "cuda", "hpu", "xpu" are devices a CPU backend lacks.
DEFAULT_FEATURES = ("ddp", "subgroup", "plugin", "gpu")
SKIP_COLLECTIVES = ("allgather_coalesced", "reduce", "sendrecv anysource", "cpu barrier")
# Module-level lists in distributed_test.py: membership makes the tests look for profiler events
# named "<backend>:<op>" (the profilingTitle a c10d Work is created with).
PROFILING_LISTS = ("PROFILING_SUPPORTED_BACKENDS", "SEND_RECV_PROFILING_SUPPORTED_BACKENDS")

SUITE_MODULE = "torch.testing._internal.distributed.distributed_test"
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Timeout|Interrupt)\w*(:|$)")


def _suite_class_name(backend: str) -> str:
    return f"TestDistBackendWithSpawn{backend.upper()}"


def _import_backend_modules(config: dict) -> None:
    for name in config["import_modules"]:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise SystemExit(
                f"run_distributed_test: cannot import {name!r} for backend "
                f"{config['backend']!r}: {exc}"
            ) from exc
    if config["backend"] in BUILTIN_BACKENDS:
        return
    import torch.distributed as dist

    if config["backend"] not in dist.Backend.backend_list:
        raise SystemExit(
            f"run_distributed_test: no torch.distributed backend named {config['backend']!r} is "
            f"registered after importing {config['import_modules']} (registered: "
            f"{dist.Backend.backend_list}); build and install the backend first"
        )


def _patch_test_cases(config: dict) -> None:
    """Declare the backend's features in torch's sets; must run before the suite is imported."""
    from torch.testing._internal.common_distributed import DistTestCases

    backend = config["backend"]
    for feature in config["features"]:
        DistTestCases.backend_feature.setdefault(feature, set()).add(backend)
    for collective in config["skip_collectives"]:
        DistTestCases.skip_collective.setdefault(collective, set()).add(backend)


def build_suite(config: dict):
    """Import the suite for config['backend'] and define the test class in this module."""
    os.environ["BACKEND"] = config["backend"]
    _import_backend_modules(config)
    _patch_test_cases(config)
    import torch
    from torch.testing._internal.distributed import distributed_test

    if config["expect_profiling"]:
        for name in PROFILING_LISTS:
            listed = getattr(distributed_test, name)
            if config["backend"] not in listed:
                listed.append(config["backend"])

    class Suite(distributed_test.TestDistBackend, distributed_test.DistributedTest._DistTestBase):
        # The same composition as torch's test/distributed/test_distributed_spawn.py.
        def setUp(self):
            super().setUp()
            self._spawn_processes()
            torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()

    # The spawned ranks find the class by module and qualified name (pickle).
    Suite.__name__ = Suite.__qualname__ = _suite_class_name(config["backend"])
    Suite.__module__ = __name__
    globals()[Suite.__name__] = Suite
    return Suite, distributed_test


if __name__ != "__main__" and CONFIG_ENV in os.environ:
    # A rank spawned by the runner (or an import under the runner's environment).
    build_suite(json.loads(os.environ[CONFIG_ENV]))


# ----------------------------------------------------------------------------------------------
# Runner side.


def _statically_skipped(cls, names):
    """{test name: reason} for tests unittest will skip without starting any process."""
    out = {}
    for name in names:
        method = getattr(cls, name)
        if getattr(method, "__unittest_skip__", False):
            out[name] = getattr(method, "__unittest_skip_why__", "")
    return out


def _skips_under_gloo(names):
    """Static skip reasons the suite gives the same tests when BACKEND is "gloo".

    The suite is imported a second time, under another module name, with BACKEND=gloo; only its
    decorators are looked at, nothing of it runs.
    """
    spec = importlib.util.find_spec(SUITE_MODULE)
    saved = os.environ.get("BACKEND")
    os.environ["BACKEND"] = "gloo"
    try:
        copy = importlib.util.spec_from_file_location("_distributed_test_as_gloo", spec.origin)
        module = importlib.util.module_from_spec(copy)
        copy.loader.exec_module(module)
    finally:
        if saved is None:
            os.environ.pop("BACKEND", None)
        else:
            os.environ["BACKEND"] = saved
    return _statically_skipped(module.DistributedTest._DistTestBase, names)


def _enable_as_gloo(cls, patterns, names):
    """Clear the static skip of tests that torch skips only because the backend is not "gloo"."""
    skipped = _statically_skipped(cls, names)
    wanted = [n for n in skipped if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    if not wanted:
        return {}
    as_gloo = _skips_under_gloo(wanted)
    enabled = {}
    for name in wanted:
        if name in as_gloo:
            continue  # skipped for gloo too: not a backend-name gate
        method = getattr(cls, name)
        enabled[name] = skipped[name]
        method.__unittest_skip__ = False
        method.__unittest_skip_why__ = ""
    return enabled


def _runtime_skip_reason(method):
    """The skip torch's run-time decorators on `method` will certainly take here, or None.

    skip_if_no_gpu, skip_if_lt_x_gpu, skip_if_small_worldsize and skip_if_odd_worldsize decide in
    the spawned ranks, after the process group is up: seconds per test for a foregone skip. Their
    wrappers are recognised by code object and decided here instead, with torch's own message.
    """
    from torch.testing._internal import common_distributed as cd

    def code_of(decorator):
        return decorator(lambda: None).__code__

    no_gpu = code_of(cd.skip_if_no_gpu)
    lt_x_gpu = code_of(cd.skip_if_lt_x_gpu(1))
    small = code_of(cd.skip_if_small_worldsize)
    odd = code_of(cd.skip_if_odd_worldsize)
    world_size = int(os.environ["WORLD_SIZE"])
    not_mpi = os.environ["BACKEND"] != "mpi"
    fn = method
    while fn is not None:
        code = getattr(fn, "__code__", None)
        if code is no_gpu and not cd.HAS_ACCELERATOR:
            return cd.TEST_SKIPS["no_cuda"].message
        if code is lt_x_gpu and not cd.HAS_ACCELERATOR:
            x = inspect.getclosurevars(fn).nonlocals.get("x")
            if isinstance(x, int) and f"multi-gpu-{x}" in cd.TEST_SKIPS:
                return cd.TEST_SKIPS[f"multi-gpu-{x}"].message
        if code is small and not_mpi and world_size < 8:
            return cd.TEST_SKIPS["small_worldsize"].message
        if code is odd and not_mpi and world_size % 2 == 1:
            return cd.TEST_SKIPS["odd_worldsize"].message
        fn = getattr(fn, "__wrapped__", None)
    return None


def _preskip(cls, names):
    """Mark as skipped, before any process starts, the tests that would skip in their ranks."""
    done = {}
    for name in names:
        method = getattr(cls, name)
        if getattr(method, "__unittest_skip__", False):
            continue
        reason = _runtime_skip_reason(method)
        if reason is not None:
            method.__unittest_skip__ = True
            method.__unittest_skip_why__ = reason
            done[name] = reason
    return done


class RecordingResult(unittest.TextTestResult):
    """TextTestResult that also keeps, per test, its outcome, duration and message."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records = []
        self._started = {}

    def startTest(self, test):  # noqa: N802 (unittest's API)
        self._started[test.id()] = time.monotonic()
        super().startTest(test)

    def _record(self, test, status, detail=None):
        start = self._started.pop(test.id(), None)
        entry = {
            "name": test.id().rsplit(".", 1)[-1],
            "status": status,
            "seconds": None if start is None else round(time.monotonic() - start, 3),
        }
        if detail is not None:
            entry.update(detail)
        self.records.append(entry)

    @staticmethod
    def _error_detail(err, max_lines=20):
        exc_type, exc_value, _ = err
        message = f"{exc_type.__name__}: {exc_value}".strip()
        lines = [line for line in message.splitlines() if line.strip()]
        # A failure inside a rank arrives as "RuntimeError: Process N exited with error code 10
        # and exception:" and that rank's traceback; its exception is the last "...Error: ..." line.
        raised = [i for i, line in enumerate(lines) if EXCEPTION_LINE.match(line)]
        return {
            "error": "\n".join(lines[:max_lines]),
            "exception": "\n".join(lines[raised[-1] :][:5]) if raised else "",
        }

    def addSuccess(self, test):  # noqa: N802 (unittest's API)
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):  # noqa: N802 (unittest's API)
        super().addFailure(test, err)
        self._record(test, "failed", self._error_detail(err))

    def addError(self, test, err):  # noqa: N802 (unittest's API)
        super().addError(test, err)
        self._record(test, "errored", self._error_detail(err))

    def addSkip(self, test, reason):  # noqa: N802 (unittest's API)
        super().addSkip(test, reason)
        self._record(test, "skipped", {"reason": reason})

    def addExpectedFailure(self, test, err):  # noqa: N802 (unittest's API)
        super().addExpectedFailure(test, err)
        self._record(test, "expected_failure")

    def addUnexpectedSuccess(self, test):  # noqa: N802 (unittest's API)
        super().addUnexpectedSuccess(test)
        self._record(test, "unexpected_success")


def _select(loader, cls, patterns, excludes):
    loader.testNamePatterns = [p if "*" in p else f"*{p}*" for p in patterns] or None
    names = loader.getTestCaseNames(cls)
    return [n for n in names if not any(fnmatch.fnmatchcase(n, p) for p in excludes)]


def _summary(records, config, wall):
    counts = {
        key: 0
        for key in (
            "passed",
            "failed",
            "errored",
            "skipped",
            "expected_failure",
            "unexpected_success",
        )
    }
    for record in records:
        counts[record["status"]] += 1
    reasons = {}
    for record in records:
        if record["status"] == "skipped":
            reasons.setdefault(record["reason"], []).append(record["name"])
    import torch

    ran = [r["seconds"] for r in records if r["status"] != "skipped" and r["seconds"] is not None]
    return {
        "config": {key: config[key] for key in config if key not in ("import_modules", "temp_dir")}
        | {
            "world_size": int(os.environ["WORLD_SIZE"]),
            "init_method": config["init_method"],
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        "total": len(records),
        "counts": counts,
        "wall_seconds": round(wall, 1),
        "mean_seconds_per_run_test": round(sum(ran) / len(ran), 2) if ran else None,
        "skipped_by_reason": {k: sorted(v) for k, v in sorted(reasons.items())},
        "skipped": [
            {"name": r["name"], "reason": r["reason"]} for r in records if r["status"] == "skipped"
        ],
        "failed": [
            {k: r[k] for k in ("name", "status", "exception", "error", "seconds")}
            for r in records
            if r["status"] in ("failed", "errored")
        ],
        "tests": records,
    }


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Run torch's distributed_test.py suite against a process-group backend.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--backend", default="ringcomm", help="BACKEND for the suite")
    parser.add_argument(
        "--world-size",
        type=int,
        default=2,
        help="WORLD_SIZE: processes per test (torch's CI uses 3 on CPU; tests needing 4 or 8 "
        "ranks skip either way)",
    )
    parser.add_argument(
        "-k",
        dest="patterns",
        action="append",
        default=[],
        help="select tests by name pattern (repeatable; substring unless it has a wildcard)",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        help="drop tests whose method name matches this fnmatch pattern (repeatable)",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=300,
        help="seconds one test may take before its ranks are killed and it fails; applies to "
        "every test (it replaces torch's default and its per-test overrides)",
    )
    parser.add_argument("--json", metavar="PATH", help="write a JSON summary here")
    parser.add_argument(
        "--init-method",
        choices=("file", "env"),
        default="file",
        help="INIT_METHOD the suite sees; the suite's own process groups always use a file, but "
        "test_barrier_timeout_global runs only with file",
    )
    parser.add_argument(
        "--features",
        default=",".join(DEFAULT_FEATURES),
        help="DistTestCases.backend_feature sets to add a non-builtin backend to (comma list; "
        "'' for none); ignored for builtin backends",
    )
    parser.add_argument(
        "--skip-collective",
        action="append",
        default=[],
        choices=SKIP_COLLECTIVES,
        help="declare a collective the backend lacks (DistTestCases.skip_collective; repeatable)",
    )
    parser.add_argument(
        "--expect-profiling",
        action="store_true",
        help="add the backend to the suite's profiling allowlists: collectives and send/recv "
        "must then show profiler events named '<backend>:<op>'",
    )
    parser.add_argument(
        "--as-gloo",
        action="append",
        default=[],
        metavar="PATTERN",
        help="run the tests matching this pattern that torch skips only because BACKEND is not "
        "'gloo' (a name check, e.g. coalesced all_reduce, timeouts, sparse all_reduce; "
        "'*' for all); they then run against --backend (repeatable)",
    )
    parser.add_argument(
        "--import-module",
        action="append",
        default=None,
        help="module to import to register the backend (repeatable); default: the backend's "
        "own name for a non-builtin backend, nothing for a builtin one",
    )
    parser.add_argument(
        "--no-preskip",
        dest="preskip",
        action="store_false",
        help="let tests that need a GPU, 8 ranks or an even world size start their ranks and "
        "skip there, as torch's driver does (about 3-4 s each) instead of skipping them up front",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the selected tests and static skips, run none"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="one character per test")
    args = parser.parse_args(argv)
    if args.world_size < 2:
        parser.error("--world-size must be at least 2")
    return args


def _configure(args) -> dict:
    builtin = args.backend in BUILTIN_BACKENDS
    if args.import_module is None:
        args.import_module = [] if builtin else [args.backend]
    config = {
        "backend": args.backend,
        "import_modules": args.import_module,
        "features": [] if builtin else [f.strip() for f in args.features.split(",") if f.strip()],
        "skip_collectives": args.skip_collective,
        "expect_profiling": args.expect_profiling,
        "timeout": args.timeout,
        "init_method": args.init_method,
    }
    # What torch's run_test.py sets up for test_distributed_spawn.py. TEMP_DIR/INIT_METHOD are
    # made fresh again for each test by TestDistBackend.setUp.
    temp_dir = tempfile.mkdtemp(prefix="ringcomm-torch-suite-")
    config["temp_dir"] = temp_dir
    for sub in ("barrier", "test_dir", "init_dir"):
        os.makedirs(os.path.join(temp_dir, sub), exist_ok=True)
    os.environ["TEMP_DIR"] = temp_dir
    os.environ["WORLD_SIZE"] = str(args.world_size)
    os.environ["BACKEND"] = args.backend
    if args.init_method == "file":
        init_file = os.path.join(temp_dir, "init_dir", "shared_init_file")
        os.environ["INIT_METHOD"] = f"file://{init_file}"
    else:
        os.environ["INIT_METHOD"] = "env://"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(args.timeout)
    os.environ.setdefault("PYTORCH_PRINT_REPRO_ON_FAILURE", "0")  # its hint names torch's driver
    os.environ[CONFIG_ENV] = json.dumps(config)
    return config


def main(argv=None) -> int:
    args = parse_args(argv)
    config = _configure(args)
    started = time.monotonic()
    cls, _ = build_suite(config)

    from torch.testing._internal import common_distributed

    common_distributed.TIMEOUT_DEFAULT = args.timeout
    common_distributed.TIMEOUT_OVERRIDE.clear()

    loader = unittest.TestLoader()
    names = _select(loader, cls, args.patterns, args.exclude)
    enabled = _enable_as_gloo(cls, args.as_gloo, names) if args.as_gloo else {}
    preskipped = _preskip(cls, names) if args.preskip else {}
    for name, reason in sorted(enabled.items()):
        if name not in preskipped:
            print(f"run_distributed_test: enabled {name} (torch: {reason!r})", file=sys.stderr)

    if args.list:
        skipped = _statically_skipped(cls, names)
        for name in names:
            print(f"{name}  [skip: {skipped[name]}]" if name in skipped else name)
        print(
            f"{len(names)} tests selected, {len(skipped)} skipped before any process starts "
            f"({len(preskipped)} of them decided up front for torch's run-time skips)",
            file=sys.stderr,
        )
        return 0

    suite = unittest.TestSuite(cls(name) for name in names)
    runner = unittest.TextTestRunner(
        stream=sys.stderr,
        verbosity=1 if args.quiet else 2,
        resultclass=RecordingResult,
    )
    print(
        f"run_distributed_test: BACKEND={args.backend} WORLD_SIZE={args.world_size} "
        f"{len(names)} tests, timeout {args.timeout}s each",
        file=sys.stderr,
    )
    try:
        result = runner.run(suite)
    finally:
        shutil.rmtree(config["temp_dir"], ignore_errors=True)
    summary = _summary(result.records, config, time.monotonic() - started)
    summary["config"]["as_gloo_enabled"] = sorted(enabled)
    summary["config"]["preskipped"] = len(preskipped)
    counts = summary["counts"]
    print(
        "run_distributed_test: "
        + ", ".join(
            f"{v} {k.replace('_', ' ')}"
            for k, v in counts.items()
            if v or k in ("passed", "failed", "errored", "skipped")
        )
        + f" of {summary['total']} in {summary['wall_seconds']} s",
        file=sys.stderr,
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
    return 0 if counts["failed"] == counts["errored"] == 0 else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception:
        traceback.print_exc()
        sys.exit(2)
