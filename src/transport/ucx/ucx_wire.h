// What ringcomm's UCX links put on the wire: the active messages' ids and headers, and the proof
// of the job's secret a peer's first message carries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "auth/sha256.h"
#include "transport/frame.h"

namespace ringcomm::transport::ucx_wire {

// Active-message ids: the proof of the job's secret (both ways), frames, and a rank's goodbye
// when its communicator closes (lanes within a host report no failure of their own).
constexpr unsigned kHelloMessage = 1;
constexpr unsigned kFrameMessage = 2;
constexpr unsigned kGoodbyeMessage = 3;
constexpr uint32_t kHelloMagic = 0x52435548;  // "RCUH"
constexpr size_t kAddressNonceBytes = 32;

// A peer's first message on its endpoint, and the answer to it: proof of the job's secret for the
// receiver's nonce. `answer` 0: "I am rank from"; 1: "and I accepted your hello".
struct Hello {
  uint32_t magic;
  uint32_t from;
  uint32_t to;
  uint32_t answer;
  auth::Digest proof;
};

// The header of a frame's active message.
struct WireFrame {
  FrameHeader frame;
  uint64_t sequence;  // per sender and receiver, from 1
  uint32_t from;
  uint32_t reserved;
};

inline auth::Digest proofOf(const std::string& secret, const Hello& hello, const uint8_t* nonce) {
  const std::string receiverNonce(reinterpret_cast<const char*>(nonce), kAddressNonceBytes);
  return auth::hmacSha256(secret, {"ringcomm ucx link", std::to_string(hello.answer),
                                   std::to_string(hello.from), std::to_string(hello.to),
                                   receiverNonce});
}

}  // namespace ringcomm::transport::ucx_wire
