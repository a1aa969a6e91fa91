// The kernels compiled for AVX2, with float16 converted by F16C. Built without any -m flag: a
// target region switches the instruction set on for this file's code only, and reduce.cc calls it
// only on CPUs that report both extensions.
//
// FMA is deliberately not enabled: without it the compiler cannot fuse a multiply and an add, so
// this variant cannot round differently from the portable one.
#if defined(__x86_64__)

#include <immintrin.h>

// Every header the loops use is included before the target region opens, so that inline code they
// define (shared with the portable variant) keeps the baseline instruction set.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "reduce/dispatch.h"
#include "reduce/half.h"
#include "ringcomm/types.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#endif

#include "reduce/loops.h"

namespace ringcomm::reduce {
namespace {

// vcvtps2ph's immediate: round to nearest even, regardless of the MXCSR rounding mode.
constexpr int kRoundNearestEven = _MM_FROUND_TO_NEAREST_INT;
constexpr size_t kLanes = 8;  // float32 lanes in a 256-bit register

// binary16 by F16C: eight elements per instruction, the same bits as detail::halfBitsToFloat and
// detail::floatToHalfBits (tests compare the two).
struct F16cHalfCodec {
  static void widen(float* __restrict out, const uint16_t* __restrict in, size_t count) {
    size_t i = 0;
    for (; i + kLanes <= count; i += kLanes) {
      const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(halves));
    }
    for (; i < count; ++i) out[i] = _cvtsh_ss(in[i]);
  }

  static void narrow(uint16_t* __restrict out, const float* __restrict in, size_t count) {
    size_t i = 0;
    for (; i + kLanes <= count; i += kLanes) {
      const __m128i halves = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), kRoundNearestEven);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), halves);
    }
    for (; i < count; ++i) out[i] = _cvtss_sh(in[i], kRoundNearestEven);
  }
};

}  // namespace

const KernelSet kAvx2Kernels = {
    "avx2",
    &Kernels<F16cHalfCodec>::reduceMany,
    &Kernels<F16cHalfCodec>::divide,
};

}  // namespace ringcomm::reduce

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // defined(__x86_64__)
