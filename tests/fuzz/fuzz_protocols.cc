// Structure-aware fuzzing (libFuzzer, with ASan and UBSan) of what a stranger or a peer can make
// ringcomm parse:
//   - the store server, through real connections: raw bytes where the handshake belongs, and
//     after a valid handshake, requests built from the input (opcodes, keys, values, counts and
//     timeouts, with length prefixes that may lie) or raw frames;
//   - the handshake's check of a reply (src/auth), on mutated valid replies and on raw bytes;
//   - the tensor queue's cycle messages (src/queue/negotiation.h), which peers exchange;
//   - the shared-memory plan that the lowest local rank publishes (src/transport/shm).
// What must hold: no crash, leak or undefined behaviour (the sanitizers); the server keeps
// answering its own clients (checked every 128 inputs); no reply without the secret is ever
// admitted; decoders fail only with ringcomm's own errors.
//
// tests/test_fuzz.py builds and runs it for a fixed budget; run it longer by hand with
//   RINGCOMM_FUZZ_SECONDS=3600 pytest tests/test_fuzz.py
#include <fuzzer/FuzzedDataProvider.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "auth/handshake.h"
#include "bootstrap/store_protocol.h"
#include "common/socket.h"
#include "queue/negotiation.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"
#include "transport/shm/segment.h"

using namespace ringcomm;

namespace {

const std::string kSecret = "the fuzzed job's secret";
constexpr auto kReplyWait = std::chrono::milliseconds(20);

TcpStoreServer& server() {
  static TcpStoreServer instance("127.0.0.1", 0, kSecret);
  return instance;
}

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what);
  std::abort();
}

net::UniqueFd connectToServer() {
  return net::connectTcp("127.0.0.1", server().port(), net::deadlineAfter(std::chrono::seconds(5)));
}

// Reads whatever the server sends within a moment (replies, or the close), and drops it.
void drain(int fd) {
  uint8_t buffer[4096];
  const auto deadline = Clock::now() + kReplyWait;
  while (Clock::now() < deadline) {
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, 5) <= 0) continue;
    try {
      if (net::readSome(fd, buffer, sizeof(buffer)) == 0) continue;
    } catch (const Error&) {
      return;  // closed by the server: allowed
    }
  }
}

void sendQuietly(int fd, const std::vector<uint8_t>& bytes) {
  try {
    net::writeFully(fd, bytes.data(), bytes.size(), net::deadlineAfter(std::chrono::seconds(1)));
  } catch (const Error&) {
    // The server may have closed the connection already: that is a defence, not a finding.
  }
}

// A stranger: raw bytes where the handshake reply belongs.
void strangerBytes(FuzzedDataProvider& input) {
  net::UniqueFd fd = connectToServer();
  sendQuietly(fd.get(), input.ConsumeRemainingBytes<uint8_t>());
  drain(fd.get());
}

// A client that knows the secret: a valid handshake, then requests made from the input.
void afterHandshake(FuzzedDataProvider& input) {
  net::UniqueFd fd = connectToServer();
  auth::connectHandshake(fd.get(), kSecret, auth::Purpose::Store, auth::Caller{},
                         net::deadlineAfter(std::chrono::seconds(5)), "the fuzzed store");
  std::vector<uint8_t> stream;
  while (input.remaining_bytes() > 0 && stream.size() < (1 << 20)) {
    if (input.ConsumeBool()) {  // a raw frame: any length prefix, any body
      const uint32_t length = input.ConsumeIntegral<uint32_t>();
      const std::vector<uint8_t> body = input.ConsumeBytes<uint8_t>(input.ConsumeIntegralInRange<size_t>(0, 4096));
      for (int i = 0; i < 4; ++i) stream.push_back(uint8_t(length >> (8 * i)));
      stream.insert(stream.end(), body.begin(), body.end());
      continue;
    }
    const auto op = static_cast<storeproto::Op>(input.ConsumeIntegralInRange<uint8_t>(0, 5));
    storeproto::Encoder request(op);
    const std::string key = input.ConsumeRandomLengthString(64);
    switch (op) {
      case storeproto::Op::Set:
        request.str(key).str(input.ConsumeRandomLengthString(256));
        break;
      case storeproto::Op::Get:
        request.str(key).i64(input.ConsumeIntegralInRange<int64_t>(-5, 50));
        break;
      case storeproto::Op::Add:
        request.str(key).i64(input.ConsumeIntegral<int64_t>());
        break;
      case storeproto::Op::Check: {
        const uint32_t claimed = input.ConsumeIntegral<uint32_t>();  // may lie about the keys
        request.u32(claimed);
        const int present = input.ConsumeIntegralInRange<int>(0, 8);
        for (int i = 0; i < present; ++i) request.str(input.ConsumeRandomLengthString(32));
        break;
      }
      default:
        request.str(key);
        break;
    }
    const Bytes frame = request.finish();
    stream.insert(stream.end(), frame.begin(), frame.end());
  }
  sendQuietly(fd.get(), stream);
  drain(fd.get());
}

// A handshake reply, valid but for the mutations, or raw: never admitted without the secret.
void handshakeReplies(FuzzedDataProvider& input) {
  const auto purpose = input.ConsumeBool() ? auth::Purpose::Data : auth::Purpose::Store;
  auth::Acceptor acceptor(kSecret, purpose);
  std::array<uint8_t, auth::kReplyBytes> reply{};
  const std::vector<uint8_t> bytes = input.ConsumeBytes<uint8_t>(auth::kReplyBytes);
  std::memcpy(reply.data(), bytes.data(), bytes.size());
  if (acceptor.check(reply.data())) finding("a reply not made with the secret was admitted");
}

void cycleMessages(FuzzedDataProvider& input) {
  const std::vector<uint8_t> bytes = input.ConsumeRemainingBytes<uint8_t>();
  try {
    const queue::CycleMessage message = queue::decode(bytes.data(), bytes.size());
    // What decodes must encode and decode to the same.
    const std::vector<uint8_t> again = queue::encode(message);
    const queue::CycleMessage back = queue::decode(again.data(), again.size());
    if (back.announcements.size() != message.announcements.size()) finding("cycle round trip");
  } catch (const Error&) {
    // A malformed message is refused: that is its job.
  }
}

void segmentPlans(FuzzedDataProvider& input) {
  try {
    shm::SegmentPlan::decode(input.ConsumeRemainingBytesAsString());
  } catch (const Error&) {
  }
}

// The server still answers a client with the secret, at once.
void checkServerServes() {
  TcpStore client("127.0.0.1", server().port(), std::chrono::seconds(5), kSecret);
  client.set("health", Bytes{1});
  if (client.get("health", std::chrono::seconds(1)) != Bytes{1}) finding("the store stopped serving");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static uint64_t runs = 0;
  FuzzedDataProvider input(data, size);
  switch (input.ConsumeIntegralInRange<int>(0, 4)) {
    case 0: strangerBytes(input); break;
    case 1: afterHandshake(input); break;
    case 2: handshakeReplies(input); break;
    case 3: cycleMessages(input); break;
    default: segmentPlans(input); break;
  }
  if (++runs % 128 == 0) checkServerServes();
  return 0;
}
