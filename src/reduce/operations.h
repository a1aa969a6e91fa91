// The reduction operations per element, written once for the CPU's loops (reduce/loops.h) and
// the CUDA kernels (cuda/element_ops.cuh), so that both compute the same bits: operand order
// included (it matters for Min and Max of -0 and +0, and for which NaN comes out).
//
// In an unnamed namespace, as loops.h is: each instruction-set variant of the CPU loops includes
// this file inside its own target region and gets its own copy of the code (with external
// linkage the linker would keep one copy for all, and the portable path could run AVX2 code).
// Under nvcc the operations are host and device functions; the canonical NaNs are constexpr
// scalars, which device code may read.
#pragma once

#include <limits>
#include <type_traits>

#if defined(__CUDACC__)
#define RINGCOMM_ELEMENT_OP __host__ __device__ __forceinline__
#else
#define RINGCOMM_ELEMENT_OP
#endif

namespace ringcomm::reduce {
namespace {

// --- Operations. ---
//
// Integers do their arithmetic in an unsigned type, so Sum and Prod wrap around instead of
// overflowing (which is undefined for signed types). Types narrower than int compute in unsigned
// int: C++ would promote their unsigned type to (signed) int, where a product of two uint16_t
// overflows.
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
  using type =
      std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
};
template <typename T>
using ArithmeticType = typename Arithmetic<T>::type;

template <typename T>
constexpr T kCanonicalNan = std::numeric_limits<T>::quiet_NaN();

template <typename T>
RINGCOMM_ELEMENT_OP T canonicalizeNan(T value) {
  return value != value ? kCanonicalNan<T> : value;
}

struct SumOp {
  static constexpr const char* kName = "sum";
  template <typename T>
  RINGCOMM_ELEMENT_OP static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return canonicalizeNan(a + b);
    } else {
      using A = ArithmeticType<T>;
      return static_cast<T>(static_cast<A>(static_cast<A>(a) + static_cast<A>(b)));
    }
  }
};

struct ProdOp {
  static constexpr const char* kName = "prod";
  template <typename T>
  RINGCOMM_ELEMENT_OP static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return canonicalizeNan(a * b);
    } else {
      using A = ArithmeticType<T>;
      return static_cast<T>(static_cast<A>(static_cast<A>(a) * static_cast<A>(b)));
    }
  }
};

struct MinOp {
  static constexpr const char* kName = "min";
  template <typename T>
  RINGCOMM_ELEMENT_OP static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return ((a != a) | (b != b)) ? kCanonicalNan<T> : (b < a ? b : a);
    } else {
      return b < a ? b : a;
    }
  }
};

struct MaxOp {
  static constexpr const char* kName = "max";
  template <typename T>
  RINGCOMM_ELEMENT_OP static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return ((a != a) | (b != b)) ? kCanonicalNan<T> : (b > a ? b : a);
    } else {
      return b > a ? b : a;
    }
  }
};

// bool (DataType::Bool) is reduced as bytes, logically: 0 is false, anything else true, and every
// result is 0 or 1 (a byte other than 0 and 1 is no valid bool in C++, NumPy or torch, but memory
// can hold one, so the inputs are never trusted to be 0 or 1). Sum and Max are logical or, Prod
// and Min logical and: what torch.distributed's gloo backend computes (gloo::sum<bool> adds two
// bools and stores the result in a bool), and what NCCL does for torch (bool SUM runs as MAX of
// uint8). Avg is not defined (reduce.cc refuses it).
struct LogicalOrOp {
  static constexpr const char* kName = "or";
  template <typename T>
  RINGCOMM_ELEMENT_OP static T apply(T a, T b) {
    return static_cast<T>((a | b) != 0);
  }
};

struct LogicalAndOp {
  static constexpr const char* kName = "and";
  template <typename T>
  RINGCOMM_ELEMENT_OP static T apply(T a, T b) {
    return static_cast<T>((a != 0) & (b != 0));
  }
};

// The logical operation a ReduceOp's operation becomes on bool.
template <typename Op>
struct LogicalOf {
  using type = LogicalOrOp;  // SumOp, MaxOp
};
template <>
struct LogicalOf<ProdOp> {
  using type = LogicalAndOp;
};
template <>
struct LogicalOf<MinOp> {
  using type = LogicalAndOp;
};

}  // namespace
}  // namespace ringcomm::reduce
