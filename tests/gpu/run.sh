#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA GPU, builds ringcomm with CUDA, runs every CUDA test and
# a short benchmark, and prints one summary. CI has no GPU; run this wherever one is at hand:
#
#   tests/gpu/run.sh            # every step, in RINGCOMM_GPU_BUDGET seconds (450 by default)
#   tests/gpu/run.sh build tests  # only the named steps (env build mps kernels tests sanitizer bench)
#
# A lent GPU machine gives a session 15 minutes, its start included: the steps run in the order
# that matters most (the build, the MPS check, the tests, the sanitizer, the benchmark), each
# limited to what is left of the budget, and one the budget does not reach is reported skipped.
# RINGCOMM_GPU_BUDGET=1800 runs everything in full.
#
# Logs land in /tmp/ringcomm-gpu, one per step, and at the end in one archive in $OUT (the device
# tool's folder, which takes back at most 8 files); the summary is the last thing printed.
# RINGCOMM_GPU_BENCH names the benchmark groups (tests/gpu/bench.sh; default all). MPI: a wheel of mpich in .whl/ (see the device tool's README) is
# installed first, so the tests that launch with mpirun run too; and UCX with CUDA lanes, where
# tests/gpu/pack_ucx.sh packed it into .whl/ (with pkgconf's wheel for a machine without
# pkg-config), so that the build has UCX and device buffers go to it as device memory.
#
# The build uses the machine's own C++ compiler first (that is what a user gets), and falls back
# to /usr/bin/g++ only if that fails, saying so in the summary.
set -uo pipefail
cd "$(dirname "$0")/../.."
ARCHIVE_TO=${OUT:-}
OUT=/tmp/ringcomm-gpu
mkdir -p "$OUT"
export OUT
# Every log in one archive where the device tool collects files, however the script ends.
archive() {
  [ -n "$ARCHIVE_TO" ] && tar -czf "$ARCHIVE_TO/gpu-logs.tar.gz" -C "$OUT" . 2>/dev/null
}
trap archive EXIT
PYTHON=${PYTHON:-python3}
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(env build mps kernels tests sanitizer bench)
BUDGET=${RINGCOMM_GPU_BUDGET:-450}
SUMMARY=()
export PYTHONUNBUFFERED=1

wanted() { [[ " ${STEPS[*]} " == *" $1 "* ]]; }

# step NAME SECONDS COMMAND...: runs COMMAND with a time limit, its output in $OUT/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - SECONDS))
  if [ $left -lt 20 ]; then
    SUMMARY+=("skipped $name: the ${BUDGET} s budget is spent (RINGCOMM_GPU_BUDGET)")
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local start=$SECONDS
  echo "== $name: $*"
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  local took=$((SECONDS - start))
  if [ $rc -eq 0 ]; then
    SUMMARY+=("ok      $name (${took} s)")
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    SUMMARY+=("TIMEOUT $name after ${took} s (log: $OUT/$name.log)")
  else
    SUMMARY+=("FAILED  $name, exit $rc after ${took} s (log: $OUT/$name.log)")
  fi
  tail -n 15 "$OUT/$name.log"
  return $rc
}

if ls .whl/mpich-*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} \
    && export PATH=/tmp/site/bin:$PATH
fi

# UCX with CUDA lanes: the libucx-cu12 wheel's libraries, packed by tests/gpu/pack_ucx.sh into
# .whl/libucx-cu12.tar.gz. The build finds its headers through pkg-config (pkgconf's wheel in .whl/
# where the machine has no pkg-config), and ringcomm loads its library, so that device buffers in
# sends and receives go to UCX as device memory (test_cuda_collectives.py's
# test_cuda_arrays_over_ucx). Its .pc files name the folder the wheel was built in: pointed here.
if [ -f .whl/libucx-cu12.tar.gz ]; then
  mkdir -p /tmp/site && tar -xzf .whl/libucx-cu12.tar.gz -C /tmp/site
  sed -i "s|^prefix = .*|prefix = /tmp/site/libucx|" /tmp/site/libucx/lib/pkgconfig/*.pc
  export PKG_CONFIG_PATH=/tmp/site/libucx/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  if ! command -v pkg-config >/dev/null && [ -x /tmp/site/bin/pkgconf ]; then
    export PKG_CONFIG=/tmp/site/bin/pkgconf  # CMake's FindPkgConfig takes it from there
  fi
fi

# The GPU machine has no iproute2, which the simulated cluster (network namespaces) needs: a copy
# carried in .whl/iproute2 (Debian's ip and tc with their libraries, behind wrappers).
[ -x .whl/iproute2/bin/ip ] && ! command -v ip >/dev/null && export PATH=$PWD/.whl/iproute2/bin:$PATH

if wanted env; then
  step env 60 bash -c "nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,driver_version \
    --format=csv; nvcc --version | tail -1; \${CXX:-c++} --version | head -1; \
    $PYTHON -c 'import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())'; \
    $PYTHON -c 'import cupy; print(\"cupy\", cupy.__version__)'; \
    command -v mpirun || echo 'no mpirun (carry the mpich wheel in .whl/)'; nproc"
fi

# The kernel tests (tests/test_cuda.py's build of the kernels, their tests and the core's device
# path, at idle CPU priority; then the tests on the device and on the host) need no ringcomm
# installed: started now, beside the build below, and collected as the kernel-tests step.
kernel_tests_started=$SECONDS
if wanted kernels; then
  "$PYTHON" - >"$OUT/kernel-tests.log" 2>&1 <<'PY' &
import subprocess, sys
sys.path.insert(0, "tests")
import test_cuda

build = test_cuda.build_cuda_targets()
print(build.log[-3000:], f"\nbuilt in {build.seconds:.0f} s", flush=True)
failed = not build.ok
for part in ("--device-only", "--host-only"):
    if failed:
        break
    done = subprocess.run([str(build.tests), part], capture_output=True, text=True, timeout=900)
    print(done.stdout[-6000:], done.stderr[-3000:], flush=True)
    failed = done.returncode != 0 or " passed, 0 failed" not in done.stdout
sys.exit(1 if failed else 0)
PY
  kernel_tests=$!
fi

build() {
  "$PYTHON" -m pip install -v --no-build-isolation --no-deps \
    ${PKG_CONFIG:+-Ccmake.define.PKG_CONFIG_EXECUTABLE=$PKG_CONFIG} \
    -Ccmake.define.RINGCOMM_BUILD_CUDA=ON -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90 -e . &&
    "$PYTHON" -c 'import ringcomm, ringcomm._devices as d; assert d.built_with_cuda(); print("built with CUDA")' &&
    "$PYTHON" -m ringcomm info &&
    "$PYTHON" -m ringcomm.c10d
}
export -f build
export PYTHON

if wanted build; then
  if ! step build 600 bash -c build; then
    echo "the machine's own compiler failed; again with CXX=/usr/bin/g++"
    CXX=/usr/bin/g++ step build-with-system-gxx 600 bash -c build
  fi
fi

if wanted mps; then
  # MPS started: ringcomm sees it, the all-reduce takes IPC at over half the limit; stopped: it
  # says so and stages (tests/gpu/check_mps.py).
  step mps 600 "$PYTHON" tests/gpu/check_mps.py
fi

if wanted kernels; then
  # The kernel tests (all of them, device and host) and the core's device path compile in a
  # fresh build directory.
  timeout $((BUDGET - SECONDS > 20 ? BUDGET - SECONDS : 20)) tail --pid="$kernel_tests" -f /dev/null
  if kill -0 "$kernel_tests" 2>/dev/null; then
    kill "$kernel_tests"
    SUMMARY+=("TIMEOUT kernel-tests (log: $OUT/kernel-tests.log)")
  elif wait "$kernel_tests"; then
    SUMMARY+=("ok      kernel-tests (started beside the build, done $((SECONDS - kernel_tests_started)) s in)")
  else
    SUMMARY+=("FAILED  kernel-tests (log: $OUT/kernel-tests.log)")
  fi
  tail -n 15 "$OUT/kernel-tests.log"
fi

if wanted tests; then
  # Every multi-process CUDA test: torch and CuPy arrays on the staged and IPC paths at 2-4 ranks
  # and across 2 hosts, the torch backend, ringcomm.torch (the tensor queue).
  # Four at a time where pytest-xdist is installed (the GPU machine has 16 cores).
  parallel=()
  "$PYTHON" -c 'import xdist' 2>/dev/null && parallel=(-n 4)
  # RINGCOMM_GPU_TESTS: a pytest -k expression, to run some of them only.
  step cuda-collectives 900 "$PYTHON" -m pytest -q -p no:cacheprovider -rfs "${parallel[@]}" \
    ${RINGCOMM_GPU_TESTS:+-k "$RINGCOMM_GPU_TESTS"} tests/test_cuda_collectives.py tests/test_api.py
fi


if wanted sanitizer; then
  # compute-sanitizer over the kernel tests (its memcheck finds out-of-bounds device accesses).
  kernel_tests=build/cuda-check/ringcomm_cuda_tests  # where tests/test_cuda.py builds them
  if [ -x "$kernel_tests" ]; then
    step sanitizer 600 compute-sanitizer --tool memcheck --error-exitcode 1 "$kernel_tests" \
      --device-only codec
    # The IPC all-reduce's reduction (every source count, aligned and not), for one type.
    step sanitizer-reduce-many 600 compute-sanitizer --tool memcheck --error-exitcode 1 \
      "$kernel_tests" --device-only reduceManyFloat32
  else
    SUMMARY+=("skipped sanitizer: no kernel test binary (run the tests step first)")
  fi
fi

if wanted bench; then
  # The benchmarks of bench/RESULTS.md ("CUDA"), with MPS and without: tests/gpu/bench.sh.
  # shellcheck disable=SC2086  # a list of group names
  step bench 900 tests/gpu/bench.sh $((BUDGET - SECONDS)) ${RINGCOMM_GPU_BENCH:-}
  for log in "$OUT"/staged.log "$OUT"/training.log "$OUT"/hosts.log "$OUT"/hosts-cuda.log \
    "$OUT"/ipc.log; do
    [ -f "$log" ] && { echo "---- $log"; grep -v '^\s*$' "$log" | tail -n 60; }
  done
fi

echo
echo "==== ringcomm GPU check: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
printf '%s\n' "${SUMMARY[@]}"
for line in "${SUMMARY[@]}"; do
  [[ $line == ok* || $line == skipped* ]] || exit 1
done
