// Sealed TCP links (src/transport/tcp/sealed_stream.h) over an in-memory pipe that takes a few
// KiB at a time, so that records are written and read in pieces: bytes arrive exactly, in both
// modes; encryption hides them; and a byte flipped, a record replayed, dropped or reordered, or
// a peer in the other mode ends the link with a failure naming the peer. The keys come from a
// real handshake over a socket pair, each side's send key the other's receive key.
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "auth/handshake.h"
#include "check.h"
#include "ringcomm/errors.h"
#include "transport/byte_stream.h"
#include "transport/tcp/sealed_stream.h"

using namespace ringcomm;
using namespace ringcomm::transport;

namespace {

// One direction of bytes, as a socket's buffer: at most `capacity` bytes in flight.
struct Wire {
  std::deque<uint8_t> bytes;
  size_t capacity = 5000;
};

// An end of two wires, as a non-blocking socket would behave.
class PipeEnd : public ByteStream {
 public:
  PipeEnd(Wire& out, Wire& in) : out_(out), in_(in) {}
  const char* kind() const override { return "tcp"; }
  size_t writeSome(const void* data, size_t bytes) override {
    const size_t n = std::min(bytes, out_.capacity - std::min(out_.capacity, out_.bytes.size()));
    const auto* from = static_cast<const uint8_t*>(data);
    out_.bytes.insert(out_.bytes.end(), from, from + n);
    return n;
  }
  size_t readSome(void* data, size_t bytes) override {
    const size_t n = std::min(bytes, in_.bytes.size());
    std::copy_n(in_.bytes.begin(), n, static_cast<uint8_t*>(data));
    in_.bytes.erase(in_.bytes.begin(), in_.bytes.begin() + static_cast<std::ptrdiff_t>(n));
    return n;
  }
  std::string failure() const override { return ""; }
  void close() override {}

 private:
  Wire& out_;
  Wire& in_;
};

// Both sides' keys from one handshake over a socket pair: {caller's, listener's}.
std::pair<auth::LinkKeys, auth::LinkKeys> handshakeKeys() {
  int fds[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  net::UniqueFd listener(fds[0]), caller(fds[1]);
  auth::LinkKeys listenerKeys;
  std::thread accept([&] {
    auth::Acceptor acceptor("s3cret", auth::Purpose::Data);
    const auto deadline = net::deadlineAfter(std::chrono::seconds(5));
    net::writeFully(listener.get(), acceptor.hello().data(), auth::kHelloBytes, deadline);
    std::vector<uint8_t> reply(auth::kReplyBytes);
    net::readFully(listener.get(), reply.data(), reply.size(), deadline);
    const auto accepted = acceptor.check(reply.data());
    CHECK(accepted.has_value());
    net::writeFully(listener.get(), accepted->second.data(), accepted->second.size(), deadline);
    listenerKeys = acceptor.keys(reply.data());
  });
  const auth::LinkKeys callerKeys =
      auth::connectHandshake(caller.get(), "s3cret", auth::Purpose::Data, auth::Caller{1, 0},
                             net::deadlineAfter(std::chrono::seconds(5)), "rank 0");
  accept.join();
  return {callerKeys, listenerKeys};
}

// Rank 1 (the caller) and rank 0 (the listener), sealed, over two wires.
struct Link {
  Wire toListener, toCaller;
  std::unique_ptr<ByteStream> caller, listener;
  explicit Link(WireProtection callerMode, WireProtection listenerMode = WireProtection::Auto) {
    if (listenerMode == WireProtection::Auto) listenerMode = callerMode;
    const auto [callerKeys, listenerKeys] = handshakeKeys();
    caller = sealStream(std::make_unique<PipeEnd>(toListener, toCaller), 0, callerMode, callerKeys);
    listener =
        sealStream(std::make_unique<PipeEnd>(toCaller, toListener), 1, listenerMode, listenerKeys);
  }
};

std::vector<uint8_t> pattern(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 9));
  return data;
}

// Moves `data` from one end to the other, writes and reads interleaved; what arrived.
std::vector<uint8_t> send(ByteStream& from, ByteStream& to, const std::vector<uint8_t>& data,
                          size_t readPiece = 3000) {
  std::vector<uint8_t> got(data.size());
  size_t written = 0, read = 0;
  for (int round = 0; round < 100000 && read < data.size(); ++round) {
    written += from.writeSome(data.data() + written, data.size() - written);
    const size_t n = to.readSome(got.data() + read, std::min(readPiece, data.size() - read));
    if (n == 0 && !to.failure().empty()) break;
    read += n;
  }
  got.resize(read);
  return got;
}

using ::ringcomm::testing::contains;

}  // namespace

TEST(sealedLinksDeliverEveryByteInBothModesAndDirections) {
  if (!wireProtectionBuilt()) return;  // a build without OpenSSL: test_cpp_units says so
  for (WireProtection mode : {WireProtection::Integrity, WireProtection::Encrypt}) {
    Link link(mode);
    for (size_t bytes : {size_t{1}, size_t{24}, size_t{65536}, size_t{65537}, size_t{300007}}) {
      const auto data = pattern(bytes, static_cast<uint8_t>(bytes));
      CHECK(send(*link.caller, *link.listener, data) == data);
      CHECK(send(*link.listener, *link.caller, data, 24) == data);
    }
    CHECK_EQ(link.caller->failure(), std::string());
    CHECK_EQ(link.listener->failure(), std::string());
  }
}

TEST(encryptedRecordsHideTheBytesIntegrityOnlyAuthenticatesThem) {
  if (!wireProtectionBuilt()) return;
  const std::vector<uint8_t> secretText(4000, 'z');
  for (WireProtection mode : {WireProtection::Integrity, WireProtection::Encrypt}) {
    Link link(mode);
    CHECK_EQ(link.caller->writeSome(secretText.data(), secretText.size()), secretText.size());
    // The payload's place in the record (the length before it and the tag after it are random
    // bytes that may be 'z' too).
    const auto payload = link.toListener.bytes.begin() + 4;
    const size_t plainRun =
        static_cast<size_t>(std::count(payload, payload + secretText.size(), 'z'));
    CHECK(mode == WireProtection::Encrypt ? plainRun < 100 : plainRun == secretText.size());
  }
}

TEST(aFlippedByteEndsTheLinkNamingThePeer) {
  if (!wireProtectionBuilt()) return;
  for (WireProtection mode : {WireProtection::Integrity, WireProtection::Encrypt}) {
    // In the length (0, 2: a longer record, one past the limit), the payload, the tag.
    for (size_t at : {size_t{0}, size_t{2}, size_t{4}, size_t{1000}, size_t{4000 + 19}}) {
      Link link(mode);
      link.toListener.capacity = 1 << 20;
      const auto data = pattern(4000, 1);
      CHECK_EQ(link.caller->writeSome(data.data(), data.size()), data.size());
      link.toListener.bytes[at] ^= 0x10;
      // More behind it, so that a record made longer is whole too: nothing of either arrives.
      CHECK_EQ(link.caller->writeSome(data.data(), data.size()), data.size());
      std::vector<uint8_t> got(2 * data.size());
      CHECK_EQ(link.listener->readSome(got.data(), got.size()), size_t{0});
      CHECK(contains(link.listener->failure(), "rank 1"));
      CHECK(contains(link.listener->failure(), "authentication check"));
      CHECK_EQ(link.listener->readSome(got.data(), got.size()), size_t{0});
    }
  }
}

TEST(replayedDroppedAndReorderedRecordsFail) {
  if (!wireProtectionBuilt()) return;
  const auto first = pattern(100, 1), second = pattern(100, 2);
  const size_t record = 4 + 100 + 16;
  for (int attack = 0; attack < 3; ++attack) {
    Link link(WireProtection::Integrity);
    CHECK_EQ(link.caller->writeSome(first.data(), first.size()), first.size());
    CHECK_EQ(link.caller->writeSome(second.data(), second.size()), second.size());
    std::deque<uint8_t>& wire = link.toListener.bytes;
    CHECK_EQ(wire.size(), 2 * record);
    std::deque<uint8_t> one(wire.begin(), wire.begin() + record), two(wire.begin() + record, wire.end());
    wire.clear();
    if (attack == 0) {  // the first record twice
      wire.insert(wire.end(), one.begin(), one.end());
      wire.insert(wire.end(), one.begin(), one.end());
    } else if (attack == 1) {  // the first record dropped
      wire.insert(wire.end(), two.begin(), two.end());
    } else {  // the two swapped
      wire.insert(wire.end(), two.begin(), two.end());
      wire.insert(wire.end(), one.begin(), one.end());
    }
    std::vector<uint8_t> got(200);
    const size_t n = link.listener->readSome(got.data(), got.size());
    CHECK(n == (attack == 0 ? size_t{100} : size_t{0}));
    CHECK(contains(link.listener->failure(), "authentication check"));
  }
}

TEST(peersInDifferentModesFailAtTheFirstRecord) {
  if (!wireProtectionBuilt()) return;
  Link link(WireProtection::Integrity, WireProtection::Encrypt);
  const auto data = pattern(64, 3);
  CHECK_EQ(link.caller->writeSome(data.data(), data.size()), data.size());
  std::vector<uint8_t> got(64);
  CHECK_EQ(link.listener->readSome(got.data(), got.size()), size_t{0});
  CHECK(contains(link.listener->failure(), "RINGCOMM_WIRE_PROTECTION differ"));
}

TEST(keysDifferPerLinkAndDirection) {
  const auto [callerA, listenerA] = handshakeKeys();
  const auto [callerB, listenerB] = handshakeKeys();
  CHECK(callerA.send == listenerA.receive);
  CHECK(callerA.receive == listenerA.send);
  CHECK(callerA.send != callerA.receive);
  CHECK(callerA.send != callerB.send);  // fresh nonces, fresh keys
}

TEST(stopSealingSendsTheRestAsItIsAfterAnAuthenticatedLastRecord) {
  if (!wireProtectionBuilt()) return;
  Link link(WireProtection::Integrity);
  const auto sealed = pattern(100000, 4);
  CHECK(send(*link.caller, *link.listener, sealed) == sealed);
  link.caller->stopSealing();
  // Sealed bytes still in flight go first, then the last record, then the bytes as they are,
  // read ahead with the last record or not.
  const auto plain = pattern(70001, 5);
  CHECK(send(*link.caller, *link.listener, plain, 100) == plain);
  link.caller->writeSome(plain.data(), 4);
  CHECK(std::equal(plain.begin(), plain.begin() + 4, link.toListener.bytes.begin()));
  std::vector<uint8_t> got(4);
  CHECK_EQ(link.listener->readSome(got.data(), got.size()), size_t{4});
  // The other direction stays sealed until its sender stops too.
  CHECK(send(*link.listener, *link.caller, sealed) == sealed);
  CHECK_EQ(link.caller->failure(), std::string());
  CHECK_EQ(link.listener->failure(), std::string());
}

TEST(aForgedLastRecordFails) {
  if (!wireProtectionBuilt()) return;
  Link link(WireProtection::Integrity);
  std::deque<uint8_t>& wire = link.toListener.bytes;
  wire.insert(wire.end(), 4 + 16, 0);  // length 0 and a made-up tag
  const char raw[] = "not sealed";
  wire.insert(wire.end(), raw, raw + sizeof(raw));
  std::vector<uint8_t> got(sizeof(raw));
  CHECK_EQ(link.listener->readSome(got.data(), got.size()), size_t{0});
  CHECK(contains(link.listener->failure(), "authentication check"));
}
