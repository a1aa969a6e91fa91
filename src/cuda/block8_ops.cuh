// What the 8-bit block codec kernels (block8_steps.cuh) compute per block and per value: the
// arithmetic of src/codec/codec_block8.cc, written once more because that file's is host-only
// (std::frexp, std::ldexp, a static table), and compiled for host and device alike so that
// tests/cuda can hold it to the CPU codec on the host too.
//
// Each step is the CPU's own float32 operation, in its order: the int8 scale is largest / 127
// rounded to a bfloat16, each value x * (1 / scale) rounded to nearest even; a value decodes as
// code * scale and accumulates as accumulator + value. On the device every product, quotient and
// sum goes through a _rn intrinsic (multiplyRn and friends, element_ops.cuh), so that no build flag
// can fuse a multiply and an add into one FMA. fp8's powers of two are made from their bits,
// exactly; so are e4m3's values.
//
// NaN: as the 16-bit codec kernels (kernels.h), x86's: x86Multiply and x86Add of element_ops.cuh.
// A NaN or an infinity spoils only its own value (codec_block8.h): a block's scale is made from
// its finite values, and its non-finite ones get codes of their own.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "codec/codec_block8.h"
#include "cuda/element_ops.cuh"
#include "cuda/float_formats.cuh"

namespace ringcomm::cuda::detail::block8 {

using codec::block8::kBlock;
using codec::block8::kE4m3NanCode;
using codec::block8::kFp8ScaleBytes;
using codec::block8::kInt8MarkedMaxCode;
using codec::block8::kInt8MinusInfinityCode;
using codec::block8::kInt8NanCode;
using codec::block8::kInt8NonFiniteMark;
using codec::block8::kInt8PlusInfinityCode;
using codec::block8::kInt8ScaleBytes;

// codec_block8.cc's constants.
constexpr float kInt8Max = 127.0f;
constexpr float kInt8MarkedMax = kInt8MarkedMaxCode;  // a block holding a NaN or an infinity
// A block's fp8 exponent is its largest value's frexp exponent less kFp8ExponentOffset: the
// exponent of 2^x is x + 1 in frexp's terms, and e4m3's largest exponent is 8 (448 = 1.75 x 2^8).
constexpr int kFp8ExponentOffset = 1 + 8;
constexpr int kScaleBias = 127;
constexpr uint8_t kNanScale = 255;
// The int8 scale is a bfloat16: float32's top 16 bits.
constexpr int kBfloat16Shift = 16;

// What the kernels were written for; a change to the CPU's wire must show up here.
static_assert(kBlock == 32, "a block of 32 values");
static_assert(kInt8ScaleBytes == 2, "int8: a bfloat16 scale");
static_assert(kFp8ScaleBytes == 1, "fp8: an E8M0 scale byte");

constexpr uint32_t kInfinityBits = 0x7F800000u;
constexpr uint32_t kMagnitudeMask = 0x7FFFFFFFu;
constexpr uint32_t kQuietNanBits = 0x7FC00000u;  // std::numeric_limits<float>::quiet_NaN()

// --- Largest magnitude: the maximum of a block's finite |x| as float32 bits. ---
//
// Magnitudes compare as unsigned integers, and an infinity or a NaN is at or above kInfinityBits:
// the largest of a block's finiteMagnitudeBits, with whether any of its values isNonFinite, is the
// CPU's largestMagnitude (for magnitudes, max is the same whichever order the values come in).

RINGCOMM_HOST_DEVICE uint32_t magnitudeBits(float value) {
  return bitsOf(value) & kMagnitudeMask;
}

RINGCOMM_HOST_DEVICE bool isNonFinite(uint32_t magnitudeBits) {
  return magnitudeBits >= kInfinityBits;
}

// A value's magnitude bits, 0 for a NaN or an infinity: what the block's scale is made from.
RINGCOMM_HOST_DEVICE uint32_t finiteMagnitudeBits(float value) {
  const uint32_t magnitude = magnitudeBits(value);
  return isNonFinite(magnitude) ? 0u : magnitude;
}

// --- Rounding to a whole number, for the codes. ---

// Round to nearest, ties to even (std::nearbyint in the default rounding mode).
RINGCOMM_HOST_DEVICE float roundToNearestEven(float value) {
  return rintf(value);
}

// --- int8 ---

// The block's scale (codec/block8_scales.h, int8ScaleBits): its largest finite magnitude /
// largestCode (127, or kInt8MarkedMax for a block holding a NaN or an infinity) in float32,
// rounded to nearest even to a bfloat16; 0 for a block of zeros. The carry of the rounding cannot
// reach infinity: the quotient is at most FLT_MAX / 126. The wire's bits add the block's mark.
RINGCOMM_HOST_DEVICE uint16_t int8ScaleBits(uint32_t largestBits, float largestCode) {
  const uint32_t bits = bitsOf(divideRn(floatOf(largestBits), largestCode));
  const uint32_t odd = (bits >> kBfloat16Shift) & 1u;
  return static_cast<uint16_t>((bits + ((1u << (kBfloat16Shift - 1)) - 1u) + odd) >>
                               kBfloat16Shift);
}

// The float32 a scale's bits stand for.
RINGCOMM_HOST_DEVICE float int8Scale(uint16_t scaleBits) {
  return floatOf(uint32_t{scaleBits} << kBfloat16Shift);
}

// Whether the block's finite values get codes: a zero scale makes every one 0.
RINGCOMM_HOST_DEVICE bool int8HasCodes(float scale) {
  return scale > 0.0f;
}

// 1 / scale, for a scale > 0 (infinity when the scale is so small that its inverse overflows).
RINGCOMM_HOST_DEVICE float int8Inverse(float scale) {
  return divideRn(1.0f, scale);
}

// One finite value's code: value * inverse rounded to nearest even, clamped to [-largestCode,
// largestCode]. A NaN product (0 x infinity, when the inverse overflowed) codes 0, as the CPU's
// scales::int8Code.
RINGCOMM_HOST_DEVICE int8_t int8Code(float value, float inverse, float largestCode) {
  const float q = roundToNearestEven(multiplyRn(value, inverse));
  if (isNan(q)) return 0;
  const float clamped = q < -largestCode ? -largestCode : (q > largestCode ? largestCode : q);
  return static_cast<int8_t>(clamped);
}

// A NaN's or an infinity's code, in a marked block (scales::int8NonFiniteCode).
RINGCOMM_HOST_DEVICE int8_t int8NonFiniteCode(float value) {
  if (isNan(value)) return kInt8NanCode;
  return value > 0.0f ? kInt8PlusInfinityCode : kInt8MinusInfinityCode;
}

// One value decoded: code * scale, in that order (the order decides nothing here, as a code is
// never NaN, but it is the CPU's).
RINGCOMM_HOST_DEVICE float int8Value(int8_t code, float scale) {
  return x86Multiply(static_cast<float>(code), scale);
}

// One value of a marked block (scales::int8MarkedValue): its non-finite codes, else as above.
RINGCOMM_HOST_DEVICE float int8MarkedValue(int8_t code, float scale) {
  if (code == kInt8PlusInfinityCode) return floatOf(kInfinityBits);
  if (code == kInt8MinusInfinityCode) return floatOf(kInfinityBits | ~kMagnitudeMask);
  if (code == kInt8NanCode) return floatOf(kQuietNanBits);
  return int8Value(code, scale);
}

// --- fp8 (OCP mxfp8): an E8M0 scale byte, e4m3 codes. ---

// 2^exponent for exponent in [-127, 127], from its bits (2^-127 is a subnormal).
RINGCOMM_HOST_DEVICE float powerOfTwo(int exponent) {
  constexpr uint32_t kTwoToMinus127 = 0x00400000u;
  if (exponent == -kScaleBias) return floatOf(kTwoToMinus127);
  return floatOf(static_cast<uint32_t>(exponent + kScaleBias) << 23);
}

// The block's scale exponent e (its scale is 2^e): frexp's exponent of its largest finite
// magnitude less kFp8ExponentOffset, 0 for a block of zeros, within [-127, 127].
// frexp's exponent of a normal float is its biased exponent less 126; a subnormal's is below
// -125, so that its e is clamped to -127 as the biased exponent 0 gives here too.
RINGCOMM_HOST_DEVICE int fp8Exponent(uint32_t largestBits) {
  if (largestBits == 0) return 0;
  const int exponent = static_cast<int>(largestBits >> 23) - 126 - kFp8ExponentOffset;
  return exponent < -kScaleBias ? -kScaleBias : (exponent > kScaleBias ? kScaleBias : exponent);
}

// The block's scale byte, e + 127.
RINGCOMM_HOST_DEVICE uint8_t fp8ScaleByte(uint32_t largestBits) {
  return static_cast<uint8_t>(fp8Exponent(largestBits) + kScaleBias);
}

// What the finite values of a block with scale byte e + 127 are multiplied by before toE4m3: 2^-e.
RINGCOMM_HOST_DEVICE float fp8Unscale(uint8_t scaleByte) {
  return powerOfTwo(kScaleBias - static_cast<int>(scaleByte));
}

// The scale a byte stands for: 2^(byte - 127), NaN for kNanScale (which no encoder writes).
RINGCOMM_HOST_DEVICE float fp8Scale(uint8_t scaleByte) {
  if (scaleByte == kNanScale) return floatOf(kQuietNanBits);
  return powerOfTwo(static_cast<int>(scaleByte) - kScaleBias);
}

// codec_block8.cc's toE4m3: one e4m3 code from a value already scaled, rounded to nearest even,
// saturated at +-448; a NaN keeps its sign.
RINGCOMM_HOST_DEVICE uint8_t toE4m3(float value) {
  const uint32_t bits = bitsOf(value);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t magnitude = bits & kMagnitudeMask;
  if (magnitude > kInfinityBits) return sign | 0x7F;  // NaN
  if (magnitude >= 0x43E00000u) return sign | 0x7E;   // 448 and beyond saturate
  if (magnitude < 0x3C800000u) {
    // Below 2^-6, e4m3's subnormals: steps of 2^-9 (the product is exact); a count of 8 is the
    // smallest normal, whose code is 8 as well.
    return sign | static_cast<uint8_t>(roundToNearestEven(multiplyRn(floatOf(magnitude), 512.0f)));
  }
  // Normal: float32's top 3 bits of mantissa, rounded to nearest even (a carry goes into the
  // exponent), the exponent's bias moved from 127 to 7.
  const uint32_t rounded = magnitude + 0x7FFFFu + ((magnitude >> 20) & 1u);
  const uint32_t code = (rounded >> 20) - ((127u - 7u) << 3);
  return sign | static_cast<uint8_t>(code < 0x7Eu ? code : 0x7Eu);
}

// codec_block8.cc's fromE4m3 (its table), from the bits: 0x7F and 0xFF are the quiet NaN with the
// code's sign, exponent field 0 is mantissa x 2^-9, the rest move into float32's fields.
RINGCOMM_HOST_DEVICE float fromE4m3(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80) << 24;
  const uint32_t magnitude = code & 0x7Fu;
  uint32_t bits;
  if (magnitude == 0x7F) {
    bits = kQuietNanBits;
  } else if (magnitude < 8) {
    bits = bitsOf(multiplyRn(static_cast<float>(magnitude), 1.0f / 512.0f));  // exact
  } else {
    bits = (magnitude << 20) + ((127u - 7u) << 23);
  }
  return floatOf(sign | bits);
}

// One value decoded: e4m3 value * scale, in the CPU's order (when both are NaN, x86 keeps the
// code's).
RINGCOMM_HOST_DEVICE float fp8Value(uint8_t code, float scale) {
  return x86Multiply(fromE4m3(code), scale);
}

// --- The two codecs as the kernels use them. ---
//
// A block's scale travels as kScaleBytes bytes, which the kernels handle as a "scale word": the
// bytes little-endian in a uint32_t (the bfloat16 scale for int8, the E8M0 byte for fp8), so
// that no access needs the wire aligned. An Encoder is what every value of a block needs once the
// block's largest finite magnitude is known, and whether it holds a NaN or an infinity; a Decoder
// what every value needs once its scale is read.

struct Int8Codec {
  static constexpr const char* kName = "int8";
  static constexpr size_t kScaleBytes = kInt8ScaleBytes;

  struct Encoder {
    float largestCode;  // 127, or kInt8MarkedMax in a block marked for its non-finite values
    uint16_t scaleBits;  // without the mark
    uint16_t mark;
    float scale;  // what the bits stand for: the codes are made with the scale the wire carries
    bool hasCodes;
    float inverse;

    RINGCOMM_HOST_DEVICE Encoder(uint32_t largestFiniteBits, bool holdsNonFinite)
        : largestCode(holdsNonFinite ? kInt8MarkedMax : kInt8Max),
          scaleBits(int8ScaleBits(largestFiniteBits, largestCode)),
          mark(holdsNonFinite ? kInt8NonFiniteMark : uint16_t{0}),
          scale(int8Scale(scaleBits)),
          hasCodes(int8HasCodes(scale)),
          inverse(hasCodes ? int8Inverse(scale) : 0.0f) {}
    RINGCOMM_HOST_DEVICE uint32_t scaleWord() const { return scaleBits | mark; }
    RINGCOMM_HOST_DEVICE uint8_t code(float value) const {
      if (isNonFinite(magnitudeBits(value))) return static_cast<uint8_t>(int8NonFiniteCode(value));
      return hasCodes ? static_cast<uint8_t>(int8Code(value, inverse, largestCode)) : uint8_t{0};
    }
  };

  struct Decoder {
    bool marked;
    float scale;

    RINGCOMM_HOST_DEVICE explicit Decoder(uint32_t scaleWord)
        : marked((scaleWord & kInt8NonFiniteMark) != 0),
          scale(int8Scale(static_cast<uint16_t>(scaleWord & ~uint32_t{kInt8NonFiniteMark}))) {}
    RINGCOMM_HOST_DEVICE float value(uint8_t code) const {
      const int8_t signedCode = static_cast<int8_t>(code);
      return marked ? int8MarkedValue(signedCode, scale) : int8Value(signedCode, scale);
    }
  };
};

struct Fp8Codec {
  static constexpr const char* kName = "fp8";
  static constexpr size_t kScaleBytes = kFp8ScaleBytes;

  struct Encoder {
    uint8_t scaleByte;
    float unscale;

    // fp8 needs no mark: a non-finite value's code says what it is.
    RINGCOMM_HOST_DEVICE Encoder(uint32_t largestFiniteBits, bool /*holdsNonFinite*/)
        : scaleByte(fp8ScaleByte(largestFiniteBits)), unscale(fp8Unscale(scaleByte)) {}
    RINGCOMM_HOST_DEVICE uint32_t scaleWord() const { return scaleByte; }
    RINGCOMM_HOST_DEVICE uint8_t code(float value) const {
      if (isNonFinite(magnitudeBits(value))) return kE4m3NanCode;  // whatever its sign
      return toE4m3(multiplyRn(value, unscale));
    }
  };

  struct Decoder {
    float scale;

    RINGCOMM_HOST_DEVICE explicit Decoder(uint32_t scaleWord)
        : scale(fp8Scale(static_cast<uint8_t>(scaleWord))) {}
    RINGCOMM_HOST_DEVICE float value(uint8_t code) const { return fp8Value(code, scale); }
  };
};

}  // namespace ringcomm::cuda::detail::block8
