// Huge pages under the buffers that the single-copy all-reduce hands to the kernel.
//
// process_vm_readv and process_vm_writev pin the peer's pages one by one. Measured on the 2-core
// VM, 256 KiB reads ran at 6.4 GB/s from memory in 4 KiB pages and 14 GB/s from 2 MiB pages; a
// 32 MiB all-reduce of torch tensors at 4 ranks took 14.8 ms, and 9.9 ms once the tensors were
// in huge pages. numpy asks for huge pages for large arrays; torch does not unless
// THP_MEM_ALLOC_ENABLE=1. So a buffer that comes back (a gradient bucket, a fusion buffer) is
// collapsed into huge pages (MADV_COLLAPSE, Linux 6.1) the second time it is seen: collapsing
// copies it once, about one all-reduce's time, which only a buffer used again pays back. The
// collapse changes no byte and no address; a kernel without it, or a range it cannot collapse,
// is left as it is.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace ringcomm::shm {

class HugePageAdvice {
 public:
  // Off when `enabled` is false, and from the first time the kernel does not know the collapse.
  explicit HugePageAdvice(bool enabled) : enabled_(enabled) {}

  // Notes a buffer of a single-copy all-reduce; the second time the same address and length
  // come, the 2 MiB-aligned pages within it are collapsed into huge pages.
  void note(const void* address, size_t bytes);

 private:
  struct Seen {
    uintptr_t address = 0;
    size_t bytes = 0;
    bool collapsed = false;
  };
  // A training loop cycles through a few buffers (buckets, fusion buffers, inputs and outputs).
  // A buffer freed after its collapse and another allocated at the same address and length is
  // taken for the first, and stays in small pages.
  static constexpr size_t kRemembered = 64;

  bool enabled_;
  std::array<Seen, kRemembered> seen_{};
  size_t next_ = 0;  // the entry the next new buffer replaces
};

}  // namespace ringcomm::shm
