// The kernels compiled for AVX2, with float16 converted by F16C and bfloat16 by hand-written
// AVX2 code. Built without any -m flag: a target region switches the instruction set on for this
// file's code only, and reduce.cc calls it only on CPUs that report both extensions.
//
// FMA is deliberately not enabled: without it the compiler cannot fuse a multiply and an add, so
// this variant cannot round differently from the portable one, whatever -ffp-contract says.
#if defined(__x86_64__)

#include <immintrin.h>

// Every header the loops use is included before the target region opens, so that inline code they
// define (shared with the portable variant) keeps the baseline instruction set.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/bytes.h"
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
constexpr size_t kFloatLanes = 8;  // float32 lanes in a 256-bit register
constexpr size_t kHalfLanes = 16;  // 16-bit lanes in a 256-bit register

// binary16 by F16C: eight elements per instruction, the same bits as detail::halfBitsToFloat and
// detail::floatToHalfBits (tests compare the two).
struct F16cHalfCodec {
  static void widen(float* __restrict out, const uint16_t* __restrict in, size_t count) {
    const size_t vectorEnd = count - count % kFloatLanes;
    for (size_t i = 0; i < vectorEnd; i += kFloatLanes) {
      const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(halves));
    }
    for (size_t i = vectorEnd; i < count; ++i) out[i] = _cvtsh_ss(in[i]);
  }

  static void narrow(uint16_t* __restrict out, const float* __restrict in, size_t count) {
    const size_t vectorEnd = count - count % kFloatLanes;
    for (size_t i = 0; i < vectorEnd; i += kFloatLanes) {
      const __m128i halves = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), kRoundNearestEven);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), halves);
    }
    for (size_t i = vectorEnd; i < count; ++i) out[i] = _cvtss_sh(in[i], kRoundNearestEven);
  }
};

// bfloat16 with hand-picked AVX2 instructions: the compiler's version of the element loop spends
// most of its time moving lanes around (vpmovzxwd, then vpackusdw + vpermq to come back), which
// made bfloat16 Sum instruction-bound at about half the float16 speed.
//
// Widening interleaves zero half-words below the elements (vpunpck{l,h}wd), which puts each
// element in the upper half of a float32 but, as vpunpck works inside 128-bit lanes, stores 16
// elements in the order 0-3 8-11 | 4-7 12-15. vpackusdw in narrow() is also in-lane and puts them
// back in order; the loops in between work element by element (see the codec note in loops.h).
// Rounding is the same integer arithmetic as detail::floatToBfloat16Bits.
struct Avx2Bfloat16Codec {
  static void widen(float* __restrict out, const uint16_t* __restrict in, size_t count) {
    const __m256i zero = _mm256_setzero_si256();
    const size_t vectorEnd = count - count % kHalfLanes;
    for (size_t i = 0; i < vectorEnd; i += kHalfLanes) {
      const __m256i values = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_unpacklo_epi16(zero, values));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + kFloatLanes),
                          _mm256_unpackhi_epi16(zero, values));
    }
    for (size_t i = vectorEnd; i < count; ++i) out[i] = detail::bfloat16BitsToFloat(in[i]);
  }

  static void narrow(uint16_t* __restrict out, const float* __restrict in, size_t count) {
    const size_t vectorEnd = count - count % kHalfLanes;
    for (size_t i = 0; i < vectorEnd; i += kHalfLanes) {
      const __m256i low = roundToBfloat16(_mm256_loadu_ps(in + i));
      const __m256i high = roundToBfloat16(_mm256_loadu_ps(in + i + kFloatLanes));
      // Each 32-bit lane holds a value below 2^16, so the saturating pack just narrows.
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_packus_epi32(low, high));
    }
    for (size_t i = vectorEnd; i < count; ++i) out[i] = detail::floatToBfloat16Bits(in[i]);
  }

 private:
  // Eight floats to bfloat16 bits, each in the low half of a 32-bit lane.
  static __m256i roundToBfloat16(__m256 value) {
    const __m256i bits = _mm256_castps_si256(value);
    const __m256i kept = _mm256_srli_epi32(bits, detail::kBfloat16Shift);
    const __m256i odd = _mm256_and_si256(kept, _mm256_set1_epi32(1));
    const __m256i halfUlpBelow = _mm256_set1_epi32((1 << (detail::kBfloat16Shift - 1)) - 1);
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(bits, halfUlpBelow), odd), detail::kBfloat16Shift);
    const __m256i quietNan =
        _mm256_or_si256(kept, _mm256_set1_epi32(static_cast<int>(detail::kBfloat16QuietBit)));
    const __m256 isNan = _mm256_cmp_ps(value, value, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(rounded, quietNan, _mm256_castps_si256(isNan));
  }
};

}  // namespace

const KernelSet kAvx2Kernels = kernelSetOf<F16cHalfCodec, Avx2Bfloat16Codec>("avx2");

}  // namespace ringcomm::reduce

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // defined(__x86_64__)
