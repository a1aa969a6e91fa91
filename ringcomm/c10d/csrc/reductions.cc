// The collectives that reduce: all_reduce (dense, compressed, sparse, coalesced), reduce and
// reduce_scatter (list, tensor, coalesced), each a core call on this backend's communicator.
#include <c10/util/Exception.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "backend.h"
#include "operation_start.h"
#include "ringcomm/options.h"
#include "sparse.h"
#include "tensors.h"
#include "work.h"

namespace ringcomm::c10d_backend {

ringcomm::WorkPtr RingcommBackend::startAllreduce(const at::Tensor& buffer,
                                                  const Reduction& reduction,
                                                  ringcomm::AllreduceOptions o) {
  Buffer b = reducible(buffer, reduction);
  setArrays(o, b.data, b.data, b);
  o.op = reduction.op;
  return communicator_->allreduce(o);
}

ringcomm::WorkPtr RingcommBackend::startReduceScatter(const at::Tensor& input,
                                                      const at::Tensor& output,
                                                      const Reduction& reduction,
                                                      ringcomm::ReduceScatterOptions o) {
  Buffer b = reducible(output, reduction);
  setArrays(o, input.data_ptr(), b.data, b);
  o.op = reduction.op;
  return communicator_->reduceScatter(o);
}

WorkHandle RingcommBackend::allreduce(std::vector<at::Tensor>& tensors,
                                      const ::c10d::AllreduceOptions& opts) {
  requireCount(tensors, 1, "all_reduce", "tensors");
  if (tensors[0].is_sparse()) return allreduceSparse(tensors[0], opts);
  requireDense(tensors, "all_reduce", "tensor");
  TORCH_CHECK_VALUE(!opts.sparseIndices.has_value(),
                    "ringcomm all_reduce: sparse indices apply to sparse tensors only");
  const Reduction reduction = reductionFor(tensors[0], opts.reduceOp, "all_reduce");
  return startInPlace(tensors, OpType::ALLREDUCE, {"all_reduce", "ringcomm:all_reduce"},
                      [&](RingcommWork&, const at::Tensor& buffer) {
                        return startAllreduce(
                            buffer, reduction,
                            common<ringcomm::AllreduceOptions>(opts.timeout, opts.asyncOp));
                      });
}

WorkHandle RingcommBackend::allreduceCompressed(at::Tensor& tensor,
                                                ringcomm::Compression compression, bool average) {
  std::vector<at::Tensor> tensors{tensor};
  requireDense(tensors, "allreduce_compressed", "tensor");
  const ::c10d::ReduceOp op(average ? ::c10d::ReduceOp::AVG : ::c10d::ReduceOp::SUM);
  const Reduction reduction = reductionFor(tensor, op, "allreduce_compressed");
  return startInPlace(tensors, OpType::ALLREDUCE, {"all_reduce", "ringcomm:all_reduce_compressed"},
                      [&](RingcommWork&, const at::Tensor& buffer) {
                        auto o =
                            common<ringcomm::AllreduceOptions>(std::chrono::milliseconds(0), true);
                        o.compression = compression;
                        return startAllreduce(buffer, reduction, o);
                      });
}

WorkHandle RingcommBackend::allreduceSparse(at::Tensor& tensor,
                                            const ::c10d::AllreduceOptions& opts) {
  TORCH_CHECK_VALUE(opts.reduceOp == ::c10d::ReduceOp::SUM,
                    "ringcomm all_reduce: sparse tensors are reduced with ReduceOp.SUM only (as "
                    "with gloo)");
  TORCH_CHECK_VALUE(tensor.device().is_cpu(),
                    "ringcomm all_reduce: sparse tensors must be on the CPU; got ", tensor.device());
  const at::Tensor input = tensor.coalesce();
  at::Tensor indices = input.indices().t().contiguous();  // one row per non-zero
  at::Tensor values = input.values().contiguous();
  // Filled once the ranks' non-zeros are known, inside the launch.
  auto gathered = std::make_shared<std::pair<at::Tensor, at::Tensor>>();
  std::vector<at::Tensor> outputs{tensor};
  return start(
      rank_, count_, OpType::ALLREDUCE, {"all_reduce", "ringcomm:all_reduce"}, outputs,
      outputs, {indices, values},
      [&](RingcommWork&) {
        // The descriptions first, waited for here: the rows' sizes depend on them.
        at::Tensor mine = sparseLayoutOf(input);
        at::Tensor layouts = at::empty({size_ * kSparseLayoutWords}, at::kLong);
        auto describe = common<ringcomm::AllgatherOptions>(opts.timeout, false);
        describe.input = mine.data_ptr();
        describe.output = layouts.data_ptr();
        describe.count = kSparseLayoutWords;
        describe.type = DataType::Int64;
        communicator_->allgather(describe)->wait();
        const std::vector<int64_t> nonZeros = nonZerosByRank(layouts, size_);
        int64_t total = 0;
        for (int64_t n : nonZeros) total += n;
        std::vector<int64_t> valueShape = values.sizes().vec();
        valueShape[0] = total;
        gathered->first = at::empty({total, indices.size(1)}, indices.options());
        gathered->second = at::empty(valueShape, values.options());
        std::vector<ringcomm::WorkPtr> parts;
        for (auto [from, into] : {std::pair{indices, gathered->first},
                                  std::pair{values, gathered->second}}) {
          // Every rank sends all its rows to every rank: an all-gather of uneven sizes. (A row's
          // size comes from the shape: strides of a one-row tensor say nothing.)
          const Buffer in = movable(from);
          int64_t rowElements = 1;
          for (int64_t d = 1; d < from.dim(); ++d) rowElements *= from.size(d);
          const size_t rowUnits = static_cast<size_t>(rowElements) * coreUnitsPerElement(from);
          auto o = common<ringcomm::AlltoallvOptions>(opts.timeout, opts.asyncOp);
          o.input = in.data;
          o.output = into.data_ptr();
          o.type = in.type;
          for (int r = 0; r < size_; ++r) {
            o.sendCounts.push_back(in.count);
            o.sendOffsets.push_back(0);
            o.recvCounts.push_back(static_cast<size_t>(nonZeros[r]) * rowUnits);
          }
          o.recvOffsets = prefixSums(o.recvCounts);
          parts.push_back(communicator_->alltoallv(o));
        }
        return parts;
      },
      [tensor, gathered]() mutable {
        at::Tensor sum = sumOfGathered(gathered->first, gathered->second, tensor);
        tensor.copy_(sum);
      });
}

WorkHandle RingcommBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                const ::c10d::AllreduceCoalescedOptions& opts) {
  requireDense(tensors, "all_reduce_coalesced", "tensors");
  if (tensors.empty()) {
    return start(rank_, count_, OpType::ALLREDUCE_COALESCED,
                 {"all_reduce_coalesced", "ringcomm:all_reduce"}, tensors, {}, {},
                 [](RingcommWork&) { return std::vector<ringcomm::WorkPtr>{}; });
  }
  requireSameDtype(tensors, "all_reduce_coalesced");
  const Reduction reduction = reductionFor(tensors[0], opts.reduceOp, "all_reduce_coalesced");
  // One all-reduce over the tensors end to end (like gloo): one round of latency for all of them.
  at::Tensor flat = flatten(tensors);
  return start(
      rank_, count_, OpType::ALLREDUCE_COALESCED,
      {"all_reduce_coalesced", "ringcomm:all_reduce"}, tensors, tensors, {flat},
      [&](RingcommWork&) {
        return std::vector<ringcomm::WorkPtr>{
            startAllreduce(flat, reduction, common<ringcomm::AllreduceOptions>(opts.timeout, opts.asyncOp))};
      },
      [flat, tensors] { unflatten(flat, tensors); });
}

WorkHandle RingcommBackend::reduce(std::vector<at::Tensor>& tensors,
                                   const ::c10d::ReduceOptions& opts) {
  requireCount(tensors, 1, "reduce", "tensors");
  requireDense(tensors, "reduce", "tensor");
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "ringcomm reduce: rootTensor must be 0");
  const Reduction reduction = reductionFor(tensors[0], opts.reduceOp, "reduce");
  return startInPlace(tensors, OpType::REDUCE, {"reduce", "ringcomm:reduce"},
                      [&](RingcommWork&, const at::Tensor& buffer) {
                        Buffer b = reducible(buffer, reduction);
                        void* reduced = rank_ == opts.rootRank ? b.data : nullptr;
                        auto o = rooted<ringcomm::ReduceOptions>(opts, b.data, reduced, b);
                        o.op = reduction.op;
                        return communicator_->reduce(o);
                      });
}

WorkHandle RingcommBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const ::c10d::ReduceScatterOptions& opts) {
  requireCount(outputs, 1, "reduce_scatter", "output tensors");
  requireOneList(inputs, "expected", "input", "reduce_scatter");
  requireDense(outputs, "reduce_scatter", "output");
  requireRankList(inputs[0], outputs[0], size_, "input", "reduce_scatter");
  const Reduction reduction = reductionFor(outputs[0], opts.reduceOp, "reduce_scatter");
  at::Tensor flat = flatten(inputs[0]);
  auto staging = std::make_shared<Staging>();
  at::Tensor output = staging->inOut(outputs[0]);
  return start(
      rank_, count_, OpType::REDUCE_SCATTER, {"reduce_scatter", "ringcomm:reduce_scatter"},
      inputs[0], outputs, {flat, output},
      [&](RingcommWork&) {
        return std::vector<ringcomm::WorkPtr>{
            startReduceScatter(flat, output, reduction,
                               common<ringcomm::ReduceScatterOptions>(opts.timeout, opts.asyncOp))};
      },
      [staging] { staging->copyBack(); });
}

WorkHandle RingcommBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                 const ::c10d::ReduceScatterOptions& opts) {
  const Reduction reduction = reductionFor(output, opts.reduceOp, "reduce_scatter_tensor");
  return startWholePair(
      output, input, Whole::Input, OpType::_REDUCE_SCATTER_BASE,
      {"reduce_scatter_tensor", "ringcomm:reduce_scatter_tensor"},
      [&](const at::Tensor& in, const at::Tensor& out) {
        return startReduceScatter(
            in, out, reduction, common<ringcomm::ReduceScatterOptions>(opts.timeout, opts.asyncOp));
      });
}

WorkHandle RingcommBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::ReduceScatterOptions& opts) {
  // Each pair is one reduce-scatter of its own output's reduction, all checked before any starts.
  std::vector<Reduction> reductions;
  for (const at::Tensor& output : outputs) {
    reductions.push_back(reductionFor(output, opts.reduceOp, "reduce_scatter_tensor_coalesced"));
  }
  return startCoalescedPairs(
      outputs, inputs, Whole::Input,
      {"reduce_scatter_tensor_coalesced", "ringcomm:reduce_scatter_tensor_coalesced"},
      [&](size_t i, const at::Tensor& in, const at::Tensor& out) {
        return startReduceScatter(in, out, reductions[i],
                                  common<ringcomm::ReduceScatterOptions>(opts.timeout, true));
      });
}

}  // namespace ringcomm::c10d_backend
