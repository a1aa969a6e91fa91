// The header every message between two ranks carries, whatever moves it: the receiver checks it
// against what it expects, so ranks that disagree about a collective are named, not corrupted.
#pragma once

#include <cstdint>

namespace ringcomm::transport {

constexpr uint32_t kFrameMagic = 0x52434d31;  // "RCM1"

struct FrameHeader {
  uint32_t magic;
  uint32_t tag;
  uint32_t signature;  // see MessageTag
  uint32_t variant;
  uint64_t bytes;
};

}  // namespace ringcomm::transport
