#include "transport/shm/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"

// Older C libraries' headers lack it; the kernel's value since Linux 6.1.
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

namespace ringcomm::shm {
namespace {

constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

// Returns false when the kernel does not know MADV_COLLAPSE (before Linux 6.1), so that the
// caller stops asking. Only the collapse: MADV_HUGEPAGE would mark the caller's memory for good
// (and split its mapping) even where the collapse then fails, and override its MADV_NOHUGEPAGE,
// which the collapse respects. It ignores the system's "madvise" setting by design. It runs
// while the peers wait for this rank to post, once per buffer.
bool collapse(uintptr_t address, size_t bytes) {
  const uintptr_t start = (address + kHugePage - 1) / kHugePage * kHugePage;
  const uintptr_t end = (address + bytes) / kHugePage * kHugePage;
  if (end <= start) return true;
  if (madvise(reinterpret_cast<void*>(start), end - start, MADV_COLLAPSE) == 0) return true;
  const int failed = errno;
  RINGCOMM_LOG(LogLevel::Info, kLogTransport,
               "huge pages for a %zu-byte buffer of the single-copy all-reduce: %s (it stays in "
               "small pages)",
               bytes, std::strerror(failed));
  return failed != EINVAL;
}

}  // namespace

void HugePageAdvice::note(const void* address, size_t bytes) {
  if (!enabled_ || bytes < kHugePage) return;
  const auto at = reinterpret_cast<uintptr_t>(address);
  for (Seen& entry : seen_) {
    if (entry.address != at || entry.bytes != bytes) continue;
    if (!entry.collapsed) {
      enabled_ = collapse(at, bytes);
      entry.collapsed = true;  // tried once, whether the kernel could or not
    }
    return;
  }
  seen_[next_] = Seen{at, bytes, false};
  next_ = (next_ + 1) % kRemembered;
}

}  // namespace ringcomm::shm
