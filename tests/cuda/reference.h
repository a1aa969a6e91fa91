// A model of what the kernels must compute, written from the definitions rather than from the
// code under test: integers in 64-bit modular arithmetic; bools as or / and of "non-zero"; floats
// in float64, rounded once to the element's precision; float16 / bfloat16 read as exact doubles
// and rounded by nearest-neighbour comparison in double arithmetic, not by bit tricks.
//
// One rounding of a float64 result to float32 is exactly what float32 arithmetic gives for +, *
// and / of float32 operands: double has more than 2 * 24 + 2 significand bits, so rounding twice
// (exact result to double, double to float) cannot differ from rounding once.
//
// The model also gives each type's random inputs: mostly ordinary values, with NaNs (payloads,
// signs, signalling ones), infinities, signed zeros, subnormals and ties for rounding mixed in.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "ringcomm/types.h"
#include "support.h"

namespace ringcomm::cudatest::model {

inline float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

inline double doubleOf(uint64_t bits) {
  double value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// --- 16-bit formats, from their definitions. ---

inline double halfToDouble(uint16_t half) {
  const int exponent = (half >> 10) & 0x1F;
  const int mantissa = half & 0x3FF;
  const double sign = (half & 0x8000) != 0 ? -1.0 : 1.0;
  if (exponent == 0x1F) {
    return mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                         : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

inline double bfloat16ToDouble(uint16_t value) {
  return static_cast<double>(floatOf(uint32_t{value} << 16));
}

// The values of all 2^16 codes of a format (the reference rounding searches them).
template <double (*kValueOf)(uint16_t)>
const std::vector<double>& codeValues() {
  static const std::vector<double> values = [] {
    std::vector<double> all(0x10000);
    for (uint32_t code = 0; code < 0x10000; ++code) all[code] = kValueOf(uint16_t(code));
    return all;
  }();
  return values;
}

// The code of a 16-bit format nearest to `value` (not NaN), ties to the even code: the two
// candidates are the codes whose values bracket it, found by binary search over the magnitudes of
// codes 0 .. infinity - 1, which increase with the code.
template <double (*kValueOf)(uint16_t), uint16_t kInfinity>
uint16_t nearestCode(double value) {
  const std::vector<double>& values = codeValues<kValueOf>();
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const double magnitude = std::fabs(value);
  // From the largest finite value plus half its ulp on, rounding goes to infinity.
  const uint16_t largest = kInfinity - 1;
  const double overflow = values[largest] + (values[largest] - values[largest - 1]) / 2;
  if (magnitude >= overflow) return sign | kInfinity;
  uint16_t lo = 0;  // the last code whose magnitude is <= magnitude
  uint16_t hi = largest;
  while (lo < hi) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (values[mid] <= magnitude) {
      lo = mid;
    } else {
      hi = static_cast<uint16_t>(mid - 1);
    }
  }
  if (lo == largest) return sign | lo;
  const double below = magnitude - values[lo];
  const double above = values[lo + 1] - magnitude;
  if (below < above || (below == above && (lo & 1) == 0)) return sign | lo;
  return sign | static_cast<uint16_t>(lo + 1);
}

inline uint16_t roundToHalf(double value) {
  return nearestCode<halfToDouble, 0x7C00>(value);
}
inline uint16_t roundToBfloat16(double value) {
  return nearestCode<bfloat16ToDouble, 0x7F80>(value);
}

// --- The reduction operations in double; Min and Max as the CPU writes them (which zero of
// -0 and +0 comes out is part of the contract). ---

inline double apply(ReduceOp op, double a, double b) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return a + b;
    case ReduceOp::Prod: return a * b;
    case ReduceOp::Min: return std::isnan(a) || std::isnan(b) ? nan : (b < a ? b : a);
    case ReduceOp::Max: return std::isnan(a) || std::isnan(b) ? nan : (b > a ? b : a);
    case ReduceOp::Adasum: break;  // not element-wise
  }
  return nan;
}

// --- Random values. ---

// Every few elements a special value, so that the specials meet ordinary values and each other.
constexpr uint32_t kSpecialOneIn = 16;

inline float randomSpecialFloat(Rng& rng) {
  const uint32_t sign = static_cast<uint32_t>(rng.next() & 1) << 31;
  switch (rng.below(8)) {
    case 0: return floatOf(sign | 0x7FC00000u | (rng.below(1u << 22)));  // quiet NaN, payload
    case 1: return floatOf(sign | 0x7F800001u | (rng.below(1u << 22)));  // signalling NaN
    case 2: return floatOf(sign | 0x7F800000u);                          // infinity
    case 3: return floatOf(sign);                                        // zero
    case 4: return floatOf(sign | (rng.below(1u << 23) + 1));            // subnormal
    case 5: return floatOf(sign | 0x7F7FFFFFu);                          // largest finite
    case 6: return floatOf(sign | 0x477FF000u);   // 65520: the float16 overflow tie
    default: return floatOf(sign | 0x00800000u);  // smallest normal
  }
}

// Random sign and mantissa, exponent within +-range of 1.
inline float randomOrdinaryFloat(Rng& rng, int range) {
  const uint64_t bits = rng.next();
  const int exponent = 127 - range + static_cast<int>((bits >> 32) % (2 * range + 1));
  return floatOf(static_cast<uint32_t>(bits >> 63) << 31 | static_cast<uint32_t>(exponent) << 23 |
                 (static_cast<uint32_t>(bits) & 0x7FFFFFu));
}

// 16-bit floats straight from bits: random sign and mantissa, exponents within +-3 of 1 (sums
// and products stay in range mostly, and overflow sometimes), or any bit pattern at all.
inline uint16_t random16(Rng& rng, bool half) {
  const uint64_t bits = rng.next();
  if (rng.oneIn(kSpecialOneIn)) return static_cast<uint16_t>(bits);  // NaNs, infinities...
  const int mantissaBits = half ? 10 : 7;
  const int bias = half ? 15 : 127;
  const uint32_t exponent = static_cast<uint32_t>(bias - 3 + (bits >> 32) % 7);
  const uint32_t mantissa = static_cast<uint32_t>(bits) & ((1u << mantissaBits) - 1);
  return static_cast<uint16_t>((bits >> 63) << 15 | exponent << mantissaBits | mantissa);
}

// --- One model per DataType: storage, random inputs, the element-wise result. ---

template <typename T, DataType kTypeValue>
struct IntegerModel {
  using Storage = T;
  static constexpr DataType kType = kTypeValue;
  static constexpr bool kHasAverage = true;

  static void fill(Rng& rng, std::vector<T>& a, std::vector<T>& b) {
    for (T& value : a) value = static_cast<T>(rng.next());
    for (T& value : b) value = static_cast<T>(rng.next());
  }
  // Sums and products modulo 2^64, truncated: the wrap-around the kernels must produce.
  static T apply(ReduceOp op, T a, T b) {
    const uint64_t ua = static_cast<uint64_t>(static_cast<int64_t>(a));
    const uint64_t ub = static_cast<uint64_t>(static_cast<int64_t>(b));
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: return static_cast<T>(ua + ub);
      case ReduceOp::Prod: return static_cast<T>(ua * ub);
      case ReduceOp::Min: return b < a ? b : a;
      case ReduceOp::Max: return b > a ? b : a;
      case ReduceOp::Adasum: break;  // not element-wise
    }
    return 0;
  }
  static T divide(T value, int divisor) {
    return static_cast<T>(static_cast<int64_t>(value) / divisor);  // truncates toward zero
  }
  static std::string describe(T value) { return std::to_string(static_cast<int64_t>(value)); }
};

template <typename T, DataType kTypeValue>
struct NativeFloatModel {
  using Storage = T;
  static constexpr DataType kType = kTypeValue;
  static constexpr bool kHasAverage = true;
  static constexpr int kMantissaBits = std::numeric_limits<T>::digits - 1;

  // Ordinary values of exponents within +-30, specials, and at some positions a b that is
  // exactly half an ulp of a: a tie, which must round to even.
  static void fill(Rng& rng, std::vector<T>& a, std::vector<T>& b) {
    auto one = [&rng]() -> T {
      if (rng.oneIn(kSpecialOneIn)) return static_cast<T>(randomSpecialFloat(rng));
      if constexpr (sizeof(T) == 4) {
        return randomOrdinaryFloat(rng, 30);
      } else {
        // float64: a float32 ordinary value with random low mantissa bits added.
        const double coarse = randomOrdinaryFloat(rng, 30);
        return coarse +
               std::ldexp(coarse, -24) * static_cast<double>(rng.below(1u << 29)) * 0x1p-29;
      }
    };
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = one();
      if (rng.oneIn(8) && std::isfinite(a[i]) && a[i] != 0) {
        int exponent = 0;
        std::frexp(a[i], &exponent);  // a = f * 2^exponent, f in [0.5, 1): ulp 2^(exp - digits)
        const T sign = rng.oneIn(2) ? T(-1) : T(1);
        b[i] = sign * std::ldexp(T(1), exponent - std::numeric_limits<T>::digits - 1);
      } else {
        b[i] = one();
      }
    }
  }
  static T apply(ReduceOp op, T a, T b) {
    // float32: one rounding of the double result (see the top of this file). float64: the double
    // operation itself; there is nothing wider to compute it in.
    const T result = static_cast<T>(model::apply(op, a, b));
    return std::isnan(result) ? std::numeric_limits<T>::quiet_NaN() : result;
  }
  static T divide(T value, int divisor) {
    const T result = static_cast<T>(static_cast<double>(value) / divisor);
    return std::isnan(result) ? std::numeric_limits<T>::quiet_NaN() : result;
  }
  static std::string describe(T value) {
    std::ostringstream text;
    text.precision(std::numeric_limits<T>::max_digits10);
    text << value << "=" << hexBits(value);
    return text.str();
  }
};

// float16 / bfloat16: exact values, the operation rounded once to float32 (the precision the
// kernels accumulate in), then to the 16-bit format. A NaN result is the canonical float NaN
// narrowed: 0x7E00 / 0x7FC0.
template <bool kHalf, DataType kTypeValue>
struct Widened16Model {
  using Storage = uint16_t;
  static constexpr DataType kType = kTypeValue;
  static constexpr bool kHasAverage = true;

  static double toDouble(uint16_t value) {
    return kHalf ? codeValues<halfToDouble>()[value] : bfloat16ToDouble(value);
  }
  static uint16_t round(float value) {
    if (std::isnan(value)) return kHalf ? 0x7E00 : 0x7FC0;
    return kHalf ? roundToHalf(value) : roundToBfloat16(value);
  }
  static void fill(Rng& rng, std::vector<uint16_t>& a, std::vector<uint16_t>& b) {
    for (uint16_t& value : a) value = random16(rng, kHalf);
    for (uint16_t& value : b) value = random16(rng, kHalf);
  }
  static uint16_t apply(ReduceOp op, uint16_t a, uint16_t b) {
    return round(static_cast<float>(model::apply(op, toDouble(a), toDouble(b))));
  }
  static uint16_t divide(uint16_t value, int divisor) {
    return round(static_cast<float>(toDouble(value) / divisor));
  }
  static std::string describe(uint16_t value) {
    std::ostringstream text;
    text << toDouble(value) << "=" << hexBits(value);
    return text.str();
  }
};

// bool: a byte, false when 0 and true otherwise. Sum and Max are logical or, Prod and Min logical
// and, and the result is 0 or 1; there is no average. Inputs are mostly 0 and 1, with other
// non-zero bytes (trues no C++ bool holds, which memory can) mixed in.
struct BoolModel {
  using Storage = uint8_t;
  static constexpr DataType kType = DataType::Bool;
  static constexpr bool kHasAverage = false;

  static void fill(Rng& rng, std::vector<uint8_t>& a, std::vector<uint8_t>& b) {
    auto one = [&rng]() -> uint8_t {
      if (rng.oneIn(kSpecialOneIn)) return static_cast<uint8_t>(2 + rng.below(254));
      return static_cast<uint8_t>(rng.below(2));
    };
    for (uint8_t& value : a) value = one();
    for (uint8_t& value : b) value = one();
  }
  static uint8_t apply(ReduceOp op, uint8_t a, uint8_t b) {
    if (op == ReduceOp::Prod || op == ReduceOp::Min) return a != 0 && b != 0;
    return a != 0 || b != 0;
  }
  static std::string describe(uint8_t value) { return std::to_string(value); }
};

using Int8Model = IntegerModel<int8_t, DataType::Int8>;
using Uint8Model = IntegerModel<uint8_t, DataType::Uint8>;
using Int16Model = IntegerModel<int16_t, DataType::Int16>;
using Int32Model = IntegerModel<int32_t, DataType::Int32>;
using Int64Model = IntegerModel<int64_t, DataType::Int64>;
using Float16Model = Widened16Model<true, DataType::Float16>;
using BFloat16Model = Widened16Model<false, DataType::BFloat16>;
using Float32Model = NativeFloatModel<float, DataType::Float32>;
using Float64Model = NativeFloatModel<double, DataType::Float64>;

}  // namespace ringcomm::cudatest::model
