// A peer reached by a byte stream (TCP, shared memory): each message goes out as its frame
// header, then its payload; the receiver reads the header, checks it against what it expects
// (frame_check.h), then reads the payload into the receive's buffer.
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "common/bytes.h"
#include "transport/frame_check.h"
#include "transport/peer_link.h"

namespace ringcomm::transport {
namespace {

// Sends up to this size are copied with their header into one buffer.
constexpr size_t kSmallFrameBytes = 8192;

class StreamLink final : public PeerLink {
 public:
  StreamLink(int peer, std::unique_ptr<ByteStream> stream)
      : peer_(peer), stream_(std::move(stream)) {}

  const char* kind() const override { return stream_->kind(); }

  void sendQueued(std::deque<Message>& sends) override {
    frameIfSmall(sends.back());
    writeQueued(sends);
  }

  bool progressSends(std::deque<Message>& sends, const Operation& /*op*/) override {
    return writeQueued(sends);
  }

  bool progressReceives(std::deque<Message>& receives, const Operation& op) override {
    bool moved = false;
    while (!receives.empty()) {
      Message& head = receives.front();
      if (head.headerMoved == 0 && peekedBytes_ > 0) {
        // waitForAnySender read this frame's header ahead.
        std::memcpy(&head.received, &peeked_, peekedBytes_);
        head.headerMoved = peekedBytes_;
        peekedBytes_ = 0;
      }
      if (head.headerMoved < sizeof(FrameHeader)) {
        moved |= readInto(&head.received, head.headerMoved);
        if (head.headerMoved < sizeof(FrameHeader)) return moved;
        checkFrame(peer_, head.received, head.header, op);
      }
      while (head.moved < head.bytes) {
        const size_t n = stream_->readSome(head.data + head.moved, head.bytes - head.moved);
        if (n == 0) return moved;
        head.moved += n;
        moved = true;
      }
      receives.pop_front();
    }
    return moved;
  }

  const FrameHeader* nextIncoming(bool* moved) override {
    if (peekedBytes_ < sizeof(FrameHeader)) *moved |= readInto(&peeked_, peekedBytes_);
    return peekedBytes_ == sizeof(FrameHeader) ? &peeked_ : nullptr;
  }

  bool addToSleep(SleepSet& sleep, bool receiving, bool sending) override {
    const int fd = stream_->pollFd();
    if (fd < 0) {
      sleep.doorbell = true;  // shared memory: the peer rings the host's doorbell
      return true;
    }
    // Not input while only sending: a frame the peer sent ahead would wake every poll at once.
    const short events = static_cast<short>((receiving ? POLLIN : 0) | (sending ? POLLOUT : 0));
    sleep.fds.push_back(pollfd{fd, events, 0});
    return true;
  }

  std::string failure() const override { return stream_->failure(); }
  void close() override { stream_->close(); }
  void stopSealing() override { stream_->stopSealing(); }

 private:
  // Reads more of a frame header into `header`, of which `have` bytes are there.
  bool readInto(FrameHeader* header, size_t& have) {
    uint8_t* at = reinterpret_cast<uint8_t*>(header);
    const size_t n = stream_->readSome(at + have, sizeof(FrameHeader) - have);
    have += n;
    return n > 0;
  }

  bool writeQueued(std::deque<Message>& sends) {
    bool moved = false;
    while (!sends.empty()) {
      Message& head = sends.front();
      if (!writeFrame(head, moved)) return moved;
      sends.pop_front();
    }
    return moved;
  }

  // A small send goes out with its header in one write (one wake-up of the peer), copied as it
  // is queued; or, queued before its TCP link was made, when it is first written.
  static void frameIfSmall(Message& message) {
    const bool started = message.headerMoved > 0 || !message.smallFrame.empty();
    if (started || message.bytes > kSmallFrameBytes) return;
    message.smallFrame.resize(sizeof(FrameHeader) + message.bytes);
    std::memcpy(message.smallFrame.data(), &message.header, sizeof(FrameHeader));
    copyBytes(message.smallFrame.data() + sizeof(FrameHeader), message.data, message.bytes);
  }

  // Writes what the stream takes of one message; true once all of it is written.
  bool writeFrame(Message& message, bool& moved) {
    frameIfSmall(message);
    if (!message.smallFrame.empty()) {
      const size_t n = stream_->writeSome(message.smallFrame.data() + message.moved,
                                          message.smallFrame.size() - message.moved);
      message.moved += n;
      moved |= n > 0;
      return message.moved == message.smallFrame.size();
    }
    if (message.headerMoved < sizeof(FrameHeader)) {
      const size_t n =
          stream_->writeSome(reinterpret_cast<uint8_t*>(&message.header) + message.headerMoved,
                             sizeof(FrameHeader) - message.headerMoved);
      message.headerMoved += n;
      moved |= n > 0;
      if (message.headerMoved < sizeof(FrameHeader)) return false;
    }
    while (message.moved < message.bytes) {
      const size_t n =
          stream_->writeSome(message.data + message.moved, message.bytes - message.moved);
      if (n == 0) return false;
      message.moved += n;
      moved = true;
    }
    return true;
  }

  int peer_;
  std::unique_ptr<ByteStream> stream_;
  // The head of the next incoming frame, read ahead by nextIncoming; the next receive starts
  // from it.
  FrameHeader peeked_{};
  size_t peekedBytes_ = 0;
};

}  // namespace

std::unique_ptr<PeerLink> streamLink(int peer, std::unique_ptr<ByteStream> stream) {
  return std::make_unique<StreamLink>(peer, std::move(stream));
}

}  // namespace ringcomm::transport
