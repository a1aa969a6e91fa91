#include "transport/shm/cross_memory.h"

#include <sys/uio.h>

#include <cerrno>
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

}  // namespace

int readProcessMemory(int pid, uint64_t remote, void* local, size_t bytes) {
  auto* to = static_cast<uint8_t*>(local);
  while (bytes > 0) {
    iovec into{to, bytes};
    iovec from{reinterpret_cast<void*>(static_cast<uintptr_t>(remote)), bytes};
    const ssize_t got = process_vm_readv(pid, &into, 1, &from, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    // A short read stops where a page could not be read: the next call says why, or goes on
    // (the kernel also stops early when a fatal signal is pending).
    if (got == 0) return EFAULT;
    to += got;
    remote += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  return 0;
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
  return {};
}

}  // namespace ringcomm::shm
