// The collectives that move data without reducing it: broadcast, all_gather (list, tensor,
// coalesced), gather, scatter and all_to_all (even and uneven), and barrier, which moves none.
#include <c10/util/Exception.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "backend.h"
#include "operation_start.h"
#include "ringcomm/options.h"
#include "tensors.h"
#include "work.h"

namespace ringcomm::c10d_backend {
namespace {

// All-to-all block sizes in elements from torch's split sizes (rows of the first dimension), or
// equal blocks when no splits are given.
std::vector<size_t> blockCounts(const at::Tensor& tensor, const std::vector<int64_t>& splits,
                                int size, const char* argument) {
  const size_t total = static_cast<size_t>(tensor.numel());
  if (splits.empty()) {
    TORCH_CHECK_VALUE(total % size == 0, "ringcomm all_to_all_single: ", argument, " has ", total,
                      " elements, which do not split evenly over ", size, " ranks; pass split sizes");
    return std::vector<size_t>(size, total / size);
  }
  TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == size, "ringcomm all_to_all_single: ",
                    argument, " split sizes need one entry per rank (", size, "); got ",
                    splits.size());
  const int64_t rows = tensor.dim() == 0 ? 1 : tensor.size(0);
  const size_t perRow = rows == 0 ? 0 : total / static_cast<size_t>(rows);
  int64_t sum = 0;
  std::vector<size_t> counts;
  for (int64_t split : splits) {
    TORCH_CHECK_VALUE(split >= 0, "ringcomm all_to_all_single: negative split size ", split);
    sum += split;
    counts.push_back(static_cast<size_t>(split) * perRow);
  }
  TORCH_CHECK_VALUE(sum == rows, "ringcomm all_to_all_single: ", argument, " split sizes add up to ",
                    sum, " but its first dimension is ", rows);
  return counts;
}

}  // namespace

ringcomm::WorkPtr RingcommBackend::startAllgather(const at::Tensor& input, void* output,
                                                  ringcomm::AllgatherOptions o) {
  Buffer b = movable(input);
  setArrays(o, b.data, output, b);
  return communicator_->allgather(o);
}

WorkHandle RingcommBackend::broadcast(std::vector<at::Tensor>& tensors,
                                      const ::c10d::BroadcastOptions& opts) {
  requireCount(tensors, 1, "broadcast", "tensors");
  requireDense(tensors, "broadcast", "tensor");
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "ringcomm broadcast: rootTensor must be 0");
  return startInPlace(tensors, OpType::BROADCAST, {"broadcast", "ringcomm:broadcast"},
                      [&](RingcommWork&, const at::Tensor& buffer) {
                        auto o = common<ringcomm::BroadcastOptions>(opts.timeout, opts.asyncOp);
                        Buffer b = movable(buffer);
                        o.buffer = b.data;
                        o.count = b.count;
                        o.type = b.type;
                        o.root = static_cast<int>(opts.rootRank);
                        return communicator_->broadcast(o);
                      });
}

WorkHandle RingcommBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                      std::vector<at::Tensor>& inputs,
                                      const ::c10d::AllgatherOptions& opts) {
  requireCount(inputs, 1, "all_gather", "input tensors");
  requireOneList(outputs, "expected", "output", "all_gather");
  requireDense(inputs, "all_gather", "input");
  requireRankList(outputs[0], inputs[0], size_, "output", "all_gather");
  at::Tensor input = Staging::in(inputs[0]);
  at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
  std::vector<at::Tensor> targets = outputs[0];
  return start(
      rank_, count_, OpType::ALLGATHER, {"all_gather", "ringcomm:all_gather"}, inputs, targets,
      {input, flat},
      [&](RingcommWork&) {
        return std::vector<ringcomm::WorkPtr>{startAllgather(
            input, flat.data_ptr(), common<ringcomm::AllgatherOptions>(opts.timeout, opts.asyncOp))};
      },
      [flat, targets] { unflatten(flat, targets); });
}

WorkHandle RingcommBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                            const ::c10d::AllgatherOptions& opts) {
  return startWholePair(
      output, input, Whole::Output, OpType::_ALLGATHER_BASE,
      {"all_gather_into_tensor", "ringcomm:all_gather_into_tensor"},
      [&](const at::Tensor& in, const at::Tensor& out) {
        return startAllgather(in, out.data_ptr(),
                              common<ringcomm::AllgatherOptions>(opts.timeout, opts.asyncOp));
      });
}

WorkHandle RingcommBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputLists,
                                                std::vector<at::Tensor>& inputs,
                                                const ::c10d::AllgatherOptions& opts) {
  requireDense(inputs, "all_gather_coalesced", "inputs");
  TORCH_CHECK_VALUE(outputLists.size() == static_cast<size_t>(size_),
                    "ringcomm all_gather_coalesced: expected one output list per rank (", size_,
                    "); got ", outputLists.size());
  if (inputs.empty()) {
    return start(rank_, count_, OpType::ALLGATHER_COALESCED,
                 {"all_gather_coalesced", "ringcomm:all_gather_coalesced"}, inputs, {}, {},
                 [](RingcommWork&) { return std::vector<ringcomm::WorkPtr>{}; });
  }
  requireSameDtype(inputs, "all_gather_coalesced");
  for (auto& list : outputLists) {
    requireDense(list, "all_gather_coalesced", "output");
    requireCount(list, inputs.size(), "all_gather_coalesced", "each output list");
    for (size_t i = 0; i < list.size(); ++i) {
      requireSameShape({list[i]}, inputs[i], "all_gather_coalesced", "output");
    }
  }
  // Gather the inputs end to end in one all-gather, then cut rank r's block into its outputs.
  at::Tensor flatIn = flatten(inputs);
  at::Tensor flatOut = at::empty({size_ * flatIn.numel()}, flatIn.options());
  std::vector<at::Tensor> targets;
  for (auto& list : outputLists) targets.insert(targets.end(), list.begin(), list.end());
  return start(
      rank_, count_, OpType::ALLGATHER_COALESCED,
      {"all_gather_coalesced", "ringcomm:all_gather_coalesced"}, inputs, targets, {flatIn, flatOut},
      [&](RingcommWork&) {
        return std::vector<ringcomm::WorkPtr>{startAllgather(
            flatIn, flatOut.data_ptr(), common<ringcomm::AllgatherOptions>(opts.timeout, opts.asyncOp))};
      },
      [flatOut, targets] { unflatten(flatOut, targets); });
}

WorkHandle RingcommBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const ::c10d::AllgatherOptions& opts) {
  return startCoalescedPairs(
      outputs, inputs, Whole::Output,
      {"all_gather_into_tensor_coalesced", "ringcomm:all_gather_into_tensor_coalesced"},
      [&](size_t, const at::Tensor& in, const at::Tensor& out) {
        // Several parts: queue them all (no running in the caller), then wait.
        return startAllgather(in, out.data_ptr(),
                              common<ringcomm::AllgatherOptions>(opts.timeout, true));
      });
}

WorkHandle RingcommBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                   std::vector<at::Tensor>& inputs,
                                   const ::c10d::GatherOptions& opts) {
  const std::vector<at::Tensor> targets =
      rootList(inputs, "input", outputs, "output", rank_, opts.rootRank, size_, "gather");
  const bool isRoot = rank_ == opts.rootRank;
  at::Tensor input = Staging::in(inputs[0]);
  at::Tensor flat = isRoot ? at::empty({size_ * input.numel()}, input.options()) : at::Tensor();
  return start(
      rank_, count_, OpType::GATHER, {"gather", "ringcomm:gather"}, inputs, targets,
      {input, flat},
      [&](RingcommWork&) {
        Buffer b = movable(input);
        void* gathered = isRoot ? flat.data_ptr() : nullptr;
        return std::vector<ringcomm::WorkPtr>{
            communicator_->gather(rooted<ringcomm::GatherOptions>(opts, b.data, gathered, b))};
      },
      [flat, targets] {
        if (!targets.empty()) unflatten(flat, targets);
      });
}

WorkHandle RingcommBackend::scatter(std::vector<at::Tensor>& outputs,
                                    std::vector<std::vector<at::Tensor>>& inputs,
                                    const ::c10d::ScatterOptions& opts) {
  const std::vector<at::Tensor> sources =
      rootList(outputs, "output", inputs, "input", rank_, opts.rootRank, size_, "scatter");
  const bool isRoot = rank_ == opts.rootRank;
  const at::Tensor flat = isRoot ? flatten(sources) : at::Tensor();
  auto staging = std::make_shared<Staging>();
  at::Tensor output = staging->inOut(outputs[0]);
  return start(
      rank_, count_, OpType::SCATTER, {"scatter", "ringcomm:scatter"}, sources, outputs,
      {flat, output},
      [&](RingcommWork&) {
        Buffer b = movable(output);
        const void* scattered = isRoot ? flat.data_ptr() : nullptr;
        return std::vector<ringcomm::WorkPtr>{
            communicator_->scatter(rooted<ringcomm::ScatterOptions>(opts, scattered, b.data, b))};
      },
      [staging] { staging->copyBack(); });
}

WorkHandle RingcommBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                          std::vector<int64_t>& outputSplitSizes,
                                          std::vector<int64_t>& inputSplitSizes,
                                          const ::c10d::AllToAllOptions& opts) {
  requireDensePair(output, input, "all_to_all_single");
  at::Tensor in = Staging::in(input);
  auto staging = std::make_shared<Staging>();
  at::Tensor out = staging->inOut(output);
  const bool even = outputSplitSizes.empty() && inputSplitSizes.empty();
  if (even) {
    TORCH_CHECK_VALUE(input.numel() == output.numel(), "ringcomm all_to_all_single: input has ",
                      input.numel(), " elements but output ", output.numel());
  }
  const std::vector<size_t> sendCounts = blockCounts(in, inputSplitSizes, size_, "input");
  const std::vector<size_t> recvCounts = blockCounts(out, outputSplitSizes, size_, "output");
  return start(
      rank_, count_, OpType::ALLTOALL_BASE, {"all_to_all_single", "ringcomm:all_to_all"},
      {input}, {output}, {in, out},
      [&](RingcommWork&) {
        Buffer i = movable(in);
        Buffer o = movable(out);
        const size_t scale = coreUnitsPerElement(in);
        if (even) {
          auto options = common<ringcomm::AlltoallOptions>(opts.timeout, opts.asyncOp);
          options.input = i.data;
          options.output = o.data;
          options.count = i.count / size_;
          options.type = i.type;
          return std::vector<ringcomm::WorkPtr>{communicator_->alltoall(options)};
        }
        auto options = common<ringcomm::AlltoallvOptions>(opts.timeout, opts.asyncOp);
        options.input = i.data;
        options.output = o.data;
        options.type = i.type;
        for (size_t c : sendCounts) options.sendCounts.push_back(c * scale);
        for (size_t c : recvCounts) options.recvCounts.push_back(c * scale);
        options.sendOffsets = prefixSums(options.sendCounts);
        options.recvOffsets = prefixSums(options.recvCounts);
        return std::vector<ringcomm::WorkPtr>{communicator_->alltoallv(options)};
      },
      [staging] { staging->copyBack(); });
}

WorkHandle RingcommBackend::alltoall(std::vector<at::Tensor>& outputs,
                                     std::vector<at::Tensor>& inputs,
                                     const ::c10d::AllToAllOptions& opts) {
  requireCount(inputs, static_cast<size_t>(size_), "all_to_all", "input list");
  requireCount(outputs, static_cast<size_t>(size_), "all_to_all", "output list");
  requireDense(inputs, "all_to_all", "input");
  requireDense(outputs, "all_to_all", "output");
  requireSameDtype(inputs, "all_to_all");
  for (const auto& output : outputs) requireOutputDtype(output, inputs[0], "all_to_all");
  at::Tensor flatIn = flatten(inputs);
  int64_t received = 0;
  for (const auto& output : outputs) received += output.numel();
  at::Tensor flatOut = at::empty({received}, flatIn.options());
  std::vector<size_t> sendCounts;
  std::vector<size_t> recvCounts;
  const size_t scale = coreUnitsPerElement(flatIn);
  for (const auto& t : inputs) sendCounts.push_back(static_cast<size_t>(t.numel()) * scale);
  for (const auto& t : outputs) recvCounts.push_back(static_cast<size_t>(t.numel()) * scale);
  std::vector<at::Tensor> targets = outputs;
  return start(
      rank_, count_, OpType::ALLTOALL, {"all_to_all", "ringcomm:all_to_all"}, inputs, targets,
      {flatIn, flatOut},
      [&](RingcommWork&) {
        auto o = common<ringcomm::AlltoallvOptions>(opts.timeout, opts.asyncOp);
        o.input = flatIn.data_ptr();
        o.output = flatOut.data_ptr();
        o.type = movable(flatIn).type;
        o.sendCounts = sendCounts;
        o.recvCounts = recvCounts;
        o.sendOffsets = prefixSums(sendCounts);
        o.recvOffsets = prefixSums(recvCounts);
        return std::vector<ringcomm::WorkPtr>{communicator_->alltoallv(o)};
      },
      [flatOut, targets] { unflatten(flatOut, targets); });
}

WorkHandle RingcommBackend::barrier(const ::c10d::BarrierOptions& opts) {
  return start(rank_, count_, OpType::BARRIER, {"barrier", "ringcomm:barrier"}, {}, {}, {},
               [&](RingcommWork&) {
                 auto o = common<ringcomm::BarrierOptions>(opts.timeout, opts.asyncOp);
                 return std::vector<ringcomm::WorkPtr>{communicator_->barrier(o)};
               });
}

}  // namespace ringcomm::c10d_backend
