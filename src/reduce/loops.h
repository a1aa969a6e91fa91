// The reduction loops, written once and compiled once per instruction-set variant: each
// kernels_*.cc includes this file inside its own target region and instantiates Kernels<Codecs>
// with the float16/bfloat16 conversions that variant can use.
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
//    loop here multiplies and then adds (nothing for FMA contraction to fuse), no variant is
//    built with -ffast-math, and NaN results are canonicalised (see the operations below).
//  - float16 and bfloat16 are widened to float32 a small group at a time, combined by the same
//    float32 loop, and rounded back. The conversions are then the only code that differs between
//    variants (F16C or software, AVX2 or plain shifts), and they convert exactly alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/bytes.h"
#include "reduce/dispatch.h"
#include "reduce/half.h"
#include "reduce/operations.h"
#include "ringcomm/types.h"

namespace ringcomm::reduce {
namespace {

// With more sources than one pass takes, reduceMany works on this many bytes of dst at a time, so
// that the later passes find it in L2 (1 MiB per core on the Zen 4 EPYC this was tuned on) and
// each source still streams through once. Measured there with 8 float32 sources of 64 MiB:
// 16 KiB blocks 23-25 GB/s, 64 KiB 24-25, 256 KiB 26-27, 1 MiB 25-28 (longer streams suit the
// prefetchers, up to the point where dst no longer stays in L2); no difference in cache.
constexpr size_t kBlockBytes = 256 * 1024;

// float16/bfloat16 go through the float32 loops this many elements at a time: four 256-bit
// registers per array, small enough to stay in registers across all sources (measured on Zen 4:
// float16 Sum in L2 went from 39 GB/s with 1024-element tiles in L1 to 61 GB/s).
constexpr size_t kWidenGroupElements = 32;

inline size_t clampToBlock(size_t remaining, size_t block) {
  return remaining < block ? remaining : block;
}

// --- The loop shapes every reduction is built from. ---
//
// Reading several sources in one pass matters: with four float32 sources, one fused pass ran
// about twice as fast from DRAM as a pass per source over an L2-resident block of dst, and
// 1.3-1.6x as fast in cache (Zen 4). Four itself is a choice, not a measured optimum: it keeps
// the number of loop variants per type and op at six, and more sources take further passes.
constexpr int kMaxFusedSources = 4;

// acc[i] = acc[i] OP operand[i]
template <typename Op, typename T>
void combineInto(T* __restrict acc, const T* __restrict operand, size_t count) {
  for (size_t i = 0; i < count; ++i) acc[i] = Op::apply(acc[i], operand[i]);
}

// acc[i] = ((acc[i] OP a[i]) OP b[i]) OP c[i], for the first kOperands of a, b, c (the others
// are not read and may be null).
template <typename Op, int kOperands, typename T>
void accumulate(T* __restrict acc, const T* __restrict a, const T* __restrict b,
                const T* __restrict c, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    T result = Op::apply(acc[i], a[i]);
    if constexpr (kOperands >= 2) result = Op::apply(result, b[i]);
    if constexpr (kOperands >= 3) result = Op::apply(result, c[i]);
    acc[i] = result;
  }
}

// out[i] = ((a[i] OP b[i]) OP c[i]) OP d[i], for the first kOperands of a, b, c, d.
template <typename Op, int kOperands, typename T>
void combine(T* __restrict out, const T* __restrict a, const T* __restrict b,
             const T* __restrict c, const T* __restrict d, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    T result = Op::apply(a[i], b[i]);
    if constexpr (kOperands >= 3) result = Op::apply(result, c[i]);
    if constexpr (kOperands >= 4) result = Op::apply(result, d[i]);
    out[i] = result;
  }
}

// --- 16-bit float codecs: widen a run of elements to float32, round a run back. ---
//
// A codec may store a run's floats in a permuted order (the AVX2 bfloat16 one does, to save
// shuffles), as long as widening the same count always permutes the same way and narrow() undoes
// it. Everything in between works element by element, so the order does not matter there.

// bfloat16 by shifts, in element loops the compiler vectorises.
struct SoftwareBfloat16Codec {
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
  if (dst != src) copyBytes(dst, src, bytes);
}

// Up to kMaxFusedSources source pointers for one pass over a block; the unused ones are null.
template <typename T>
struct PassSources {
  const T* at[kMaxFusedSources] = {};
  int count = 0;

  PassSources(const void* const* srcs, int first, int countValue, size_t start)
      : count(countValue) {
    for (int k = 0; k < count; ++k) at[k] = static_cast<const T*>(srcs[first + k]) + start;
  }
};

// out = s[0] OP s[1] OP ... OP s[count - 1], count from 2 to kMaxFusedSources.
template <typename Op, typename T>
void combinePass(T* out, const PassSources<T>& s, size_t length) {
  switch (s.count) {
    case 2: return combine<Op, 2>(out, s.at[0], s.at[1], s.at[2], s.at[3], length);
    case 3: return combine<Op, 3>(out, s.at[0], s.at[1], s.at[2], s.at[3], length);
    default: return combine<Op, 4>(out, s.at[0], s.at[1], s.at[2], s.at[3], length);
  }
}

// acc = acc OP s[0] OP ... OP s[count - 1], count from 1 to kMaxFusedSources - 1.
template <typename Op, typename T>
void accumulatePass(T* acc, const PassSources<T>& s, size_t length) {
  switch (s.count) {
    case 1: return accumulate<Op, 1>(acc, s.at[0], s.at[1], s.at[2], length);
    case 2: return accumulate<Op, 2>(acc, s.at[0], s.at[1], s.at[2], length);
    default: return accumulate<Op, 3>(acc, s.at[0], s.at[1], s.at[2], length);
  }
}

// Types reduced in themselves: dst = srcs[0] OP srcs[1] OP ..., left to right. Up to
// kMaxFusedSources sources go through in one pass; with more, dst is worked on one L2-sized block
// at a time, so that the passes after the first find it in cache.
template <typename Op, typename T>
bool reduceManySame(void* dstBytes, const void* const* srcs, int n, size_t count) {
  T* dst = static_cast<T*>(dstBytes);
  if (n == 1) {
    copyUnlessSame(dst, srcs[0], count * sizeof(T));
    return true;
  }
  // dst may be srcs[0] itself; then every pass accumulates in place (it must: the loops'
  // pointers are __restrict).
  const bool inPlace = dstBytes == srcs[0];
  constexpr size_t kBlock = kBlockBytes / sizeof(T);
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t length = clampToBlock(count - start, kBlock);
    T* out = dst + start;
    int next = 1;  // the first source not yet in out
    if (!inPlace) {
      const int take = n < kMaxFusedSources ? n : kMaxFusedSources;
      combinePass<Op>(out, PassSources<T>(srcs, 0, take, start), length);
      next = take;
    }
    while (next < n) {
      const int take = n - next < kMaxFusedSources - 1 ? n - next : kMaxFusedSources - 1;
      accumulatePass<Op>(out, PassSources<T>(srcs, next, take, start), length);
      next += take;
    }
  }
  return true;
}

// 16-bit floats: accumulate every source in float32, round once per element at the end. One
// group of elements goes through all sources at a time; with the group size a constant, the
// compiler unrolls the conversions and the combine and keeps the group in registers, where a
// larger tile would go through L1 three extra times per source.
template <typename Op, typename Codec>
inline __attribute__((always_inline)) void reduceWidenedGroup(uint16_t* dst,
                                                              const void* const* srcs, int n,
                                                              size_t start, size_t length) {
  alignas(64) float acc[kWidenGroupElements];
  alignas(64) float operand[kWidenGroupElements];
  Codec::widen(acc, static_cast<const uint16_t*>(srcs[0]) + start, length);
  for (int k = 1; k < n; ++k) {
    Codec::widen(operand, static_cast<const uint16_t*>(srcs[k]) + start, length);
    combineInto<Op>(acc, operand, length);
  }
  // Written only after every source was read: dst may be srcs[0].
  Codec::narrow(dst + start, acc, length);
}

template <typename Op, typename Codec>
bool reduceManyWidened(void* dstBytes, const void* const* srcs, int n, size_t count) {
  uint16_t* dst = static_cast<uint16_t*>(dstBytes);
  if (n == 1) {
    copyUnlessSame(dst, srcs[0], count * sizeof(uint16_t));
    return true;
  }
  size_t start = 0;
  for (; start + kWidenGroupElements <= count; start += kWidenGroupElements) {
    reduceWidenedGroup<Op, Codec>(dst, srcs, n, start, kWidenGroupElements);
  }
  if (start < count) reduceWidenedGroup<Op, Codec>(dst, srcs, n, start, count - start);
  return true;
}

template <typename Codecs, typename Op>
bool reduceManyForOp(void* dst, const void* const* srcs, int n, size_t count, DataType type) {
  switch (type) {
    case DataType::Int8: return reduceManySame<Op, int8_t>(dst, srcs, n, count);
    case DataType::Uint8: return reduceManySame<Op, uint8_t>(dst, srcs, n, count);
    case DataType::Int16: return reduceManySame<Op, int16_t>(dst, srcs, n, count);
    case DataType::Int32: return reduceManySame<Op, int32_t>(dst, srcs, n, count);
    case DataType::Int64: return reduceManySame<Op, int64_t>(dst, srcs, n, count);
    case DataType::Float16:
      return reduceManyWidened<Op, typename Codecs::Float16>(dst, srcs, n, count);
    case DataType::BFloat16:
      return reduceManyWidened<Op, typename Codecs::BFloat16>(dst, srcs, n, count);
    case DataType::Float32: return reduceManySame<Op, float>(dst, srcs, n, count);
    case DataType::Float64: return reduceManySame<Op, double>(dst, srcs, n, count);
    case DataType::Bool:
      return reduceManySame<typename LogicalOf<Op>::type, uint8_t>(dst, srcs, n, count);
  }
  return false;
}

// --- finishAverage's division. ---

// Integers: truncating division (the divisor stays an int, so int8 and int16 elements are
// promoted and divisors above their largest value still work). Floats: an exact IEEE division, never a reciprocal multiply.
template <typename T, typename Divisor>
bool divideSame(void* bufBytes, size_t count, Divisor divisor) {
  T* buf = static_cast<T*>(bufBytes);
  for (size_t i = 0; i < count; ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      buf[i] = canonicalizeNan(buf[i] / divisor);
    } else {
      buf[i] = static_cast<T>(buf[i] / divisor);
    }
  }
  return true;
}

template <typename Codec>
inline __attribute__((always_inline)) void divideWidenedGroup(uint16_t* buf, size_t length,
                                                              float divisor) {
  alignas(64) float values[kWidenGroupElements];
  Codec::widen(values, buf, length);
  for (size_t i = 0; i < length; ++i) values[i] = canonicalizeNan(values[i] / divisor);
  Codec::narrow(buf, values, length);
}

template <typename Codec>
bool divideWidened(void* bufBytes, size_t count, float divisor) {
  uint16_t* buf = static_cast<uint16_t*>(bufBytes);
  size_t start = 0;
  for (; start + kWidenGroupElements <= count; start += kWidenGroupElements) {
    divideWidenedGroup<Codec>(buf + start, kWidenGroupElements, divisor);
  }
  if (start < count) divideWidenedGroup<Codec>(buf + start, count - start, divisor);
  return true;
}

// --- The entry points a variant puts in its KernelSet. ---

// Codecs names the variant's float16 and bfloat16 codecs (Codecs::Float16, Codecs::BFloat16).
template <typename Codecs>
struct Kernels {
  static bool reduceMany(void* dst, const void* const* srcs, int n, size_t count, DataType type,
                         ReduceOp op) {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:  // the division comes later, in finishAverage
        return reduceManyForOp<Codecs, SumOp>(dst, srcs, n, count, type);
      case ReduceOp::Min: return reduceManyForOp<Codecs, MinOp>(dst, srcs, n, count, type);
      case ReduceOp::Max: return reduceManyForOp<Codecs, MaxOp>(dst, srcs, n, count, type);
      case ReduceOp::Prod: return reduceManyForOp<Codecs, ProdOp>(dst, srcs, n, count, type);
      case ReduceOp::Adasum: return false;  // not element-wise: src/algorithms/adasum.h
    }
    return false;
  }

  static bool divide(void* buf, size_t count, DataType type, int divisor) {
    switch (type) {
      case DataType::Int8: return divideSame<int8_t>(buf, count, divisor);
      case DataType::Uint8: return divideSame<uint8_t>(buf, count, divisor);
      case DataType::Int16: return divideSame<int16_t>(buf, count, divisor);
      case DataType::Int32: return divideSame<int32_t>(buf, count, divisor);
      case DataType::Int64: return divideSame<int64_t>(buf, count, int64_t{divisor});
      case DataType::Float16:
        return divideWidened<typename Codecs::Float16>(buf, count, static_cast<float>(divisor));
      case DataType::BFloat16:
        return divideWidened<typename Codecs::BFloat16>(buf, count, static_cast<float>(divisor));
      case DataType::Float32: return divideSame<float>(buf, count, static_cast<float>(divisor));
      case DataType::Float64: return divideSame<double>(buf, count, static_cast<double>(divisor));
      case DataType::Bool: return false;  // no average of bools (reduce.cc says so first)
    }
    return false;
  }
};

// The float16 and bfloat16 conversions of one instruction-set variant.
template <typename Float16Codec, typename BFloat16Codec>
struct VariantCodecs {
  using Float16 = Float16Codec;
  using BFloat16 = BFloat16Codec;
};

// One instruction-set variant's entry in dispatch.h's table: the loops, with its conversions.
template <typename Float16Codec, typename BFloat16Codec>
constexpr KernelSet kernelSetOf(const char* name) {
  using Codecs = VariantCodecs<Float16Codec, BFloat16Codec>;
  return {name, &Kernels<Codecs>::reduceMany, &Kernels<Codecs>::divide};
}

}  // namespace
}  // namespace ringcomm::reduce
