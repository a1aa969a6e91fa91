// The reduction loops, written once and compiled once per instruction-set variant: each
// kernels_*.cc includes this file inside its own target region and instantiates
// Kernels<Float16Codec> with the float16 conversion that variant can use.
//
// Everything here sits in an unnamed namespace on purpose. The variants instantiate the same
// templates (combineInto<SumOp, float>, ...) with different code; with external linkage the
// linker would keep one copy for both, and the portable path could end up running AVX2 code.
//
// Why the loops look the way they do:
//  - Plain element loops over __restrict pointers, with the operation a template parameter, are
//    what the compiler auto-vectorises; it then uses whatever the target region allows.
//  - Vectorising does not change the result: the compiler keeps the same IEEE operations in the
//    same order per element, so every variant gives the same bits. That only holds because no
//    loop here multiplies and then adds (nothing for FMA contraction to fuse) and no variant is
//    built with -ffast-math.
//  - float16 and bfloat16 are widened to float32 a tile at a time into stack buffers, combined
//    with the float32 loop, and rounded back. The conversion is then the only code that differs
//    between variants (F16C or software), and both convert exactly alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "reduce/dispatch.h"
#include "reduce/half.h"
#include "ringcomm/types.h"

namespace ringcomm::reduce {
namespace {

// reduceMany reduces this many bytes of dst through every source before moving on, so the
// partial result stays in L1 between sources and each source streams through once. Half of the
// 32 KiB L1d of the EPYC (Zen 4) the kernels were tuned on, leaving room for the sources' lines.
constexpr size_t kBlockBytes = 16 * 1024;

// float16/bfloat16 are widened this many elements at a time: two float32 tiles of 4 KiB each.
constexpr size_t kWidenTileElements = 1024;

inline size_t clampToBlock(size_t remaining, size_t block) {
  return remaining < block ? remaining : block;
}

// --- Operations. ---
//
// Integers do their arithmetic in the unsigned type, so Sum and Prod wrap around instead of
// overflowing (which is undefined for signed types).
//
// Floats: any NaN result is the canonical quiet NaN. Without that, NaN OP NaN would not be
// deterministic: x86 returns the first operand's payload, and the compiler may swap the operands
// of + and * (it does, differently in vector and scalar code). The extra compare and blend cost
// nothing measurable in these memory-bound loops. Min and Max propagate NaN like torch: NaN when
// either operand is. Selections use `|`, not `||`, so there is no branch to stop vectorising.

template <typename T, bool kIntegral = std::is_integral_v<T>>
struct Arithmetic {
  using type = T;
};
template <typename T>
struct Arithmetic<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <typename T>
using ArithmeticType = typename Arithmetic<T>::type;

template <typename T>
constexpr T kCanonicalNan = std::numeric_limits<T>::quiet_NaN();

template <typename T>
T canonicalizeNan(T value) {
  return value != value ? kCanonicalNan<T> : value;
}

struct SumOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return canonicalizeNan(a + b);
    } else {
      using A = ArithmeticType<T>;
      return static_cast<T>(static_cast<A>(static_cast<A>(a) + static_cast<A>(b)));
    }
  }
};

struct ProdOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return canonicalizeNan(a * b);
    } else {
      using A = ArithmeticType<T>;
      return static_cast<T>(static_cast<A>(static_cast<A>(a) * static_cast<A>(b)));
    }
  }
};

struct MinOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return ((a != a) | (b != b)) ? kCanonicalNan<T> : (b < a ? b : a);
    } else {
      return b < a ? b : a;
    }
  }
};

struct MaxOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return ((a != a) | (b != b)) ? kCanonicalNan<T> : (b > a ? b : a);
    } else {
      return b > a ? b : a;
    }
  }
};

// --- The two loop shapes every reduction is built from. ---

// acc[i] = acc[i] OP operand[i]
template <typename Op, typename T>
void combineInto(T* __restrict acc, const T* __restrict operand, size_t count) {
  for (size_t i = 0; i < count; ++i) acc[i] = Op::apply(acc[i], operand[i]);
}

// out[i] = a[i] OP b[i]
template <typename Op, typename T>
void combine(T* __restrict out, const T* __restrict a, const T* __restrict b, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = Op::apply(a[i], b[i]);
}

// --- 16-bit float codecs: widen a run of elements to float32, round a run back. ---

struct BFloat16Codec {
  static void widen(float* __restrict out, const uint16_t* __restrict in, size_t count) {
    for (size_t i = 0; i < count; ++i) out[i] = detail::bfloat16BitsToFloat(in[i]);
  }
  static void narrow(uint16_t* __restrict out, const float* __restrict in, size_t count) {
    for (size_t i = 0; i < count; ++i) out[i] = detail::floatToBfloat16Bits(in[i]);
  }
};

// binary16 in software, for CPUs without conversion instructions (or when tests force it).
struct SoftwareHalfCodec {
  static void widen(float* __restrict out, const uint16_t* __restrict in, size_t count) {
    for (size_t i = 0; i < count; ++i) out[i] = detail::halfBitsToFloat(in[i]);
  }
  static void narrow(uint16_t* __restrict out, const float* __restrict in, size_t count) {
    for (size_t i = 0; i < count; ++i) out[i] = detail::floatToHalfBits(in[i]);
  }
};

// --- reduceMany for one element type and operation. ---

inline void copyUnlessSame(void* dst, const void* src, size_t bytes) {
  if (dst != src) std::memcpy(dst, src, bytes);
}

// Types reduced in themselves: dst = srcs[0] OP srcs[1] OP ..., one L1-sized block at a time.
template <typename Op, typename T>
bool reduceManySame(void* dstBytes, const void* const* srcs, int n, size_t count) {
  T* dst = static_cast<T*>(dstBytes);
  if (n == 1) {
    copyUnlessSame(dst, srcs[0], count * sizeof(T));
    return true;
  }
  constexpr size_t kBlock = kBlockBytes / sizeof(T);
  // dst may be srcs[0] itself; then the first step is in place (and must be, for __restrict).
  const bool inPlace = dstBytes == srcs[0];
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t length = clampToBlock(count - start, kBlock);
    T* out = dst + start;
    const T* second = static_cast<const T*>(srcs[1]) + start;
    if (inPlace) {
      combineInto<Op>(out, second, length);
    } else {
      combine<Op>(out, static_cast<const T*>(srcs[0]) + start, second, length);
    }
    for (int k = 2; k < n; ++k) combineInto<Op>(out, static_cast<const T*>(srcs[k]) + start, length);
  }
  return true;
}

// 16-bit floats: accumulate every source in float32, round once per element at the end.
template <typename Op, typename Codec>
bool reduceManyWidened(void* dstBytes, const void* const* srcs, int n, size_t count) {
  uint16_t* dst = static_cast<uint16_t*>(dstBytes);
  if (n == 1) {
    copyUnlessSame(dst, srcs[0], count * sizeof(uint16_t));
    return true;
  }
  alignas(64) float acc[kWidenTileElements];
  alignas(64) float operand[kWidenTileElements];
  for (size_t start = 0; start < count; start += kWidenTileElements) {
    const size_t length = clampToBlock(count - start, kWidenTileElements);
    Codec::widen(acc, static_cast<const uint16_t*>(srcs[0]) + start, length);
    for (int k = 1; k < n; ++k) {
      Codec::widen(operand, static_cast<const uint16_t*>(srcs[k]) + start, length);
      combineInto<Op>(acc, operand, length);
    }
    // Written only after every source was read: dst may be srcs[0].
    Codec::narrow(dst + start, acc, length);
  }
  return true;
}

template <typename Float16Codec, typename Op>
bool reduceManyForOp(void* dst, const void* const* srcs, int n, size_t count, DataType type) {
  switch (type) {
    case DataType::Int8: return reduceManySame<Op, int8_t>(dst, srcs, n, count);
    case DataType::Uint8: return reduceManySame<Op, uint8_t>(dst, srcs, n, count);
    case DataType::Int32: return reduceManySame<Op, int32_t>(dst, srcs, n, count);
    case DataType::Int64: return reduceManySame<Op, int64_t>(dst, srcs, n, count);
    case DataType::Float16: return reduceManyWidened<Op, Float16Codec>(dst, srcs, n, count);
    case DataType::BFloat16: return reduceManyWidened<Op, BFloat16Codec>(dst, srcs, n, count);
    case DataType::Float32: return reduceManySame<Op, float>(dst, srcs, n, count);
    case DataType::Float64: return reduceManySame<Op, double>(dst, srcs, n, count);
  }
  return false;
}

// --- finishAverage's division. ---

// Integers: truncating division (the divisor stays an int, so int8 elements are promoted and
// divisors above 127 still work). Floats: an exact IEEE division, never a reciprocal multiply.
template <typename T, typename Divisor>
bool divideSame(void* bufBytes, size_t count, Divisor divisor) {
  T* buf = static_cast<T*>(bufBytes);
  for (size_t i = 0; i < count; ++i) buf[i] = static_cast<T>(buf[i] / divisor);
  return true;
}

template <typename Codec>
bool divideWidened(void* bufBytes, size_t count, float divisor) {
  uint16_t* buf = static_cast<uint16_t*>(bufBytes);
  alignas(64) float values[kWidenTileElements];
  for (size_t start = 0; start < count; start += kWidenTileElements) {
    const size_t length = clampToBlock(count - start, kWidenTileElements);
    Codec::widen(values, buf + start, length);
    for (size_t i = 0; i < length; ++i) values[i] = values[i] / divisor;
    Codec::narrow(buf + start, values, length);
  }
  return true;
}

// --- The entry points a variant puts in its KernelSet. ---

template <typename Float16Codec>
struct Kernels {
  static bool reduceMany(void* dst, const void* const* srcs, int n, size_t count, DataType type,
                         ReduceOp op) {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:  // the division comes later, in finishAverage
        return reduceManyForOp<Float16Codec, SumOp>(dst, srcs, n, count, type);
      case ReduceOp::Min: return reduceManyForOp<Float16Codec, MinOp>(dst, srcs, n, count, type);
      case ReduceOp::Max: return reduceManyForOp<Float16Codec, MaxOp>(dst, srcs, n, count, type);
      case ReduceOp::Prod: return reduceManyForOp<Float16Codec, ProdOp>(dst, srcs, n, count, type);
    }
    return false;
  }

  static bool divide(void* buf, size_t count, DataType type, int divisor) {
    switch (type) {
      case DataType::Int8: return divideSame<int8_t>(buf, count, divisor);
      case DataType::Uint8: return divideSame<uint8_t>(buf, count, divisor);
      case DataType::Int32: return divideSame<int32_t>(buf, count, divisor);
      case DataType::Int64: return divideSame<int64_t>(buf, count, int64_t{divisor});
      case DataType::Float16:
        return divideWidened<Float16Codec>(buf, count, static_cast<float>(divisor));
      case DataType::BFloat16:
        return divideWidened<BFloat16Codec>(buf, count, static_cast<float>(divisor));
      case DataType::Float32: return divideSame<float>(buf, count, static_cast<float>(divisor));
      case DataType::Float64: return divideSame<double>(buf, count, static_cast<double>(divisor));
    }
    return false;
  }
};

}  // namespace
}  // namespace ringcomm::reduce
