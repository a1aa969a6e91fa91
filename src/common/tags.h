// Message tags. Every framed message carries one, and the receiver checks it against what it
// expects: two ranks that disagree about which collective comes next fail with a MismatchError
// naming both, instead of exchanging garbage.
//   collectives:     bit 31 clear, bits 8..30 = the communicator's collective sequence number,
//                    bits 0..7 = the collective's kind;
//   send/recv:       bit 31 set, bits 0..30 = the user's tag.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>

#include "common/enum_names.h"
#include "ringcomm/types.h"

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
  LinkProbe,  // the cost model's measurement of the network at creation (tuning/link_probe.h)
};

constexpr uint32_t kUserTagBit = 0x80000000u;

inline constexpr EnumName<CollectiveKind> kCollectiveKindNames[] = {
    {CollectiveKind::Allreduce, "allreduce"},
    {CollectiveKind::ReduceScatter, "reduce_scatter"},
    {CollectiveKind::Allgather, "allgather"},
    {CollectiveKind::Broadcast, "broadcast"},
    {CollectiveKind::Reduce, "reduce"},
    {CollectiveKind::Alltoall, "alltoall"},
    {CollectiveKind::Gather, "gather"},
    {CollectiveKind::Scatter, "scatter"},
    {CollectiveKind::Barrier, "barrier"},
    {CollectiveKind::LinkProbe, "the link probe"},
};
// A row for each kind, 1 to the last, LinkProbe (a kind added after it moves this check).
static_assert(std::size(kCollectiveKindNames) == static_cast<size_t>(CollectiveKind::LinkProbe));

inline const char* toString(CollectiveKind kind) { return nameIn(kCollectiveKindNames, kind); }

inline uint32_t collectiveTag(uint64_t sequence, CollectiveKind kind) {
  return static_cast<uint32_t>(((sequence & 0x7fffffu) << 8) | static_cast<uint8_t>(kind));
}

inline uint32_t userTag(int tag) { return kUserTagBit | (static_cast<uint32_t>(tag) & 0x7fffffffu); }

// What every message of a collective carries besides its tag: what the sending rank believes the
// collective is. Ranks that agree on the sequence and size but not on the element type, the
// reduction, the root or the schedule are caught here instead of exchanging the wrong data.
//   signature: bits 0-7 element type + 1, bits 8-15 reduction + 1, bits 16-31 root + 1 (0 = none)
//   variant:   bits 0-7 algorithm + 1, bits 8-15 compression + 1 (all-reduce only; 0 = none),
//              bits 16-23 how device buffers travel (MemoryPath; 0 = host buffers). The device
//              paths cut a collective into chunks or add handshakes of their own, so a rank with
//              host buffers and one with device buffers in the same collective must not meet;
//              bit 24 marks an acknowledgement (see acknowledgementOf).
struct MessageTag {
  uint32_t id = 0;
  uint32_t signature = 0;
  uint32_t variant = 0;
};

inline uint32_t signatureOf(const DataType* type, const ReduceOp* op, int root) {
  uint32_t signature = 0;
  if (type != nullptr) signature |= static_cast<uint32_t>(*type) + 1;
  if (op != nullptr) signature |= (static_cast<uint32_t>(*op) + 1) << 8;
  if (root >= 0) signature |= (static_cast<uint32_t>(root) + 1) << 16;
  return signature;
}

inline uint32_t variantOf(Algorithm algorithm, Compression compression) {
  return (static_cast<uint32_t>(algorithm) + 1) | ((static_cast<uint32_t>(compression) + 1) << 8);
}

// Where a collective's buffers are and how they travel (variant bits 16-23).
enum class MemoryPath : uint8_t {
  // The schedule runs once on the whole buffers: host memory, or device memory staged whole
  // through host memory (the messages are the same, so such ranks may meet).
  Host = 0,
  DeviceChunked = 1,  // device memory staged in pipelined chunks: one schedule per chunk
  DeviceIpc = 2,      // device memory read by peers through CUDA IPC (all-reduce)
  // Across hosts: CUDA IPC among each host's ranks, each rank's slice staged to the network.
  DeviceIpcAcrossHosts = 3,
};

inline constexpr EnumName<MemoryPath> kMemoryPathNames[] = {
    {MemoryPath::Host, "host buffers"},
    {MemoryPath::DeviceChunked, "device buffers, staged in chunks"},
    {MemoryPath::DeviceIpc, "device buffers, CUDA IPC"},
    {MemoryPath::DeviceIpcAcrossHosts, "device buffers, CUDA IPC within hosts"},
};
// A row for each path, 0 to the last (a path added after it moves this check).
static_assert(std::size(kMemoryPathNames) ==
              static_cast<size_t>(MemoryPath::DeviceIpcAcrossHosts) + 1);

inline const char* toString(MemoryPath path) {
  return nameIn(kMemoryPathNames, path, "unknown buffers");
}

inline uint32_t withMemoryPath(uint32_t variant, MemoryPath path) {
  return (variant & ~0xff0000u) | (static_cast<uint32_t>(path) << 16);
}

// A receiver's empty reply to a collective's data: "I am in this collective too, with this root".
// Broadcast, scatter and gather have ranks that only send; without a reply, ranks that disagree
// about the root (every rank naming itself) would all complete with different data and nobody
// told. A sender that waits for the reply meets the other rank's data instead, and names it.
constexpr uint32_t kAcknowledgementBit = 1u << 24;

inline MessageTag acknowledgementOf(const MessageTag& tag) {
  return MessageTag{tag.id, tag.signature, tag.variant | kAcknowledgementBit};
}

inline std::string describeSignature(uint32_t signature, uint32_t variant) {
  std::string text;
  auto add = [&text](const std::string& part) { text += (text.empty() ? "" : ", ") + part; };
  if (signature & 0xffu) add(toString(static_cast<DataType>((signature & 0xffu) - 1)));
  if ((signature >> 8) & 0xffu) add(toString(static_cast<ReduceOp>(((signature >> 8) & 0xffu) - 1)));
  if (signature >> 16) add("root " + std::to_string((signature >> 16) - 1));
  if (variant & 0xffu) add(toString(static_cast<Algorithm>((variant & 0xffu) - 1)));
  if ((variant >> 8) & 0xffu) {
    add(std::string("compression ") + toString(static_cast<Compression>(((variant >> 8) & 0xffu) - 1)));
  }
  if ((variant >> 16) & 0xffu) add(toString(static_cast<MemoryPath>((variant >> 16) & 0xffu)));
  if (variant & kAcknowledgementBit) add("its acknowledgement");
  return text.empty() ? "no details" : text;
}

inline std::string describeTag(uint32_t tag) {
  if (tag & kUserTagBit) return "send/recv with tag " + std::to_string(tag & ~kUserTagBit);
  return std::string(toString(static_cast<CollectiveKind>(tag & 0xffu))) + " #" +
         std::to_string(tag >> 8);
}

}  // namespace ringcomm
