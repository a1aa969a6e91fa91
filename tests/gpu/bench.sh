#!/usr/bin/env bash
# The GPU benchmarks of bench/RESULTS.md ("CUDA"), against gloo on CUDA tensors, in one call of
# a lent GPU machine: collectives at 2, 4 and 8 ranks on one GPU, the staged path against pinned
# host<->device copies, the DDP step and the DistributedOptimizer, with MPS and without it.
#
#   tests/gpu/bench.sh [SECONDS]   # stop starting benchmarks after SECONDS (default 480)
#
# Run tests/gpu/run.sh build first (or have ringcomm built with CUDA). One log per MPS mode lands
# in $OUT (the device tool's folder) or /tmp/ringcomm-gpu; the benchmarks run in the order of the
# targets they measure, so a short budget still records the most important ones.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/ringcomm-gpu}
mkdir -p "$OUT"
BUDGET=${1:-480}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
PYTHON=${PYTHON:-python3}
if ls .whl/mpich-*.whl >/dev/null 2>&1 && [ ! -d /tmp/site/mpich ]; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH

# bench LOG SECONDS COMMAND...: runs COMMAND unless the budget is spent, appending to LOG.
bench() {
  local log=$OUT/$1 limit=$2
  shift 2
  if [ $SECONDS -ge "$BUDGET" ]; then
    echo "skipped (budget of $BUDGET s spent): $*" | tee -a "$log"
    return
  fi
  echo "\$ $*" >>"$log"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  echo "# exit $? after $((SECONDS - start)) s" >>"$log"
  echo "ok after $((SECONDS - start)) s: $*"
}

allreduce=(ringcomm-bench allreduce --device cuda --check --quiet --min-time 0.1)
# The issue's DDP model: an MLP of 23M parameters (92 MB of float32 gradients).
ddp=("$PYTHON" -m ringcomm.bench.ddp --device cuda --np 4 --steps 10 --hidden 2048 --layers 6)
training=("$PYTHON" -m ringcomm.bench.training --device cuda --np 4 --steps 10)

mps() {
  if [ "$1" = on ]; then
    nvidia-cuda-mps-control -d && sleep 1
  else
    echo quit | nvidia-cuda-mps-control && sleep 2
  fi
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/machine.txt"

# In the order of the targets they measure; MPS switched as seldom as possible.
mps on
bench bench-mps.log 150 "${allreduce[@]}" --compare gloo -np 4 -b 1M -e 1G -f 4
bench bench-mps.log 150 "${ddp[@]}"
mps off
bench bench-no-mps.log 150 "${allreduce[@]}" --compare gloo -np 4 -b 1M -e 1G -f 4
bench bench-no-mps.log 150 "${ddp[@]}"
# The two paths forced: auto stages on a time-sliced GPU; these show what IPC would give there.
bench bench-no-mps.log 100 env RINGCOMM_CUDA_PATH=staged "${ddp[@]}" --backends ringcomm
bench bench-no-mps.log 100 env RINGCOMM_CUDA_PATH=ipc "${ddp[@]}" --backends ringcomm
bench bench-no-mps.log 60 env RINGCOMM_CUDA_PATH=staged "${allreduce[@]}" -np 4 -b 256K -e 16M -f 4
bench bench-no-mps.log 60 env RINGCOMM_CUDA_PATH=ipc "${allreduce[@]}" -np 4 -b 256K -e 16M -f 4
bench bench-no-mps.log 120 "${training[@]}"
mps on
bench bench-mps.log 120 "${training[@]}"
bench bench-mps.log 100 "${allreduce[@]}" --compare gloo -np 2 -b 1M -e 1G -f 32
bench bench-mps.log 120 "${allreduce[@]}" --compare gloo -np 8 -b 1M -e 1G -f 32
bench bench-mps.log 120 env RINGCOMM_CUDA_PATH=staged "${allreduce[@]}" --compare gloo -np 4 -b 64M -e 1G -f 4
mps off
# The staged path's host half on its own: the host all-reduce of its 4 MiB chunks and of whole
# buffers, on this machine's cores, next to MPICH.
bench bench-no-mps.log 120 ringcomm-bench allreduce --check --quiet --min-time 0.1 --compare mpi \
  -np 4 -b 4M -e 256M -f 4
echo "logs: $OUT/bench-mps.log $OUT/bench-no-mps.log"
