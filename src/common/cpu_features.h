// Run-time CPU feature tests for the vectorised kernels, spelled so that every compiler that
// builds the core accepts them. __builtin_cpu_supports("f16c") would be the obvious spelling, but
// clang 14 (Debian bookworm's clang) rejects that name at compile time, so F16C is read from
// CPUID directly.
#pragma once

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace ringcomm::cpu {

// CPUID leaf 1, ECX bit F16C. It does not say whether the OS saves the YMM registers, so pair it
// with __builtin_cpu_supports("avx") or ("avx2"), which check that too.
inline bool hasF16c() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
#else
  return false;
#endif
}

}  // namespace ringcomm::cpu
