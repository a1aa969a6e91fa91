// Running what the cycle found ready (tensor_queue_impl.h): consecutive compatible all-reduces
// fused into one buffer, in host memory local peers map or on the device, and each other request
// kind; then the requests' completion, with the trace of each run.
#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "codec/codec.h"
#include "common/bytes.h"
#include "common/log.h"
#include "common/trace.h"
#include "queue/tensor_queue_impl.h"
#include "reduce/half.h"
#include "ringcomm/errors.h"

namespace ringcomm::queue {
namespace {

template <typename T>
void fill(void* data, size_t count, T value) {
  std::fill_n(static_cast<T*>(data), count, value);
}

template <typename T>
void fillIdentityOf(void* data, size_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::Prod: return fill<T>(data, count, T(1));
    case ReduceOp::Min:
      return fill<T>(data, count,
                     std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                          : std::numeric_limits<T>::max());
    case ReduceOp::Max:
      return fill<T>(data, count,
                     std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                          : std::numeric_limits<T>::lowest());
    default: return fill<T>(data, count, T(0));
  }
}

// What a rank that has joined contributes to a reduction: the value that changes nothing.
void fillIdentity(void* data, size_t count, DataType type, ReduceOp op) {
  const float infinity = std::numeric_limits<float>::infinity();
  const float asFloat = op == ReduceOp::Prod  ? 1.0f
                        : op == ReduceOp::Min ? infinity
                        : op == ReduceOp::Max ? -infinity
                                              : 0.0f;
  switch (type) {
    case DataType::Int8: return fillIdentityOf<int8_t>(data, count, op);
    case DataType::Uint8: return fillIdentityOf<uint8_t>(data, count, op);
    case DataType::Int16: return fillIdentityOf<int16_t>(data, count, op);
    case DataType::Int32: return fillIdentityOf<int32_t>(data, count, op);
    case DataType::Int64: return fillIdentityOf<int64_t>(data, count, op);
    case DataType::Float16:
      return fill<uint16_t>(data, count, reduce::detail::floatToHalfBits(asFloat));
    case DataType::BFloat16:
      return fill<uint16_t>(data, count, reduce::detail::floatToBfloat16Bits(asFloat));
    case DataType::Float32: return fillIdentityOf<float>(data, count, op);
    case DataType::Float64: return fillIdentityOf<double>(data, count, op);
    case DataType::Bool:
      // Or (Sum, Max) leaves a value alone with false, and (Prod, Min) with true.
      return fill<uint8_t>(data, count, op == ReduceOp::Prod || op == ReduceOp::Min ? 1 : 0);
  }
}

}  // namespace

int64_t TensorQueueImpl::traceRunStart(const std::vector<const Pending*>& run) {
  if (!trace::on()) return -1;
  const int64_t now = trace::now();
  for (const Pending* pending : run) {
    if (pending->readyAt < 0) continue;  // ready before tracing began
    trace::Event event;
    event.phase = trace::Phase::Queue;
    event.start = pending->readyAt;
    event.duration = now - pending->readyAt;
    event.id = pending->traceId;
    event.label = pending->request.name;
    event.detail = horovodName(pending->request.op);
    trace::record(std::move(event));
  }
  return now;
}

void TensorQueueImpl::traceRunEnd(const std::vector<const Pending*>& run, int64_t start,
                                  int64_t runNumber) {
  if (start < 0 || !trace::on()) return;
  const int64_t now = trace::now();
  for (const Pending* pending : run) {
    const TensorRequest& request = pending->request;
    trace::Event event;
    event.phase = trace::Phase::Tensor;
    event.start = start;
    event.duration = now - start;
    event.id = pending->traceId;
    event.group = runNumber;
    event.label = request.name;
    event.detail = horovodName(request.op);
    event.bytes = request.count() * elementSize(request.type);
    std::string shape = "[";
    for (size_t d = 0; d < request.shape.size(); ++d) {
      shape += (d ? ", " : "") + std::to_string(request.shape[d]);
    }
    event.args =
        std::string("\"dtype\": \"") + toString(request.type) + "\", \"shape\": \"" + shape + "]\"";
    if (run.size() > 1) event.args += ", \"fused\": " + std::to_string(run.size());
    trace::record(std::move(event));
  }
}

void TensorQueueImpl::run(std::vector<ReadyTensor>& ready) {
  size_t i = 0;
  while (i < ready.size()) {
    if (!ready[i].error.empty()) {
      failLocal(ready[i].name,
                std::make_exception_ptr(MismatchError(ready[i].error, FailureContext{})));
      ++i;
      continue;
    }
    switch (ready[i].reference().op) {
      case TensorOp::Allreduce: {
        const size_t end = fusionEnd(ready, i);
        runAllreduce(ready, i, end);
        i = end;
        break;
      }
      case TensorOp::Allgather: runAllgather(ready[i++]); break;
      case TensorOp::Broadcast: runBroadcast(ready[i++]); break;
      case TensorOp::Reducescatter: runReducescatter(ready[i++]); break;
      case TensorOp::Alltoall: runAlltoall(ready[i++]); break;
    }
  }
}

size_t TensorQueueImpl::fusionEnd(const std::vector<ReadyTensor>& ready, size_t begin) const {
  const Announcement& first = ready[begin].reference();
  size_t bytes = first.count() * elementSize(first.type);
  size_t end = begin + 1;
  while (end < ready.size() && ready[end].error.empty()) {
    const Announcement& next = ready[end].reference();
    const size_t nextBytes = next.count() * elementSize(next.type);
    if (!reduceAlike(first, next) || ready[end].contributors() != ready[begin].contributors() ||
        bytes + nextBytes > fusionThresholdBytes_) {
      break;
    }
    bytes += nextBytes;
    ++end;
  }
  return end;
}

void TensorQueueImpl::runAllreduce(const std::vector<ReadyTensor>& ready, size_t begin,
                                   size_t end) {
  const Announcement& first = ready[begin].reference();
  std::vector<std::optional<Pending>> locals;
  for (size_t i = begin; i < end; ++i) locals.push_back(takeLocal(ready[i].name));

  AllreduceOptions options;
  options.type = first.type;
  options.op = first.reduceOp;
  options.compression = first.compression;
  options.prescale = first.prescale;
  options.postscale = first.postscale;
  options.runInCaller = true;
  options.name = namesOf(ready, begin, end);
  const int contributors = ready[begin].contributors();
  if (joinPolicy_ == JoinPolicy::Contributors && first.reduceOp == ReduceOp::Avg &&
      contributors < comm_->size()) {
    // The ranks that joined added nothing: divide by the ranks that did.
    options.op = ReduceOp::Sum;
    options.postscale = first.postscale / contributors;
  }

  {
    // Counted before the Works complete: a caller that waited for them sees the count.
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.allreduces;
    if (end - begin > 1) stats_.fusedTensors += end - begin;
  }
  if (first.device) {
    guarded(worksOf(locals), [&] { runDeviceAllreduce(ready, begin, end, locals, options); });
    return;
  }
  const int64_t runNumber = runs_++;
  const std::vector<const Pending*> run = present(locals);
  const int64_t runStart = traceRunStart(run);
  if (end - begin > 1) {
    RINGCOMM_LOG(LogLevel::Trace, kLogQueue, "fusing %zu all-reduces (%s) into one", end - begin,
                 namesOf(ready, begin, end).c_str());
  }
  FusionMemory host;
  host.reserve = [&](size_t bytes) { return fusion_.reserve(bytes); };
  host.copy = [](void* to, const void* from, size_t bytes) { copyBytes(to, from, bytes); };
  host.join = [&](void* at, size_t count) { fillJoined(at, count, first.type, first.reduceOp); };
  guarded(worksOf(locals), [&] {
    allreduceRun(ready, begin, end, locals, options, runNumber, host);
    traceRunEnd(run, runStart, runNumber);
  });
}

void TensorQueueImpl::allreduceRun(const std::vector<ReadyTensor>& ready, size_t begin, size_t end,
                                   const std::vector<std::optional<Pending>>& locals,
                                   AllreduceOptions& options, int64_t runNumber,
                                   const FusionMemory& memory) {
  const Announcement& first = ready[begin].reference();
  if (end - begin == 1 && locals[0]) {
    options.input = locals[0]->request.input;
    options.output = locals[0]->request.output;
    options.count = first.count();
    comm_->allreduce(options)->wait();
    return;
  }
  const size_t elementBytes = elementSize(first.type);
  size_t total = 0;
  for (size_t i = begin; i < end; ++i) total += ready[i].reference().count();
  uint8_t* const fusion = memory.reserve(total * elementBytes);
  size_t offset = 0;
  {
    trace::Span copy(trace::Phase::FusionIn, memory.where);
    for (size_t i = begin; i < end; ++i) {
      const size_t count = ready[i].reference().count();
      const auto& local = locals[i - begin];
      if (local) {
        memory.copy(fusion + offset, local->request.input, count * elementBytes);
      } else {
        memory.join(fusion + offset, count);
      }
      offset += count * elementBytes;
    }
    describeFusion(copy, runNumber, offset, ready, begin, end);
  }
  options.input = options.output = fusion;
  options.count = total;
  options.tensorCounts = adasumTensors(ready, begin, end, options.op);
  comm_->allreduce(options)->wait();
  offset = 0;
  trace::Span copy(trace::Phase::FusionOut, memory.where);
  for (size_t i = begin; i < end; ++i) {
    const size_t bytes = ready[i].reference().count() * elementBytes;
    const auto& local = locals[i - begin];
    if (local) memory.copy(local->request.output, fusion + offset, bytes);
    offset += bytes;
  }
  describeFusion(copy, runNumber, offset, ready, begin, end);
}

void TensorQueueImpl::describeFusion(trace::Span& copy, int64_t runNumber, size_t bytes,
                                     const std::vector<ReadyTensor>& ready, size_t begin,
                                     size_t end) {
  if (!copy.active()) return;
  copy.event().group = runNumber;
  copy.event().bytes = bytes;
  copy.event().label = namesOf(ready, begin, end);
}

void TensorQueueImpl::runDeviceAllreduce(const std::vector<ReadyTensor>& ready, size_t begin,
                                         size_t end,
                                         const std::vector<std::optional<Pending>>& locals,
                                         AllreduceOptions options) {
  const Announcement& first = ready[begin].reference();
  const std::vector<const Pending*> run = present(locals);
  const int device = runDevice(run);
  const int64_t runNumber = runs_++;
  const int64_t runStart = traceRunStart(run);
  options.deviceMemory = true;
  options.stream = device_->beginRun(device, marksOf(run));
  const size_t elementBytes = elementSize(first.type);
  // Device copies are queued on the queue's stream: the fusion's spans time the queueing.
  FusionMemory onDevice;
  onDevice.reserve = [&](size_t bytes) {
    return static_cast<uint8_t*>(device_->fusionBuffer(device, std::max<size_t>(bytes, 1)));
  };
  onDevice.copy = [&](void* to, const void* from, size_t bytes) {
    device_->copy(device, to, from, bytes);
  };
  onDevice.join = [&](void* at, size_t count) {
    if (count == 0) return;
    std::vector<uint8_t> joined(count * elementBytes);
    fillJoined(joined.data(), count, first.type, first.reduceOp);
    device_->upload(device, at, joined.data(), joined.size());
  };
  onDevice.where = "device";
  allreduceRun(ready, begin, end, locals, options, runNumber, onDevice);
  traceRunEnd(run, runStart, runNumber);
  finishRun(device, run);
}

std::vector<size_t> TensorQueueImpl::adasumTensors(const std::vector<ReadyTensor>& ready,
                                                   size_t begin, size_t end, ReduceOp op) {
  std::vector<size_t> counts;
  if (op != ReduceOp::Adasum) return counts;
  for (size_t i = begin; i < end; ++i) counts.push_back(ready[i].reference().count());
  return counts;
}

void TensorQueueImpl::fillJoined(void* data, size_t count, DataType type, ReduceOp op) const {
  fillIdentity(data, count, type, joinPolicy_ == JoinPolicy::Zeros ? ReduceOp::Sum : op);
}

std::vector<const TensorQueueImpl::Pending*> TensorQueueImpl::present(
    const std::vector<std::optional<Pending>>& locals) {
  std::vector<const Pending*> run;
  for (const auto& local : locals) {
    if (local) run.push_back(&*local);
  }
  return run;
}

std::vector<const TensorQueueImpl::Pending*> TensorQueueImpl::present(
    const std::optional<Pending>& local) {
  return local ? std::vector<const Pending*>{&*local} : std::vector<const Pending*>{};
}

std::vector<const ReadyMark*> TensorQueueImpl::marksOf(
    const std::vector<const Pending*>& run) {
  std::vector<const ReadyMark*> marks;
  for (const Pending* pending : run) marks.push_back(pending->ready.get());
  return marks;
}

int TensorQueueImpl::runDevice(const std::vector<const Pending*>& run) {
  if (!run.empty()) return run.front()->ready->device();
  std::lock_guard<std::mutex> lock(mutex_);
  const int device = joinDevice_ >= 0 ? joinDevice_ : lastDevice_;
  if (device < 0) {
    throw InvalidArgument("tensor queue: rank " + std::to_string(rank()) +
                          " has joined, and the other ranks run a collective on CUDA memory, "
                          "but it has no CUDA device to take part with; pass join(device=...)");
  }
  return device;
}

void TensorQueueImpl::finishRun(int device, const std::vector<const Pending*>& run) {
  const OrderAfter done = device_->endRun(device);
  for (const Pending* pending : run) pending->work->orderResultsOn = done;
  std::lock_guard<std::mutex> lock(mutex_);
  lastDevice_ = device;
}

void TensorQueueImpl::runAllgather(const ReadyTensor& ready) {
  std::optional<Pending> local = takeLocal(ready.name);
  const Announcement& reference = ready.reference();
  const int size = comm_->size();
  size_t rowElements = 1;
  for (size_t d = 1; d < reference.shape.size(); ++d) {
    rowElements *= static_cast<size_t>(reference.shape[d]);
  }
  std::vector<int64_t> rows(size, 0);
  for (int r = 0; r < size; ++r) {
    if (ready.byRank[r]) rows[r] = ready.byRank[r]->shape.empty() ? 1 : ready.byRank[r]->shape[0];
  }
  const size_t mine = static_cast<size_t>(rows[comm_->rank()]) * rowElements;
  AlltoallvOptions options;
  options.type = reference.type;
  options.runInCaller = true;
  options.name = ready.name;
  options.input = local ? local->request.input : nullptr;
  options.sendCounts.assign(size, mine);
  options.sendOffsets.assign(size, 0);
  size_t total = 0;
  for (int r = 0; r < size; ++r) {
    options.recvCounts.push_back(static_cast<size_t>(rows[r]) * rowElements);
    options.recvOffsets.push_back(total);
    total += options.recvCounts.back();
  }
  runRows(local, reference.device, options, std::move(rows), total);
}

void TensorQueueImpl::runReducescatter(const ReadyTensor& ready) {
  std::optional<Pending> local = takeLocal(ready.name);
  const Announcement& reference = ready.reference();
  const int size = comm_->size();
  const int rank = comm_->rank();
  const int64_t rows = reference.shape[0];
  const size_t rowElements = rows > 0 ? reference.count() / static_cast<size_t>(rows) : 0;
  std::vector<int64_t> parts(size, rows / size);
  for (int r = 0; r < rows % size; ++r) ++parts[r];
  int64_t before = 0;
  for (int r = 0; r < rank; ++r) before += parts[r];
  const size_t elementBytes = elementSize(reference.type);
  const size_t mine = static_cast<size_t>(parts[rank]) * rowElements;
  const size_t offset = static_cast<size_t>(before) * rowElements * elementBytes;
  std::vector<uint8_t> result(std::max<size_t>(mine, 1) * elementBytes);
  const int64_t runNumber = runs_++;
  const int64_t runStart = traceRunStart(present(local));
  guarded(worksOf(local), [&] {
    const TensorRequest& request = local->request;
    const bool even = rows % size == 0;
    const bool scaled = request.prescale != 1.0 || request.postscale != 1.0;
    if (even && !(request.deviceMemory && scaled)) {
      // A reduce-scatter proper; host tensors are scaled here, around it.
      const void* input = request.input;
      std::vector<uint8_t> prescaled;
      if (request.prescale != 1.0) {
        const auto* bytes = static_cast<const uint8_t*>(input);
        prescaled.assign(bytes, bytes + reference.count() * elementBytes);
        codec::scale(prescaled.data(), reference.count(), reference.type, request.prescale);
        input = prescaled.data();
      }
      ReduceScatterOptions options;
      options.input = input;
      options.output = result.data();
      options.count = mine;
      options.type = reference.type;
      options.op = request.reduceOp;
      options.runInCaller = true;
      options.name = ready.name;
      if (request.deviceMemory) {
        options.deviceMemory = true;  // the input is staged; the result lands in host memory
        options.stream = device_->beginRun(local->ready->device(), marksOf(present(local)));
      }
      comm_->reduceScatter(options)->wait();
      codec::scale(result.data(), mine, reference.type, request.postscale);
    } else {
      // Rows that do not split evenly (or scaling on the GPU): an all-reduce of the whole, of
      // which this rank keeps its rows.
      AllreduceOptions options;
      options.input = request.input;
      options.count = reference.count();
      options.type = reference.type;
      options.op = request.reduceOp;
      options.prescale = request.prescale;
      options.postscale = request.postscale;
      options.runInCaller = true;
      options.name = ready.name;
      if (request.deviceMemory) {
        const int device = local->ready->device();
        options.deviceMemory = true;
        options.stream = device_->beginRun(device, marksOf(present(local)));
        auto* whole = static_cast<uint8_t*>(
            device_->fusionBuffer(device, std::max<size_t>(reference.count() * elementBytes, 1)));
        options.output = whole;
        comm_->allreduce(options)->wait();
        device_->download(device, result.data(), whole + offset, mine * elementBytes);
      } else {
        std::vector<uint8_t> whole(std::max<size_t>(reference.count(), 1) * elementBytes);
        options.output = whole.data();
        comm_->allreduce(options)->wait();
        copyBytes(result.data(), whole.data() + offset, mine * elementBytes);
      }
    }
    result.resize(mine * elementBytes);
    traceRunEnd(present(local), runStart, runNumber);
    local->work->rows = std::move(parts);
    local->work->gathered = std::move(result);
  });
}

void TensorQueueImpl::runAlltoall(const ReadyTensor& ready) {
  std::optional<Pending> local = takeLocal(ready.name);
  const int size = comm_->size();
  const int rank = comm_->rank();
  const Announcement& mine = *ready.byRank[rank];
  size_t rowElements = 1;
  for (size_t d = 1; d < mine.shape.size(); ++d) rowElements *= static_cast<size_t>(mine.shape[d]);
  AlltoallvOptions options;
  options.type = mine.type;
  options.runInCaller = true;
  options.name = ready.name;
  options.input = local->request.input;
  std::vector<int64_t> received(size, 0);
  size_t sent = 0;
  size_t total = 0;
  for (int r = 0; r < size; ++r) {
    options.sendCounts.push_back(static_cast<size_t>(mine.splits[r]) * rowElements);
    options.sendOffsets.push_back(sent);
    sent += options.sendCounts.back();
    received[r] = ready.byRank[r]->splits[rank];
    options.recvCounts.push_back(static_cast<size_t>(received[r]) * rowElements);
    options.recvOffsets.push_back(total);
    total += options.recvCounts.back();
  }
  runRows(local, mine.device, options, std::move(received), total);
}

void TensorQueueImpl::runRows(std::optional<Pending>& local, bool device,
                              AlltoallvOptions& options, std::vector<int64_t> rows, size_t total) {
  std::vector<uint8_t> gathered(std::max<size_t>(total, 1) * elementSize(options.type));
  options.output = gathered.data();
  const int64_t runNumber = runs_++;
  const int64_t runStart = traceRunStart(present(local));
  guarded(worksOf(local), [&] {
    if (device && local) {
      options.deviceMemory = true;  // the rows are staged out of device memory
      options.stream = device_->beginRun(local->ready->device(), marksOf(present(local)));
    }
    comm_->alltoallv(options)->wait();
    traceRunEnd(present(local), runStart, runNumber);
    if (local) {
      gathered.resize(total * elementSize(options.type));
      local->work->rows = std::move(rows);
      local->work->gathered = std::move(gathered);
    }
  });
}

void TensorQueueImpl::runBroadcast(const ReadyTensor& ready) {
  std::optional<Pending> local = takeLocal(ready.name);
  const Announcement& reference = ready.reference();
  std::vector<uint8_t> scratch;  // a joined rank passes the data on and drops it
  BroadcastOptions options;
  options.type = reference.type;
  options.count = reference.count();
  options.root = reference.root;
  options.runInCaller = true;
  options.name = ready.name;
  const size_t bytes = options.count * elementSize(reference.type);
  const int64_t runNumber = runs_++;
  const int64_t runStart = traceRunStart(present(local));
  guarded(worksOf(local), [&] {
    int device = -1;
    if (reference.device) {
      // A joined rank relays through device memory too: the path is part of the message.
      device = runDevice(present(local));
      options.deviceMemory = true;
      options.stream = device_->beginRun(device, marksOf(present(local)));
    }
    if (local) {
      options.buffer = local->request.output;
    } else if (reference.device) {
      options.buffer = device_->fusionBuffer(device, std::max<size_t>(bytes, 1));
    } else {
      scratch.resize(bytes);
      options.buffer = scratch.data();
    }
    comm_->broadcast(options)->wait();
    traceRunEnd(present(local), runStart, runNumber);
    if (reference.device) finishRun(device, present(local));
  });
}

std::vector<TensorWorkPtr> TensorQueueImpl::worksOf(
    const std::vector<std::optional<Pending>>& locals) {
  std::vector<TensorWorkPtr> works;
  for (const auto& local : locals) {
    if (local) works.push_back(local->work);
  }
  return works;
}

std::vector<TensorWorkPtr> TensorQueueImpl::worksOf(const std::optional<Pending>& local) {
  return local ? std::vector<TensorWorkPtr>{local->work} : std::vector<TensorWorkPtr>{};
}

std::optional<TensorQueueImpl::Pending> TensorQueueImpl::takeLocal(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pending_.find(name);
  if (it == pending_.end()) return std::nullopt;  // this rank had joined
  Pending pending = std::move(it->second);
  pending_.erase(it);
  awaited_.erase(name);
  return pending;
}

void TensorQueueImpl::failLocal(const std::string& name, std::exception_ptr error) {
  if (auto local = takeLocal(name)) local->work->complete(error);
}

void TensorQueueImpl::finishJoin(int lastJoined) {
  TensorWorkPtr work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    work.swap(joinWork_);
  }
  if (work) {
    work->lastJoined = lastJoined;
    work->complete(nullptr);
  }
}

}  // namespace ringcomm::queue
