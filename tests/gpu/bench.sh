#!/usr/bin/env bash
# The GPU benchmarks of bench/RESULTS.md ("CUDA"), in one call of a lent GPU machine, in the order
# of issue 37's parts, each group within what is left of SECONDS:
#
#   tests/gpu/bench.sh [SECONDS [GROUP...]]   # default 480 s, every group
#
#   staged    the staged path (every rank's buffers through pinned host memory) against pinned
#             host<->device copies at 2 and 4 ranks from 64 MiB, at three pipeline chunk sizes
#             (RINGCOMM_CUDA_CHUNK_BYTES), and its host half alone next to MPICH
#   training  with MPS: the DistributedOptimizer against DDP on ringcomm and gloo (the training
#             bench), and the DDP step of the 23M-parameter MLP
#   hosts     2 namespace hosts of 2 ranks at 10 Gbit/s, CPU buffers, against gloo (16 cores)
#   ipc       with MPS and without: the IPC all-reduce against gloo at 2, 4 and 8 ranks
#
# Run tests/gpu/run.sh build first (or have ringcomm built with CUDA). One log per group lands in
# $OUT (the device tool's folder) or /tmp/ringcomm-gpu.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/ringcomm-gpu}
mkdir -p "$OUT"
BUDGET=${1:-480}
shift || true
GROUPS_WANTED=("$@")
[ ${#GROUPS_WANTED[@]} -eq 0 ] && GROUPS_WANTED=(staged training hosts ipc)
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
  local left=$((BUDGET - SECONDS))
  if [ $left -lt 15 ]; then
    echo "skipped (budget of $BUDGET s spent): $*" | tee -a "$log"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "\$ $*" >>"$log"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  echo "# exit $? after $((SECONDS - start)) s" >>"$log"
  echo "done after $((SECONDS - start)) s: $*"
}

allreduce=(ringcomm-bench allreduce --device cuda --check --quiet --min-time 0.1)
# The issue's DDP model: an MLP of 23M parameters (92 MB of float32 gradients).
ddp=("$PYTHON" -m ringcomm.bench.ddp --device cuda --np 4 --steps 10 --hidden 2048 --layers 6)
training=("$PYTHON" -m ringcomm.bench.training --device cuda --np 4 --steps 10)

mps() {
  if [ "$1" = on ]; then
    nvidia-cuda-mps-control -d && sleep 1
  else
    echo quit | nvidia-cuda-mps-control 2>/dev/null; sleep 2
  fi
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/machine.txt"

for group in "${GROUPS_WANTED[@]}"; do
  case $group in
    staged)
      # No kernels on this path, so MPS does not matter to it; off, as auto stages there.
      mps off
      for chunk in 4194304 16777216 67108864; do
        bench staged.log 60 env RINGCOMM_CUDA_PATH=staged RINGCOMM_CUDA_CHUNK_BYTES=$chunk \
          "${allreduce[@]}" -np 4 -b 64M -e 1G -f 4
      done
      for chunk in 4194304 16777216; do
        bench staged.log 60 env RINGCOMM_CUDA_PATH=staged RINGCOMM_CUDA_CHUNK_BYTES=$chunk \
          "${allreduce[@]}" -np 2 -b 64M -e 1G -f 4
      done
      # The host half alone: the host all-reduce of chunk-sized and whole buffers, 4 ranks.
      bench staged.log 60 ringcomm-bench allreduce --check --quiet --min-time 0.1 --compare mpi \
        -np 4 -b 4M -e 256M -f 4
      bench staged.log 60 env RINGCOMM_CUDA_PATH=staged "${allreduce[@]}" --compare gloo -np 4 \
        -b 64M -e 256M -f 4
      ;;
    training)
      mps on
      bench training.log 150 "${training[@]}"
      bench training.log 100 "${ddp[@]}"
      mps off
      ;;
    hosts)
      bench hosts.log 120 ringcomm-bench allreduce --check --quiet --min-time 0.1 --hosts 2 \
        -np 4 --link-rate 10gbit --compare gloo -b 1M -e 256M -f 4
      ;;
    ipc)
      mps on
      bench ipc.log 100 "${allreduce[@]}" --compare gloo -np 4 -b 1M -e 1G -f 4
      bench ipc.log 100 "${allreduce[@]}" --compare gloo -np 8 -b 1M -e 1G -f 32
      mps off
      bench ipc.log 100 "${allreduce[@]}" --compare gloo -np 4 -b 1M -e 1G -f 4
      ;;
    *) echo "unknown group $group (staged training hosts ipc)" ;;
  esac
done
echo "logs: $(ls "$OUT"/*.log | tr '\n' ' ')"
