#include "codec/codec_block8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "codec/block8_scales.h"
#include "codec/codec_block8_avx2.h"

namespace ringcomm::codec::block8 {
namespace {

// What a block's scale is made from: its largest finite magnitude, and whether it holds a NaN or
// an infinity, which the scale leaves out (codec_block8.h).
struct Largest {
  float finite = 0.0f;
  bool nonFinite = false;
};

Largest largestMagnitude(const float* in, size_t n) {
  Largest largest;
  for (size_t i = 0; i < n; ++i) {
    const float magnitude = std::fabs(in[i]);
    if (std::isfinite(magnitude)) {
      largest.finite = std::max(largest.finite, magnitude);
    } else {
      largest.nonFinite = true;
    }
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

namespace portable {

void encodeInt8(const float* in, uint8_t* out, size_t n) {
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t count = std::min(kBlock, n - start);
    const float* values = in + start;
    const Largest largest = largestMagnitude(values, count);
    const float largestCode = largest.nonFinite ? scales::kInt8MarkedMax : scales::kInt8Max;
    const uint16_t scaleBits = scales::int8ScaleBits(largest.finite, largestCode);
    const uint16_t mark = largest.nonFinite ? kInt8NonFiniteMark : 0;
    const uint16_t wireScaleBits = scaleBits | mark;
    std::memcpy(out, &wireScaleBits, kInt8ScaleBytes);
    const float scale = scales::int8Scale(scaleBits);
    int8_t* codes = reinterpret_cast<int8_t*>(out + kInt8ScaleBytes);
    // A zero scale (no finite value but zeros) codes every finite value 0.
    const float inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (size_t i = 0; i < count; ++i) {
      codes[i] = std::isfinite(values[i]) ? scales::int8Code(values[i] * inverse, largestCode)
                                          : scales::int8NonFiniteCode(values[i]);
    }
    out += kInt8ScaleBytes + count;
  }
}

void decodeInt8(const uint8_t* in, float* out, size_t n, bool accumulate) {
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t count = std::min(kBlock, n - start);
    uint16_t scaleBits;
    std::memcpy(&scaleBits, in, kInt8ScaleBytes);
    const bool marked = (scaleBits & kInt8NonFiniteMark) != 0;
    const float scale = scales::int8Scale(static_cast<uint16_t>(scaleBits & ~kInt8NonFiniteMark));
    const int8_t* codes = reinterpret_cast<const int8_t*>(in + kInt8ScaleBytes);
    float* values = out + start;
    if (marked) {
      for (size_t i = 0; i < count; ++i) {
        const float value = scales::int8MarkedValue(codes[i], scale);
        values[i] = accumulate ? values[i] + value : value;
      }
    } else {
      for (size_t i = 0; i < count; ++i) {
        const float value = static_cast<float>(codes[i]) * scale;
        values[i] = accumulate ? values[i] + value : value;
      }
    }
    in += kInt8ScaleBytes + count;
  }
}

void encodeFp8(const float* in, uint8_t* out, size_t n) {
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t count = std::min(kBlock, n - start);
    const float* values = in + start;
    const int exponent = scales::fp8Exponent(largestMagnitude(values, count).finite);
    out[0] = static_cast<uint8_t>(exponent + scales::kScaleBias);
    uint8_t* codes = out + kFp8ScaleBytes;
    const float unscale = scales::powerOfTwo(-exponent);  // a power of two: exact
    for (size_t i = 0; i < count; ++i) {
      codes[i] = std::isfinite(values[i]) ? toE4m3(values[i] * unscale) : kE4m3NanCode;
    }
    out += kFp8ScaleBytes + count;
  }
}

void decodeFp8(const uint8_t* in, float* out, size_t n, bool accumulate) {
  const std::array<float, 256>& table = e4m3Values();
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t count = std::min(kBlock, n - start);
    const float scale = scales::fp8Scale(in[0]);
    const uint8_t* codes = in + kFp8ScaleBytes;
    float* values = out + start;
    for (size_t i = 0; i < count; ++i) {
      const float value = table[codes[i]] * scale;
      values[i] = accumulate ? values[i] + value : value;
    }
    in += kFp8ScaleBytes + count;
  }
}

}  // namespace portable

namespace {

// Whole blocks go to the AVX2 loops where the CPU has them (the same bytes and bits: both take
// their scales from block8_scales.h), the short last block to the portable ones. Int8 and fp8
// split alike; they differ only in their loops and in the bytes of a block's scale on the wire
// (a block there is kBlock codes and kScaleBytes).
size_t vectorBlocks(size_t n) { return avx2::available() ? n / kBlock : 0; }

template <size_t kScaleBytes, typename Vector, typename Portable>
void encodeSplit(const float* in, uint8_t* out, size_t n, Vector vector, Portable portable) {
  const size_t blocks = vectorBlocks(n);
  if (blocks > 0) vector(in, out, blocks);
  portable(in + blocks * kBlock, out + blocks * (kBlock + kScaleBytes), n - blocks * kBlock);
}

template <size_t kScaleBytes, typename Vector, typename Portable>
void decodeSplit(const uint8_t* in, float* out, size_t n, bool accumulate, Vector vector,
                 Portable portable) {
  const size_t blocks = vectorBlocks(n);
  if (blocks > 0) vector(in, out, blocks, accumulate);
  portable(in + blocks * (kBlock + kScaleBytes), out + blocks * kBlock, n - blocks * kBlock,
           accumulate);
}

}  // namespace

void encodeInt8(const float* in, uint8_t* out, size_t n) {
  encodeSplit<kInt8ScaleBytes>(in, out, n, avx2::encodeInt8, portable::encodeInt8);
}

void decodeInt8(const uint8_t* in, float* out, size_t n, bool accumulate) {
  decodeSplit<kInt8ScaleBytes>(in, out, n, accumulate, avx2::decodeInt8, portable::decodeInt8);
}

void encodeFp8(const float* in, uint8_t* out, size_t n) {
  encodeSplit<kFp8ScaleBytes>(in, out, n, avx2::encodeFp8, portable::encodeFp8);
}

void decodeFp8(const uint8_t* in, float* out, size_t n, bool accumulate) {
  decodeSplit<kFp8ScaleBytes>(in, out, n, accumulate, avx2::decodeFp8, portable::decodeFp8);
}

}  // namespace ringcomm::codec::block8
