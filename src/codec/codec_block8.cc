#include "codec/codec_block8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace ringcomm::codec::block8 {
namespace {

constexpr float kInt8Max = 127.0f;
constexpr float kE4m3Max = 448.0f;
// e4m3's largest exponent: 448 = 1.75 x 2^8.
constexpr int kE4m3MaxExponent = 8;
constexpr int kScaleBias = 127;
constexpr uint8_t kNanScale = 255;

// The largest magnitude of a block, or NaN where the block holds a NaN or an infinity.
float largestMagnitude(const float* in, size_t n) {
  float largest = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float magnitude = std::fabs(in[i]);
    if (!std::isfinite(magnitude)) return std::numeric_limits<float>::quiet_NaN();
    largest = std::max(largest, magnitude);
  }
  return largest;
}

// Decoding a byte is a table lookup.
const std::array<float, 256>& e4m3Values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> values{};
    for (int code = 0; code < 256; ++code) {
      const int exponent = (code >> 3) & 0xF;
      const int mantissa = code & 0x7;
      float magnitude;
      if (exponent == 0xF && mantissa == 0x7) {
        magnitude = std::numeric_limits<float>::quiet_NaN();
      } else if (exponent == 0) {
        magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m/8 x 2^-6
      } else {
        magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - 7 - 3);
      }
      values[static_cast<size_t>(code)] = (code & 0x80) ? -magnitude : magnitude;
    }
    return values;
  }();
  return table;
}

}  // namespace

uint8_t toE4m3(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return sign | 0x7F;  // NaN
  if (magnitude >= 0x43E00000u) return sign | 0x7E;  // 448 and beyond saturate, as MX's do
  if (magnitude < 0x3C800000u) {
    // Below 2^-6, e4m3's subnormals: steps of 2^-9. A count of 8 is the smallest normal, whose
    // code is 8 as well.
    float absolute;
    std::memcpy(&absolute, &magnitude, sizeof absolute);
    return sign | static_cast<uint8_t>(std::nearbyint(absolute * 512.0f));
  }
  // Normal: keep float32's top 3 bits of mantissa, rounded to nearest even (a carry goes into the
  // exponent), then move the exponent's bias from 127 to 7.
  const uint32_t rounded = magnitude + 0x7FFFFu + ((magnitude >> 20) & 1u);
  const uint32_t code = (rounded >> 20) - ((127u - 7u) << 3);
  return sign | static_cast<uint8_t>(std::min<uint32_t>(code, 0x7E));
}

float fromE4m3(uint8_t code) { return e4m3Values()[code]; }

void encodeInt8(const float* in, uint8_t* out, size_t n) {
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t count = std::min(kBlock, n - start);
    const float* values = in + start;
    const float largest = largestMagnitude(values, count);
    const float scale = largest / kInt8Max;  // NaN stays NaN
    std::memcpy(out, &scale, kInt8ScaleBytes);
    int8_t* codes = reinterpret_cast<int8_t*>(out + kInt8ScaleBytes);
    if (scale > 0.0f) {
      const float inverse = 1.0f / scale;
      for (size_t i = 0; i < count; ++i) {
        const float q = std::nearbyint(values[i] * inverse);
        codes[i] = static_cast<int8_t>(std::clamp(q, -kInt8Max, kInt8Max));
      }
    } else {
      std::memset(codes, 0, count);  // all zeros, or a NaN scale that decodes to NaN anyway
    }
    out += kInt8ScaleBytes + count;
  }
}

void decodeInt8(const uint8_t* in, float* out, size_t n, bool accumulate) {
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t count = std::min(kBlock, n - start);
    float scale;
    std::memcpy(&scale, in, kInt8ScaleBytes);
    const int8_t* codes = reinterpret_cast<const int8_t*>(in + kInt8ScaleBytes);
    float* values = out + start;
    for (size_t i = 0; i < count; ++i) {
      const float value = static_cast<float>(codes[i]) * scale;
      values[i] = accumulate ? values[i] + value : value;
    }
    in += kInt8ScaleBytes + count;
  }
}

void encodeFp8(const float* in, uint8_t* out, size_t n) {
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t count = std::min(kBlock, n - start);
    const float* values = in + start;
    const float largest = largestMagnitude(values, count);
    uint8_t* codes = out + kFp8ScaleBytes;
    if (std::isnan(largest)) {
      out[0] = kNanScale;
      std::memset(codes, 0, count);
    } else {
      int exponent = 0;
      if (largest > 0.0f) {
        std::frexp(largest, &exponent);
        exponent = exponent - 1 - kE4m3MaxExponent;
      }
      exponent = std::clamp(exponent, -kScaleBias, kScaleBias);
      out[0] = static_cast<uint8_t>(exponent + kScaleBias);
      const float unscale = std::ldexp(1.0f, -exponent);  // a power of two: exact
      for (size_t i = 0; i < count; ++i) codes[i] = toE4m3(values[i] * unscale);
    }
    out += kFp8ScaleBytes + count;
  }
}

void decodeFp8(const uint8_t* in, float* out, size_t n, bool accumulate) {
  const std::array<float, 256>& table = e4m3Values();
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t count = std::min(kBlock, n - start);
    const float scale = in[0] == kNanScale ? std::numeric_limits<float>::quiet_NaN()
                                           : std::ldexp(1.0f, static_cast<int>(in[0]) - kScaleBias);
    const uint8_t* codes = in + kFp8ScaleBytes;
    float* values = out + start;
    for (size_t i = 0; i < count; ++i) {
      const float value = table[codes[i]] * scale;
      values[i] = accumulate ? values[i] + value : value;
    }
    in += kFp8ScaleBytes + count;
  }
}

}  // namespace ringcomm::codec::block8
