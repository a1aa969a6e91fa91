// The tensor queue's requests coming in and its cycle (tensor_queue_impl.h): each cycle the
// queue's thread announces what this rank submitted, all-gathers every rank's announcement on the
// queue's own communicator, asks the readiness table what is ready, and runs it (queue_runs.cc).
#include "queue/tensor_queue_impl.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/bytes.h"
#include "common/log.h"
#include "common/trace.h"
#include "queue/negotiation.h"
#include "ringcomm/errors.h"

namespace ringcomm {

size_t TensorRequest::count() const {
  size_t count = 1;
  for (int64_t dim : shape) count *= static_cast<size_t>(dim);
  return count;
}

namespace queue {
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

}  // namespace

std::string rankList(const std::vector<int>& ranks) {
  std::ostringstream text;
  for (size_t i = 0; i < ranks.size(); ++i) text << (i ? ", " : "") << ranks[i];
  return text.str();
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

TensorQueueImpl::TensorQueueImpl(std::shared_ptr<Communicator> comm, JoinPolicy joinPolicy)
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

TensorWorkPtr TensorQueueImpl::submit(TensorRequest request) {
  std::vector<TensorRequest> one;
  one.push_back(std::move(request));
  return submitAll(std::move(one)).front();
}

std::vector<TensorWorkPtr> TensorQueueImpl::submitAll(std::vector<TensorRequest> requests) {
  if (requests.empty()) return {};
  std::set<std::string> names;
  std::vector<std::shared_ptr<const ReadyMark>> marks;
  for (TensorRequest& request : requests) {
    resolveSplits(request);
    validate(request);
    if (!names.insert(request.name).second) {
      throw InvalidArgument("tensor queue: '" + request.name +
                            "' appears twice among the requests submitted together");
    }
    // Where the caller's stream has the tensors ready: recorded now, waited for by the queue's
    // stream when they run, never by this thread.
    marks.push_back(request.deviceMemory ? device_->markReady({request.input, request.output},
                                                              request.stream, request.name)
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
      throw InvalidArgument("tensor queue: '" + request.name + "' is already in flight on rank " +
                            std::to_string(rank()) +
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

TensorWorkPtr TensorQueueImpl::join(int device) {
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

TensorQueueStats TensorQueueImpl::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void TensorQueueImpl::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutdownRequested_ = true;
  }
  submitted_.notify_all();
  if (thread_.joinable()) thread_.join();
  comm_->shutdown();
}

size_t TensorQueueImpl::agreeOnSettings(JoinPolicy joinPolicy) {
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

void TensorQueueImpl::resolveSplits(TensorRequest& request) const {
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

void TensorQueueImpl::validate(const TensorRequest& request) const {
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
        throw InvalidArgument("allreduce '" + request.name +
                              "': op adasum needs a "
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
        throw InvalidArgument("reducescatter '" + request.name +
                              "': op adasum is an "
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
        for (int64_t rows : request.splits)
          given += (given.empty() ? "" : ", ") + std::to_string(rows);
        throw InvalidArgument("alltoall '" + request.name + "': splits must hold " +
                              std::to_string(size()) + " non-negative row counts summing to " +
                              "the first dimension (" + std::to_string(request.shape[0]) +
                              "); got [" + given + "]");
      }
      break;
    }
  }
}

void TensorQueueImpl::requireRows(const TensorRequest& request) {
  if (request.shape.empty()) {
    throw InvalidArgument(std::string(toString(request.op)) + " '" + request.name +
                          "': a 0-d tensor has no first dimension to split; give it one");
  }
  if (request.input == nullptr && request.count() > 0) {
    throw InvalidArgument(std::string(toString(request.op)) + " '" + request.name +
                          "': input is null");
  }
}

bool TensorQueueImpl::incomingNames(const std::string& name) const {
  return std::any_of(incoming_.begin(), incoming_.end(),
                     [&](const Pending& p) { return p.request.name == name; });
}

void TensorQueueImpl::throwIfClosed() const {
  if (closed_) std::rethrow_exception(closedError_);
}

void TensorQueueImpl::loop() {
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

void TensorQueueImpl::await(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_.count(name) == 0 && !incomingNames(name)) return;  // already taken to run
    awaited_.insert(name);
  }
  submitted_.notify_one();
}

bool TensorQueueImpl::hasNewsLocked() const {
  return !incoming_.empty() || (joinWork_ && !joinAnnounced_) || shutdownRequested_;
}

bool TensorQueueImpl::cycle(bool* idle) {
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
                 outcome.ready.size(), namesOf(outcome.ready, 0, outcome.ready.size()).c_str());
  }
  *idle = *idle && outcome.ready.empty() && !outcome.allJoined;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.cycles;
  }
  for (const Expiry& expiry : outcome.expired) {
    failLocal(expiry.name, std::make_exception_ptr(TimeoutError(expiry.reason, FailureContext{})));
  }
  run(outcome.ready);
  if (outcome.allJoined) finishJoin(outcome.lastJoined);
  if (outcome.shutdownBy >= 0) {
    closeWith(std::make_exception_ptr(CommunicatorClosed("tensor queue: closed by rank " +
                                                         std::to_string(outcome.shutdownBy) +
                                                         " (shutdown() was called)")));
    return false;
  }
  warnAboutStalls();
  return true;
}

void TensorQueueImpl::traceNegotiation(const std::vector<CycleMessage>& messages,
                                       const CycleOutcome& outcome, int64_t cycleStart) {
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

CycleMessage TensorQueueImpl::nextMessage() {
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

std::vector<CycleMessage> TensorQueueImpl::exchange(const CycleMessage& mine) {
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

void TensorQueueImpl::allgatherBytes(const void* input, void* output, size_t bytes) {
  AllgatherOptions options;
  options.input = input;
  options.output = output;
  options.count = bytes;
  options.type = DataType::Uint8;
  options.runInCaller = true;
  options.name = "tensor queue cycle";
  comm_->allgather(options)->wait();
}

std::vector<Expiry> TensorQueueImpl::expiredRequests() {
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

void TensorQueueImpl::warnAboutStalls() {
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

void TensorQueueImpl::closeWith(std::exception_ptr error) {
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

std::exception_ptr TensorQueueImpl::closedError(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const PeerError&) {
    return error;
  } catch (const CommunicatorClosed&) {
    return error;
  } catch (const std::exception& other) {
    return std::make_exception_ptr(CommunicatorClosed(
        std::string("tensor queue: closed by an earlier failure: ") + other.what()));
  } catch (...) {
    return std::make_exception_ptr(
        CommunicatorClosed("tensor queue: closed by an earlier failure"));
  }
}

}  // namespace queue

std::shared_ptr<TensorQueue> TensorQueue::create(std::shared_ptr<Communicator> comm,
                                                 JoinPolicy joinPolicy) {
  if (!comm) throw InvalidArgument("TensorQueue::create: communicator is null");
  return std::make_shared<queue::TensorQueueImpl>(std::move(comm), joinPolicy);
}

}  // namespace ringcomm
