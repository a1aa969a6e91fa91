// Cross-memory attach: reading a local peer's memory with one copy (process_vm_readv).
//
// The staged direct schedule moves every byte through a shared-memory slot: copy in, copy out.
// With cross-memory attach a rank reads a peer's own buffer straight into its own, and the kernel
// makes the one copy. Linux allows it between processes of one user unless Yama's ptrace_scope
// (1 or more) or a seccomp profile (Docker's default before 20.10, some Kubernetes ones) forbids
// it, so ranks probe each other at setup and every rank falls back to staging when one cannot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ringcomm::shm {

// Reads `bytes` at `remote` in process `pid` into `local` (writes `local` there), looping over
// partial transfers. Returns 0, or the errno of the call that failed: ESRCH when the process is
// gone, EFAULT when `remote` is no longer mapped there, EPERM when the kernel forbids it.
int readProcessMemory(int pid, uint64_t remote, void* local, size_t bytes);
int writeProcessMemory(int pid, uint64_t remote, const void* local, size_t bytes);

// Whether this process can read and write process `pid`'s word at `remote` and finds `expected`
// there (which tells that `pid` really is the peer, not another process of the same number in
// another PID namespace); it writes back the same value. Empty when it can, else why not, e.g.
// "process_vm_readv: Operation not permitted (Yama ptrace_scope is 1)".
std::string probeCrossMemory(int pid, uint64_t remote, uint64_t expected);

}  // namespace ringcomm::shm
