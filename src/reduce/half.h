// Software conversions between float32 and the two 16-bit float formats, bit-exact with the
// hardware ones: IEEE binary16 as x86 F16C does it (vcvtph2ps / vcvtps2ph with round to nearest
// even), bfloat16 as the upper half of a float32.
//
// Only integer operations are used, so the results do not depend on the FPU's rounding mode or on
// flush-to-zero / denormals-are-zero settings a host process may have turned on.
//
// NaN handling matches F16C (checked against it for every one of the 2^32 float inputs): a NaN
// keeps its sign and the top bits of its payload, and comes out quiet.
#pragma once

#include <cstdint>
#include <cstring>

namespace ringcomm::reduce::detail {

inline uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline float floatFromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// --- binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits. ---

constexpr uint32_t kHalfSignBit = 0x8000;
constexpr uint32_t kHalfExponentMask = 0x7C00;
constexpr uint32_t kHalfMantissaMask = 0x03FF;
constexpr uint32_t kHalfQuietBit = 0x0200;
constexpr int kHalfMantissaBits = 10;

constexpr uint32_t kFloatSignBit = 0x80000000u;
constexpr uint32_t kFloatAbsMask = 0x7FFFFFFFu;
constexpr uint32_t kFloatExponentMask = 0x7F800000u;
constexpr uint32_t kFloatMantissaMask = 0x007FFFFFu;
constexpr uint32_t kFloatQuietBit = 0x00400000u;
constexpr int kFloatMantissaBits = 23;

// float32 has 13 more mantissa bits than binary16.
constexpr int kHalfToFloatMantissaShift = kFloatMantissaBits - kHalfMantissaBits;
// Difference of the exponent biases (127 - 15), placed in the float32 exponent field.
constexpr uint32_t kHalfToFloatRebias = uint32_t{127 - 15} << kFloatMantissaBits;
// The smallest normal binary16, 2^-14, as float32 bits.
constexpr uint32_t kHalfMinNormalAsFloat = 0x38800000u;
// Half of the smallest binary16 subnormal (2^-25): at or below it everything rounds to zero
// (exactly 2^-25 is a tie, and zero is the even neighbour).
constexpr uint32_t kHalfZeroThresholdAsFloat = 0x33000000u;
// 65520 = 65504 (largest finite binary16) plus half an ulp: from there on, round to infinity.
constexpr uint32_t kHalfOverflowThresholdAsFloat = 0x477FF000u;

inline float halfBitsToFloat(uint16_t half) {
  const uint32_t sign = (uint32_t{half} & kHalfSignBit) << 16;
  const uint32_t exponent = uint32_t{half} & kHalfExponentMask;
  uint32_t mantissa = uint32_t{half} & kHalfMantissaMask;

  if (exponent == kHalfExponentMask) {  // infinity or NaN
    const uint32_t quiet = mantissa != 0 ? kFloatQuietBit : 0;
    return floatFromBits(sign | kFloatExponentMask | quiet |
                         (mantissa << kHalfToFloatMantissaShift));
  }
  if (exponent != 0) {  // normal
    return floatFromBits(sign | (((exponent | mantissa) << kHalfToFloatMantissaShift) +
                                 kHalfToFloatRebias));
  }
  if (mantissa == 0) return floatFromBits(sign);  // signed zero

  // Subnormal: value = mantissa * 2^-24, a normal float32. Shift the leading one up to the
  // implicit-bit position and lower the exponent by the same amount.
  uint32_t floatExponent = kHalfMinNormalAsFloat >> kFloatMantissaBits;  // 2^-14
  while ((mantissa & (kHalfMantissaMask + 1)) == 0) {
    mantissa <<= 1;
    --floatExponent;
  }
  mantissa &= kHalfMantissaMask;
  return floatFromBits(sign | (floatExponent << kFloatMantissaBits) |
                       (mantissa << kHalfToFloatMantissaShift));
}

inline uint16_t floatToHalfBits(float value) {
  const uint32_t bits = floatBits(value);
  const uint32_t sign = (bits >> 16) & kHalfSignBit;
  const uint32_t magnitude = bits & kFloatAbsMask;

  if (magnitude > kFloatExponentMask) {  // NaN: keep the payload's top bits, make it quiet
    return static_cast<uint16_t>(sign | kHalfExponentMask | kHalfQuietBit |
                                 ((magnitude >> kHalfToFloatMantissaShift) & kHalfMantissaMask));
  }
  if (magnitude >= kHalfOverflowThresholdAsFloat) {  // overflow, or infinity itself
    return static_cast<uint16_t>(sign | kHalfExponentMask);
  }
  if (magnitude >= kHalfMinNormalAsFloat) {
    // Round the 13 dropped bits to nearest even: add just under half an ulp, plus one when the
    // kept part is odd, and let a carry ripple into the exponent (it cannot reach infinity,
    // the overflow threshold above caught those values).
    const uint32_t odd = (magnitude >> kHalfToFloatMantissaShift) & 1;
    const uint32_t rounded = magnitude + ((1u << (kHalfToFloatMantissaShift - 1)) - 1) + odd;
    return static_cast<uint16_t>(sign |
                                 ((rounded - kHalfToFloatRebias) >> kHalfToFloatMantissaShift));
  }
  if (magnitude <= kHalfZeroThresholdAsFloat) return static_cast<uint16_t>(sign);

  // Subnormal result: units of 2^-24. The float32 significand (with its implicit bit) is worth
  // significand * 2^(exponent - 150); dividing by 2^-24 is a right shift by 126 - exponent,
  // which is between 14 and 24 here. A result of 0x400 is correctly the smallest normal.
  const uint32_t significand = (magnitude & kFloatMantissaMask) | (kFloatMantissaMask + 1);
  const int shift = 126 - static_cast<int>(magnitude >> kFloatMantissaBits);
  const uint32_t kept = significand >> shift;
  const uint32_t dropped = significand & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  const bool roundUp = dropped > halfway || (dropped == halfway && (kept & 1) != 0);
  return static_cast<uint16_t>(sign | (kept + (roundUp ? 1 : 0)));
}

// --- bfloat16: the upper 16 bits of a float32. ---

constexpr int kBfloat16Shift = 16;
constexpr uint32_t kBfloat16QuietBit = 0x0040;

inline float bfloat16BitsToFloat(uint16_t value) {
  return floatFromBits(uint32_t{value} << kBfloat16Shift);
}

inline uint16_t floatToBfloat16Bits(float value) {
  const uint32_t bits = floatBits(value);
  // Round to nearest even; overflow carries into the exponent and gives infinity, as it should.
  const uint32_t odd = (bits >> kBfloat16Shift) & 1;
  const uint32_t rounded = (bits + ((1u << (kBfloat16Shift - 1)) - 1) + odd) >> kBfloat16Shift;
  // NaN: truncating could leave an all-zero mantissa (infinity), so set the quiet bit instead.
  const uint32_t quietNan = (bits >> kBfloat16Shift) | kBfloat16QuietBit;
  // Both candidates computed and one selected, with a float comparison: this vectorises to a
  // compare and one blend (AVX2 has no unsigned 32-bit compare for the integer NaN test), and
  // NaN compares unequal whatever the FPU mode.
  return static_cast<uint16_t>(value != value ? quietNan : rounded);
}

}  // namespace ringcomm::reduce::detail
