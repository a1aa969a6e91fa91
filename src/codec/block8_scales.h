// The per-block scales of the 8-bit codecs (codec_block8.h), shared by the portable and the AVX2
// loops so that both put the same bytes on the wire.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "codec/codec_block8.h"

namespace ringcomm::codec::block8::scales {

constexpr float kInt8Max = 127.0f;
constexpr float kInt8MarkedMax = kInt8MarkedMaxCode;
// e4m3's largest exponent: 448 = 1.75 x 2^8.
constexpr int kE4m3MaxExponent = 8;
constexpr int kScaleBias = 127;
constexpr uint8_t kNanScale = 255;

// int8: the block's largest magnitude / 127 as a bfloat16 (float32's top 16 bits, what the wire
// carries), rounded to nearest even: float32's range in half the bytes. Rounded to nearest, the
// largest value codes as 127 (or 128, clamped to 127), never 126: so values decoded from a block
// encode again to the same bytes, which the all-reduce's owners of blocks rely on. Zero gives zero.
// A block holding a NaN or an infinity divides its largest finite magnitude by
// kInt8MarkedMaxCode instead (codec_block8.h), for the same reason.
inline uint16_t int8ScaleBits(float largest, float largestCode = kInt8Max) {
  const float scale = largest / largestCode;
  uint32_t bits;
  std::memcpy(&bits, &scale, sizeof bits);
  // Finite and at most FLT_MAX / 126: the carry of rounding never reaches infinity.
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float int8Scale(uint16_t scaleBits) {
  const uint32_t bits = uint32_t{scaleBits} << 16;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return scale;
}

// A value's int8 code from its product with the inverse scale, rounded to nearest even and
// clamped to [-largestCode, largestCode]. A NaN product (0 x infinity, when the scale is so small
// that its inverse overflows) codes 0, as a zero value should.
inline int8_t int8Code(float product, float largestCode = kInt8Max) {
  const float q = std::nearbyint(product);
  if (std::isnan(q)) return 0;
  return static_cast<int8_t>(std::clamp(q, -largestCode, largestCode));
}

// The code a NaN or an infinity takes in a block marked with kInt8NonFiniteMark.
inline int8_t int8NonFiniteCode(float value) {
  if (std::isnan(value)) return kInt8NanCode;
  return value > 0.0f ? kInt8PlusInfinityCode : kInt8MinusInfinityCode;
}

// One value of a block marked with kInt8NonFiniteMark, whose scale is `magnitude` (the scale's
// bits without the mark): its three non-finite codes, else code x magnitude.
inline float int8MarkedValue(int8_t code, float magnitude) {
  if (code == kInt8PlusInfinityCode) return std::numeric_limits<float>::infinity();
  if (code == kInt8MinusInfinityCode) return -std::numeric_limits<float>::infinity();
  if (code == kInt8NanCode) return std::numeric_limits<float>::quiet_NaN();
  return static_cast<float>(code) * magnitude;
}

// fp8: the exponent e of the block's scale 2^e: the largest exponent less 8, so that the largest
// value lands in [256, 512); 0 for a block of zeros; within E8M0's [-127, 127].
inline int fp8Exponent(float largest) {
  int exponent = 0;
  if (largest > 0.0f) {
    std::frexp(largest, &exponent);
    exponent = exponent - 1 - kE4m3MaxExponent;
  }
  return std::clamp(exponent, -kScaleBias, kScaleBias);
}

// 2^exponent for exponent in [-127, 127], exactly.
inline float powerOfTwo(int exponent) { return std::ldexp(1.0f, exponent); }

// The scale a block's E8M0 byte stands for (kNanScale, NaN, is no encoder's; codec_block8.h).
inline float fp8Scale(uint8_t byte) {
  return byte == kNanScale ? std::numeric_limits<float>::quiet_NaN()
                           : powerOfTwo(static_cast<int>(byte) - kScaleBias);
}

}  // namespace ringcomm::codec::block8::scales
