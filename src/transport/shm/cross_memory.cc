#include "transport/shm/cross_memory.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

namespace ringcomm::shm {
namespace {

// The kernel's setting that most often forbids the read, for the message that says why.
std::string yamaScope() {
  std::ifstream file("/proc/sys/kernel/yama/ptrace_scope");
  std::string scope;
  if (!(file >> scope)) return {};
  return " (Yama ptrace_scope is " + scope + ")";
}

// One loop for both directions: `transfer` is process_vm_readv or process_vm_writev.
template <typename Transfer>
int moveProcessMemory(Transfer transfer, int pid, uint64_t remote, uint8_t* local, size_t bytes) {
  while (bytes > 0) {
    iovec here{local, bytes};
    iovec there{reinterpret_cast<void*>(static_cast<uintptr_t>(remote)), bytes};
    const ssize_t moved = transfer(pid, &here, 1, &there, 1, 0);
    if (moved < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    // A short transfer stops where a page could not be reached: the next call says why, or goes
    // on (the kernel also stops early when a fatal signal is pending).
    if (moved == 0) return EFAULT;
    local += moved;
    remote += static_cast<uint64_t>(moved);
    bytes -= static_cast<size_t>(moved);
  }
  return 0;
}

}  // namespace

int readProcessMemory(int pid, uint64_t remote, void* local, size_t bytes) {
  return moveProcessMemory(process_vm_readv, pid, remote, static_cast<uint8_t*>(local), bytes);
}

int writeProcessMemory(int pid, uint64_t remote, const void* local, size_t bytes) {
  // process_vm_writev only reads the local side; its iovec is not const.
  return moveProcessMemory(process_vm_writev, pid, remote,
                           const_cast<uint8_t*>(static_cast<const uint8_t*>(local)), bytes);
}

std::string probeCrossMemory(int pid, uint64_t remote, uint64_t expected) {
  uint64_t seen = 0;
  if (const int failed = readProcessMemory(pid, remote, &seen, sizeof(seen))) {
    return std::string("process_vm_readv: ") + std::strerror(failed) +
           (failed == EPERM || failed == EACCES ? yamaScope() : "");
  }
  if (seen != expected) {
    return "process_vm_readv read another process's memory (the ranks are in different PID "
           "namespaces)";
  }
  if (const int failed = writeProcessMemory(pid, remote, &seen, sizeof(seen))) {
    return std::string("process_vm_writev: ") + std::strerror(failed) +
           (failed == EPERM || failed == EACCES ? yamaScope() : "");
  }
  return {};
}

}  // namespace ringcomm::shm
