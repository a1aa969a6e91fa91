// Message tags. Every framed message carries one, and the receiver checks it against what it
// expects: two ranks that disagree about which collective comes next fail with a MismatchError
// naming both, instead of exchanging garbage.
//   collectives:     bit 31 clear, bits 8..30 = the communicator's collective sequence number,
//                    bits 0..7 = the collective's kind;
//   send/recv:       bit 31 set, bits 0..30 = the user's tag.
#pragma once

#include <cstdint>
#include <string>

namespace ringcomm {

enum class CollectiveKind : uint8_t {
  Allreduce = 1,
  ReduceScatter,
  Allgather,
  Broadcast,
  Reduce,
  Alltoall,
  Gather,
  Scatter,
  Barrier,
};

constexpr uint32_t kUserTagBit = 0x80000000u;

inline const char* toString(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::Allreduce: return "allreduce";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::Allgather: return "allgather";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::Reduce: return "reduce";
    case CollectiveKind::Alltoall: return "alltoall";
    case CollectiveKind::Gather: return "gather";
    case CollectiveKind::Scatter: return "scatter";
    case CollectiveKind::Barrier: return "barrier";
  }
  return "unknown";
}

inline uint32_t collectiveTag(uint64_t sequence, CollectiveKind kind) {
  return static_cast<uint32_t>(((sequence & 0x7fffffu) << 8) | static_cast<uint8_t>(kind));
}

inline uint32_t userTag(int tag) { return kUserTagBit | (static_cast<uint32_t>(tag) & 0x7fffffffu); }

inline std::string describeTag(uint32_t tag) {
  if (tag & kUserTagBit) return "send/recv with tag " + std::to_string(tag & ~kUserTagBit);
  return std::string(toString(static_cast<CollectiveKind>(tag & 0xffu))) + " #" +
         std::to_string(tag >> 8);
}

}  // namespace ringcomm
