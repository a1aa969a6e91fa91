#include "transport/transport.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <utility>

#include "common/failure.h"
#include "common/spin.h"
#include "common/tags.h"
#include "common/trace.h"
#include "ringcomm/errors.h"
#include "transport/frame_check.h"
#include "transport/shm/segment.h"

namespace ringcomm::transport {
namespace {

// How long one blocking wait lasts before the loop re-checks peers' health and the deadline.
constexpr std::chrono::milliseconds kHealthCheckInterval{100};
// When shared-memory and TCP peers are both pending, poll() sockets in slices this short so that
// the doorbell is not ignored for long.
constexpr std::chrono::milliseconds kMixedPollSlice{1};

// A device buffer reaches this layer only for a peer that takes device memory: the layers above
// stage the others through host memory (src/device/device_path.h).
void requireHostMemory(const Transport& transport, int peer, Memory memory) {
  if (memory == Memory::Cuda && !transport.takesDeviceMemory(peer)) {
    throw Error(std::string("ringcomm: internal error: device memory for rank ") +
                std::to_string(peer) + " over " + transport.kindOf(peer) +
                ", which takes host memory only");
  }
}

}  // namespace

Transport::Transport(int rank, std::vector<std::unique_ptr<ByteStream>> streams,
                     std::vector<std::unique_ptr<MessageNetwork>> networks,
                     const shm::Segments* segments,
                     WaitPolicy& waitPolicy, std::unique_ptr<TcpDialer> dialer)
    : rank_(rank),
      peers_(streams.size()),
      networks_(std::move(networks)),
      segments_(segments),
      waitPolicy_(waitPolicy),
      dialer_(std::move(dialer)) {
  for (size_t peer = 0; peer < streams.size(); ++peer) {
    const int at = static_cast<int>(peer);
    if (streams[peer]) {
      peers_[peer].link = streamLink(at, std::move(streams[peer]));
      continue;
    }
    if (at == rank_ || (dialer_ && dialer_->reaches(at))) continue;
    for (const auto& network : networks_) {
      if (network->reaches(at)) peers_[peer].link = networkLink(*network, at);
    }
  }
}

void Transport::registerLongLived(void* data, size_t bytes) {
  for (const auto& network : networks_) network->registerMemory(data, bytes);
}

void Transport::forgetLongLived(void* data) {
  for (const auto& network : networks_) network->forgetMemory(data);
}

std::string Transport::failureOf(int peer) const {
  const PeerLink* link = peers_[peer].link.get();
  return link != nullptr ? link->failure() : std::string();
}

Transport::Request Transport::postSend(int peer, const void* data, size_t bytes,
                                       const MessageTag& tag, Memory memory) {
  requireHostMemory(*this, peer, memory);
  Peer& state = peers_[peer];
  Message message;
  message.data = const_cast<uint8_t*>(static_cast<const uint8_t*>(data));
  message.bytes = bytes;
  message.memory = memory;
  message.header = FrameHeader{kFrameMagic, tag.id, tag.signature, tag.variant, bytes};
  markActive(peer, state);
  state.sends.push_back(std::move(message));
  // Start moving it now: the peer may already be waiting (a TCP link not yet made is made in
  // the wait, which has a deadline).
  if (state.link) {
    const size_t queued = state.sends.size();
    state.link->sendQueued(state.sends);
    state.sendsDone += queued - state.sends.size();
  }
  return Request{peer, true, ++state.sendsPosted};
}

Transport::Request Transport::postRecv(int peer, void* data, size_t bytes, const MessageTag& tag,
                                       Memory memory) {
  requireHostMemory(*this, peer, memory);
  Peer& state = peers_[peer];
  Message message;
  message.data = static_cast<uint8_t*>(data);
  message.bytes = bytes;
  message.memory = memory;
  // What we expect to receive.
  message.header = FrameHeader{kFrameMagic, tag.id, tag.signature, tag.variant, bytes};
  markActive(peer, state);
  state.recvs.push_back(std::move(message));
  return Request{peer, false, ++state.recvsPosted};
}

void Transport::markActive(int peer, Peer& state) {
  if (state.active) return;
  state.active = true;
  active_.push_back(peer);
}

bool Transport::isDone(const Request& request) const {
  const Peer& state = peers_[request.peer];
  return (request.isSend ? state.sendsDone : state.recvsDone) >= request.sequence;
}

bool Transport::progressAll(const Operation& op) {
  bool moved = false;
  // A network serves many peers from one worker: it moves once a round, for all of them.
  for (const auto& network : networks_) moved |= network->progress();
  for (size_t i = 0; i < active_.size();) {
    int peer = active_[i];
    Peer& state = peers_[peer];
    if (!state.link) ensureLink(peer, state, op);
    const size_t sends = state.sends.size();
    const size_t recvs = state.recvs.size();
    moved |= state.link->progressSends(state.sends, op);
    moved |= state.link->progressReceives(state.recvs, op);
    state.sendsDone += sends - state.sends.size();
    state.recvsDone += recvs - state.recvs.size();
    if (state.sends.empty() && state.recvs.empty()) {
      state.active = false;
      active_[i] = active_.back();
      active_.pop_back();
      continue;
    }
    // Only a peer this rank still waits for fails the operation: one that delivered everything
    // and then exited did its part (the others complete this collective too).
    const std::string failure = state.link->failure();
    if (!failure.empty()) raisePeerFailure<TransportError>(op, peer, failure);
    ++i;
  }
  return moved;
}

void Transport::checkPeers(const Operation& op) {
  checkAborted(op);
  for (int peer : active_) {
    const std::string failure = failureOf(peer);
    if (!failure.empty()) raisePeerFailure<TransportError>(op, peer, failure);
  }
}

void Transport::checkAborted(const Operation& op) const {
  if (dialer_) {
    // Out of descriptors, this rank cannot take its peers' links (they would wait for it).
    const std::string failure = dialer_->failure();
    if (!failure.empty()) raisePeerFailure<TransportError>(op, -1, failure);
  }
  if (segments_ == nullptr) return;
  const std::string reason = segments_->ownAbort();
  if (!reason.empty()) {
    raisePeerFailure<TransportError>(op, -1, "this rank's communicator closed: " + reason);
  }
}

void Transport::raiseTimeout(const Operation& op) const {
  // Name the peer we are waiting on: prefer one we expect data from.
  for (int pass = 0; pass < 2; ++pass) {
    for (int peer : active_) {
      const Peer& state = peers_[peer];
      const auto& queue = pass == 0 ? state.recvs : state.sends;
      if (queue.empty()) continue;
      const Message& head = queue.front();
      std::string what = std::string("timed out waiting for rank ") + std::to_string(peer) +
                         (pass == 0 ? " (receive of " : " (send of ") + std::to_string(head.bytes) +
                         " bytes, " + std::to_string(head.moved) + " moved)";
      raisePeerFailure<TimeoutError>(op, peer, what);
    }
  }
  raisePeerFailure<TimeoutError>(op, -1, "timed out");
}

void Transport::block(uint32_t doorbellSeen, const Operation& op,
                      std::chrono::milliseconds longest) {
  SleepSet sleep;
  for (int peer : active_) {
    Peer& state = peers_[peer];
    if (!state.link) continue;
    if (!state.link->addToSleep(sleep, !state.recvs.empty(), !state.sends.empty())) return;
  }
  sleepOn(sleep, doorbellSeen, std::min({op.remaining(), kHealthCheckInterval, longest}));
}

void Transport::blockForAnyIncoming(uint32_t doorbellSeen, const Operation& op) {
  SleepSet sleep;
  if (dialer_) sleep.fds.push_back(pollfd{dialer_->arrivalFd(), POLLIN, 0});
  for (Peer& state : peers_) {
    if (state.link && !state.link->addToSleep(sleep, true, false)) return;
  }
  sleepOn(sleep, doorbellSeen, std::min(op.remaining(), kHealthCheckInterval));
}

void Transport::sleepOn(SleepSet& sleep, uint32_t doorbellSeen, std::chrono::milliseconds slice) {
  if (!sleep.fds.empty()) {
    // Shared-memory peers ring no descriptor: look at them again soon.
    if (sleep.doorbell) slice = std::min(slice, kMixedPollSlice);
    ::poll(sleep.fds.data(), sleep.fds.size(), static_cast<int>(slice.count()));
  } else if (sleep.doorbell && segments_ != nullptr) {
    segments_->sleepOnDoorbell(doorbellSeen,
                               std::chrono::duration_cast<std::chrono::microseconds>(slice));
  } else {
    sched_yield();
  }
}

template <typename Predicate>
void Transport::waitUntil(Predicate done, const Operation& op) {
  SpinBudget spin = waitPolicy_.budget();
  auto lastHealthCheck = Clock::now();
  bool checkDue = false;
  while (true) {
    uint32_t doorbell = segments_ != nullptr ? segments_->doorbellSnapshot() : 0;
    bool moved = progressAll(op);
    if (done()) return;
    // After taking in what arrived: a peer that sent its part and then exited while this rank
    // slept is not one this rank still waits for.
    if (checkDue) {
      checkPeers(op);
      lastHealthCheck = Clock::now();
      checkDue = false;
    }
    if (moved) {
      spin.reset();
      continue;
    }
    if (spin.spinAgain()) continue;
    if (op.expired()) raiseTimeout(op);
    if (!active_.empty()) op.noteWaitingFor(active_.front());
    block(doorbell, op);
    checkAborted(op);
    checkDue = Clock::now() - lastHealthCheck >= kHealthCheckInterval ||
               (segments_ != nullptr && segments_->peerExited());
  }
}

void Transport::wait(const Request& request, const Operation& op) {
  if (isDone(request)) return;
  trace::Span span(trace::Phase::Wait, request.isSend ? "send" : "receive");
  if (span.active()) span.event().rank = request.peer;
  waitUntil([&] { return isDone(request); }, op);
}

void Transport::progress(const Operation& op, bool mayBlock, std::chrono::milliseconds slice) {
  uint32_t doorbell = segments_ != nullptr ? segments_->doorbellSnapshot() : 0;
  if (progressAll(op) || !mayBlock || active_.empty()) return;
  block(doorbell, op, slice);
  progressAll(op);
  checkPeers(op);
}

void Transport::waitAll(const Operation& op) {
  if (active_.empty()) return;
  trace::Span span(trace::Phase::Wait, "sends to complete");
  waitUntil([&] { return active_.empty(); }, op);
}

int Transport::waitForAnySender(const MessageTag& tag, const Operation& op) {
  SpinBudget spin = waitPolicy_.budget();
  while (true) {
    uint32_t doorbell = segments_ != nullptr ? segments_->doorbellSnapshot() : 0;
    bool moved = progressAll(op);  // sends this rank posted earlier may be what the sender awaits
    adoptArrived();                // a sender without a link to this rank dials it
    for (size_t at = 0; at < peers_.size(); ++at) {
      const int peer = static_cast<int>(at);
      Peer& state = peers_[at];
      if (!state.link || !state.recvs.empty()) continue;
      const FrameHeader* next = state.link->nextIncoming(&moved);
      if (next != nullptr) checkMagic(peer, *next, op);
      if (next != nullptr && next->tag == tag.id) return peer;
      const std::string failure = state.link->failure();
      if (!failure.empty()) raisePeerFailure<TransportError>(op, peer, failure);
    }
    if (moved) {
      spin.reset();
      continue;
    }
    if (spin.spinAgain()) continue;
    if (op.expired()) {
      raisePeerFailure<TimeoutError>(op, -1, "timed out waiting for a message from any rank");
    }
    blockForAnyIncoming(doorbell, op);
    checkAborted(op);
  }
}

std::string Transport::unreadMessageFrom(int peer) {
  adoptArrived();  // a message nothing received may have come over a link the sender made
  Peer& state = peers_[peer];
  if (!state.recvs.empty() || !state.link) return {};
  const FrameHeader* next = nullptr;
  try {
    for (const auto& network : networks_) network->progress();
    bool moved = false;
    next = state.link->nextIncoming(&moved);
  } catch (const std::exception&) {
    return {};  // the peer is gone: nothing to read, and shutting down is no time to raise
  }
  if (next == nullptr || next->magic != kFrameMagic) return {};
  return describeTag(next->tag) + " (" + describeSignature(next->signature, next->variant) +
         ", " + std::to_string(next->bytes) + " bytes)";
}

}  // namespace ringcomm::transport
