#!/usr/bin/env bash
# The GPU benchmarks of bench/RESULTS.md ("CUDA"), in one call of a lent GPU machine, in the order
# of issue 37's parts, each group within what is left of SECONDS:
#
#   tests/gpu/bench.sh [SECONDS [GROUP...]]   # default 480 s, every group
#
#   staged    the staged path (every rank's buffers through pinned host memory) against pinned
#             host<->device copies at 2 and 4 ranks from 64 MiB, with one thread per rank and
#             more, at three pipeline chunk sizes; its host half alone; then against gloo
#   training  with MPS: the DistributedOptimizer against DDP on ringcomm and gloo (the training
#             bench), and the DDP step of the 23M-parameter MLP
#   training-queue  with MPS: the DistributedOptimizer against DDP on ringcomm alone, the CNN
#             (and gloo) and ResNet-50
#   staged2   the staged path at 2 ranks against pinned copies (the defaults only)
#   hosts     2 namespace hosts of 2 and 4 ranks at 10 Gbit/s, and of 2 at 25 Gbit/s, CPU
#             buffers, against gloo (16 cores: TCP where cores do not limit it)
#   hosts-cuda  2 namespace hosts of 2 ranks at 10 Gbit/s, CUDA buffers, with MPS: IPC within
#             each host and only each rank's slice staged across (auto), against staging whole
#             buffers (RINGCOMM_CUDA_PATH=staged) and gloo
#   queue-knobs  with MPS: the DistributedOptimizer under one knob each (cycle time, fusion,
#             path), and traces of it and of DDP (RINGCOMM_TRACE)
#   hosts-fast  at 25 Gbit/s and unshaped: one rank per host; CUDA buffers at 2 per host
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
[ ${#GROUPS_WANTED[@]} -eq 0 ] && GROUPS_WANTED=(staged staged2 training hosts hosts-cuda ipc)
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
      # No kernels on this path, so MPS does not matter to it; off, as auto stages there. The
      # pipeline's chunk size (RINGCOMM_CUDA_CHUNK_BYTES) and the threads that reduce each rank's
      # slice of a chunk (RINGCOMM_REDUCE_THREADS, auto: 4 on 16 cores at 4 ranks).
      mps off
      staged=(env RINGCOMM_CUDA_PATH=staged "${allreduce[@]}" -b 64M -e 1G -f 4)
      bench staged.log 60 "${staged[@]}" -np 4
      bench staged.log 60 env RINGCOMM_REDUCE_THREADS=1 "${staged[@]}" -np 4
      for chunk in 16777216 1048576; do
        bench staged.log 60 env RINGCOMM_CUDA_CHUNK_BYTES=$chunk "${staged[@]}" -np 4
      done
      bench staged.log 60 "${staged[@]}" -np 2
      # The host half alone: the host all-reduce between buffers the ranks map (as the staged
      # chunks are), with the reduction's threads and without; the memory's bound at 16 ranks.
      for threads in auto 1; do
        bench staged.log 60 env RINGCOMM_REDUCE_THREADS=$threads ringcomm-bench allreduce --check \
          --quiet --min-time 0.1 --memory shared -np 4 -b 1M -e 256M -f 4
      done
      bench staged.log 60 ringcomm-bench allreduce --check --quiet --min-time 0.1 -np 16 --size 64M
      bench staged.log 60 env RINGCOMM_CUDA_PATH=staged "${allreduce[@]}" --compare gloo -np 4 \
        -b 64M -e 256M -f 4
      ;;
    training)
      mps on
      bench training.log 150 "${training[@]}"
      bench training.log 100 "${ddp[@]}"
      mps off
      ;;
    training-queue)
      # Issue 37 part 3 only: the DistributedOptimizer against DDP on ringcomm, the CNN and
      # ResNet-50, with MPS.
      mps on
      bench training.log 120 "${training[@]}" --steps 30 --runs ringcomm,ringcomm-ddp,gloo
      bench training.log 120 "${training[@]}" --model resnet50 --runs ringcomm,ringcomm-ddp
      mps off
      ;;
    staged2)
      mps off
      bench staged.log 60 env RINGCOMM_CUDA_PATH=staged "${allreduce[@]}" -b 64M -e 1G -f 4 -np 2
      ;;
    hosts)
      across=(ringcomm-bench allreduce --check --quiet --min-time 0.1 --hosts 2 --compare gloo)
      bench hosts.log 90 "${across[@]}" -np 4 --link-rate 10gbit -b 1M -e 256M -f 4
      bench hosts.log 90 "${across[@]}" -np 8 --link-rate 10gbit -b 4M -e 256M -f 4
      bench hosts.log 90 "${across[@]}" -np 4 --link-rate 25gbit -b 4M -e 256M -f 4
      ;;
    hosts-cuda)
      mps on
      across=("${allreduce[@]}" --hosts 2 -np 4 --link-rate 10gbit -b 4M -e 256M -f 4)
      bench hosts-cuda.log 90 "${across[@]}" --compare gloo
      bench hosts-cuda.log 60 env RINGCOMM_CUDA_PATH=staged "${across[@]}"
      mps off
      ;;
    queue-knobs)
      # Where the DistributedOptimizer's step goes (issue 37 part 3): the cycle time, fusion and
      # the path of its all-reduces, one knob at a time; then a trace of it and of DDP.
      mps on
      for knob in RINGCOMM_CYCLE_TIME=0.2 RINGCOMM_CYCLE_TIME=5 HOROVOD_FUSION_THRESHOLD=0 \
        RINGCOMM_CUDA_PATH=staged RINGCOMM_CUDA_PATH=ipc; do
        bench training.log 40 env "$knob" "${training[@]}" --steps 30 --runs ringcomm
      done
      bench training.log 40 env RINGCOMM_TRACE="$OUT/distopt-trace.json" "${training[@]}" \
        --steps 30 --runs ringcomm
      bench training.log 40 env RINGCOMM_TRACE="$OUT/ddp-trace.json" "${training[@]}" \
        --steps 30 --runs ringcomm-ddp
      mps off
      ;;
    hosts-fast)
      # 25 Gbit/s: one rank per host (a single connection between the hosts), shaped and not;
      # CUDA buffers with IPC within the hosts against staging whole buffers.
      one=(ringcomm-bench allreduce --check --quiet --min-time 0.1 --hosts 2 -np 2 -b 4M -e 256M -f 4)
      bench hosts.log 60 "${one[@]}" --link-rate 25gbit
      bench hosts.log 60 "${one[@]}"
      mps on
      across=("${allreduce[@]}" --hosts 2 -np 4 --link-rate 25gbit -b 16M -e 256M -f 4)
      bench hosts-cuda.log 60 "${across[@]}"
      bench hosts-cuda.log 60 env RINGCOMM_CUDA_PATH=staged "${across[@]}"
      mps off
      ;;
    ipc)
      mps on
      bench ipc.log 100 "${allreduce[@]}" --compare gloo -np 4 -b 1M -e 1G -f 4
      bench ipc.log 100 "${allreduce[@]}" --compare gloo -np 8 -b 1M -e 1G -f 32
      mps off
      bench ipc.log 100 "${allreduce[@]}" --compare gloo -np 4 -b 1M -e 1G -f 4
      ;;
    *) echo "unknown group $group (staged staged2 training training-queue queue-knobs hosts hosts-cuda hosts-fast ipc)" ;;
  esac
done
echo "logs: $(ls "$OUT"/*.log | tr '\n' ' ')"
