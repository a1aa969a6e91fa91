// Software conversions between float32 and the two 16-bit float formats, bit-exact with the
// hardware ones: IEEE binary16 as x86 F16C does it (vcvtph2ps / vcvtps2ph with round to nearest
// even), bfloat16 as the upper half of a float32.
//
// The results do not depend on the FPU's rounding mode or on flush-to-zero / denormals-are-zero
// settings a host process may have turned on: rounding is integer arithmetic, and the one float
// operation (widening a binary16 subnormal) is exact on normal numbers.
//
// NaN handling matches F16C (checked against it once for all 2^32 float inputs; the unit tests
// sample them): a NaN keeps its sign and the top bits of its payload, and comes out quiet.
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

constexpr uint32_t kFloatAbsMask = 0x7FFFFFFFu;
constexpr uint32_t kFloatExponentMask = 0x7F800000u;
constexpr uint32_t kFloatMantissaMask = 0x007FFFFFu;
constexpr uint32_t kFloatQuietBit = 0x00400000u;
constexpr int kFloatMantissaBits = 23;

// float32 has 13 more mantissa bits than binary16.
constexpr int kHalfToFloatMantissaShift = kFloatMantissaBits - kHalfMantissaBits;
// Difference of the exponent biases (127 - 15), placed in the float32 exponent field.
constexpr uint32_t kHalfToFloatRebias = uint32_t{127 - 15} << kFloatMantissaBits;
// The value of one binary16 subnormal unit, 2^-24.
constexpr float kHalfSubnormalUnit = 0x1p-24f;
// The smallest normal binary16, 2^-14, as float32 bits.
constexpr uint32_t kHalfMinNormalAsFloat = 0x38800000u;
// 65520 = 65504 (largest finite binary16) plus half an ulp: from there on, round to infinity.
constexpr uint32_t kHalfOverflowThresholdAsFloat = 0x477FF000u;

// Both conversions compute every case and select one, without branches: element loops over them
// then vectorise wherever the target has per-lane variable shifts (NEON, AVX2), which is what
// makes the portable float16 kernels usable on aarch64.

inline float halfBitsToFloat(uint16_t half) {
  const uint32_t sign = (uint32_t{half} & kHalfSignBit) << 16;
  const uint32_t magnitude = uint32_t{half} & ~kHalfSignBit;
  const uint32_t exponent = magnitude & kHalfExponentMask;
  const uint32_t mantissa = magnitude & kHalfMantissaMask;

  const uint32_t normal = (magnitude << kHalfToFloatMantissaShift) + kHalfToFloatRebias;
  // Infinity or NaN; a NaN comes out quiet.
  const uint32_t special = (magnitude << kHalfToFloatMantissaShift) | kFloatExponentMask |
                           (mantissa != 0 ? kFloatQuietBit : 0);
  // Subnormal or zero: mantissa * 2^-24. The integer converts exactly and the power-of-two
  // scaling leaves a normal float, so neither the rounding mode nor FTZ/DAZ can change the bits.
  const uint32_t subnormal =
      floatBits(static_cast<float>(static_cast<int32_t>(mantissa)) * kHalfSubnormalUnit);

  // Selected with masks rather than `?:`: the compiler will not hoist a float multiply out of a
  // conditional (it might trap), so a conditional here would stay a branch and block vectorising.
  const uint32_t isSpecial = 0u - static_cast<uint32_t>(exponent == kHalfExponentMask);
  const uint32_t isSubnormal = 0u - static_cast<uint32_t>(exponent == 0);
  const uint32_t bits = (special & isSpecial) | (subnormal & isSubnormal) |
                        (normal & ~(isSpecial | isSubnormal));
  return floatFromBits(sign | bits);
}

inline uint16_t floatToHalfBits(float value) {
  const uint32_t bits = floatBits(value);
  const uint32_t sign = (bits >> 16) & kHalfSignBit;
  const uint32_t magnitude = bits & kFloatAbsMask;

  // NaN: keep the payload's top bits, make it quiet.
  const uint32_t nan = kHalfExponentMask | kHalfQuietBit |
                       ((magnitude >> kHalfToFloatMantissaShift) & kHalfMantissaMask);

  // Normal result: round the 13 dropped bits to nearest even by adding just under half an ulp,
  // plus one when the kept part is odd; a carry ripples into the exponent (it cannot reach
  // infinity: values that would are at or above the overflow threshold, selected out below).
  const uint32_t odd = (magnitude >> kHalfToFloatMantissaShift) & 1;
  const uint32_t normal =
      (magnitude + ((1u << (kHalfToFloatMantissaShift - 1)) - 1) + odd - kHalfToFloatRebias) >>
      kHalfToFloatMantissaShift;

  // Subnormal result, in units of 2^-24. The float32 significand (implicit bit included) is worth
  // significand * 2^(exponent - 150), so the units are significand >> (126 - exponent), rounded
  // to nearest even. The shift is clamped to [1, 25] so that it is defined for every input;
  // inputs below 2^-25 (shift 25 and more) come out as zero, as they must, and a result of 0x400
  // is correctly the smallest normal.
  const uint32_t significand = (magnitude & kFloatMantissaMask) | (kFloatMantissaMask + 1);
  const int unclamped = 126 - static_cast<int>(magnitude >> kFloatMantissaBits);
  const int shift = unclamped < 1 ? 1 : (unclamped > 25 ? 25 : unclamped);
  const uint32_t kept = significand >> shift;
  const uint32_t dropped = significand & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  const uint32_t roundUp = (dropped > halfway) | ((dropped == halfway) & kept);
  const uint32_t subnormal = kept + (roundUp & 1);

  const uint32_t half = magnitude > kFloatExponentMask                 ? nan
                        : magnitude >= kHalfOverflowThresholdAsFloat   ? kHalfExponentMask
                        : magnitude >= kHalfMinNormalAsFloat           ? normal
                                                                       : subnormal;
  return static_cast<uint16_t>(sign | half);
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
