#include "transport/shm/shm_stream.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/bytes.h"

namespace ringcomm::transport {

ShmStream::ShmStream(const shm::Segments& segments, int peerLocal)
    : segments_(segments), peerLocal_(peerLocal),
      outgoing_(segments.ring(peerLocal, segments.localRank())),
      incoming_(segments.ring(segments.localRank(), peerLocal)) {}

size_t ShmStream::writeSome(const void* data, size_t bytes) {
  const uint64_t head = outgoing_.header->head.value.load(std::memory_order_relaxed);
  const uint64_t tail = outgoing_.header->tail.value.load(std::memory_order_acquire);
  const size_t n = std::min<size_t>(bytes, outgoing_.capacity - (head - tail));
  if (n == 0) return 0;
  const size_t at = head % outgoing_.capacity;
  const size_t first = std::min(n, outgoing_.capacity - at);
  copyBytes(outgoing_.data + at, data, first);
  copyBytes(outgoing_.data, static_cast<const uint8_t*>(data) + first, n - first);
  outgoing_.header->head.value.store(head + n, std::memory_order_release);
  segments_.ringDoorbell(peerLocal_);
  return n;
}

size_t ShmStream::readSome(void* data, size_t bytes) {
  const uint64_t tail = incoming_.header->tail.value.load(std::memory_order_relaxed);
  const uint64_t head = incoming_.header->head.value.load(std::memory_order_acquire);
  const size_t n = std::min<size_t>(bytes, head - tail);
  if (n == 0) return 0;
  const size_t at = tail % incoming_.capacity;
  const size_t first = std::min(n, incoming_.capacity - at);
  copyBytes(data, incoming_.data + at, first);
  copyBytes(static_cast<uint8_t*>(data) + first, incoming_.data, n - first);
  incoming_.header->tail.value.store(tail + n, std::memory_order_release);
  segments_.ringDoorbell(peerLocal_);
  return n;
}

std::string ShmStream::failure() const { return segments_.peerFailure(peerLocal_); }

}  // namespace ringcomm::transport
