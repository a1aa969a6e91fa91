#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA GPU, builds ringcomm with CUDA, runs every CUDA test and
# a short benchmark, and prints one summary. CI has no GPU; run this wherever one is at hand:
#
#   tests/gpu/run.sh            # every step, in RINGCOMM_GPU_BUDGET seconds (450 by default)
#   tests/gpu/run.sh build tests  # only the named steps (env build mps tests sanitizer bench)
#
# A lent GPU machine gives a session 15 minutes, its start included: the steps run in the order
# that matters most (the build, the MPS check, the tests, the sanitizer, the benchmark), each
# limited to what is left of the budget, and one the budget does not reach is reported skipped.
# RINGCOMM_GPU_BUDGET=1800 runs everything in full.
#
# Logs land in $OUT (the device tool's folder) or /tmp/ringcomm-gpu, one per step; the summary is
# the last thing printed. MPI: a wheel of mpich in .whl/ (see the device tool's README) is
# installed first, so the tests that launch with mpirun run too.
#
# The build uses the machine's own C++ compiler first (that is what a user gets), and falls back
# to /usr/bin/g++ only if that fails, saying so in the summary.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/ringcomm-gpu}
mkdir -p "$OUT"
PYTHON=${PYTHON:-python3}
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(env build mps tests sanitizer bench)
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

if wanted env; then
  step env 60 bash -c "nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,driver_version \
    --format=csv; nvcc --version | tail -1; \${CXX:-c++} --version | head -1; \
    $PYTHON -c 'import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())'; \
    $PYTHON -c 'import cupy; print(\"cupy\", cupy.__version__)'; \
    command -v mpirun || echo 'no mpirun (carry the mpich wheel in .whl/)'; nproc"
fi

build() {
  "$PYTHON" -m pip install -v --no-build-isolation --no-deps \
    -Ccmake.define.RINGCOMM_BUILD_CUDA=ON -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90 -e . &&
    "$PYTHON" -c 'import ringcomm, ringcomm._devices as d; assert d.built_with_cuda(); print("built with CUDA")' &&
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

if wanted tests; then
  # The kernel tests (all of them, device and host) and the core's device path compile in a
  # fresh build directory; then every multi-process CUDA test: torch and CuPy arrays on the
  # staged and IPC paths at 2-4 ranks, the torch backend, ringcomm.torch (the tensor queue).
  step kernel-tests 600 "$PYTHON" -m pytest -q -x -p no:cacheprovider tests/test_cuda.py
  step cuda-collectives 900 "$PYTHON" -m pytest -q -p no:cacheprovider -rfs \
    tests/test_cuda_collectives.py tests/test_api.py
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
  step bench 900 tests/gpu/bench.sh 600
fi

echo
echo "==== ringcomm GPU check: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
printf '%s\n' "${SUMMARY[@]}"
for line in "${SUMMARY[@]}"; do
  [[ $line == ok* || $line == skipped* ]] || exit 1
done
