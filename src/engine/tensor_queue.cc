// The tensor queue's thread: each cycle it announces what this rank submitted, all-gathers every
// rank's announcement on the queue's own communicator, asks the readiness table what is ready,
// and runs it - consecutive compatible all-reduces fused into one buffer.
#include "ringcomm/tensor_queue.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "codec/codec.h"
#include "common/bytes.h"
#include "common/log.h"
#include "common/trace.h"
#include "engine/negotiation.h"
#include "reduce/half.h"
#include "ringcomm/errors.h"
#include "transport/cuda/queue_device.h"
#include "transport/shm/shared_buffers.h"

namespace ringcomm {

const char* toString(JoinPolicy policy) {
  switch (policy) {
    case JoinPolicy::Zeros:
      return "zeros";
    case JoinPolicy::Contributors:
      return "contributors";
  }
  return "?";
}

JoinPolicy parseJoinPolicy(const std::string& name) {
  for (JoinPolicy policy : {JoinPolicy::Zeros, JoinPolicy::Contributors}) {
    if (name == toString(policy)) return policy;
  }
  throw InvalidArgument("join policy must be 'zeros' or 'contributors'; got '" + name + "'");
}

size_t TensorRequest::count() const {
  size_t count = 1;
  for (int64_t dim : shape) count *= static_cast<size_t>(dim);
  return count;
}

namespace engine {
namespace {

using Clock = std::chrono::steady_clock;

// A cycle message up to this size travels in the cycle's one all-gather; a longer one (many
// names at once) needs a second, sized to the longest.
constexpr size_t kSlotBytes = 1024;
constexpr size_t kLengthBytes = sizeof(uint64_t);
// While nothing is happening on any rank, cycles back off, doubling up to this: idle ranks
// (oversubscribed, or computing a forward pass) should not wake a thousand times a second. A
// submission ends the back-off at once on its own rank; a peer still backing off joins the cycle
// at most this late.
constexpr std::chrono::milliseconds kLongestIdleCycle{8};

template <typename T>
void fill(void* data, size_t count, T value) {
  std::fill_n(static_cast<T*>(data), count, value);
}

template <typename T>
void fillIdentityOf(void* data, size_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::Prod:
      return fill<T>(data, count, T(1));
    case ReduceOp::Min:
      return fill<T>(data, count, std::numeric_limits<T>::has_infinity
                                      ? std::numeric_limits<T>::infinity()
                                      : std::numeric_limits<T>::max());
    case ReduceOp::Max:
      return fill<T>(data, count, std::numeric_limits<T>::has_infinity
                                      ? -std::numeric_limits<T>::infinity()
                                      : std::numeric_limits<T>::lowest());
    default:
      return fill<T>(data, count, T(0));
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
    case DataType::Int8:
      return fillIdentityOf<int8_t>(data, count, op);
    case DataType::Uint8:
      return fillIdentityOf<uint8_t>(data, count, op);
    case DataType::Int16:
      return fillIdentityOf<int16_t>(data, count, op);
    case DataType::Int32:
      return fillIdentityOf<int32_t>(data, count, op);
    case DataType::Int64:
      return fillIdentityOf<int64_t>(data, count, op);
    case DataType::Float16:
      return fill<uint16_t>(data, count, reduce::detail::floatToHalfBits(asFloat));
    case DataType::BFloat16:
      return fill<uint16_t>(data, count, reduce::detail::floatToBfloat16Bits(asFloat));
    case DataType::Float32:
      return fillIdentityOf<float>(data, count, op);
    case DataType::Float64:
      return fillIdentityOf<double>(data, count, op);
    case DataType::Bool:
      // Or (Sum, Max) leaves a value alone with false, and (Prod, Min) with true.
      return fill<uint8_t>(data, count, op == ReduceOp::Prod || op == ReduceOp::Min ? 1 : 0);
  }
}

std::string rankList(const std::vector<int>& ranks) {
  std::ostringstream text;
  for (size_t i = 0; i < ranks.size(); ++i) text << (i ? ", " : "") << ranks[i];
  return text.str();
}

// Horovod's names of the operations, as its timeline shows them (NEGOTIATE_ALLREDUCE...).
const char* horovodName(TensorOp op) {
  switch (op) {
    case TensorOp::Allreduce:
      return "ALLREDUCE";
    case TensorOp::Allgather:
      return "ALLGATHER";
    case TensorOp::Broadcast:
      return "BROADCAST";
    case TensorOp::Reducescatter:
      return "REDUCESCATTER";
    case TensorOp::Alltoall:
      return "ALLTOALL";
  }
  return "OPERATION";
}

int64_t traceTime(Clock::time_point at) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
}

// "a, b and 3 more": names a fused collective in error messages.
std::string namesOf(const std::vector<ReadyTensor>& ready, size_t begin, size_t end) {
  std::string text;
  for (size_t i = begin; i < end && i < begin + 3; ++i) {
    text += (i > begin ? ", " : "") + ready[i].name;
  }
  if (end - begin > 3) text += " and " + std::to_string(end - begin - 3) + " more";
  return text;
}

class TensorQueueImpl : public TensorQueue,
                        public std::enable_shared_from_this<TensorQueueImpl> {
 public:
  TensorQueueImpl(std::shared_ptr<Communicator> comm, JoinPolicy joinPolicy)
      : comm_(std::move(comm)),
        config_(comm_->config()),
        fusionThresholdBytes_(agreeOnSettings(joinPolicy)),
        joinPolicy_(joinPolicy),
        table_(comm_->size(), joinPolicy) {
    RINGCOMM_LOG(LogLevel::Info, kLogQueue,
                 "tensor queue: cycle every %.3f ms, fusion up to %zu B (the smallest of the "
                 "ranks' settings; this rank's: %zu B), join policy '%s', stall warning %.0f s, "
                 "timeout %.0f s",
                 config_.cycleTime.count() / 1000.0, fusionThresholdBytes_,
                 config_.fusionThresholdBytes, toString(joinPolicy_),
                 config_.stallWarning.count() / 1000.0, config_.timeout.count() / 1000.0);
    // Even one rank, which has nobody to agree with, runs its requests on the thread: an
    // asynchronous request must be in flight when submit() returns, as Horovod's are.
    thread_ = std::thread([this] { loop(); });
  }

  ~TensorQueueImpl() override { shutdown(); }

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }

  TensorWorkPtr submit(TensorRequest request) override {
    std::vector<TensorRequest> one;
    one.push_back(std::move(request));
    return submitAll(std::move(one)).front();
  }

  std::vector<TensorWorkPtr> submitAll(std::vector<TensorRequest> requests) override {
    if (requests.empty()) return {};
    std::set<std::string> names;
    std::vector<std::shared_ptr<const device::ReadyMark>> marks;
    for (TensorRequest& request : requests) {
      resolveSplits(request);
      validate(request);
      if (!names.insert(request.name).second) {
        throw InvalidArgument("tensor queue: '" + request.name +
                              "' appears twice among the requests submitted together");
      }
      // Where the caller's stream has the tensors ready: recorded now, waited for by the queue's
      // stream when they run, never by this thread.
      marks.push_back(request.deviceMemory
                          ? device_->markReady({request.input, request.output}, request.stream,
                                               request.name)
                          : nullptr);
    }
    std::vector<TensorWorkPtr> works;
    std::unique_lock<std::mutex> lock(mutex_);
    throwIfClosed();
    if (joinWork_) {
      throw InvalidArgument("tensor queue: rank " + std::to_string(rank()) +
                            " is in join(); it cannot submit '" + requests.front().name + "'");
    }
    for (const TensorRequest& request : requests) {
      if (pending_.count(request.name) != 0 || incomingNames(request.name)) {
        throw InvalidArgument("tensor queue: '" + request.name +
                              "' is already in flight on rank " + std::to_string(rank()) +
                              "; names must be unique among the requests not yet completed");
      }
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      Pending pending;
      pending.work = std::make_shared<TensorWork>();
      pending.work->onFirstWait([queue = weak_from_this(), name = requests[i].name] {
        if (auto alive = queue.lock()) alive->await(name);
      });
      pending.submitted = Clock::now();
      pending.traceId = nextTraceId_++;
      pending.request = std::move(requests[i]);
      pending.ready = std::move(marks[i]);
      works.push_back(pending.work);
      incoming_.push_back(std::move(pending));
    }
    lock.unlock();
    submitted_.notify_one();
    return works;
  }

  TensorWorkPtr join(int device) override {
    TensorWorkPtr work;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      throwIfClosed();
      if (joinWork_) throw InvalidArgument("tensor queue: join() is already in progress");
      joinWork_ = work = std::make_shared<TensorWork>();
      joinAnnounced_ = false;
      if (device >= 0) joinDevice_ = device;
    }
    submitted_.notify_one();
    return work;
  }

  TensorQueueStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      shutdownRequested_ = true;
    }
    submitted_.notify_all();
    if (thread_.joinable()) thread_.join();
    comm_->shutdown();
  }

 private:
  struct Pending {
    TensorRequest request;
    std::shared_ptr<const device::ReadyMark> ready;  // device requests
    TensorWorkPtr work;
    Clock::time_point submitted;
    int64_t traceId = -1;  // the request's number in the trace
    int64_t readyAt = -1;  // trace::now() when every rank had it (while tracing)
    bool warned = false;
    bool expiryAnnounced = false;
  };

  // Fusion decisions must be the same on every rank, so the ranks take the smallest of their
  // configured thresholds (an environment variable set on one node only would otherwise split
  // the same ready list differently); returns that. What a joined rank contributes must be the
  // same everywhere too: a disagreement fails creation on every rank.
  size_t agreeOnSettings(JoinPolicy joinPolicy) {
    const auto policy = static_cast<int64_t>(joinPolicy);
    // Minimum of each: the threshold, the policy, and minus the policy (its maximum).
    int64_t values[3] = {static_cast<int64_t>(config_.fusionThresholdBytes), policy, -policy};
    AllreduceOptions options;
    options.input = options.output = values;
    options.count = 3;
    options.type = DataType::Int64;
    options.op = ReduceOp::Min;
    options.runInCaller = true;
    options.name = "tensor queue settings";
    comm_->allreduce(options)->wait();
    if (values[1] != -values[2]) {
      throw InvalidArgument("tensor queue: the ranks were created with different join policies ('" +
                            std::string(toString(static_cast<JoinPolicy>(values[1]))) + "' and '" +
                            toString(static_cast<JoinPolicy>(-values[2])) + "')");
    }
    return static_cast<size_t>(values[0]);
  }

  // An all-to-all without splits sends shape[0] / size rows to each rank (Horovod's default).
  void resolveSplits(TensorRequest& request) const {
    if (request.op != TensorOp::Alltoall || !request.splits.empty() || request.shape.empty()) {
      return;
    }
    const int64_t rows = request.shape[0];
    if (rows % size() != 0) {
      throw InvalidArgument("alltoall '" + request.name + "': the first dimension (" +
                            std::to_string(rows) + ") does not split evenly across " +
                            std::to_string(size()) + " ranks; pass splits");
    }
    request.splits.assign(size(), rows / size());
  }

  void validate(const TensorRequest& request) const {
    if (request.name.empty()) throw InvalidArgument("tensor queue: a request needs a name");
    for (int64_t dim : request.shape) {
      if (dim < 0) {
        throw InvalidArgument("tensor queue: '" + request.name + "' has a negative dimension");
      }
    }
    const size_t count = request.count();
    switch (request.op) {
      case TensorOp::Allreduce: {
        AllreduceOptions options;
        options.input = request.input;
        options.output = request.output;
        options.count = count;
        options.type = request.type;
        options.op = request.reduceOp;
        options.compression = request.compression;
        options.prescale = request.prescale;
        options.postscale = request.postscale;
        options.validate();
        if (request.reduceOp == ReduceOp::Adasum && (size() & (size() - 1)) != 0) {
          throw InvalidArgument("allreduce '" + request.name + "': op adasum needs a "
                                "power-of-two number of ranks; this queue has " +
                                std::to_string(size()));
        }
        break;
      }
      case TensorOp::Allgather:
        if (request.input == nullptr && count > 0) {
          throw InvalidArgument("allgather '" + request.name + "': input is null");
        }
        break;
      case TensorOp::Broadcast:
        if (request.output == nullptr && count > 0) {
          throw InvalidArgument("broadcast '" + request.name + "': buffer is null");
        }
        if (request.root < 0 || request.root >= size()) {
          throw InvalidArgument("broadcast '" + request.name + "': root must be in [0, " +
                                std::to_string(size()) + "); got " + std::to_string(request.root));
        }
        break;
      case TensorOp::Reducescatter: {
        requireRows(request);
        if (request.reduceOp == ReduceOp::Adasum) {
          throw InvalidArgument("reducescatter '" + request.name + "': op adasum is an "
                                "all-reduce only");
        }
        // The reduction and scaling rules are the all-reduce's.
        AllreduceOptions options;
        options.input = request.input;
        options.output = const_cast<void*>(request.input);  // only checked, never written
        options.count = count;
        options.type = request.type;
        options.op = request.reduceOp;
        options.prescale = request.prescale;
        options.postscale = request.postscale;
        options.validate();
        break;
      }
      case TensorOp::Alltoall: {
        requireRows(request);
        int64_t sum = 0;
        for (int64_t rows : request.splits) {
          if (rows < 0) sum = -1;
          if (sum >= 0) sum += rows;
        }
        if (static_cast<int>(request.splits.size()) != size() || sum != request.shape[0]) {
          std::string given;
          for (int64_t rows : request.splits) given += (given.empty() ? "" : ", ") + std::to_string(rows);
          throw InvalidArgument("alltoall '" + request.name + "': splits must hold " +
                                std::to_string(size()) + " non-negative row counts summing to " +
                                "the first dimension (" + std::to_string(request.shape[0]) +
                                "); got [" + given + "]");
        }
        break;
      }
    }
  }

  // Reducescatter and Alltoall cut the tensor along its first dimension.
  static void requireRows(const TensorRequest& request) {
    if (request.shape.empty()) {
      throw InvalidArgument(std::string(toString(request.op)) + " '" + request.name +
                            "': a 0-d tensor has no first dimension to split; give it one");
    }
    if (request.input == nullptr && request.count() > 0) {
      throw InvalidArgument(std::string(toString(request.op)) + " '" + request.name +
                            "': input is null");
    }
  }

  bool incomingNames(const std::string& name) const {
    return std::any_of(incoming_.begin(), incoming_.end(),
                       [&](const Pending& p) { return p.request.name == name; });
  }

  void throwIfClosed() const {
    if (closed_) std::rethrow_exception(closedError_);
  }

  // ---- the cycle --------------------------------------------------------------------------
  void loop() {
    trace::nameThisThread("tensor queue");
    auto interval = config_.cycleTime;
    auto last = Clock::now();
    for (;;) {
      {
        // Sleep out the cycle; while backing off, a submission (or shutdown) cuts it short, but
        // not below one cycle time, which lets tensors gather for fusion. While a caller waits
        // for a request, cycles follow each other at once (tensor_queue.h), unless the last one
        // found every rank waiting and nothing moving (names that never become ready: the
        // stall warning's case), where they would only spin.
        std::unique_lock<std::mutex> lock(mutex_);
        auto hurried = [&] { return hurry_ && !awaited_.empty(); };
        submitted_.wait_until(lock, last + interval, [&] {
          return hurried() || (interval > config_.cycleTime && hasNewsLocked());
        });
        submitted_.wait_until(lock, last + config_.cycleTime, hurried);
      }
      last = Clock::now();
      try {
        bool idle = false;
        if (!cycle(&idle)) return;
        interval = idle ? std::min<std::chrono::microseconds>(interval * 2, kLongestIdleCycle)
                        : config_.cycleTime;
      } catch (...) {
        closeWith(std::current_exception());
        return;
      }
    }
  }

  // A caller waits for the request `name`: cycles follow each other at once until it has run
  // (tensor_queue.h).
  void await(const std::string& name) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (pending_.count(name) == 0 && !incomingNames(name)) return;  // already taken to run
      awaited_.insert(name);
    }
    submitted_.notify_one();
  }

  // Called with mutex_ held: whether this rank has something to announce.
  bool hasNewsLocked() const {
    return !incoming_.empty() || (joinWork_ && !joinAnnounced_) || shutdownRequested_;
  }

  // One cycle; false once the queue has closed.
  // `idle`: no rank announced anything and nothing ran (the thread may back off).
  bool cycle(bool* idle) {
    const int64_t cycleStart = trace::on() ? trace::now() : 0;
    const CycleMessage mine = nextMessage();
    const std::vector<CycleMessage> messages = exchange(mine);
    *idle = std::all_of(messages.begin(), messages.end(), [](const CycleMessage& m) {
      return m.announcements.empty() && !m.join && !m.shutdown && m.expired.empty();
    });
    CycleOutcome outcome = table_.record(messages);
    const bool everyRankWaits = std::all_of(messages.begin(), messages.end(),
                                            [](const CycleMessage& m) { return m.awaiting; });
    hurry_ = !(everyRankWaits && *idle && outcome.ready.empty());
    if (trace::on()) {
      traceNegotiation(messages, outcome, cycleStart);
    } else if (!negotiations_.empty()) {
      negotiations_.clear();  // tracing stopped: what was noted is of no use any more
    }
    if (!outcome.ready.empty() && log::enabled(LogLevel::Trace, kLogQueue)) {
      RINGCOMM_LOG(LogLevel::Trace, kLogQueue, "cycle: %zu tensor(s) ready on every rank (%s)",
                   outcome.ready.size(),
                   namesOf(outcome.ready, 0, outcome.ready.size()).c_str());
    }
    *idle = *idle && outcome.ready.empty() && !outcome.allJoined;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.cycles;
    }
    for (const Expiry& expiry : outcome.expired) {
      failLocal(expiry.name,
                std::make_exception_ptr(TimeoutError(expiry.reason, FailureContext{})));
    }
    run(outcome.ready);
    if (outcome.allJoined) finishJoin(outcome.lastJoined);
    if (outcome.shutdownBy >= 0) {
      closeWith(std::make_exception_ptr(CommunicatorClosed(
          "tensor queue: closed by rank " + std::to_string(outcome.shutdownBy) +
          " (shutdown() was called)")));
      return false;
    }
    warnAboutStalls();
    return true;
  }

  // The trace's view of negotiation: when each rank's announcement of a name arrived (rank 0's
  // record of them is Horovod's ticks under NEGOTIATE_ALLREDUCE), and, for the names ready now,
  // the span from the first announcement (or this rank's submission) to readiness.
  void traceNegotiation(const std::vector<CycleMessage>& messages, const CycleOutcome& outcome,
                        int64_t cycleStart) {
    const int64_t now = trace::now();
    bool busy = !outcome.ready.empty();
    for (size_t r = 0; r < messages.size(); ++r) {
      for (const Announcement& announcement : messages[r].announcements) {
        Negotiation& negotiation = negotiations_[announcement.name];
        if (negotiation.marks.empty()) negotiation.first = now;
        negotiation.marks.emplace_back(static_cast<int>(r), now);
        busy = true;
      }
    }
    if (busy) trace::instant(trace::Phase::Cycle, cycleStart, trace::Event{});
    std::lock_guard<std::mutex> lock(mutex_);
    for (const ReadyTensor& ready : outcome.ready) {
      auto noted = negotiations_.find(ready.name);
      auto local = pending_.find(ready.name);
      if (local != pending_.end()) {
        Pending& pending = local->second;
        pending.readyAt = now;
        int64_t start = traceTime(pending.submitted);
        if (noted != negotiations_.end()) start = std::min(start, noted->second.first);
        trace::Event event;
        event.phase = trace::Phase::Negotiate;
        event.start = start;
        event.duration = now - start;
        event.id = pending.traceId;
        event.label = ready.name;
        event.detail = horovodName(pending.request.op);
        trace::record(event);
        if (noted != negotiations_.end()) {
          for (const auto& [rank, at] : noted->second.marks) {
            trace::Event mark;
            mark.id = pending.traceId;
            mark.rank = rank;
            mark.label = ready.name;
            mark.detail = event.detail;
            trace::instant(trace::Phase::RankReady, at, std::move(mark));
          }
        }
      }
      if (noted != negotiations_.end()) negotiations_.erase(noted);
    }
  }

  // A run of requests (one collective) begins: each one's time in the queue since it was ready.
  int64_t traceRunStart(const std::vector<const Pending*>& run) {
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

  // ... and ended, `run` numbering the collective they shared.
  void traceRunEnd(const std::vector<const Pending*>& run, int64_t start, int64_t runNumber) {
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
      event.args = std::string("\"dtype\": \"") + toString(request.type) +
                   "\", \"shape\": \"" + shape + "]\"";
      if (run.size() > 1) event.args += ", \"fused\": " + std::to_string(run.size());
      trace::record(std::move(event));
    }
  }

  // Moves what was submitted since the last cycle into pending_ and announces it.
  CycleMessage nextMessage() {
    CycleMessage message;
    std::lock_guard<std::mutex> lock(mutex_);
    for (Pending& pending : incoming_) {
      message.announcements.push_back(Announcement::of(pending.request));
      std::string name = pending.request.name;
      pending_.emplace(std::move(name), std::move(pending));
    }
    incoming_.clear();
    if (joinWork_ && !joinAnnounced_) {
      message.join = true;
      joinAnnounced_ = true;
    }
    message.shutdown = shutdownRequested_;
    message.awaiting = !awaited_.empty();
    message.expired = expiredRequests();
    return message;
  }

  // All-gathers every rank's message: one collective when they all fit a slot, else two.
  std::vector<CycleMessage> exchange(const CycleMessage& mine) {
    const int size = comm_->size();
    const std::vector<uint8_t> bytes = encode(mine);
    std::vector<uint8_t> slot(kSlotBytes, 0);
    const uint64_t length = bytes.size();
    std::memcpy(slot.data(), &length, kLengthBytes);
    std::memcpy(slot.data() + kLengthBytes, bytes.data(),
                std::min<size_t>(bytes.size(), kSlotBytes - kLengthBytes));
    std::vector<uint8_t> slots(kSlotBytes * size);
    allgatherBytes(slot.data(), slots.data(), kSlotBytes);

    std::vector<uint64_t> lengths(size);
    for (int r = 0; r < size; ++r) std::memcpy(&lengths[r], &slots[r * kSlotBytes], kLengthBytes);
    const uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
    std::vector<CycleMessage> messages;
    if (longest <= kSlotBytes - kLengthBytes) {
      for (int r = 0; r < size; ++r) {
        messages.push_back(decode(&slots[r * kSlotBytes + kLengthBytes], lengths[r]));
      }
      return messages;
    }
    std::vector<uint8_t> padded(longest, 0);
    std::memcpy(padded.data(), bytes.data(), bytes.size());
    std::vector<uint8_t> all(longest * size);
    allgatherBytes(padded.data(), all.data(), longest);
    for (int r = 0; r < size; ++r) messages.push_back(decode(&all[r * longest], lengths[r]));
    return messages;
  }

  void allgatherBytes(const void* input, void* output, size_t bytes) {
    AllgatherOptions options;
    options.input = input;
    options.output = output;
    options.count = bytes;
    options.type = DataType::Uint8;
    options.runInCaller = true;
    options.name = "tensor queue cycle";
    comm_->allgather(options)->wait();
  }

  // ---- running what is ready --------------------------------------------------------------
  void run(std::vector<ReadyTensor>& ready) {
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
        case TensorOp::Allgather:
          runAllgather(ready[i++]);
          break;
        case TensorOp::Broadcast:
          runBroadcast(ready[i++]);
          break;
        case TensorOp::Reducescatter:
          runReducescatter(ready[i++]);
          break;
        case TensorOp::Alltoall:
          runAlltoall(ready[i++]);
          break;
      }
    }
  }

  // The end of the run of all-reduces from `begin` that can share one collective.
  size_t fusionEnd(const std::vector<ReadyTensor>& ready, size_t begin) const {
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

  void runAllreduce(const std::vector<ReadyTensor>& ready, size_t begin, size_t end) {
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
    const size_t elementBytes = elementSize(first.type);
    const int64_t runNumber = runs_++;
    const std::vector<const Pending*> run = present(locals);
    const int64_t runStart = traceRunStart(run);
    if (end - begin > 1) {
      RINGCOMM_LOG(LogLevel::Trace, kLogQueue, "fusing %zu all-reduces (%s) into one",
                   end - begin, namesOf(ready, begin, end).c_str());
    }
    guarded(worksOf(locals), [&] {
      if (end - begin == 1 && locals[0]) {
        options.input = locals[0]->request.input;
        options.output = locals[0]->request.output;
        options.count = first.count();
        comm_->allreduce(options)->wait();
        traceRunEnd(run, runStart, runNumber);
        return;
      }
      size_t total = 0;
      for (size_t i = begin; i < end; ++i) total += ready[i].reference().count();
      uint8_t* const fusion = fusion_.reserve(total * elementBytes);
      size_t offset = 0;
      std::optional<trace::Span> copy(std::in_place, trace::Phase::FusionIn);
      for (size_t i = begin; i < end; ++i) {
        const size_t count = ready[i].reference().count();
        uint8_t* at = fusion + offset;
        const auto& local = locals[i - begin];
        if (local) {
          copyBytes(at, local->request.input, count * elementBytes);
        } else {
          fillJoined(at, count, first.type, first.reduceOp);
        }
        offset += count * elementBytes;
      }
      describeFusion(copy, runNumber, offset, ready, begin, end);
      copy.reset();
      options.input = options.output = fusion;
      options.count = total;
      options.tensorCounts = adasumTensors(ready, begin, end, options.op);
      comm_->allreduce(options)->wait();
      offset = 0;
      copy.emplace(trace::Phase::FusionOut);
      for (size_t i = begin; i < end; ++i) {
        const size_t bytes = ready[i].reference().count() * elementBytes;
        const auto& local = locals[i - begin];
        if (local) copyBytes(local->request.output, fusion + offset, bytes);
        offset += bytes;
      }
      describeFusion(copy, runNumber, offset, ready, begin, end);
      copy.reset();
      traceRunEnd(run, runStart, runNumber);
    });
  }

  // The fusion copy's details in the trace: which run, how many bytes, which tensors.
  static void describeFusion(std::optional<trace::Span>& copy, int64_t runNumber, size_t bytes,
                             const std::vector<ReadyTensor>& ready, size_t begin, size_t end) {
    if (!copy->active()) return;
    copy->event().group = runNumber;
    copy->event().bytes = bytes;
    copy->event().label = namesOf(ready, begin, end);
  }

  // The same on device memory: fused in a device buffer on the queue's stream for the run's
  // device, which waits for each tensor's ready mark (queue_device.h).
  void runDeviceAllreduce(const std::vector<ReadyTensor>& ready, size_t begin, size_t end,
                          const std::vector<std::optional<Pending>>& locals,
                          AllreduceOptions options) {
    const Announcement& first = ready[begin].reference();
    const std::vector<const Pending*> run = present(locals);
    const int device = runDevice(run);
    const int64_t runNumber = runs_++;
    const int64_t runStart = traceRunStart(run);
    options.deviceMemory = true;
    options.stream = device_->beginRun(device, marksOf(run));
    if (end - begin == 1 && locals[0]) {
      options.input = locals[0]->request.input;
      options.output = locals[0]->request.output;
      options.count = first.count();
      comm_->allreduce(options)->wait();
    } else {
      const size_t elementBytes = elementSize(first.type);
      size_t total = 0;
      for (size_t i = begin; i < end; ++i) total += ready[i].reference().count();
      auto* fusion = static_cast<uint8_t*>(
          device_->fusionBuffer(device, std::max<size_t>(total * elementBytes, 1)));
      size_t offset = 0;
      // Device copies are queued on the queue's stream: these spans time the queueing.
      std::optional<trace::Span> copy(std::in_place, trace::Phase::FusionIn, "device");
      for (size_t i = begin; i < end; ++i) {
        const size_t count = ready[i].reference().count();
        const auto& local = locals[i - begin];
        if (local) {
          device_->copy(device, fusion + offset, local->request.input, count * elementBytes);
        } else if (count > 0) {
          std::vector<uint8_t> joined(count * elementBytes);
          fillJoined(joined.data(), count, first.type, first.reduceOp);
          device_->upload(device, fusion + offset, joined.data(), joined.size());
        }
        offset += count * elementBytes;
      }
      describeFusion(copy, runNumber, offset, ready, begin, end);
      copy.reset();
      options.input = options.output = fusion;
      options.count = total;
      options.tensorCounts = adasumTensors(ready, begin, end, options.op);
      comm_->allreduce(options)->wait();
      offset = 0;
      copy.emplace(trace::Phase::FusionOut, "device");
      for (size_t i = begin; i < end; ++i) {
        const size_t bytes = ready[i].reference().count() * elementBytes;
        const auto& local = locals[i - begin];
        if (local) device_->copy(device, local->request.output, fusion + offset, bytes);
        offset += bytes;
      }
      describeFusion(copy, runNumber, offset, ready, begin, end);
      copy.reset();
    }
    traceRunEnd(run, runStart, runNumber);
    finishRun(device, run);
  }

  // A fused Adasum combines each tensor with coefficients of its own: the core is told where
  // each one lies in the fusion buffer.
  static std::vector<size_t> adasumTensors(const std::vector<ReadyTensor>& ready, size_t begin,
                                           size_t end, ReduceOp op) {
    std::vector<size_t> counts;
    if (op != ReduceOp::Adasum) return counts;
    for (size_t i = begin; i < end; ++i) counts.push_back(ready[i].reference().count());
    return counts;
  }

  // What this rank, having joined, contributes to a reduction by `op` (JoinPolicy).
  void fillJoined(void* data, size_t count, DataType type, ReduceOp op) const {
    fillIdentity(data, count, type, joinPolicy_ == JoinPolicy::Zeros ? ReduceOp::Sum : op);
  }

  // This rank's requests in a run: none where it has joined.
  static std::vector<const Pending*> present(const std::vector<std::optional<Pending>>& locals) {
    std::vector<const Pending*> run;
    for (const auto& local : locals) {
      if (local) run.push_back(&*local);
    }
    return run;
  }
  static std::vector<const Pending*> present(const std::optional<Pending>& local) {
    return local ? std::vector<const Pending*>{&*local} : std::vector<const Pending*>{};
  }

  static std::vector<const device::ReadyMark*> marksOf(const std::vector<const Pending*>& run) {
    std::vector<const device::ReadyMark*> marks;
    for (const Pending* pending : run) marks.push_back(pending->ready.get());
    return marks;
  }

  // The device a run of device requests uses on this rank: its tensors', or for a rank that has
  // joined, the device it named (or last used).
  int runDevice(const std::vector<const Pending*>& run) {
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

  // Ends a device run: its Works order their callers' streams after what it wrote (set before
  // guarded() completes them).
  void finishRun(int device, const std::vector<const Pending*>& run) {
    const device::OrderAfter done = device_->endRun(device);
    for (const Pending* pending : run) pending->work->orderResultsOn = done;
    std::lock_guard<std::mutex> lock(mutex_);
    lastDevice_ = device;
  }

  // Ranks' first dimensions may differ: an all-to-all with uneven counts, every rank sending its
  // rows to every rank, lands them in rank order without padding.
  void runAllgather(const ReadyTensor& ready) {
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
    std::vector<uint8_t> gathered(std::max<size_t>(total, 1) * elementSize(reference.type));
    options.output = gathered.data();
    const int64_t runNumber = runs_++;
    const int64_t runStart = traceRunStart(present(local));
    guarded(worksOf(local), [&] {
      if (reference.device && local) {
        // The rows are read out of device memory (staged) and gathered in host memory: the
        // caller moves the result to its device.
        options.deviceMemory = true;
        options.stream = device_->beginRun(local->ready->device(), marksOf(present(local)));
      }
      comm_->alltoallv(options)->wait();
      traceRunEnd(present(local), runStart, runNumber);
      if (local) {  // before guarded() completes the Work, which lets the caller read these
        gathered.resize(total * elementSize(reference.type));
        local->work->rows = std::move(rows);
        local->work->gathered = std::move(gathered);
      }
    });
  }

  // Horovod's reducescatter: rank r keeps its rows of the reduction, the first shape[0] % size
  // ranks one row more. Every rank submitted it (negotiation refuses joined ranks here).
  void runReducescatter(const ReadyTensor& ready) {
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
          auto* whole = static_cast<uint8_t*>(device_->fusionBuffer(
              device, std::max<size_t>(reference.count() * elementBytes, 1)));
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

  // Each rank sends splits[j] rows to rank j and receives, in rank order, what each rank's
  // announcement says it sends to it: the counts are known everywhere without another message.
  void runAlltoall(const ReadyTensor& ready) {
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
    std::vector<uint8_t> gathered(std::max<size_t>(total, 1) * elementSize(mine.type));
    options.output = gathered.data();
    const int64_t runNumber = runs_++;
    const int64_t runStart = traceRunStart(present(local));
    guarded(worksOf(local), [&] {
      if (mine.device) {
        options.deviceMemory = true;  // the rows are staged out of device memory
        options.stream = device_->beginRun(local->ready->device(), marksOf(present(local)));
      }
      comm_->alltoallv(options)->wait();
      traceRunEnd(present(local), runStart, runNumber);
      gathered.resize(total * elementSize(mine.type));
      local->work->rows = std::move(received);
      local->work->gathered = std::move(gathered);
    });
  }

  void runBroadcast(const ReadyTensor& ready) {
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

  // Runs a collective: completes these Works, or fails them and rethrows (a failed collective
  // closes the queue). A rank that joined has no Work for the tensor.
  template <typename Body>
  static void guarded(const std::vector<TensorWorkPtr>& works, Body body) {
    try {
      body();
    } catch (...) {
      for (const auto& work : works) work->complete(std::current_exception());
      throw;
    }
    for (const auto& work : works) work->complete(nullptr);
  }

  static std::vector<TensorWorkPtr> worksOf(const std::vector<std::optional<Pending>>& locals) {
    std::vector<TensorWorkPtr> works;
    for (const auto& local : locals) {
      if (local) works.push_back(local->work);
    }
    return works;
  }

  static std::vector<TensorWorkPtr> worksOf(const std::optional<Pending>& local) {
    return local ? std::vector<TensorWorkPtr>{local->work} : std::vector<TensorWorkPtr>{};
  }

  std::optional<Pending> takeLocal(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pending_.find(name);
    if (it == pending_.end()) return std::nullopt;  // this rank had joined
    Pending pending = std::move(it->second);
    pending_.erase(it);
    awaited_.erase(name);
    return pending;
  }

  void failLocal(const std::string& name, std::exception_ptr error) {
    if (auto local = takeLocal(name)) local->work->complete(error);
  }

  void finishJoin(int lastJoined) {
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

  // ---- stalls, deadlines and closing ------------------------------------------------------
  // Called with mutex_ held (on the queue's thread): this rank's requests that have waited
  // longer than the timeout for ranks that never submitted them, each announced once. Every
  // rank then fails its request for the name; the queue goes on.
  std::vector<Expiry> expiredRequests() {
    std::vector<Expiry> expired;
    const auto now = Clock::now();
    for (auto& [name, pending] : pending_) {
      if (pending.expiryAnnounced || now - pending.submitted < config_.timeout) continue;
      pending.expiryAnnounced = true;
      const double seconds = std::chrono::duration<double>(now - pending.submitted).count();
      std::ostringstream text;
      text << "tensor queue: " << toString(pending.request.op) << " '" << name << "' on rank "
           << rank() << " timed out after " << seconds << " s waiting for rank(s) "
           << rankList(table_.missing(name)) << ", which never submitted it";
      expired.push_back(Expiry{name, text.str()});
    }
    return expired;
  }

  void warnAboutStalls() {
    if (config_.stallWarning.count() == 0) return;
    const auto now = Clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [name, pending] : pending_) {
      if (pending.warned || now - pending.submitted < config_.stallWarning) continue;
      pending.warned = true;
      const double seconds = std::chrono::duration<double>(now - pending.submitted).count();
      RINGCOMM_LOG(LogLevel::Warn, kLogQueue,
                   "rank %d has waited %.0f s for %s '%s': rank(s) %s have not submitted it "
                   "(still waiting; the timeout fails it)",
                   rank(), seconds, toString(pending.request.op), name.c_str(),
                   rankList(table_.missing(name)).c_str());
    }
  }

  // Fails everything in flight with `error`, and what is submitted later with closedError(it).
  void closeWith(std::exception_ptr error) {
    std::vector<TensorWorkPtr> works;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!closed_) {
        closed_ = true;
        closedError_ = closedError(error);
      }
      for (auto& [name, pending] : pending_) works.push_back(pending.work);
      for (auto& pending : incoming_) works.push_back(pending.work);
      if (joinWork_) works.push_back(joinWork_);
      pending_.clear();
      incoming_.clear();
      awaited_.clear();
      joinWork_.reset();
    }
    for (auto& work : works) work->complete(error);
  }

  // What later submissions raise after `error` closed the queue: a peer's failure or a closed
  // communicator as it was (its type names what happened), anything else (an argument the
  // queue's thread refused) as CommunicatorClosed quoting it, so that it is not taken for a bad
  // argument of the new call (Horovod: a HorovodInternalError).
  static std::exception_ptr closedError(std::exception_ptr error) {
    try {
      std::rethrow_exception(error);
    } catch (const PeerError&) {
      return error;
    } catch (const CommunicatorClosed&) {
      return error;
    } catch (const std::exception& other) {
      return std::make_exception_ptr(
          CommunicatorClosed(std::string("tensor queue: closed by an earlier failure: ") +
                             other.what()));
    } catch (...) {
      return std::make_exception_ptr(
          CommunicatorClosed("tensor queue: closed by an earlier failure"));
    }
  }

  std::shared_ptr<Communicator> comm_;
  const Config config_;
  const size_t fusionThresholdBytes_;  // agreed by every rank at creation
  const JoinPolicy joinPolicy_;        // the same on every rank (checked at creation)
  ReadinessTable table_;         // touched by the queue's thread only
  // The fusion buffer, grown to the largest fused run; in memory local peers map, so large fused
  // all-reduces on one host move with loads and stores (shm::SharedBytes).
  shm::SharedBytes fusion_;
  std::unique_ptr<device::QueueDevice> device_ = device::createQueueDevice();
  std::thread thread_;

  mutable std::mutex mutex_;
  std::condition_variable submitted_;
  std::set<std::string> awaited_;  // requests a caller waits for, not yet taken to run
  // Whether awaited requests start cycles at once: false after a cycle where every rank was
  // waiting and nothing was announced or ready (queue thread only).
  bool hurry_ = true;
  std::vector<Pending> incoming_;          // submitted, not yet announced
  std::map<std::string, Pending> pending_;  // announced, not yet run
  TensorWorkPtr joinWork_;
  bool joinAnnounced_ = false;
  int joinDevice_ = -1;  // the CUDA device join() named
  int lastDevice_ = -1;  // the CUDA device of the last device run
  bool shutdownRequested_ = false;
  bool closed_ = false;
  std::exception_ptr closedError_;
  TensorQueueStats stats_;

  // The trace (touched by the queue's thread only, but nextTraceId_ under mutex_).
  struct Negotiation {
    int64_t first = 0;                         // trace::now() of the first announcement
    std::vector<std::pair<int, int64_t>> marks;  // (rank, when its announcement arrived)
  };
  std::map<std::string, Negotiation> negotiations_;  // names announced, not yet ready
  int64_t nextTraceId_ = 0;
  int64_t runs_ = 0;  // collectives run, numbering them in the trace
};

}  // namespace
}  // namespace engine

std::shared_ptr<TensorQueue> TensorQueue::create(std::shared_ptr<Communicator> comm,
                                                 JoinPolicy joinPolicy) {
  if (!comm) throw InvalidArgument("TensorQueue::create: communicator is null");
  return std::make_shared<engine::TensorQueueImpl>(std::move(comm), joinPolicy);
}

}  // namespace ringcomm
