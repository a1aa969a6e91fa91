// Copies between buffers for every path that moves payload: memcpy and memmove for lengths that may
// be zero, and a copy that stays fast whatever the buffers' alignment.
//
// An empty buffer's pointer may be null (an empty std::vector's data(), a zero-sized array from
// Python), and passing null to memcpy or memmove is undefined behaviour even for zero bytes (UBSan
// reports it: tests/test_sanitizers.py).
//
// copyBytes avoids one alignment memcpy handles badly. On AMD Zen, `rep movsb` (which glibc's
// memcpy uses from 4 KiB to about the L2 size, and the kernel's copies for process_vm_readv and
// writev use always) runs at 3 GB/s instead of 40-90 when the destination lies 1 to 31 bytes
// after the source modulo 4 KiB: each load appears to alias the store just made. That is exactly
// a page-aligned shared-memory slot copied into a numpy array (numpy's large arrays start 16 bytes
// into a page). Measured on the 2-core EPYC VM with 256 KiB copies: 2.9 GB/s by memcpy, 36-40
// GB/s by the vector loop below, 39-42 GB/s by memcpy at other alignments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ringcomm {

// Whether a copy from `from` to `to` falls in the slow window (Zen's is 1-31 bytes; 63 leaves a
// margin for other models). Kernel copies have the same window, which is why landing buffers for
// cross-memory reads are placed with it in mind (algorithms/direct_single_copy.cc).
inline bool isShortForwardDistance(const void* to, const void* from) {
  const uintptr_t distance =
      (reinterpret_cast<uintptr_t>(to) - reinterpret_cast<uintptr_t>(from)) % 4096;
  return distance != 0 && distance < 64;
}

// The copy for the slow window: 64 bytes per step by unaligned vector loads and stores.
void copyByVectors(void* to, const void* from, size_t bytes);

// memcpy semantics (no overlap), fast at every relative alignment, and no call for zero bytes.
inline void copyBytes(void* to, const void* from, size_t bytes) {
  // Below a few KiB memcpy does not use `rep movsb`, and the check would cost more than it saves.
  constexpr size_t kRepeatedMoveBytes = 2048;
  if (bytes >= kRepeatedMoveBytes && isShortForwardDistance(to, from)) {
    copyByVectors(to, from, bytes);
  } else if (bytes > 0) {
    std::memcpy(to, from, bytes);
  }
}

inline void moveBytes(void* to, const void* from, size_t bytes) {
  if (bytes > 0) std::memmove(to, from, bytes);
}

}  // namespace ringcomm
