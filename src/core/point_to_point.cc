#include "core/point_to_point.h"

#include <chrono>
#include <string>
#include <utility>

namespace ringcomm {
namespace {

// How long one poll of the engine's may wait for bytes to move.
constexpr std::chrono::milliseconds kPollSlice{1};

}  // namespace

MessageTag PointToPoint::tagOf(int tag, const std::optional<DataType>& type) {
  return MessageTag{userTag(tag), type ? signatureOf(&*type, nullptr, -1) : 0u};
}

OperationLabel PointToPoint::labelOf(const char* what, int peer, int tag, size_t bytes) {
  OperationLabel label;
  label.collective = what;
  label.peer = peer;
  label.tag = tag;
  label.bytes = bytes;
  return label;
}

void PointToPoint::add(Posted posted, Operation op, WorkPtr work) {
  pending_.push_back(Pending{std::move(posted), std::move(op), std::move(work)});
}

std::exception_ptr PointToPoint::finish(Pending& pending) {
  if (!pending.posted.message) return nullptr;
  try {
    pending.posted.message->finish(pending.op);  // a receive's copy to the device
  } catch (...) {
    return std::current_exception();  // this one's failure, not its peer's
  }
  return nullptr;
}

engine::PollResult PointToPoint::poll(transport::Transport& transport, bool mayBlock,
                                      const std::function<void(const PeerError&)>& peerFailed) {
  engine::PollResult result;
  if (pending_.empty()) return result;
  std::exception_ptr failure;
  try {
    transport.progress(pending_.front().op, mayBlock, kPollSlice);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (transport.isDone(it->posted.request)) {
        result.finished.emplace_back(it->work, finish(*it));
        it = pending_.erase(it);
      } else if (it->op.expired()) {
        transport.wait(it->posted.request, it->op);  // raises the timeout, naming the peer
        ++it;
      } else {
        ++it;
      }
    }
  } catch (const PeerError& error) {
    try {
      peerFailed(error);
    } catch (...) {
      failure = std::current_exception();
    }
  } catch (...) {
    failure = std::current_exception();
  }
  if (failure) {
    for (auto& pending : pending_) result.finished.emplace_back(pending.work, failure);
    pending_.clear();
  }
  result.pending = !pending_.empty();
  return result;
}

void PointToPoint::abandon(const std::string& why) {
  for (auto& pending : pending_) {
    pending.work->complete(std::make_exception_ptr(
        CommunicatorClosed("ringcomm: " + pending.op.name() + " did not complete: " + why)));
  }
  pending_.clear();
}

}  // namespace ringcomm
