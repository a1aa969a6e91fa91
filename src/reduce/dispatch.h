// Which compiled variant of the reduction kernels runs. Each variant is the same source (loops.h)
// compiled for a different instruction set; the best one the CPU supports is chosen once, on the
// first call, and tests can force the portable one to compare the two bit for bit.
#pragma once

#include <cstddef>

#include "ringcomm/types.h"

namespace ringcomm::reduce {

// One compiled variant. The entry points take already-validated arguments (n >= 1, count > 0,
// divisor > 0) and return false for a DataType or ReduceOp they do not know.
struct KernelSet {
  const char* name;
  bool (*reduceMany)(void* dst, const void* const* srcs, int n, size_t count, DataType type,
                     ReduceOp op);
  bool (*divide)(void* buf, size_t count, DataType type, int divisor);
};

// Plain C++ compiled for the baseline instruction set (SSE2 on x86-64, NEON on aarch64).
extern const KernelSet kPortableKernels;
#if defined(__x86_64__)
// The same loops compiled for AVX2, with float16 converted by F16C.
extern const KernelSet kAvx2Kernels;
#endif

// While forced, every call uses kPortableKernels. For tests; safe to call from any thread.
void forcePortableKernels(bool force);

// The name of the variant the next call will use ("avx2" or "portable").
const char* activeKernelName();

}  // namespace ringcomm::reduce
