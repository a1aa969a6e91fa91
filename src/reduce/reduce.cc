// The public reduction entry points: argument checks, then the kernel variant the CPU supports.
#include "reduce/reduce.h"

#include <atomic>
#include <string>

#include "common/cpu_features.h"
#include "reduce/dispatch.h"
#include "reduce/half.h"
#include "ringcomm/errors.h"

namespace ringcomm::reduce {
namespace {

std::atomic<bool> gForcePortable{false};

const KernelSet& detectBestKernels() {
#if defined(__x86_64__)
  // Called explicitly because this may run from another file's static initialiser, before libgcc
  // has filled in what __builtin_cpu_supports reads. The AVX2 check includes the OS saving YMM
  // state, which the F16C instructions need too.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && cpu::hasF16c()) return kAvx2Kernels;
#endif
  return kPortableKernels;
}

const KernelSet& activeKernels() {
  static const KernelSet& best = detectBestKernels();
  return gForcePortable.load(std::memory_order_relaxed) ? kPortableKernels : best;
}

[[noreturn]] void throwUnknown(const char* function, DataType type, ReduceOp op) {
  throw InvalidArgument(std::string("ringcomm::reduce::") + function +
                        ": unknown data type or op (dtype " +
                        std::to_string(static_cast<int>(type)) + ", op " +
                        std::to_string(static_cast<int>(op)) + ")");
}

}  // namespace

void forcePortableKernels(bool force) { gForcePortable.store(force, std::memory_order_relaxed); }

const char* activeKernelName() { return activeKernels().name; }

void reduceInto(void* dst, const void* src, size_t count, DataType type, ReduceOp op) {
  // The in-place case of reduceMany: the kernels see dst == srcs[0] and update dst in place.
  const void* srcs[2] = {dst, src};
  reduceMany(dst, srcs, 2, count, type, op);
}

void reduceMany(void* dst, const void* const* srcs, int n, size_t count, DataType type,
                ReduceOp op) {
  if (n < 1) {
    throw InvalidArgument("ringcomm::reduce::reduceMany: needs at least one source, got " +
                          std::to_string(n));
  }
  if (count == 0) return;
  if (!activeKernels().reduceMany(dst, srcs, n, count, type, op)) {
    throwUnknown("reduceMany", type, op);
  }
}

void finishAverage(void* buf, size_t count, DataType type, ReduceOp op, int divisor) {
  if (op != ReduceOp::Avg) return;
  if (type == DataType::Bool) {
    throw InvalidArgument("ringcomm::reduce::finishAverage: avg of bool is not defined");
  }
  if (divisor < 1) {
    throw InvalidArgument("ringcomm::reduce::finishAverage: divisor must be positive, got " +
                          std::to_string(divisor));
  }
  if (count == 0) return;
  if (!activeKernels().divide(buf, count, type, divisor)) throwUnknown("finishAverage", type, op);
}

float halfToFloat(uint16_t h) { return detail::halfBitsToFloat(h); }
uint16_t floatToHalf(float f) { return detail::floatToHalfBits(f); }
float bfloat16ToFloat(uint16_t b) { return detail::bfloat16BitsToFloat(b); }
uint16_t floatToBfloat16(float f) { return detail::floatToBfloat16Bits(f); }

}  // namespace ringcomm::reduce
