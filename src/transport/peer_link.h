// One peer's link, whatever carries it: the one interface Transport progresses, in the spirit of
// gloo's transport::Pair. Transport keeps each peer's queues of messages, their order and the
// waiting; a link moves the messages at the head of those queues and says what to sleep on.
//
// Two implementations cover every kind of link (link_kind.h):
//   - streamLink: a byte stream (TCP socket, shared-memory rings, byte_stream.h), which the link
//     frames itself: header, then payload, read back and checked in order;
//   - networkLink: one peer of a message network (UCX, message_network.h), which moves whole
//     frames; the link numbers them and checks each header as it arrives.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "common/deadline.h"
#include "transport/byte_stream.h"
#include "transport/frame.h"
#include "transport/message_network.h"

namespace ringcomm::transport {

// One send or receive, queued per peer and direction; complete once popped from its queue.
struct Message {
  uint8_t* data = nullptr;
  size_t bytes = 0;
  size_t moved = 0;
  Memory memory = Memory::Host;
  FrameHeader header{};  // sends: what goes out; receives: what is expected

  // What a stream link keeps of its progress on the message.
  FrameHeader received{};           // receives: the header as it arrives
  size_t headerMoved = 0;
  std::vector<uint8_t> smallFrame;  // header + payload of a small send, written in one go
  // What a network link keeps: the network's progress on it (receives: once started).
  std::shared_ptr<MessageNetwork::Completion> completion;
};

// What a rank with nothing to move sleeps on, gathered from the links it waits for.
struct SleepSet {
  std::vector<pollfd> fds;
  bool doorbell = false;  // a shared-memory stream: the host's doorbell (shm/segment.h)
  std::vector<const MessageNetwork*> armed;  // networks already asked (one event fd each)
};

class PeerLink {
 public:
  virtual ~PeerLink() = default;
  virtual const char* kind() const = 0;  // "tcp", "shm", "ucx"
  // Whether messages may be in CUDA device memory (message_network.h: takesDeviceMemory).
  virtual bool takesDeviceMemory() const { return false; }

  // A send was queued at the back of `sends`: start it where the link can without waiting (the
  // peer may already wait for it). Raises nothing: a failure shows in the next progress.
  virtual void sendQueued(std::deque<Message>& sends) = 0;
  // Move the queued messages in order and pop those complete; true when anything moved. Raise
  // the operation's error naming the peer where a frame is not the one expected (frame_check.h)
  // or the link failed a message.
  virtual bool progressSends(std::deque<Message>& sends, const Operation& op) = 0;
  virtual bool progressReceives(std::deque<Message>& receives, const Operation& op) = 0;
  // The header of the next frame no receive has taken, once it has arrived (null before); only
  // while no receive is queued. The magic is not checked here.
  virtual const FrameHeader* nextIncoming(bool* moved) = 0;
  // Adds what to wait on: input while `receiving`, room for output while `sending`. False when
  // events are already waiting, so that the caller progresses again rather than sleeps.
  virtual bool addToSleep(SleepSet& sleep, bool receiving, bool sending) = 0;

  // Empty while the peer is healthy; else why it is not, naming the rank.
  virtual std::string failure() const = 0;
  // Tells the peer this rank is going away: from any thread.
  virtual void close() = 0;
  // A sealed link sends unsealed from now on (byte_stream.h).
  virtual void stopSealing() {}
};

std::unique_ptr<PeerLink> streamLink(int peer, std::unique_ptr<ByteStream> stream);
// `network` reaches `peer` and outlives the link; it is closed as a whole by its owner.
std::unique_ptr<PeerLink> networkLink(MessageNetwork& network, int peer);

}  // namespace ringcomm::transport
