// The two kinds of PeerLink (transport/peer_link.h) on stand-ins for their carriers: a stream
// link frames messages through a stream that takes a few bytes at a time and delivers them in
// order, whole, and a receive meeting a frame it did not expect names the sender; a network link
// numbers its frames from 1, in the order queued, and checks each header as it arrives.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "check.h"
#include "common/deadline.h"
#include "ringcomm/errors.h"
#include "transport/peer_link.h"

using namespace ringcomm;
using namespace ringcomm::transport;

namespace {

// One direction of a stream in memory: what one end writes, the other reads.
struct Pipe {
  std::deque<uint8_t> bytes;
};

// A stream that moves at most `chunk` bytes a call, as a full socket or ring would.
class ChunkedStream final : public ByteStream {
 public:
  ChunkedStream(Pipe& out, Pipe& in, size_t chunk) : out_(out), in_(in), chunk_(chunk) {}
  const char* kind() const override { return "test"; }
  size_t writeSome(const void* data, size_t bytes) override {
    const size_t n = std::min(bytes, chunk_);
    const auto* from = static_cast<const uint8_t*>(data);
    out_.bytes.insert(out_.bytes.end(), from, from + n);
    return n;
  }
  size_t readSome(void* data, size_t bytes) override {
    const size_t n = std::min({bytes, chunk_, in_.bytes.size()});
    std::copy_n(in_.bytes.begin(), n, static_cast<uint8_t*>(data));
    in_.bytes.erase(in_.bytes.begin(), in_.bytes.begin() + static_cast<std::ptrdiff_t>(n));
    return n;
  }
  std::string failure() const override { return {}; }
  void close() override {}

 private:
  Pipe& out_;
  Pipe& in_;
  size_t chunk_;
};

Operation operation() {
  OperationLabel label;
  label.collective = "test";
  return Operation(label, 0, std::chrono::milliseconds(10000));
}

Message message(std::vector<uint8_t>& buffer, uint32_t tag) {
  Message m;
  m.data = buffer.data();
  m.bytes = buffer.size();
  m.header = FrameHeader{kFrameMagic, tag, 0, 0, buffer.size()};
  return m;
}

// Progresses both ends until both queues are empty (a bounded number of rounds).
void deliver(PeerLink& sender, std::deque<Message>& sends, PeerLink& receiver,
             std::deque<Message>& receives) {
  const Operation op = operation();
  for (int round = 0; round < 100000 && !(sends.empty() && receives.empty()); ++round) {
    sender.progressSends(sends, op);
    receiver.progressReceives(receives, op);
  }
  CHECK(sends.empty());
  CHECK(receives.empty());
}

}  // namespace

TEST(streamLinksDeliverFramesWholeAndInOrderThroughAStreamThatMovesAFewBytesAtATime) {
  Pipe forward, backward;
  auto sender = streamLink(1, std::make_unique<ChunkedStream>(forward, backward, 7));
  auto receiver = streamLink(0, std::make_unique<ChunkedStream>(backward, forward, 7));
  // Empty, small (one write with its header) and large (header, then payload).
  std::vector<std::vector<uint8_t>> sent = {{}, std::vector<uint8_t>(100), {}};
  sent[2].resize(20000);
  for (auto& buffer : sent) {
    for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<uint8_t>(i * 31 + 7);
  }
  std::vector<std::vector<uint8_t>> received = {{}, std::vector<uint8_t>(100),
                                                std::vector<uint8_t>(20000)};
  std::deque<Message> sends, receives;
  for (size_t i = 0; i < sent.size(); ++i) {
    sends.push_back(message(sent[i], 40 + static_cast<uint32_t>(i)));
    sender->sendQueued(sends);
    receives.push_back(message(received[i], 40 + static_cast<uint32_t>(i)));
  }
  deliver(*sender, sends, *receiver, receives);
  for (size_t i = 0; i < sent.size(); ++i) CHECK(received[i] == sent[i]);
}

TEST(aStreamLinkShowsTheNextFrameAheadAndTheNextReceiveStartsFromIt) {
  Pipe forward, backward;
  auto sender = streamLink(1, std::make_unique<ChunkedStream>(forward, backward, 5));
  auto receiver = streamLink(0, std::make_unique<ChunkedStream>(backward, forward, 5));
  std::vector<uint8_t> sent(300, 9), received(300, 0);
  std::deque<Message> sends, receives;
  sends.push_back(message(sent, 77));
  sender->sendQueued(sends);
  const FrameHeader* next = nullptr;
  for (int round = 0; round < 1000 && next == nullptr; ++round) {
    sender->progressSends(sends, operation());
    bool moved = false;
    next = receiver->nextIncoming(&moved);
  }
  CHECK(next != nullptr);
  CHECK_EQ(next->tag, 77u);
  CHECK_EQ(next->bytes, 300u);
  receives.push_back(message(received, 77));
  deliver(*sender, sends, *receiver, receives);
  CHECK(received == sent);
}

TEST(aStreamLinkNamesTheRankWhoseFrameIsNotTheOneExpected) {
  Pipe forward, backward;
  auto sender = streamLink(0, std::make_unique<ChunkedStream>(forward, backward, 64));
  auto receiver = streamLink(3, std::make_unique<ChunkedStream>(backward, forward, 64));
  std::vector<uint8_t> sent(16), expected(32);
  std::deque<Message> sends, receives;
  sends.push_back(message(sent, 5));
  sender->sendQueued(sends);
  receives.push_back(message(expected, 5));
  try {
    receiver->progressReceives(receives, operation());
    CHECK(false);
  } catch (const MismatchError& error) {
    CHECK(testing::contains(error.what(), "rank 3 sent"));
    CHECK(testing::contains(error.what(), "16 bytes"));
  }
}

namespace {

// A network whose frames arrive when the test says, and whose sends are recorded.
class RecordingNetwork final : public MessageNetwork {
 public:
  struct Sent {
    int peer;
    uint64_t sequence;
    uint32_t tag;
  };
  std::vector<Sent> sent;
  std::map<uint64_t, FrameHeader> arrivedFrames;  // from peer 2, by sequence
  std::vector<uint64_t> asked;                     // sequences receive() was asked for

  const char* kind() const override { return "recording"; }
  bool reaches(int peer) const override { return peer == 2; }
  bool takesDeviceMemory() const override { return false; }
  void send(int peer, uint64_t sequence, const FrameHeader& header, const void*, Memory,
            std::shared_ptr<Completion> completion) override {
    sent.push_back({peer, sequence, header.tag});
    completion->done.store(true, std::memory_order_release);
  }
  const FrameHeader* arrived(int /*peer*/, uint64_t sequence) override {
    auto found = arrivedFrames.find(sequence);
    return found == arrivedFrames.end() ? nullptr : &found->second;
  }
  void receive(int /*peer*/, uint64_t sequence, void*, Memory,
               std::shared_ptr<Completion> completion) override {
    asked.push_back(sequence);
    completion->done.store(true, std::memory_order_release);
  }
  void registerMemory(void*, size_t) override {}
  void forgetMemory(void*) override {}
  bool progress() override { return false; }
  int eventFd() const override { return -1; }
  bool readyToSleep() override { return true; }
  std::string failure(int) const override { return {}; }
  void close() override {}
};

}  // namespace

TEST(aNetworkLinkNumbersItsFramesInOrderAndChecksEachAsItArrives) {
  RecordingNetwork network;
  auto link = networkLink(network, 2);
  std::vector<uint8_t> a(8), b(8), c(8);
  std::deque<Message> sends, receives;
  sends.push_back(message(a, 1));
  link->sendQueued(sends);
  sends.push_back(message(b, 2));
  sends.push_back(message(c, 3));  // queued together: both start at the next progress
  link->progressSends(sends, operation());
  CHECK(sends.empty());
  CHECK_EQ(network.sent.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    CHECK_EQ(network.sent[i].sequence, i + 1);
    CHECK_EQ(network.sent[i].tag, static_cast<uint32_t>(i + 1));
  }

  receives.push_back(message(a, 10));
  receives.push_back(message(b, 11));
  CHECK(!link->progressReceives(receives, operation()));  // nothing arrived yet
  network.arrivedFrames[1] = FrameHeader{kFrameMagic, 10, 0, 0, 8};
  network.arrivedFrames[2] = FrameHeader{kFrameMagic, 12, 0, 0, 8};  // not the one expected
  try {
    link->progressReceives(receives, operation());
    CHECK(false);
  } catch (const MismatchError& error) {
    CHECK(testing::contains(error.what(), "rank 2 sent"));
  }
  CHECK(network.asked == std::vector<uint64_t>{1});
  CHECK_EQ(receives.size(), 1u);
}
