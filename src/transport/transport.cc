#include "transport/transport.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "common/bytes.h"
#include "common/failure.h"
#include "common/spin.h"
#include "common/tags.h"
#include "common/trace.h"
#include "ringcomm/errors.h"
#include "transport/shm/segment.h"

namespace ringcomm::transport {
namespace {

// Sends up to this size are copied with their header into one buffer: one write, one wake-up.
constexpr size_t kSmallFrameBytes = 8192;
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
    peers_[peer].stream = std::move(streams[peer]);
    if (peers_[peer].stream || at == rank_ || (dialer_ && dialer_->reaches(at))) continue;
    for (const auto& network : networks_) {
      if (network->reaches(at)) peers_[peer].network = network.get();
    }
  }
}

bool Transport::takesDeviceMemory(int peer) const {
  const MessageNetwork* network = peers_[peer].network;
  return network != nullptr && network->takesDeviceMemory();
}

void Transport::registerLongLived(void* data, size_t bytes) {
  for (const auto& network : networks_) network->registerMemory(data, bytes);
}

void Transport::forgetLongLived(void* data) {
  for (const auto& network : networks_) network->forgetMemory(data);
}

std::string Transport::failureOf(int peer) const {
  const Peer& state = peers_[peer];
  if (state.network != nullptr) return state.network->failure(peer);
  return state.stream ? state.stream->failure() : std::string();
}

Transport::Request Transport::postSend(int peer, const void* data, size_t bytes,
                                       const MessageTag& tag, Memory memory) {
  requireHostMemory(*this, peer, memory);
  Peer& state = peers_[peer];
  Pending pending;
  pending.data = const_cast<uint8_t*>(static_cast<const uint8_t*>(data));
  pending.bytes = bytes;
  pending.memory = memory;
  pending.header = FrameHeader{kFrameMagic, tag.id, tag.signature, tag.variant, bytes};
  if (state.network != nullptr) {
    // The network queues it at once (its header travels as the message's header).
    pending.completion = std::make_shared<MessageNetwork::Completion>();
    state.network->send(peer, state.sendsPosted + 1, pending.header, data, memory,
                        pending.completion);
  } else if (bytes <= kSmallFrameBytes) {
    pending.smallFrame.resize(sizeof(FrameHeader) + bytes);
    std::memcpy(pending.smallFrame.data(), &pending.header, sizeof(FrameHeader));
    copyBytes(pending.smallFrame.data() + sizeof(FrameHeader), data, bytes);
  }
  if (state.sends.empty() && state.recvs.empty()) active_.push_back(peer);
  state.sends.push_back(std::move(pending));
  Request request{peer, true, ++state.sendsPosted};
  // Start moving bytes now: the peer may already be waiting (a TCP link not yet made is made
  // in the wait, which has a deadline).
  if (state.stream) progressSends(peer, state);
  return request;
}

Transport::Request Transport::postRecv(int peer, void* data, size_t bytes, const MessageTag& tag,
                                       Memory memory) {
  requireHostMemory(*this, peer, memory);
  Peer& state = peers_[peer];
  Pending pending;
  pending.data = static_cast<uint8_t*>(data);
  pending.bytes = bytes;
  pending.memory = memory;
  // What we expect to receive.
  pending.header = FrameHeader{kFrameMagic, tag.id, tag.signature, tag.variant, bytes};
  if (state.sends.empty() && state.recvs.empty()) active_.push_back(peer);
  state.recvs.push_back(std::move(pending));
  return Request{peer, false, ++state.recvsPosted};
}

bool Transport::isDone(const Request& request) const {
  const Peer& state = peers_[request.peer];
  return (request.isSend ? state.sendsDone : state.recvsDone) >= request.sequence;
}

bool Transport::progressSends(int /*peer*/, Peer& state) {
  bool moved = false;
  while (!state.sends.empty()) {
    Pending& head = state.sends.front();
    if (!head.smallFrame.empty()) {
      size_t n = state.stream->writeSome(head.smallFrame.data() + head.moved,
                                         head.smallFrame.size() - head.moved);
      head.moved += n;
      moved |= n > 0;
      if (head.moved < head.smallFrame.size()) return moved;
    } else {
      if (head.headerMoved < sizeof(FrameHeader)) {
        size_t n = state.stream->writeSome(
            reinterpret_cast<uint8_t*>(&head.header) + head.headerMoved,
            sizeof(FrameHeader) - head.headerMoved);
        head.headerMoved += n;
        moved |= n > 0;
        if (head.headerMoved < sizeof(FrameHeader)) return moved;
      }
      while (head.moved < head.bytes) {
        size_t n = state.stream->writeSome(head.data + head.moved, head.bytes - head.moved);
        if (n == 0) return moved;
        head.moved += n;
        moved = true;
      }
    }
    state.sends.pop_front();
    ++state.sendsDone;
  }
  return moved;
}

namespace {

std::string describeFrame(const FrameHeader& frame) {
  if (frame.variant & kAcknowledgementBit) return "the acknowledgement of " + describeTag(frame.tag);
  return describeTag(frame.tag) + " with " + std::to_string(frame.bytes) + " bytes";
}

// Why a frame from `peer` is not the one this rank waits for, in the terms the user called.
std::string describeMismatch(int peer, const FrameHeader& incoming, const FrameHeader& expected) {
  const std::string who = "rank " + std::to_string(peer);
  const bool theyAcknowledge = (incoming.variant & kAcknowledgementBit) != 0;
  const bool weAwaitAcknowledgement = (expected.variant & kAcknowledgementBit) != 0;
  if (incoming.tag == expected.tag && theyAcknowledge != weAwaitAcknowledgement &&
      incoming.signature != expected.signature) {
    // Both ranks sent where one should have received: they disagree on who is the root.
    return who + " called " + describeTag(incoming.tag) + " with " +
           describeSignature(incoming.signature, incoming.variant & ~kAcknowledgementBit) +
           ", but this rank with " +
           describeSignature(expected.signature, expected.variant & ~kAcknowledgementBit) +
           (weAwaitAcknowledgement ? " and waited for its acknowledgement"
                                   : " and waited for its data") +
           " (ranks must agree on the root)";
  }
  if (incoming.tag != expected.tag || incoming.bytes != expected.bytes) {
    return who + " sent " + describeFrame(incoming) + ", but this rank expected " +
           describeFrame(expected) +
           " (ranks called different collectives, or with different sizes)";
  }
  return who + " called " + describeTag(incoming.tag) + " with " +
         describeSignature(incoming.signature, incoming.variant) + ", but this rank with " +
         describeSignature(expected.signature, expected.variant) +
         " (ranks must agree on the element type, reduction, root and schedule)";
}

}  // namespace

void Transport::checkHeader(int peer, const FrameHeader& incoming, const FrameHeader& expected,
                            const Operation& op) const {
  if (incoming.magic != kFrameMagic) {
    raisePeerFailure<TransportError>(op, peer, "corrupt frame from rank " + std::to_string(peer));
  }
  const bool sameCall = incoming.tag == expected.tag && incoming.signature == expected.signature &&
                        incoming.variant == expected.variant;
  if (!sameCall || incoming.bytes != expected.bytes) {
    raisePeerFailure<MismatchError>(op, peer, describeMismatch(peer, incoming, expected));
  }
}

bool Transport::progressRecvs(int peer, Peer& state, const Operation& op) {
  bool moved = false;
  while (!state.recvs.empty()) {
    Pending& head = state.recvs.front();
    if (head.headerMoved == 0 && state.peekedBytes > 0) {
      std::memcpy(&head.received, &state.peeked, state.peekedBytes);
      head.headerMoved = state.peekedBytes;
      state.peekedBytes = 0;
    }
    if (head.headerMoved < sizeof(FrameHeader)) {
      uint8_t* at = reinterpret_cast<uint8_t*>(&head.received);
      size_t n = state.stream->readSome(at + head.headerMoved, sizeof(FrameHeader) - head.headerMoved);
      head.headerMoved += n;
      moved |= n > 0;
      if (head.headerMoved < sizeof(FrameHeader)) return moved;
      checkHeader(peer, head.received, head.header, op);
    }
    while (head.moved < head.bytes) {
      size_t n = state.stream->readSome(head.data + head.moved, head.bytes - head.moved);
      if (n == 0) return moved;
      head.moved += n;
      moved = true;
    }
    state.recvs.pop_front();
    ++state.recvsDone;
  }
  return moved;
}

bool Transport::progressNetworkSends(int peer, Peer& state, const Operation& op) {
  bool moved = false;
  while (!state.sends.empty() && state.sends.front().completion->isDone()) {
    const std::string& failure = state.sends.front().completion->failure;
    if (!failure.empty()) raisePeerFailure<TransportError>(op, peer, failure);
    state.sends.pop_front();
    ++state.sendsDone;
    moved = true;
  }
  return moved;
}

bool Transport::progressNetworkRecvs(int peer, Peer& state, const Operation& op) {
  bool moved = false;
  while (!state.recvs.empty()) {
    Pending& head = state.recvs.front();
    const uint64_t sequence = state.recvsDone + 1;
    if (!head.completion) {
      const FrameHeader* incoming = state.network->arrived(peer, sequence);
      if (incoming == nullptr) return moved;
      checkHeader(peer, *incoming, head.header, op);
      head.completion = std::make_shared<MessageNetwork::Completion>();
      state.network->receive(peer, sequence, head.data, head.memory, head.completion);
      moved = true;
    }
    if (!head.completion->isDone()) return moved;
    if (!head.completion->failure.empty()) {
      raisePeerFailure<TransportError>(op, peer, head.completion->failure);
    }
    head.moved = head.bytes;
    state.recvs.pop_front();
    ++state.recvsDone;
    moved = true;
  }
  return moved;
}

bool Transport::progressAll(const Operation& op) {
  bool moved = false;
  for (const auto& network : networks_) moved |= network->progress();
  for (size_t i = 0; i < active_.size();) {
    int peer = active_[i];
    Peer& state = peers_[peer];
    if (state.network != nullptr) {
      moved |= progressNetworkSends(peer, state, op);
      moved |= progressNetworkRecvs(peer, state, op);
    } else {
      if (!state.stream) ensureLink(peer, state, op);
      moved |= progressSends(peer, state);
      moved |= progressRecvs(peer, state, op);
    }
    if (state.sends.empty() && state.recvs.empty()) {
      active_[i] = active_.back();
      active_.pop_back();
      continue;
    }
    // Only a peer this rank still waits for fails the operation: one that delivered everything
    // and then exited did its part (the others complete this collective too).
    const std::string failure = failureOf(peer);
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
      const Pending& head = queue.front();
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
  auto slice = std::min({op.remaining(), kHealthCheckInterval, longest});
  std::vector<pollfd> fds;
  bool sharedMemoryPending = false;
  bool networkPending = false;
  for (int peer : active_) {
    const Peer& state = peers_[peer];
    if (state.network != nullptr) {
      networkPending = true;
      continue;
    }
    int fd = state.stream->pollFd();
    if (fd < 0) {
      sharedMemoryPending = true;
      continue;
    }
    short events = 0;
    if (!state.recvs.empty()) events |= POLLIN;
    if (!state.sends.empty()) events |= POLLOUT;
    fds.push_back(pollfd{fd, events, 0});
  }
  if (networkPending && !pollNetworks(fds)) return;  // events are waiting: no sleep
  if (!fds.empty()) {
    if (sharedMemoryPending) slice = std::min(slice, kMixedPollSlice);
    ::poll(fds.data(), fds.size(), static_cast<int>(slice.count()));
  } else if (sharedMemoryPending && segments_ != nullptr) {
    segments_->sleepOnDoorbell(doorbellSeen, std::chrono::duration_cast<std::chrono::microseconds>(slice));
  } else {
    sched_yield();
  }
}

bool Transport::pollNetworks(std::vector<pollfd>& fds) {
  for (const auto& network : networks_) {
    if (!network->readyToSleep()) return false;
    const int fd = network->eventFd();
    if (fd >= 0) fds.push_back(pollfd{fd, POLLIN, 0});
  }
  return true;
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

const FrameHeader* Transport::nextIncoming(int peer, Peer& state, const Operation& op,
                                           bool* moved) {
  if (state.network != nullptr) {
    const FrameHeader* next = state.network->arrived(peer, state.recvsPosted + 1);
    if (next != nullptr && next->magic != kFrameMagic) {
      raisePeerFailure<TransportError>(op, peer, "corrupt frame from rank " + std::to_string(peer));
    }
    return next;
  }
  *moved |= peekHeader(peer, state, op);
  return state.peekedBytes == sizeof(FrameHeader) ? &state.peeked : nullptr;
}

// Reads ahead the header of the peer's next frame, if any bytes of it have arrived.
bool Transport::peekHeader(int peer, Peer& state, const Operation& op) {
  bool moved = false;
  if (state.peekedBytes < sizeof(FrameHeader)) {
    uint8_t* at = reinterpret_cast<uint8_t*>(&state.peeked);
    size_t n = state.stream->readSome(at + state.peekedBytes, sizeof(FrameHeader) - state.peekedBytes);
    state.peekedBytes += n;
    moved = n > 0;
  }
  if (state.peekedBytes == sizeof(FrameHeader) && state.peeked.magic != kFrameMagic) {
    raisePeerFailure<TransportError>(op, peer, "corrupt frame from rank " + std::to_string(peer));
  }
  return moved;
}

int Transport::waitForAnySender(const MessageTag& tag, const Operation& op) {
  SpinBudget spin = waitPolicy_.budget();
  while (true) {
    uint32_t doorbell = segments_ != nullptr ? segments_->doorbellSnapshot() : 0;
    bool moved = progressAll(op);  // sends this rank posted earlier may be what the sender awaits
    adoptArrived();                // a sender without a link to this rank dials it
    for (size_t peer = 0; peer < peers_.size(); ++peer) {
      Peer& state = peers_[peer];
      if ((!state.stream && state.network == nullptr) || !state.recvs.empty()) continue;
      const FrameHeader* next = nextIncoming(static_cast<int>(peer), state, op, &moved);
      if (next != nullptr && next->tag == tag.id) return static_cast<int>(peer);
      const std::string failure = failureOf(static_cast<int>(peer));
      if (!failure.empty()) raisePeerFailure<TransportError>(op, static_cast<int>(peer), failure);
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

void Transport::blockForAnyIncoming(uint32_t doorbellSeen, const Operation& op) {
  auto slice = std::min(op.remaining(), kHealthCheckInterval);
  std::vector<pollfd> fds;
  bool sharedMemoryPeers = false;
  if (!pollNetworks(fds)) return;  // events are waiting: no sleep
  if (dialer_) fds.push_back(pollfd{dialer_->arrivalFd(), POLLIN, 0});
  for (const Peer& state : peers_) {
    if (!state.stream) continue;
    int fd = state.stream->pollFd();
    if (fd < 0) {
      sharedMemoryPeers = true;
    } else {
      fds.push_back(pollfd{fd, POLLIN, 0});
    }
  }
  if (!fds.empty()) {
    if (sharedMemoryPeers) slice = std::min(slice, kMixedPollSlice);
    ::poll(fds.data(), fds.size(), static_cast<int>(slice.count()));
  } else if (sharedMemoryPeers && segments_ != nullptr) {
    segments_->sleepOnDoorbell(doorbellSeen,
                               std::chrono::duration_cast<std::chrono::microseconds>(slice));
  } else {
    sched_yield();
  }
}

std::string Transport::unreadMessageFrom(int peer) {
  adoptArrived();  // a message nothing received may have come over a link the sender made
  Peer& state = peers_[peer];
  if (!state.recvs.empty()) return {};
  if (state.network != nullptr) {
    try {
      state.network->progress();
      const FrameHeader* next = state.network->arrived(peer, state.recvsPosted + 1);
      if (next == nullptr || next->magic != kFrameMagic) return {};
      return describeTag(next->tag) + " (" + describeSignature(next->signature, next->variant) +
             ", " + std::to_string(next->bytes) + " bytes)";
    } catch (const std::exception&) {
      return {};
    }
  }
  if (!state.stream) return {};
  try {
    if (state.peekedBytes < sizeof(FrameHeader)) {
      uint8_t* at = reinterpret_cast<uint8_t*>(&state.peeked);
      state.peekedBytes +=
          state.stream->readSome(at + state.peekedBytes, sizeof(FrameHeader) - state.peekedBytes);
    }
  } catch (const std::exception&) {
    return {};  // the peer is gone: nothing to read, and shutting down is no time to raise
  }
  if (state.peekedBytes < sizeof(FrameHeader) || state.peeked.magic != kFrameMagic) return {};
  return describeTag(state.peeked.tag) + " (" +
         describeSignature(state.peeked.signature, state.peeked.variant) + ", " +
         std::to_string(state.peeked.bytes) + " bytes)";
}

}  // namespace ringcomm::transport
