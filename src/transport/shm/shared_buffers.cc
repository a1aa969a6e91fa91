#include "transport/shm/shared_buffers.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <system_error>

#include "common/log.h"
#include "ringcomm/shared_memory.h"

// Older C libraries' headers lack them; the kernel's numbers on every architecture since 5.3/5.6.
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

namespace ringcomm::shm {
namespace {

struct OwnBuffer {
  size_t bytes;
  int fd;
  uint64_t serial;
};

// This process's shared buffers by start address. Any thread may allocate or free; the
// communicator's engine looks them up.
std::mutex ownMutex;
std::map<uintptr_t, OwnBuffer> ownBuffers;
uint64_t nextSerial = 1;

// A child forked while another thread held the lock would find it held for good: the lock is
// taken around fork(), so that the child's copy is free (its buffers are the parent's, shared).
[[maybe_unused]] const int forkHandlers = pthread_atfork(
    [] { ownMutex.lock(); }, [] { ownMutex.unlock(); }, [] { ownMutex.unlock(); });

// The memfd of buffer `serial`: "/memfd:ringcomm-buffer-7 (deleted)" in /proc.
std::string memfdName(uint64_t serial) { return "ringcomm-buffer-" + std::to_string(serial); }

// Whether `bytes` could ever be held: no more than the machine's memory and swap. A memfd's
// pages are allocated on first touch, so a larger request would succeed here and fail only
// later, at a touch in the middle of the program; malloc() refuses such a request at once under
// the kernel's default overcommit policy, and so does this.
bool couldHold(size_t bytes) {
  struct sysinfo info {};
  if (sysinfo(&info) != 0) return true;
  const double unit = info.mem_unit ? info.mem_unit : 1;
  return static_cast<double>(bytes) <=
         (static_cast<double>(info.totalram) + static_cast<double>(info.totalswap)) * unit;
}

// Whether `fd` is the memfd that allocateSharedMemory() created for buffer `serial`: a
// descriptor naming another of the peer's files, or another of its buffers, is refused.
bool isOurMemfd(int fd, uint64_t serial) {
  char link[128];
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t length = readlink(path.c_str(), link, sizeof(link) - 1);
  if (length <= 0) return false;
  const std::string target(link, static_cast<size_t>(length));
  const std::string expected = "/memfd:" + memfdName(serial);
  return target == expected || target == expected + " (deleted)";
}

}  // namespace

}  // namespace ringcomm::shm

namespace ringcomm {

void* allocateSharedMemory(size_t bytes) {
  using namespace shm;
  bytes = std::max<size_t>(bytes, 1);
  if (!couldHold(bytes)) throw std::bad_alloc();
  uint64_t serial = 0;
  {
    std::lock_guard<std::mutex> lock(ownMutex);
    serial = nextSerial++;
  }
  const int fd =
      static_cast<int>(syscall(SYS_memfd_create, memfdName(serial).c_str(), MFD_CLOEXEC));
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "memfd_create");
  const auto fail = [fd, bytes](const char* call) {
    const int failed = errno;
    close(fd);
    throw std::system_error(failed, std::generic_category(),
                            std::string(call) + " of a " + std::to_string(bytes) +
                                "-byte shared buffer");
  };
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) fail("ftruncate");
  void* address = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) fail("mmap");
  // Huge pages where the system allows them for shared memory (shmem_enabled): fewer TLB misses
  // for the peers that read it. Advice only.
  madvise(address, bytes, MADV_HUGEPAGE);
  std::lock_guard<std::mutex> lock(ownMutex);
  ownBuffers[reinterpret_cast<uintptr_t>(address)] = OwnBuffer{bytes, fd, serial};
  return address;
}

void freeSharedMemory(void* address) {
  using namespace shm;
  OwnBuffer buffer{};
  {
    std::lock_guard<std::mutex> lock(ownMutex);
    auto found = ownBuffers.find(reinterpret_cast<uintptr_t>(address));
    if (found == ownBuffers.end()) return;
    buffer = found->second;
    ownBuffers.erase(found);
  }
  munmap(address, buffer.bytes);
  close(buffer.fd);
}

}  // namespace ringcomm

namespace ringcomm::shm {

std::optional<SharedLocation> findSharedBuffer(const void* address, size_t bytes) {
  const auto at = reinterpret_cast<uintptr_t>(address);
  std::lock_guard<std::mutex> lock(ownMutex);
  auto after = ownBuffers.upper_bound(at);
  if (after == ownBuffers.begin()) return std::nullopt;
  const auto& [start, buffer] = *std::prev(after);
  if (at + bytes > start + buffer.bytes) return std::nullopt;
  return SharedLocation{buffer.fd, buffer.serial, at - start, buffer.bytes};
}

SharedBytes::~SharedBytes() { release(); }

void SharedBytes::release() {
  if (shared_) {
    freeSharedMemory(data_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  bytes_ = 0;
}

uint8_t* SharedBytes::reserve(size_t bytes) {
  if (bytes <= bytes_ && data_ != nullptr) return data_;
  release();
  try {
    data_ = static_cast<uint8_t*>(allocateSharedMemory(bytes));
    shared_ = true;
  } catch (const std::system_error& error) {
    // A sandbox that forbids memfd_create: ordinary memory, which peers copy with the kernel.
    RINGCOMM_LOG(LogLevel::Info, kLogTransport, "a %zu-byte buffer in ordinary memory: %s",
                 bytes, error.what());
    data_ = static_cast<uint8_t*>(std::malloc(std::max<size_t>(bytes, 1)));
    if (data_ == nullptr) throw std::bad_alloc();
    shared_ = false;
  }
  bytes_ = bytes;
  return data_;
}

PeerBufferMappings::~PeerBufferMappings() {
  for (const Mapping& mapping : mappings_) munmap(mapping.base, mapping.bytes);
}

uint8_t* PeerBufferMappings::map(int peer, pid_t pid, const SharedLocation& location) {
  for (auto it = mappings_.begin(); it != mappings_.end(); ++it) {
    if (it->peer != peer || it->serial != location.serial) continue;
    mappings_.splice(mappings_.begin(), mappings_, it);
    return it->base;
  }
  if (refused_.count(peer) != 0) return nullptr;
  // The owner holds the buffer for the whole collective, so its descriptor is still that
  // buffer's; the size check guards against anything else.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  int fd = -1;
  if (pidfd >= 0) {
    fd = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, location.fd, 0));
    close(pidfd);
  }
  int failed = errno;
  void* base = MAP_FAILED;
  struct stat status {};
  if (fd >= 0 && fstat(fd, &status) != 0) {
    failed = errno;
  } else if (fd >= 0 && (static_cast<uint64_t>(status.st_size) != location.bytes ||
                         !isOurMemfd(fd, location.serial))) {
    failed = EINVAL;  // not a buffer of ours: never map (and write into) anything else
  } else if (fd >= 0) {
    base = mmap(nullptr, location.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    failed = errno;
  }
  if (fd >= 0) close(fd);
  if (base == MAP_FAILED) {
    RINGCOMM_LOG(LogLevel::Info, kLogTransport,
                 "mapping rank %d's shared buffer failed (%s): its all-reduces copy with the "
                 "kernel instead",
                 peer, std::strerror(failed));
    refused_.insert(peer);
    return nullptr;
  }
  RINGCOMM_LOG(LogLevel::Info, kLogTransport,
               "mapped a %llu-byte shared buffer of rank %d: all-reduces in it read and write it "
               "directly",
               static_cast<unsigned long long>(location.bytes), peer);
  mappings_.push_front(Mapping{peer, location.serial, static_cast<uint8_t*>(base),
                               static_cast<size_t>(location.bytes)});
  // Peers' buffers that were freed stay alive while mapped here: keep the last few per peer.
  size_t kept = 0;
  for (auto it = mappings_.begin(); it != mappings_.end();) {
    if (it->peer == peer && ++kept > kKeptPerPeer) {
      munmap(it->base, it->bytes);
      it = mappings_.erase(it);
    } else {
      ++it;
    }
  }
  return static_cast<uint8_t*>(base);
}

}  // namespace ringcomm::shm
