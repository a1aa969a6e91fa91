#include "codec/codec_block8_avx2.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>

#include "codec/block8_scales.h"
#include "codec/codec_block8.h"

namespace ringcomm::codec::block8::avx2 {
namespace {

constexpr size_t kVectors = kBlock / 8;  // a block is four vectors of 8 floats
static_assert(kBlock == 32, "the loops below hold one block in four registers");

using Block = __m256[kVectors];

#define RINGCOMM_AVX2 __attribute__((target("avx2")))

RINGCOMM_AVX2 inline void load(const float* in, Block block) {
  for (size_t v = 0; v < kVectors; ++v) block[v] = _mm256_loadu_ps(in + 8 * v);
}

constexpr uint32_t kInfinityBits = 0x7F800000u;

// 8 values' magnitudes as float32 bits: magnitudes compare as integers, and an infinity or a NaN
// is above every finite one.
RINGCOMM_AVX2 inline __m256i magnitudes(__m256 values) {
  return _mm256_and_si256(_mm256_castps_si256(values), _mm256_set1_epi32(0x7FFFFFFF));
}

// All ones in the lanes holding a NaN or an infinity.
RINGCOMM_AVX2 inline __m256i nonFiniteLanes(__m256 values) {
  return _mm256_cmpgt_epi32(magnitudes(values), _mm256_set1_epi32(kInfinityBits - 1));
}

RINGCOMM_AVX2 inline uint32_t largestLane(__m256i lanes) {
  __m128i half = _mm_max_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
  half = _mm_max_epi32(half, _mm_shuffle_epi32(half, _MM_SHUFFLE(1, 0, 3, 2)));
  half = _mm_max_epi32(half, _mm_shuffle_epi32(half, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(half));
}

// The block's largest finite magnitude as float32 bits, and whether it holds a NaN or an
// infinity, which the scale leaves out (codec_block8.h). Nearly every block is finite: its
// largest magnitude is all it takes; the others take a second pass that skips their non-finite
// values.
struct Largest {
  uint32_t finiteBits;
  bool nonFinite;
};

RINGCOMM_AVX2 inline Largest largestMagnitude(const Block block) {
  __m256i largest = _mm256_setzero_si256();
  for (size_t v = 0; v < kVectors; ++v) largest = _mm256_max_epi32(largest, magnitudes(block[v]));
  const uint32_t bits = largestLane(largest);
  if (bits < kInfinityBits) return {bits, false};
  largest = _mm256_setzero_si256();
  for (size_t v = 0; v < kVectors; ++v) {
    const __m256i finite = _mm256_andnot_si256(nonFiniteLanes(block[v]), magnitudes(block[v]));
    largest = _mm256_max_epi32(largest, finite);
  }
  return {largestLane(largest), true};
}

inline float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Four vectors of 8 int32 codes, each in [-128, 255], to 32 bytes in order. The packs work within
// 128-bit lanes; the permute puts the lanes' 4-byte groups back in order.
RINGCOMM_AVX2 inline void storeBytes(const __m256i codes[kVectors], bool isSigned, uint8_t* out) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256i bytes;
  if (isSigned) {
    const __m256i low = _mm256_packs_epi32(codes[0], codes[1]);
    const __m256i high = _mm256_packs_epi32(codes[2], codes[3]);
    bytes = _mm256_packs_epi16(low, high);
  } else {
    const __m256i low = _mm256_packus_epi32(codes[0], codes[1]);
    const __m256i high = _mm256_packus_epi32(codes[2], codes[3]);
    bytes = _mm256_packus_epi16(low, high);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permutevar8x32_epi32(bytes, order));
}

// Accumulates into, or overwrites, 8 values.
RINGCOMM_AVX2 inline void storeValues(float* out, __m256 values, bool accumulate) {
  if (accumulate) values = _mm256_add_ps(_mm256_loadu_ps(out), values);
  _mm256_storeu_ps(out, values);
}

// scales::int8Code for 8 products: round to nearest even, NaN to 0, clamp to [-largestCode,
// largestCode].
RINGCOMM_AVX2 inline __m256i int8Codes(__m256 products, float largestCode) {
  __m256 q = _mm256_round_ps(products, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  q = _mm256_and_ps(q, _mm256_cmp_ps(q, q, _CMP_ORD_Q));  // NaN -> +0
  q = _mm256_min_ps(_mm256_max_ps(q, _mm256_set1_ps(-largestCode)), _mm256_set1_ps(largestCode));
  return _mm256_cvtps_epi32(q);  // already whole: no rounding left
}

// scales::int8NonFiniteCode for the lanes of 8 values that hold a NaN or an infinity, in place of
// their codes.
RINGCOMM_AVX2 inline __m256i withInt8NonFiniteCodes(__m256i codes, __m256 values) {
  const __m256i isNan = _mm256_cmpgt_epi32(magnitudes(values), _mm256_set1_epi32(kInfinityBits));
  const __m256i negative = _mm256_srai_epi32(_mm256_castps_si256(values), 31);
  const __m256i infinity = _mm256_blendv_epi8(_mm256_set1_epi32(kInt8PlusInfinityCode),
                                              _mm256_set1_epi32(kInt8MinusInfinityCode), negative);
  const __m256i special = _mm256_blendv_epi8(infinity, _mm256_set1_epi32(kInt8NanCode), isNan);
  return _mm256_blendv_epi8(codes, special, nonFiniteLanes(values));
}

// scales::int8MarkedValue for 8 values already decoded as code x scale: the non-finite codes'
// values in their place.
RINGCOMM_AVX2 inline __m256i whereCodeIs(int8_t code, uint32_t valueBits, __m256i codes,
                                         __m256i bits) {
  const __m256i here = _mm256_cmpeq_epi32(codes, _mm256_set1_epi32(code));
  return _mm256_blendv_epi8(bits, _mm256_set1_epi32(static_cast<int>(valueBits)), here);
}

RINGCOMM_AVX2 inline __m256 withInt8NonFiniteValues(__m256i codes, __m256 values) {
  __m256i bits = _mm256_castps_si256(values);
  bits = whereCodeIs(kInt8PlusInfinityCode, kInfinityBits, codes, bits);
  bits = whereCodeIs(kInt8MinusInfinityCode, kInfinityBits | 0x80000000u, codes, bits);
  bits = whereCodeIs(kInt8NanCode, 0x7FC00000u, codes, bits);  // quiet_NaN(), as the portable
  return _mm256_castsi256_ps(bits);
}

// toE4m3 (codec_block8.h) for 8 values already scaled.
RINGCOMM_AVX2 inline __m256i e4m3Codes(__m256 values) {
  const __m256i bits = _mm256_castps_si256(values);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80));
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
  // Normal: float32's top 3 bits of mantissa rounded to nearest even, the bias moved to 7.
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(magnitude, 20), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_add_epi32(_mm256_add_epi32(magnitude, _mm256_set1_epi32(0x7FFFF)), odd);
  __m256i code = _mm256_sub_epi32(_mm256_srli_epi32(rounded, 20), _mm256_set1_epi32(120 << 3));
  code = _mm256_min_epi32(code, _mm256_set1_epi32(0x7E));
  // Below 2^-6: subnormal steps of 2^-9.
  const __m256 absolute = _mm256_castsi256_ps(magnitude);
  const __m256i subnormal = _mm256_cvtps_epi32(_mm256_round_ps(
      _mm256_mul_ps(absolute, _mm256_set1_ps(512.0f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const __m256i isSubnormal = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3C800000), magnitude);
  code = _mm256_blendv_epi8(code, subnormal, isSubnormal);
  // 448 and beyond saturate; NaN stays NaN.
  const __m256i saturates = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x43E00000 - 1));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7E), saturates);
  const __m256i isNan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(kInfinityBits));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7F), isNan);
  return _mm256_or_si256(code, sign);
}

// fromE4m3 for 8 codes (the low byte of each int32), computed rather than looked up.
RINGCOMM_AVX2 inline __m256 e4m3Values(__m256i codes) {
  const __m256i magnitude = _mm256_and_si256(codes, _mm256_set1_epi32(0x7F));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(codes, _mm256_set1_epi32(0x80)), 24);
  // Normal: the exponent and mantissa fields move into float32's, the bias from 7 to 127.
  const __m256i normal =
      _mm256_add_epi32(_mm256_slli_epi32(magnitude, 20), _mm256_set1_epi32(120 << 23));
  // Exponent field 0: mantissa x 2^-9, exactly.
  const __m256i subnormal = _mm256_castps_si256(
      _mm256_mul_ps(_mm256_cvtepi32_ps(magnitude), _mm256_set1_ps(1.0f / 512.0f)));
  const __m256i isSubnormal = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), magnitude);
  __m256i value = _mm256_blendv_epi8(normal, subnormal, isSubnormal);
  const __m256i isNan = _mm256_cmpeq_epi32(magnitude, _mm256_set1_epi32(0x7F));
  value = _mm256_blendv_epi8(value, _mm256_set1_epi32(0x7FC00000), isNan);
  return _mm256_castsi256_ps(_mm256_or_si256(value, sign));
}

}  // namespace

RINGCOMM_AVX2 void encodeInt8(const float* in, uint8_t* out, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, in += kBlock, out += kBlock + kInt8ScaleBytes) {
    Block block;
    load(in, block);
    const Largest largest = largestMagnitude(block);
    const float largestCode = largest.nonFinite ? scales::kInt8MarkedMax : scales::kInt8Max;
    const uint16_t scaleBits = scales::int8ScaleBits(floatOf(largest.finiteBits), largestCode);
    const uint16_t wireScaleBits = scaleBits | (largest.nonFinite ? kInt8NonFiniteMark : 0);
    std::memcpy(out, &wireScaleBits, kInt8ScaleBytes);
    const float scale = scales::int8Scale(scaleBits);
    // A zero scale (no finite value but zeros) codes every finite value 0, as the portable loop.
    const __m256 inverse = _mm256_set1_ps(scale > 0.0f ? 1.0f / scale : 0.0f);
    __m256i codes[kVectors];
    for (size_t v = 0; v < kVectors; ++v) {
      codes[v] = int8Codes(_mm256_mul_ps(block[v], inverse), largestCode);
      if (largest.nonFinite) codes[v] = withInt8NonFiniteCodes(codes[v], block[v]);
    }
    storeBytes(codes, /*isSigned=*/true, out + kInt8ScaleBytes);
  }
}

RINGCOMM_AVX2 void decodeInt8(const uint8_t* in, float* out, size_t blocks, bool accumulate) {
  for (size_t b = 0; b < blocks; ++b, in += kBlock + kInt8ScaleBytes, out += kBlock) {
    uint16_t scaleBits;
    std::memcpy(&scaleBits, in, kInt8ScaleBytes);
    const bool marked = (scaleBits & kInt8NonFiniteMark) != 0;
    const float scale = scales::int8Scale(static_cast<uint16_t>(scaleBits & ~kInt8NonFiniteMark));
    const __m256 scales = _mm256_set1_ps(scale);
    const uint8_t* codes = in + kInt8ScaleBytes;
    for (size_t v = 0; v < kVectors; ++v) {
      const __m128i eight = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + 8 * v));
      const __m256i wide = _mm256_cvtepi8_epi32(eight);
      __m256 values = _mm256_mul_ps(_mm256_cvtepi32_ps(wide), scales);
      if (marked) values = withInt8NonFiniteValues(wide, values);
      storeValues(out + 8 * v, values, accumulate);
    }
  }
}

RINGCOMM_AVX2 void encodeFp8(const float* in, uint8_t* out, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, in += kBlock, out += kBlock + kFp8ScaleBytes) {
    Block block;
    load(in, block);
    const Largest largest = largestMagnitude(block);
    const int exponent = scales::fp8Exponent(floatOf(largest.finiteBits));
    out[0] = static_cast<uint8_t>(exponent + scales::kScaleBias);
    const __m256 unscale = _mm256_set1_ps(scales::powerOfTwo(-exponent));
    __m256i codes[kVectors];
    for (size_t v = 0; v < kVectors; ++v) {
      codes[v] = e4m3Codes(_mm256_mul_ps(block[v], unscale));
      if (largest.nonFinite) {
        codes[v] = _mm256_blendv_epi8(codes[v], _mm256_set1_epi32(kE4m3NanCode),
                                      nonFiniteLanes(block[v]));
      }
    }
    storeBytes(codes, /*isSigned=*/false, out + kFp8ScaleBytes);
  }
}

// fp8 decodes a NaN code as NaN whatever its block holds: no block needs the portable loop.
RINGCOMM_AVX2 void decodeFp8(const uint8_t* in, float* out, size_t blocks, bool accumulate) {
  for (size_t b = 0; b < blocks; ++b, in += kBlock + kFp8ScaleBytes, out += kBlock) {
    const __m256 scale = _mm256_set1_ps(scales::fp8Scale(in[0]));
    const uint8_t* codes = in + kFp8ScaleBytes;
    for (size_t v = 0; v < kVectors; ++v) {
      const __m128i eight = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + 8 * v));
      const __m256 values = e4m3Values(_mm256_cvtepu8_epi32(eight));
      storeValues(out + 8 * v, _mm256_mul_ps(values, scale), accumulate);
    }
  }
}

bool available() {
  static const bool supported = __builtin_cpu_supports("avx2");
  return supported;
}

#undef RINGCOMM_AVX2

}  // namespace ringcomm::codec::block8::avx2

#else

namespace ringcomm::codec::block8::avx2 {
void encodeInt8(const float*, uint8_t*, size_t) {}
void decodeInt8(const uint8_t*, float*, size_t, bool) {}
void encodeFp8(const float*, uint8_t*, size_t) {}
void decodeFp8(const uint8_t*, float*, size_t, bool) {}
bool available() { return false; }
}  // namespace ringcomm::codec::block8::avx2

#endif
