// What the CUDA kernels compute per element: the reduction operations of src/reduce/loops.h, the
// element types they run on, and float32 arithmetic with x86's NaNs for the codecs. Host and
// device code alike, so that tests/cuda can run them on the host too.
//
// The operations are loops.h's own (reduce/operations.h), so the results are the CPU's bit for
// bit. The library is compiled with --fmad=false (cmake/cuda.cmake): nvcc would otherwise fuse a
// multiply and an add into one FMA and round once where the CPU rounds twice.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/data_type_names.h"
#include "cuda/float_formats.cuh"
#include "reduce/operations.h"
#include "ringcomm/types.h"

namespace ringcomm::cuda::detail {

// --- The operations: reduce/operations.h's, the CPU loops' own. ---

using reduce::canonicalizeNan;
using reduce::LogicalAndOp;
using reduce::LogicalOf;
using reduce::LogicalOrOp;
using reduce::MaxOp;
using reduce::MinOp;
using reduce::ProdOp;
using reduce::SumOp;

// --- Element types: how a DataType is stored, and what it is computed in. ---
//
// Storage is what memory holds; Compute is what the operations see (float32 for the 16-bit
// floats: load, widen, combine, round back to nearest even); Divisor is the type finishAverage
// divides by, as in loops.h's Kernels::divide (an int keeps divisors above 127 working for int8);
// Operation<Op> is the operation a ReduceOp's Op becomes on the type (itself, except for bool).

// What every element type says: its name (toString(kType)'s, common/data_type_names.h: for launch
// errors and the tests), what it is stored, computed and divided in, and Operation<Op>.
template <DataType kType, typename StorageType, typename ComputeType, typename DivisorType>
struct ElementType {
  static constexpr const char* kName = nameIn(kDataTypeNames, kType);
  using Storage = StorageType;
  using Compute = ComputeType;
  using Divisor = DivisorType;
  template <typename Op>
  using Operation = Op;
};

// Types computed in themselves.
template <DataType kType, typename T, typename DivisorType>
struct NativeElement : ElementType<kType, T, T, DivisorType> {
  RINGCOMM_HOST_DEVICE static T widen(T value) { return value; }
  RINGCOMM_HOST_DEVICE static T narrow(T value) { return value; }
};

using Int8Element = NativeElement<DataType::Int8, int8_t, int>;
using Uint8Element = NativeElement<DataType::Uint8, uint8_t, int>;
using Int16Element = NativeElement<DataType::Int16, int16_t, int>;
using Int32Element = NativeElement<DataType::Int32, int32_t, int>;
using Int64Element = NativeElement<DataType::Int64, int64_t, int64_t>;
using Float32Element = NativeElement<DataType::Float32, float, float>;
using Float64Element = NativeElement<DataType::Float64, double, double>;

// Bytes reduced logically. There is no average of bools: finishAverage refuses it before any
// division (the Divisor is only there to complete the description).
struct BoolElement : NativeElement<DataType::Bool, uint8_t, int> {
  template <typename Op>
  using Operation = typename LogicalOf<Op>::type;
};

// The 16-bit floats: stored as their bits, computed in float32.
struct Float16Element : ElementType<DataType::Float16, uint16_t, float, float> {
  RINGCOMM_HOST_DEVICE static float widen(uint16_t value) { return halfBitsToFloat(value); }
  RINGCOMM_HOST_DEVICE static uint16_t narrow(float value) { return floatToHalfBits(value); }
};

struct BFloat16Element : ElementType<DataType::BFloat16, uint16_t, float, float> {
  RINGCOMM_HOST_DEVICE static float widen(uint16_t value) { return bfloat16BitsToFloat(value); }
  RINGCOMM_HOST_DEVICE static uint16_t narrow(float value) { return floatToBfloat16Bits(value); }
};

// One element combined as the CPU does it: widen both, apply, round back.
template <typename Element, typename Op>
RINGCOMM_HOST_DEVICE typename Element::Storage combine(typename Element::Storage a,
                                                       typename Element::Storage b) {
  using Operation = typename Element::template Operation<Op>;
  return Element::narrow(Operation::apply(Element::widen(a), Element::widen(b)));
}

// Element i of srcs[0] OP srcs[1] OP ... OP srcs[n - 1] (n >= 2), as the CPU's reduce::reduceMany
// computes it: left to right in the compute type, so the 16-bit floats accumulate in float32 and
// round once at the end.
template <typename Element, typename Op>
RINGCOMM_HOST_DEVICE typename Element::Storage combineMany(
    const typename Element::Storage* const* srcs, int n, size_t i) {
  using Operation = typename Element::template Operation<Op>;
  typename Element::Compute acc = Element::widen(srcs[0][i]);
  for (int k = 1; k < n; ++k) acc = Operation::apply(acc, Element::widen(srcs[k][i]));
  return Element::narrow(acc);
}

// finishAverage's division of one element (loops.h: divideSame, divideWidened).
template <typename Element>
RINGCOMM_HOST_DEVICE typename Element::Storage divide(typename Element::Storage value,
                                                      typename Element::Divisor divisor) {
  using Compute = typename Element::Compute;
  const Compute widened = Element::widen(value);
  if constexpr (std::is_floating_point_v<Compute>) {
    return Element::narrow(canonicalizeNan(widened / divisor));
  } else {
    return static_cast<Compute>(widened / divisor);
  }
}

// --- float32 arithmetic for the codecs: rounded once, with x86's NaNs (kernels.h). ---
//
// On the device every product, quotient and sum goes through a _rn intrinsic, so that no build
// flag can fuse a multiply and an add into one FMA and round once where the CPU rounds twice
// (under the library's --fmad=false a plain * or + compiles to the same instruction; the
// intrinsics hold without it).

RINGCOMM_HOST_DEVICE float multiplyRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

RINGCOMM_HOST_DEVICE float divideRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

RINGCOMM_HOST_DEVICE float addRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// x86's NaN for a + b or a * b: the first NaN operand made quiet, or, when the operands are numbers
// and the result is NaN anyway, the "real indefinite" NaN. Numbers pass through untouched.
constexpr uint32_t kX86IndefiniteNan = 0xFFC00000u;

RINGCOMM_HOST_DEVICE float withX86Nan(float a, float b, float result) {
  if (isNan(a)) return floatOf(bitsOf(a) | half::kFloatQuietBit);
  if (isNan(b)) return floatOf(bitsOf(b) | half::kFloatQuietBit);
  return isNan(result) ? floatOf(kX86IndefiniteNan) : result;
}

// a + b and a * b as the CPU's float32 arithmetic computes them, operands in the CPU's order.
RINGCOMM_HOST_DEVICE float x86Add(float a, float b) {
  return withX86Nan(a, b, addRn(a, b));
}
RINGCOMM_HOST_DEVICE float x86Multiply(float a, float b) {
  return withX86Nan(a, b, multiplyRn(a, b));
}

// The CPU's codec::scale: a float32 multiply by static_cast<float>(factor), skipped when the
// factor is exactly 1 (then even a signalling NaN passes unchanged).
struct Scale {
  float factor;
  bool active;

  explicit Scale(double value) : factor(static_cast<float>(value)), active(value != 1.0) {}
  RINGCOMM_HOST_DEVICE float apply(float value) const {
    return active ? x86Multiply(value, factor) : value;
  }
};

}  // namespace ringcomm::cuda::detail
