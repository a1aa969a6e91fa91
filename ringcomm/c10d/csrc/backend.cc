#include "backend.h"

#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <numeric>
#include <optional>
#include <tuple>
#include <utility>

#include "gil.h"
#include "ringcomm/config.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"
#include "sparse.h"
#include "store_adapter.h"
#include "tensors.h"
#include "work.h"

namespace ringcomm::c10d_backend {
namespace {

using ::c10d::OpType;
using WorkHandle = c10::intrusive_ptr<::c10d::Work>;

// The stream of the operation being started on this thread (CUDA tensors), for common().
thread_local std::optional<c10::Stream> startingOnStream;

// Starts `launch` (which submits core work), and returns a torch Work completing when it does.
// Errors raised while submitting (bad arguments, a closed communicator) surface at once, as torch
// users expect from a call with wrong arguments. `inputs` are what a profiler records of the call.
//
// CUDA tensors: the core runs the operation after the work queued on torch's current stream and
// makes that stream wait for it; the copies back into the caller's tensors (`finish`) and the
// completion of the Future (whose CUDA events torch records on the current stream) run with the
// same stream current, so everything downstream is ordered after the collective.
template <typename Launch>
WorkHandle start(int rank, OperationCount& count, OpType type, OpName op,
                 const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs,
                 std::vector<at::Tensor> keepAlive, Launch launch,
                 std::function<void()> finish = {}) {
  const DeviceContext device = deviceContextOf(inputs, outputs, op.name);
  count.sequence.fetch_add(1);
  auto work = c10::make_intrusive<RingcommWork>(rank, type, op, inputs, std::move(outputs),
                                                std::move(keepAlive), device);
  work->reportFailuresTo(count.failures);
  if (device.stream && finish) {
    finish = [stream = *device.stream, finish = std::move(finish)] {
      c10::StreamGuard guard(stream);
      finish();
    };
  }
  std::vector<ringcomm::WorkPtr> parts;
  startingOnStream = device.stream;
  try {
    parts = launch(*work);
  } catch (...) {
    startingOnStream.reset();
    std::rethrow_exception(toTorchError(std::current_exception(), op.name));
  }
  startingOnStream.reset();
  RingcommWork::completeWhen(work, parts, std::move(finish));
  return work;
}

std::vector<size_t> prefixSums(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

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

void requireSameDtype(const std::vector<at::Tensor>& tensors, const char* operation) {
  for (const auto& tensor : tensors) {
    TORCH_CHECK_TYPE(tensor.scalar_type() == tensors.front().scalar_type(), "ringcomm ", operation,
                     ": every tensor must have the same dtype; got ", tensors.front().scalar_type(),
                     " and ", tensor.scalar_type());
  }
}

}  // namespace

RingcommBackend::RingcommBackend(const c10::intrusive_ptr<::c10d::Store>& store, int rank,
                                 int size, std::chrono::milliseconds timeout,
                                 const std::string& secret, Rules shmRules, Rules tcpRules,
                                 double linkLatency, double linkBandwidth,
                                 const std::string& listenAddress)
    : ::c10d::Backend(rank, size) {
  const Config config = configFor(timeout, secret, std::move(shmRules), std::move(tcpRules),
                                  linkLatency, linkBandwidth, listenAddress);
  // torch gives each process group (and device) a store prefix of its own, so the communicator
  // meets under a fixed scope: ranks outside a subgroup create nothing for it.
  communicator_ = Communicator::createInScope(std::make_shared<TorchStoreAdapter>(store),
                                              "ringcomm/", rank, size, config);
}

c10::intrusive_ptr<RingcommBackend> RingcommBackend::meet(
    const std::string& host, int port, const std::string& scope, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& secret, Rules shmRules,
    Rules tcpRules, double linkLatency, double linkBandwidth, const std::string& listenAddress) {
  TORCH_CHECK_VALUE(!secret.empty(), "ringcomm: ranks meet in a mailbox only with a job secret");
  const Config config = configFor(timeout, secret, std::move(shmRules), std::move(tcpRules),
                                  linkLatency, linkBandwidth, listenAddress);
  auto mailbox = std::make_shared<TcpStore>(host, port, config.timeout, secret);
  return c10::make_intrusive<RingcommBackend>(
      Communicator::createInScope(mailbox, scope, rank, size, config));
}

Config RingcommBackend::configFor(std::chrono::milliseconds timeout, const std::string& secret,
                                  Rules shmRules, Rules tcpRules, double linkLatency,
                                  double linkBandwidth, const std::string& listenAddress) {
  Config config = Config::fromEnvironment();
  if (config.listenAddress.empty() && config.socketInterface.empty()) {
    config.listenAddress = listenAddress;
  }
  if (timeout.count() > 0) config.timeout = timeout;
  if (!secret.empty()) config.secret = secret;
  config.shmAllreduceRules = std::move(shmRules);
  config.tcpAllreduceRules = std::move(tcpRules);
  if (config.linkLatency.count() == 0 && linkLatency > 0) {
    config.linkLatency = std::chrono::microseconds(static_cast<int64_t>(linkLatency * 1e6));
  }
  if (config.linkBandwidth == 0) config.linkBandwidth = linkBandwidth;
  return config;
}

RingcommBackend::RingcommBackend(std::shared_ptr<Communicator> communicator)
    : ::c10d::Backend(communicator->rank(), communicator->size()),
      communicator_(std::move(communicator)) {}

RingcommBackend::RingcommBackend(std::shared_ptr<Communicator> communicator, int rank, int size,
                                 std::vector<int> coreRanks)
    : ::c10d::Backend(rank, size), communicator_(std::move(communicator)),
      coreRanks_(std::move(coreRanks)) {
  std::string lost;
  for (int r = 0; r < size; ++r) {
    if (coreRankOf(r) < 0) lost += (lost.empty() ? "" : ", ") + std::to_string(r);
  }
  communicator_->abort("rank(s) " + lost + " of this group died while torch's shrink_group "
                       "formed it: shrink again (shrink_group(ringcomm.c10d.lost_ranks()) "
                       "names them)");
}

int RingcommBackend::coreRankOf(int rank) const {
  return coreRanks_.empty() ? rank : coreRanks_.at(static_cast<size_t>(rank));
}

c10::intrusive_ptr<::c10d::Backend> RingcommBackend::shrink(
    const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
    const c10::intrusive_ptr<Options>& /*optionsOverride: ringcomm has none of torch's*/) {
  // torch's SHRINK_ABORT: end what this group still runs before the survivors meet.
  constexpr int kShrinkAbort = 1;
  if (shrinkFlags & kShrinkAbort) communicator_->abort("shrink_group with SHRINK_ABORT");
  std::vector<bool> excluded(static_cast<size_t>(size_), false);
  std::vector<int> exclude;  // in the communicator's numbering
  for (int64_t r : ranksToExclude) {
    TORCH_CHECK_VALUE(r >= 0 && r < size_, "ringcomm shrink_group: ranks_to_exclude names rank ",
                      r, ", which is not a rank of this group of ", size_);
    excluded[static_cast<size_t>(r)] = true;
    if (coreRankOf(static_cast<int>(r)) >= 0) exclude.push_back(coreRankOf(static_cast<int>(r)));
  }
  std::shared_ptr<Communicator> shrunk = communicator_->shrink(exclude, std::chrono::milliseconds(0));
  // torch numbers the new group: the ranks it keeps, in order. Each one's place in the
  // communicator the survivors formed, found by the rank it had in this one.
  const std::vector<int> former = shrunk->formerRanks();
  std::vector<int> coreRanks;
  int rank = -1;
  bool lostMeanwhile = false;
  for (int r = 0; r < size_; ++r) {
    if (excluded[static_cast<size_t>(r)]) continue;
    if (r == rank_) rank = static_cast<int>(coreRanks.size());
    const auto at = std::find(former.begin(), former.end(), coreRankOf(r));
    coreRanks.push_back(coreRankOf(r) >= 0 && at != former.end()
                            ? static_cast<int>(at - former.begin())
                            : -1);
    lostMeanwhile = lostMeanwhile || coreRanks.back() < 0;
  }
  if (!lostMeanwhile) return c10::make_intrusive<RingcommBackend>(std::move(shrunk));
  return c10::make_intrusive<RingcommBackend>(std::move(shrunk), rank,
                                              static_cast<int>(coreRanks.size()),
                                              std::move(coreRanks));
}

std::vector<int64_t> RingcommBackend::lostRanks() {
  const std::vector<int> alive = communicator_->survivors(std::chrono::milliseconds(0));
  std::vector<int64_t> lost;
  for (int r = 0; r < size_; ++r) {
    const int core = coreRankOf(r);
    if (core < 0 || std::find(alive.begin(), alive.end(), core) == alive.end()) lost.push_back(r);
  }
  return lost;
}

RingcommBackend::~RingcommBackend() {
  // Python drops its last reference to a backend holding the GIL, which the engine's threads may
  // need before the shutdown below can join them (gil.h).
  GilReleased released;
  try {
    communicator_->shutdown();
  } catch (...) {
    // A destructor must not throw; the communicator has already reported its failure.
  }
  communicator_.reset();  // the rest of its teardown, too, leaves other Python threads running
}

template <typename CoreOptions>
CoreOptions RingcommBackend::common(std::chrono::milliseconds timeout, bool asyncOp) const {
  CoreOptions options;
  if (timeout.count() > 0) {
    options.timeout = timeout;
  } else if (const int64_t set = defaultTimeout_.load(); set > 0) {
    options.timeout = std::chrono::milliseconds(set);
  }
  // A blocking call is waited on at once: let it run on the caller's thread when the engine is
  // idle, which saves two thread hand-offs on small messages.
  options.runInCaller = !asyncOp;
  if (startingOnStream) {
    options.deviceMemory = true;
    options.stream = startingOnStream->native_handle();
  }
  return options;
}

ringcomm::WorkPtr RingcommBackend::startAllreduce(const at::Tensor& buffer,
                                                  const Reduction& reduction,
                                                  ringcomm::AllreduceOptions o) {
  Buffer b = reducible(buffer, reduction);
  o.input = o.output = b.data;
  o.count = b.count;
  o.type = b.type;
  o.op = reduction.op;
  return communicator_->allreduce(o);
}

ringcomm::WorkPtr RingcommBackend::startAllgather(const at::Tensor& input, void* output,
                                                  ringcomm::AllgatherOptions o) {
  Buffer b = movable(input);
  o.input = b.data;
  o.output = output;
  o.count = b.count;
  o.type = b.type;
  return communicator_->allgather(o);
}

ringcomm::WorkPtr RingcommBackend::startReduceScatter(const at::Tensor& input,
                                                      const at::Tensor& output,
                                                      const Reduction& reduction,
                                                      ringcomm::ReduceScatterOptions o) {
  Buffer b = reducible(output, reduction);
  o.input = input.data_ptr();
  o.output = b.data;
  o.count = b.count;
  o.type = b.type;
  o.op = reduction.op;
  return communicator_->reduceScatter(o);
}

WorkHandle RingcommBackend::broadcast(std::vector<at::Tensor>& tensors,
                                      const ::c10d::BroadcastOptions& opts) {
  requireCount(tensors, 1, "broadcast", "tensors");
  requireDense(tensors, "broadcast", "tensor");
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "ringcomm broadcast: rootTensor must be 0");
  auto staging = std::make_shared<Staging>();
  at::Tensor buffer = staging->inOut(tensors[0]);
  return start(
      rank_, count_, OpType::BROADCAST, {"broadcast", "ringcomm:broadcast"}, tensors, tensors,
      {buffer},
      [&](RingcommWork&) {
        auto o = common<ringcomm::BroadcastOptions>(opts.timeout, opts.asyncOp);
        Buffer b = movable(buffer);
        o.buffer = b.data;
        o.count = b.count;
        o.type = b.type;
        o.root = static_cast<int>(opts.rootRank);
        return std::vector<ringcomm::WorkPtr>{communicator_->broadcast(o)};
      },
      [staging] { staging->copyBack(); });
}

WorkHandle RingcommBackend::allreduce(std::vector<at::Tensor>& tensors,
                                      const ::c10d::AllreduceOptions& opts) {
  requireCount(tensors, 1, "all_reduce", "tensors");
  if (tensors[0].is_sparse()) return allreduceSparse(tensors[0], opts);
  requireDense(tensors, "all_reduce", "tensor");
  TORCH_CHECK_VALUE(!opts.sparseIndices.has_value(),
                    "ringcomm all_reduce: sparse indices apply to sparse tensors only");
  const Reduction reduction = reductionFor(tensors[0], opts.reduceOp, "all_reduce");
  auto staging = std::make_shared<Staging>();
  at::Tensor buffer = staging->inOut(tensors[0]);
  return start(
      rank_, count_, OpType::ALLREDUCE, {"all_reduce", "ringcomm:all_reduce"}, tensors, tensors,
      {buffer},
      [&](RingcommWork&) {
        return std::vector<ringcomm::WorkPtr>{
            startAllreduce(buffer, reduction, common<ringcomm::AllreduceOptions>(opts.timeout, opts.asyncOp))};
      },
      [staging] { staging->copyBack(); });
}

WorkHandle RingcommBackend::allreduceCompressed(at::Tensor& tensor,
                                                ringcomm::Compression compression, bool average) {
  std::vector<at::Tensor> tensors{tensor};
  requireDense(tensors, "allreduce_compressed", "tensor");
  const ::c10d::ReduceOp op(average ? ::c10d::ReduceOp::AVG : ::c10d::ReduceOp::SUM);
  const Reduction reduction = reductionFor(tensor, op, "allreduce_compressed");
  auto staging = std::make_shared<Staging>();
  at::Tensor buffer = staging->inOut(tensor);
  return start(
      rank_, count_, OpType::ALLREDUCE, {"all_reduce", "ringcomm:all_reduce_compressed"},
      tensors, tensors, {buffer},
      [&](RingcommWork&) {
        auto o = common<ringcomm::AllreduceOptions>(std::chrono::milliseconds(0), true);
        o.compression = compression;
        return std::vector<ringcomm::WorkPtr>{startAllreduce(buffer, reduction, o)};
      },
      [staging] { staging->copyBack(); });
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
  auto staging = std::make_shared<Staging>();
  at::Tensor buffer = staging->inOut(tensors[0]);
  return start(
      rank_, count_, OpType::REDUCE, {"reduce", "ringcomm:reduce"}, tensors, tensors, {buffer},
      [&](RingcommWork&) {
        auto o = common<ringcomm::ReduceOptions>(opts.timeout, opts.asyncOp);
        Buffer b = reducible(buffer, reduction);
        o.input = b.data;
        o.output = rank_ == opts.rootRank ? b.data : nullptr;
        o.count = b.count;
        o.type = b.type;
        o.op = reduction.op;
        o.root = static_cast<int>(opts.rootRank);
        return std::vector<ringcomm::WorkPtr>{communicator_->reduce(o)};
      },
      [staging] { staging->copyBack(); });
}

WorkHandle RingcommBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                      std::vector<at::Tensor>& inputs,
                                      const ::c10d::AllgatherOptions& opts) {
  requireCount(inputs, 1, "all_gather", "input tensors");
  TORCH_CHECK_VALUE(outputs.size() == 1, "ringcomm all_gather: expected one output list; got ",
                    outputs.size());
  requireDense(inputs, "all_gather", "input");
  requireDense(outputs[0], "all_gather", "output");
  requireCount(outputs[0], static_cast<size_t>(size_), "all_gather", "output list");
  requireSameShape(outputs[0], inputs[0], "all_gather", "output");
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
  requireDense(input, "all_gather_into_tensor", "input");
  requireDense(output, "all_gather_into_tensor", "output");
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(),
                   "ringcomm all_gather_into_tensor: output dtype ", output.scalar_type(),
                   " differs from input dtype ", input.scalar_type());
  TORCH_CHECK_VALUE(output.numel() == size_ * input.numel(),
                    "ringcomm all_gather_into_tensor: output must hold world size (", size_,
                    ") x input elements (", input.numel(), "); got ", output.numel());
  at::Tensor in = Staging::in(input);
  auto staging = std::make_shared<Staging>();
  at::Tensor out = staging->inOut(output);
  return start(
      rank_, count_, OpType::_ALLGATHER_BASE,
      {"all_gather_into_tensor", "ringcomm:all_gather_into_tensor"}, {input}, {output}, {in, out},
      [&](RingcommWork&) {
        return std::vector<ringcomm::WorkPtr>{startAllgather(
            in, out.data_ptr(), common<ringcomm::AllgatherOptions>(opts.timeout, opts.asyncOp))};
      },
      [staging] { staging->copyBack(); });
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
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(),
                    "ringcomm all_gather_into_tensor_coalesced: ", outputs.size(), " outputs for ",
                    inputs.size(), " inputs");
  std::vector<at::Tensor> keep;
  auto stagings = std::make_shared<std::vector<std::shared_ptr<Staging>>>();
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    requireDense(inputs[i], "all_gather_into_tensor_coalesced", "input");
    requireDense(outputs[i], "all_gather_into_tensor_coalesced", "output");
    TORCH_CHECK_VALUE(outputs[i].numel() == size_ * inputs[i].numel() &&
                          outputs[i].scalar_type() == inputs[i].scalar_type(),
                      "ringcomm all_gather_into_tensor_coalesced: output ", i,
                      " must hold world size x input ", i, " elements of its dtype");
    auto staging = std::make_shared<Staging>();
    pairs.emplace_back(Staging::in(inputs[i]), staging->inOut(outputs[i]));
    keep.push_back(pairs.back().first);
    keep.push_back(pairs.back().second);
    stagings->push_back(staging);
  }
  return start(
      rank_, count_, OpType::COALESCED,
      {"all_gather_into_tensor_coalesced", "ringcomm:all_gather_into_tensor_coalesced"}, inputs,
      outputs, keep,
      [&](RingcommWork&) {
        std::vector<ringcomm::WorkPtr> parts;
        for (auto& [in, out] : pairs) {
          // Several parts: queue them all (no running in the caller), then wait.
          parts.push_back(startAllgather(
              in, out.data_ptr(), common<ringcomm::AllgatherOptions>(opts.timeout, true)));
        }
        return parts;
      },
      [stagings] {
        for (const auto& staging : *stagings) staging->copyBack();
      });
}

WorkHandle RingcommBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                   std::vector<at::Tensor>& inputs,
                                   const ::c10d::GatherOptions& opts) {
  requireCount(inputs, 1, "gather", "input tensors");
  requireDense(inputs, "gather", "input");
  const bool isRoot = rank_ == opts.rootRank;
  std::vector<at::Tensor> targets;
  if (isRoot) {
    TORCH_CHECK_VALUE(outputs.size() == 1, "ringcomm gather: the root needs one output list; got ",
                      outputs.size());
    requireDense(outputs[0], "gather", "output");
    requireCount(outputs[0], static_cast<size_t>(size_), "gather", "output list");
    requireSameShape(outputs[0], inputs[0], "gather", "output");
    targets = outputs[0];
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(),
                      "ringcomm gather: only the root (rank ", opts.rootRank,
                      ") takes an output list");
  }
  at::Tensor input = Staging::in(inputs[0]);
  at::Tensor flat = isRoot ? at::empty({size_ * input.numel()}, input.options()) : at::Tensor();
  return start(
      rank_, count_, OpType::GATHER, {"gather", "ringcomm:gather"}, inputs, targets,
      {input, flat},
      [&](RingcommWork&) {
        auto o = common<ringcomm::GatherOptions>(opts.timeout, opts.asyncOp);
        Buffer b = movable(input);
        o.input = b.data;
        o.output = isRoot ? flat.data_ptr() : nullptr;
        o.count = b.count;
        o.type = b.type;
        o.root = static_cast<int>(opts.rootRank);
        return std::vector<ringcomm::WorkPtr>{communicator_->gather(o)};
      },
      [flat, targets] {
        if (!targets.empty()) unflatten(flat, targets);
      });
}

WorkHandle RingcommBackend::scatter(std::vector<at::Tensor>& outputs,
                                    std::vector<std::vector<at::Tensor>>& inputs,
                                    const ::c10d::ScatterOptions& opts) {
  requireCount(outputs, 1, "scatter", "output tensors");
  requireDense(outputs, "scatter", "output");
  const bool isRoot = rank_ == opts.rootRank;
  at::Tensor flat;
  std::vector<at::Tensor> sources;  // the root's input list; nothing elsewhere
  if (isRoot) {
    TORCH_CHECK_VALUE(inputs.size() == 1, "ringcomm scatter: the root needs one input list; got ",
                      inputs.size());
    requireDense(inputs[0], "scatter", "input");
    requireCount(inputs[0], static_cast<size_t>(size_), "scatter", "input list");
    requireSameShape(inputs[0], outputs[0], "scatter", "input");
    flat = flatten(inputs[0]);
    sources = inputs[0];
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || inputs[0].empty(), "ringcomm scatter: only the root (rank ",
                      opts.rootRank, ") takes an input list");
  }
  auto staging = std::make_shared<Staging>();
  at::Tensor output = staging->inOut(outputs[0]);
  return start(
      rank_, count_, OpType::SCATTER, {"scatter", "ringcomm:scatter"}, sources, outputs,
      {flat, output},
      [&](RingcommWork&) {
        auto o = common<ringcomm::ScatterOptions>(opts.timeout, opts.asyncOp);
        Buffer b = movable(output);
        o.input = isRoot ? flat.data_ptr() : nullptr;
        o.output = b.data;
        o.count = b.count;
        o.type = b.type;
        o.root = static_cast<int>(opts.rootRank);
        return std::vector<ringcomm::WorkPtr>{communicator_->scatter(o)};
      },
      [staging] { staging->copyBack(); });
}

WorkHandle RingcommBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const ::c10d::ReduceScatterOptions& opts) {
  requireCount(outputs, 1, "reduce_scatter", "output tensors");
  TORCH_CHECK_VALUE(inputs.size() == 1, "ringcomm reduce_scatter: expected one input list; got ",
                    inputs.size());
  requireDense(outputs, "reduce_scatter", "output");
  requireDense(inputs[0], "reduce_scatter", "input");
  requireCount(inputs[0], static_cast<size_t>(size_), "reduce_scatter", "input list");
  requireSameShape(inputs[0], outputs[0], "reduce_scatter", "input");
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
  requireDense(input, "reduce_scatter_tensor", "input");
  requireDense(output, "reduce_scatter_tensor", "output");
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(),
                   "ringcomm reduce_scatter_tensor: output dtype ", output.scalar_type(),
                   " differs from input dtype ", input.scalar_type());
  TORCH_CHECK_VALUE(input.numel() == size_ * output.numel(),
                    "ringcomm reduce_scatter_tensor: input must hold world size (", size_,
                    ") x output elements (", output.numel(), "); got ", input.numel());
  const Reduction reduction = reductionFor(output, opts.reduceOp, "reduce_scatter_tensor");
  at::Tensor in = Staging::in(input);
  auto staging = std::make_shared<Staging>();
  at::Tensor out = staging->inOut(output);
  return start(
      rank_, count_, OpType::_REDUCE_SCATTER_BASE,
      {"reduce_scatter_tensor", "ringcomm:reduce_scatter_tensor"}, {input}, {output}, {in, out},
      [&](RingcommWork&) {
        return std::vector<ringcomm::WorkPtr>{
            startReduceScatter(in, out, reduction,
                               common<ringcomm::ReduceScatterOptions>(opts.timeout, opts.asyncOp))};
      },
      [staging] { staging->copyBack(); });
}

WorkHandle RingcommBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "ringcomm reduce_scatter_tensor_coalesced: ",
                    outputs.size(), " outputs for ", inputs.size(), " inputs");
  // Each pair is one reduce-scatter; queued back to back, they complete in order.
  std::vector<at::Tensor> keep;
  auto stagings = std::make_shared<std::vector<std::shared_ptr<Staging>>>();
  std::vector<std::tuple<at::Tensor, at::Tensor, Reduction>> jobs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    requireDense(inputs[i], "reduce_scatter_tensor_coalesced", "input");
    requireDense(outputs[i], "reduce_scatter_tensor_coalesced", "output");
    TORCH_CHECK_VALUE(inputs[i].numel() == size_ * outputs[i].numel() &&
                          outputs[i].scalar_type() == inputs[i].scalar_type(),
                      "ringcomm reduce_scatter_tensor_coalesced: input ", i,
                      " must hold world size x output ", i, " elements of its dtype");
    auto staging = std::make_shared<Staging>();
    const Reduction reduction =
        reductionFor(outputs[i], opts.reduceOp, "reduce_scatter_tensor_coalesced");
    jobs.emplace_back(Staging::in(inputs[i]), staging->inOut(outputs[i]), reduction);
    keep.push_back(std::get<0>(jobs.back()));
    keep.push_back(std::get<1>(jobs.back()));
    stagings->push_back(staging);
  }
  return start(
      rank_, count_, OpType::COALESCED,
      {"reduce_scatter_tensor_coalesced", "ringcomm:reduce_scatter_tensor_coalesced"}, inputs,
      outputs, keep,
      [&](RingcommWork&) {
        std::vector<ringcomm::WorkPtr> started;
        for (auto& [in, out, reduction] : jobs) {
          started.push_back(startReduceScatter(
              in, out, reduction, common<ringcomm::ReduceScatterOptions>(opts.timeout, true)));
        }
        return started;
      },
      [stagings] {
        for (const auto& staging : *stagings) staging->copyBack();
      });
}

WorkHandle RingcommBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                          std::vector<int64_t>& outputSplitSizes,
                                          std::vector<int64_t>& inputSplitSizes,
                                          const ::c10d::AllToAllOptions& opts) {
  requireDense(input, "all_to_all_single", "input");
  requireDense(output, "all_to_all_single", "output");
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(),
                   "ringcomm all_to_all_single: output dtype ", output.scalar_type(),
                   " differs from input dtype ", input.scalar_type());
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
  for (const auto& output : outputs) {
    TORCH_CHECK_TYPE(output.scalar_type() == inputs[0].scalar_type(),
                     "ringcomm all_to_all: output dtype ", output.scalar_type(),
                     " differs from input dtype ", inputs[0].scalar_type());
  }
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

WorkHandle RingcommBackend::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  requireCount(tensors, 1, "send", "tensors");
  requireDense(tensors, "send", "tensor");
  at::Tensor buffer = Staging::in(tensors[0]);
  return start(rank_, count_, OpType::SEND, {"send", "ringcomm:send"}, tensors, {}, {buffer},
               [&](RingcommWork&) {
                 // torch's send has no timeout of its own; a CUDA tensor's stream comes along.
                 auto o = common<ringcomm::SendOptions>(std::chrono::milliseconds(0), true);
                 o.buffer = buffer.data_ptr();
                 o.bytes = buffer.nbytes();
                 o.peer = dstRank;
                 o.tag = tag;
                 o.type = movable(buffer).type;  // a receive of another dtype is named
                 return std::vector<ringcomm::WorkPtr>{communicator_->send(o)};
               });
}

WorkHandle RingcommBackend::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  return receive(tensors, srcRank, tag, OpType::RECV, {"recv", "ringcomm:recv"});
}

WorkHandle RingcommBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  // Its own op type and profiler title, as gloo has: torch's tests count these events apart.
  return receive(tensors, ringcomm::kAnySource, tag, OpType::RECVANYSOURCE,
                 {"recv", "ringcomm:recvAnySource"});
}

WorkHandle RingcommBackend::receive(std::vector<at::Tensor>& tensors, int srcRank, int tag,
                                    OpType type, OpName op) {
  requireCount(tensors, 1, op.name, "tensors");
  requireDense(tensors, op.name, "tensor");
  auto staging = std::make_shared<Staging>();
  at::Tensor buffer = staging->inOut(tensors[0]);
  return start(
      rank_, count_, type, op, tensors, tensors, {buffer},
      [&](RingcommWork& work) {
        auto o = common<ringcomm::RecvOptions>(std::chrono::milliseconds(0), true);
        o.buffer = buffer.data_ptr();
        o.bytes = buffer.nbytes();
        o.peer = srcRank;
        o.tag = tag;
        o.type = movable(buffer).type;
        o.source = work.sourceSlot();
        return std::vector<ringcomm::WorkPtr>{communicator_->recv(o)};
      },
      [staging] { staging->copyBack(); });
}

WorkHandle RingcommBackend::barrier(const ::c10d::BarrierOptions& opts) {
  return start(rank_, count_, OpType::BARRIER, {"barrier", "ringcomm:barrier"}, {}, {}, {},
               [&](RingcommWork&) {
                 auto o = common<ringcomm::BarrierOptions>(opts.timeout, opts.asyncOp);
                 return std::vector<ringcomm::WorkPtr>{communicator_->barrier(o)};
               });
}

void RingcommBackend::setSequenceNumberForGroup() { count_.sequence.store(0); }

uint64_t RingcommBackend::getSequenceNumberForGroup() { return count_.sequence.load(); }

void RingcommBackend::setTimeout(std::chrono::milliseconds timeout) {
  TORCH_CHECK_VALUE(timeout.count() > 0, "ringcomm set_timeout: the timeout must be positive; got ",
                    timeout.count(), " ms");
  defaultTimeout_.store(timeout.count());
}

::c10d::ErrorType RingcommBackend::getError() { return count_.failures->type(); }

std::string RingcommBackend::errorMessage() const { return count_.failures->message(); }

void RingcommBackend::abort() { communicator_->abort("aborted through torch.distributed"); }

void RingcommBackend::shutdown() {
  GilReleased released;  // the engine's threads, which it joins, may need the GIL (gil.h)
  communicator_->shutdown();
}

}  // namespace ringcomm::c10d_backend
