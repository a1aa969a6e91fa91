// Buffers that local peers can map: memory a caller allocates through ringcomm
// (ringcomm.empty) instead of numpy or torch, as MPI_Win_allocate_shared or NCCL's registered
// buffers.
//
// The single-copy all-reduce reads peers' buffers and writes into them with the kernel's copies
// (process_vm_readv/writev), which cost about twice the CPU time per byte of the ranks' own loads
// and stores; 4 ranks on 2 cores are CPU-bound on them (bench/RESULTS.md, "What registered
// buffers could gain"). A buffer allocated here lives in a memfd, so a peer can map it: it takes
// a copy of the owner's descriptor with pidfd_getfd (Linux 5.6; the same permission as
// process_vm_readv) and then reduces from it and writes into it directly.
//
// No name in /dev/shm: the memory goes when the owner has freed it and every peer has unmapped
// it, however the processes end.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <set>
#include <optional>

namespace ringcomm::shm {

// Where a range of this process's memory lies in a shared buffer, for the slot descriptor.
struct SharedLocation {
  int fd = -1;          // the buffer's memfd in the owner's process
  uint64_t serial = 0;  // unique per buffer in the owner's process, never 0
  uint64_t offset = 0;  // of the range within the buffer
  uint64_t bytes = 0;   // the buffer's length
};

// Buffers come from ringcomm::allocateSharedMemory (include/ringcomm/shared_memory.h).
// The shared buffer holding all of [address, address + bytes), if one does.
std::optional<SharedLocation> findSharedBuffer(const void* address, size_t bytes);

// A buffer that grows to the largest size asked of it, in shared memory where the kernel allows
// it (else ordinary memory): the tensor queue's fusion buffer, which every rank's fused
// all-reduces then read and write directly on the single-copy path.
class SharedBytes {
 public:
  SharedBytes() = default;
  SharedBytes(const SharedBytes&) = delete;
  SharedBytes& operator=(const SharedBytes&) = delete;
  ~SharedBytes();

  // At least `bytes` long from now on; the contents are not kept.
  uint8_t* reserve(size_t bytes);

 private:
  void release();

  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
  bool shared_ = false;
};

// A rank's mappings of its peers' shared buffers, the most recent first. Peers free and allocate
// buffers; a mapping keeps the memory alive, so only the last few per peer are kept.
class PeerBufferMappings {
 public:
  PeerBufferMappings() = default;
  PeerBufferMappings(const PeerBufferMappings&) = delete;
  PeerBufferMappings& operator=(const PeerBufferMappings&) = delete;
  ~PeerBufferMappings();

  // The start of `location` (the owner's buffer) mapped into this process, or null when it cannot
  // be mapped (a kernel without pidfd_getfd, a seccomp profile that forbids it, as Docker's does
  // without CAP_SYS_PTRACE): the caller then copies with the kernel, for that peer from then on.
  uint8_t* map(int peer, pid_t pid, const SharedLocation& location);

 private:
  struct Mapping {
    int peer;
    uint64_t serial;
    uint8_t* base;
    size_t bytes;
  };
  static constexpr size_t kKeptPerPeer = 8;
  std::list<Mapping> mappings_;
  std::set<int> refused_;  // peers whose buffers could not be mapped: not asked again
};

}  // namespace ringcomm::shm
