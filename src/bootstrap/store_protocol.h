// What the Store implementations share: the wire format between TcpStore and TcpStoreServer, the
// encoding of add() counters, and the text of a get() timeout.
//
// ---- Wire format ----------------------------------------------------------------------------
//
// A connection starts with the handshake of src/auth/handshake.h (purpose Store): the client
// proves it knows the job's secret, and the server proves it back, before either sends a frame.
// Then every message, in both directions, is one frame:
//
//     u32 length     number of body bytes that follow (at most kMaxFrameBytes)
//     body
//
// Integers are little-endian and fixed-width (u8, u32, i64). A str is a u32 byte count followed by
// that many bytes; keys and values are arbitrary bytes. A request body starts with a u8 opcode, a
// reply body with a u8 status:
//
//     request                                  reply
//     Set   = 1  key:str value:str             Ok
//     Get   = 2  key:str timeoutMs:i64         Ok value:str
//                                              Timeout            (the key did not appear in time)
//     Add   = 3  key:str delta:i64             Ok newValue:i64
//                                              Error message:str  (the value is not a counter)
//     Check = 4  count:u32 key:str * count     Ok present:u8      (1 when every key exists)
//     GetMany = 5 count:u32 key:str * count    Ok count:u32 (found:u8 [value:str]) * count
//                                              (found: Found below; a value only where Here)
//
// Any request may also be answered Error message:str (an unknown opcode, say); the connection
// stays usable. A frame over kMaxFrameBytes, or a body that does not parse, ends the connection.
//
// Replies come in request order. When a Get's key is missing the server parks the request and
// answers it when a Set or Add creates the key, or with Timeout when timeoutMs has passed (a
// negative timeoutMs counts as 0: answer now). While a Get is parked the server processes no
// further request from that connection, which is what keeps the replies in order. (TcpStore
// sends one request at a time per connection, and opens more connections for concurrent callers.)
//
// ---- Counters -------------------------------------------------------------------------------
//
// add() keeps a counter as its decimal text, as torch.distributed's stores do: get() of a counter
// returns e.g. "42", and add() on a key that set() gave the value "7" continues from 7. add() on
// any other value is an InvalidArgument.
#pragma once

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include "ringcomm/errors.h"
#include "ringcomm/store.h"

namespace ringcomm::storeproto {

enum class Op : uint8_t { Set = 1, Get = 2, Add = 3, Check = 4, GetMany = 5 };
// What a GetMany reply says of each key, before its value where there is one: the reply stays
// within a frame, so values past kMaxValueBytes in all are left for another request.
enum class Found : uint8_t { Missing = 0, Here = 1, LeftOut = 2 };
enum class Status : uint8_t { Ok = 0, Timeout = 1, Error = 2 };

// Rendezvous values are addresses and small blobs (torch's stores hold little more); these bounds
// keep one client (even one that knows the secret) from making the server hold gigabytes.
constexpr uint32_t kMaxKeyBytes = 4096;
constexpr uint32_t kMaxValueBytes = 64u * 1024 * 1024;
constexpr uint32_t kMaxKeysPerCheck = 65536;
constexpr uint32_t kMaxFrameBytes = kMaxValueBytes + kMaxKeyBytes + 64;
constexpr size_t kFrameHeaderBytes = 4;
// A new connection has this long to complete the handshake (a real client needs a round trip):
// the server then drops it, and the client stops waiting for the server's proof.
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);

// A reply or request whose fields do not parse. The frame around it was intact, so the stream is
// still in step; only this message is lost.
class MalformedMessage : public TransportError {
 public:
  using TransportError::TransportError;
};

inline uint32_t loadU32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// Builds one frame: the length prefix is reserved up front and filled in by finish().
class Encoder {
 public:
  explicit Encoder(uint8_t tag) : frame_(kFrameHeaderBytes, 0) { u8(tag); }
  explicit Encoder(Op op) : Encoder(static_cast<uint8_t>(op)) {}
  explicit Encoder(Status status) : Encoder(static_cast<uint8_t>(status)) {}

  Encoder& u8(uint8_t value) {
    frame_.push_back(value);
    return *this;
  }
  Encoder& u32(uint32_t value) {
    for (int shift = 0; shift < 32; shift += 8) frame_.push_back(uint8_t(value >> shift));
    return *this;
  }
  Encoder& i64(int64_t value) {
    auto bits = static_cast<uint64_t>(value);
    for (int shift = 0; shift < 64; shift += 8) frame_.push_back(uint8_t(bits >> shift));
    return *this;
  }
  Encoder& str(const void* data, size_t size) {
    if (size > kMaxValueBytes) {
      throw InvalidArgument("store value of " + std::to_string(size) + " bytes exceeds the " +
                            std::to_string(kMaxValueBytes) + "-byte limit");
    }
    u32(static_cast<uint32_t>(size));
    const auto* bytes = static_cast<const uint8_t*>(data);
    frame_.insert(frame_.end(), bytes, bytes + size);
    return *this;
  }
  Encoder& str(const std::string& value) { return str(value.data(), value.size()); }
  Encoder& str(const Bytes& value) { return str(value.data(), value.size()); }

  // The finished frame, length prefix included. The encoder is spent afterwards.
  Bytes finish() {
    size_t body = frame_.size() - kFrameHeaderBytes;
    if (body > kMaxFrameBytes) {
      throw InvalidArgument("store message of " + std::to_string(body) + " bytes exceeds the " +
                            std::to_string(kMaxFrameBytes) + "-byte limit");
    }
    for (int i = 0; i < 4; ++i) frame_[i] = uint8_t(body >> (8 * i));
    return std::move(frame_);
  }

 private:
  Bytes frame_;
};

// Reads the fields of one frame body (the length prefix already stripped). Throws MalformedMessage
// when the body is shorter than its fields say.
class Decoder {
 public:
  Decoder(const uint8_t* body, size_t size) : p_(body), end_(body + size) {}

  uint8_t u8() { return *take(1); }
  uint32_t u32() { return loadU32(take(4)); }
  int64_t i64() {
    const uint8_t* p = take(8);
    uint64_t bits = 0;
    for (int i = 7; i >= 0; --i) bits = bits << 8 | p[i];
    return static_cast<int64_t>(bits);
  }
  std::string str() {
    uint32_t size = u32();
    const uint8_t* p = take(size);
    return std::string(reinterpret_cast<const char*>(p), size);
  }
  Bytes bytes() {
    uint32_t size = u32();
    const uint8_t* p = take(size);
    return Bytes(p, p + size);
  }
  // Every field read: trailing bytes mean the two sides disagree about the format.
  void expectEnd() const {
    if (p_ != end_) malformed("trailing bytes");
  }

 private:
  const uint8_t* take(size_t size) {
    if (static_cast<size_t>(end_ - p_) < size) malformed("truncated field");
    const uint8_t* p = p_;
    p_ += size;
    return p;
  }
  [[noreturn]] static void malformed(const char* why) {
    throw MalformedMessage(std::string("malformed store message: ") + why,
                           FailureContext{"store", -1, -1, 0.0});
  }

  const uint8_t* p_;
  const uint8_t* end_;
};

// ---- Shared by every Store implementation -----------------------------------------------------

// Seconds as error messages write them: "30.0".
inline std::string formatSeconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", seconds);
  return text;
}

// "store get('rank3/addr') timed out after 30.0 s"
inline std::string getTimeoutMessage(const std::string& key, double seconds) {
  return "store get('" + key + "') timed out after " + formatSeconds(seconds) + " s";
}

inline Bytes formatCounter(int64_t value) {
  std::string text = std::to_string(value);
  return Bytes(text.begin(), text.end());
}

// add(key, delta) on the current value (exists = false: the counter starts at 0). Updates value
// and returns the new count; throws InvalidArgument when the value is not a decimal int64 or the
// sum overflows.
inline int64_t applyAdd(const std::string& key, Bytes& value, bool exists, int64_t delta) {
  int64_t current = 0;
  if (exists) {
    const char* first = reinterpret_cast<const char*>(value.data());
    const char* last = first + value.size();
    auto [end, error] = std::from_chars(first, last, current);
    if (value.empty() || error != std::errc() || end != last) {
      throw InvalidArgument("store add('" + key + "'): the value is not an integer counter (" +
                            std::to_string(value.size()) + " bytes)");
    }
  }
  int64_t next = 0;
  if (__builtin_add_overflow(current, delta, &next)) {
    throw InvalidArgument("store add('" + key + "', " + std::to_string(delta) +
                          "): counter overflows int64 (now " + std::to_string(current) + ")");
  }
  value = formatCounter(next);
  return next;
}

}  // namespace ringcomm::storeproto
