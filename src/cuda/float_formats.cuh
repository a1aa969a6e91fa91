// float32 <-> binary16 / bfloat16 for the CUDA kernels: the integer arithmetic of
// src/reduce/half.h, written once more because half.h's functions are host-only, and compiled
// for host and device alike so that tests/cuda can check the two agree for every input (on the
// host, where no GPU is needed, and again on the device).
//
// Why not the hardware conversions (__float2half_rn, __half2float, __float2bfloat16_rn)? They
// round to nearest even like the CPU, but make every NaN the one NaN 0x7FFF / 0x7FFFFFFF, where
// F16C and half.h keep a NaN's sign and the top bits of its payload; a rank whose gradients live
// on a GPU would then put other bits on the wire than one whose gradients live in host memory.
// The integer versions cost a few more instructions per element in kernels bound by memory.
//
// The constants are half.h's own (constexpr scalars, which device code may read).
#pragma once

#include <cstdint>
#include <cstring>

#include "reduce/half.h"

#define RINGCOMM_HOST_DEVICE __host__ __device__ __forceinline__

namespace ringcomm::cuda::detail {

namespace half = ringcomm::reduce::detail;

// C++20's std::bit_cast, on host and device: `value`'s bytes read as a To.
template <typename To, typename From>
RINGCOMM_HOST_DEVICE To bitCast(From value) {
  static_assert(sizeof(To) == sizeof(From), "bitCast keeps the size");
  To result;
  memcpy(&result, &value, sizeof result);
  return result;
}

RINGCOMM_HOST_DEVICE uint32_t bitsOf(float value) { return bitCast<uint32_t>(value); }
RINGCOMM_HOST_DEVICE float floatOf(uint32_t bits) { return bitCast<float>(bits); }
RINGCOMM_HOST_DEVICE uint64_t bitsOf(double value) { return bitCast<uint64_t>(value); }
RINGCOMM_HOST_DEVICE double doubleOf(uint64_t bits) { return bitCast<double>(bits); }

// NaN tests on the bits: true whatever the compiler's floating-point flags.
RINGCOMM_HOST_DEVICE bool isNan(float value) {
  return (bitsOf(value) & half::kFloatAbsMask) > half::kFloatExponentMask;
}

// --- binary16 (half.h: halfBitsToFloat, floatToHalfBits). ---

RINGCOMM_HOST_DEVICE float halfBitsToFloat(uint16_t value) {
  const uint32_t sign = (uint32_t{value} & half::kHalfSignBit) << 16;
  const uint32_t magnitude = uint32_t{value} & ~half::kHalfSignBit;
  const uint32_t exponent = magnitude & half::kHalfExponentMask;
  const uint32_t mantissa = magnitude & half::kHalfMantissaMask;
  uint32_t bits;
  if (exponent == half::kHalfExponentMask) {
    // Infinity or NaN; a NaN comes out quiet.
    bits = (magnitude << half::kHalfToFloatMantissaShift) | half::kFloatExponentMask |
           (mantissa != 0 ? half::kFloatQuietBit : 0u);
  } else if (exponent == 0) {
    // Subnormal or zero: mantissa * 2^-24, exact (the integer converts exactly and the product
    // is a normal float32), so neither rounding nor flush-to-zero can touch it.
    bits = bitsOf(static_cast<float>(static_cast<int32_t>(mantissa)) * half::kHalfSubnormalUnit);
  } else {
    bits = (magnitude << half::kHalfToFloatMantissaShift) + half::kHalfToFloatRebias;
  }
  return floatOf(sign | bits);
}

RINGCOMM_HOST_DEVICE uint16_t floatToHalfBits(float value) {
  const uint32_t bits = bitsOf(value);
  const uint32_t sign = (bits >> 16) & half::kHalfSignBit;
  const uint32_t magnitude = bits & half::kFloatAbsMask;
  uint32_t result;
  if (magnitude > half::kFloatExponentMask) {
    // NaN: keep the payload's top bits, make it quiet.
    result = half::kHalfExponentMask | half::kHalfQuietBit |
             ((magnitude >> half::kHalfToFloatMantissaShift) & half::kHalfMantissaMask);
  } else if (magnitude >= half::kHalfOverflowThresholdAsFloat) {
    result = half::kHalfExponentMask;  // rounds to infinity
  } else if (magnitude >= half::kHalfMinNormalAsFloat) {
    // Round the 13 dropped bits to nearest even: add just under half an ulp, plus one when the
    // kept part is odd; a carry ripples into the exponent.
    const uint32_t odd = (magnitude >> half::kHalfToFloatMantissaShift) & 1u;
    result = (magnitude + ((1u << (half::kHalfToFloatMantissaShift - 1)) - 1u) + odd -
              half::kHalfToFloatRebias) >>
             half::kHalfToFloatMantissaShift;
  } else {
    // Subnormal result in units of 2^-24: the significand (implicit bit included) shifted right
    // by 126 - exponent, rounded to nearest even. The shift is clamped to [1, 25]: below 2^-25
    // everything rounds to zero, and a result of 0x400 is correctly the smallest normal.
    const uint32_t significand =
        (magnitude & half::kFloatMantissaMask) | (half::kFloatMantissaMask + 1u);
    const int unclamped = 126 - static_cast<int>(magnitude >> half::kFloatMantissaBits);
    const int shift = unclamped < 1 ? 1 : (unclamped > 25 ? 25 : unclamped);
    const uint32_t kept = significand >> shift;
    const uint32_t dropped = significand & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1);
    const bool roundUp = dropped > halfway || (dropped == halfway && (kept & 1u) != 0);
    result = kept + (roundUp ? 1u : 0u);
  }
  return static_cast<uint16_t>(sign | result);
}

// --- bfloat16, the upper half of a float32 (half.h: bfloat16BitsToFloat, floatToBfloat16Bits).

RINGCOMM_HOST_DEVICE float bfloat16BitsToFloat(uint16_t value) {
  return floatOf(uint32_t{value} << half::kBfloat16Shift);
}

RINGCOMM_HOST_DEVICE uint16_t floatToBfloat16Bits(float value) {
  const uint32_t bits = bitsOf(value);
  if (isNan(value)) {
    // Truncating could leave an all-zero mantissa (infinity): set the quiet bit instead.
    return static_cast<uint16_t>((bits >> half::kBfloat16Shift) | half::kBfloat16QuietBit);
  }
  // Round to nearest even; overflow carries into the exponent and gives infinity.
  const uint32_t odd = (bits >> half::kBfloat16Shift) & 1u;
  return static_cast<uint16_t>((bits + ((1u << (half::kBfloat16Shift - 1)) - 1u) + odd) >>
                               half::kBfloat16Shift);
}

}  // namespace ringcomm::cuda::detail
