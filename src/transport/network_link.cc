// A peer reached by a message network (UCX): the network moves whole frames, numbered from 1 per
// peer and direction; this link numbers them, checks each arriving header against the receive
// at the head of the queue (frame_check.h), and pops messages as the network completes them.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "common/failure.h"
#include "ringcomm/errors.h"
#include "transport/frame_check.h"
#include "transport/peer_link.h"

namespace ringcomm::transport {
namespace {

class NetworkLink final : public PeerLink {
 public:
  NetworkLink(MessageNetwork& network, int peer) : network_(network), peer_(peer) {}

  const char* kind() const override { return network_.kind(); }
  bool takesDeviceMemory() const override { return network_.takesDeviceMemory(); }

  void sendQueued(std::deque<Message>& sends) override { startQueued(sends); }

  bool progressSends(std::deque<Message>& sends, const Operation& op) override {
    startQueued(sends);
    bool moved = false;
    while (!sends.empty() && sends.front().completion->isDone()) {
      const std::string& failure = sends.front().completion->failure;
      if (!failure.empty()) raisePeerFailure<TransportError>(op, peer_, failure);
      sends.pop_front();
      moved = true;
    }
    return moved;
  }

  bool progressReceives(std::deque<Message>& receives, const Operation& op) override {
    bool moved = false;
    while (!receives.empty()) {
      Message& head = receives.front();
      const uint64_t sequence = receivesDone_ + 1;
      if (!head.completion) {
        const FrameHeader* incoming = network_.arrived(peer_, sequence);
        if (incoming == nullptr) return moved;
        checkFrame(peer_, *incoming, head.header, op);
        head.completion = std::make_shared<MessageNetwork::Completion>();
        network_.receive(peer_, sequence, head.data, head.memory, head.completion);
        moved = true;
      }
      if (!head.completion->isDone()) return moved;
      if (!head.completion->failure.empty()) {
        raisePeerFailure<TransportError>(op, peer_, head.completion->failure);
      }
      head.moved = head.bytes;
      receives.pop_front();
      ++receivesDone_;
      moved = true;
    }
    return moved;
  }

  const FrameHeader* nextIncoming(bool* /*moved*/) override {
    return network_.arrived(peer_, receivesDone_ + 1);
  }

  bool addToSleep(SleepSet& sleep, bool /*receiving*/, bool /*sending*/) override {
    // One network serves many peers: it is asked once, and has one descriptor for them all.
    for (const MessageNetwork* armed : sleep.armed) {
      if (armed == &network_) return true;
    }
    sleep.armed.push_back(&network_);
    if (!network_.readyToSleep()) return false;
    const int fd = network_.eventFd();
    if (fd >= 0) sleep.fds.push_back(pollfd{fd, POLLIN, 0});
    return true;
  }

  std::string failure() const override { return network_.failure(peer_); }
  // The network is closed once, as a whole, by its owner (Transport::closeLinks).
  void close() override {}

 private:
  // Hands the network the sends it has not seen yet, in order (it queues them at once; the
  // header travels as the message's header).
  void startQueued(std::deque<Message>& sends) {
    // Those not started are the last ones: each starts as it is queued, or at the next progress.
    size_t first = sends.size();
    while (first > 0 && !sends[first - 1].completion) --first;
    for (size_t i = first; i < sends.size(); ++i) {
      Message& send = sends[i];
      send.completion = std::make_shared<MessageNetwork::Completion>();
      network_.send(peer_, ++sendsStarted_, send.header, send.data, send.memory, send.completion);
    }
  }

  MessageNetwork& network_;
  int peer_;
  uint64_t sendsStarted_ = 0;
  uint64_t receivesDone_ = 0;
};

}  // namespace

std::unique_ptr<PeerLink> networkLink(MessageNetwork& network, int peer) {
  return std::make_unique<NetworkLink>(network, peer);
}

}  // namespace ringcomm::transport
