// Element-wise reductions on device memory (kernels.h): the CPU's per-element operations
// (element_ops.cuh) swept over the arrays by the grid-stride kernel of elementwise.cuh.
//
// One kernel per (element type, operation): 10 types x 4 operations (Avg runs as Sum; on bool
// the operations are logical or and and), plus 9 divisions for finishAverage (none for bool), plus
// as many reduceMany kernels (every source in one pass, the average folded in). Each is a
// template instance, so the operation is compiled in rather than chosen per element.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/element_ops.cuh"
#include "cuda/elementwise.cuh"
#include "cuda/kernels.h"
#include "ringcomm/errors.h"

namespace ringcomm::cuda {
namespace {

using detail::ArrayRef;
using detail::KernelName;
using detail::kVectorBytes;

// out[i] = a[i] OP b[i], a vector at a time where the arrays allow it. out may be a or b: every
// element is loaded before the same thread stores it.
template <typename Element, typename Op>
struct ReduceElements {
  using Storage = typename Element::Storage;
  static constexpr size_t kVector = kVectorBytes / sizeof(Storage);

  Storage* out;
  const Storage* a;
  const Storage* b;

  std::array<ArrayRef, 3> arrays() const {
    return {{{"out", out, sizeof(Storage)}, {"a", a, sizeof(Storage)}, {"b", b, sizeof(Storage)}}};
  }

  __device__ void scalar(size_t i) const { out[i] = detail::combine<Element, Op>(a[i], b[i]); }

  __device__ void vector(size_t i) const {
    Storage x[kVector];
    Storage y[kVector];
    detail::loadVector(a + i, x);
    detail::loadVector(b + i, y);
#pragma unroll
    for (size_t k = 0; k < kVector; ++k) x[k] = detail::combine<Element, Op>(x[k], y[k]);
    detail::storeVector(out + i, x);
  }
};

// out[i] = srcs[0][i] OP ... OP srcs[n-1][i] in the compute type, rounded once, then divided for
// Avg: reduceMany's single pass. out may be a source: every source is loaded before the store.
template <typename Element, typename Op>
struct ReduceManyElements {
  using Storage = typename Element::Storage;
  using Compute = typename Element::Compute;
  static constexpr size_t kVector = kVectorBytes / sizeof(Storage);
  static constexpr bool kCanAverage = !std::is_same_v<Element, detail::BoolElement>;

  Storage* out;
  const Storage* srcs[kMaxReduceSources];
  int n;
  bool average;
  typename Element::Divisor divisor;

  // Every array the launch touches; the unused source slots repeat the first source, which
  // leaves the alignment split and the checks unchanged.
  std::array<ArrayRef, kMaxReduceSources + 1> arrays() const {
    std::array<ArrayRef, kMaxReduceSources + 1> all{};
    all[0] = {"out", out, sizeof(Storage)};
    for (int k = 0; k < kMaxReduceSources; ++k) {
      all[k + 1] = {"a source", srcs[k < n ? k : 0], sizeof(Storage)};
    }
    return all;
  }

  __device__ Storage finish(Storage value) const {
    if constexpr (kCanAverage) {
      if (average) return detail::divide<Element>(value, divisor);
    }
    return value;
  }

  __device__ void scalar(size_t i) const {
    out[i] = finish(detail::combineMany<Element, Op>(srcs, n, i));
  }

  __device__ void vector(size_t i) const {
    using Operation = typename Element::template Operation<Op>;
    Storage x[kVector];
    Compute acc[kVector];
    detail::loadVector(srcs[0] + i, x);
#pragma unroll
    for (size_t k = 0; k < kVector; ++k) acc[k] = Element::widen(x[k]);
    for (int s = 1; s < n; ++s) {
      detail::loadVector(srcs[s] + i, x);
#pragma unroll
      for (size_t k = 0; k < kVector; ++k) acc[k] = Operation::apply(acc[k], Element::widen(x[k]));
    }
#pragma unroll
    for (size_t k = 0; k < kVector; ++k) x[k] = finish(Element::narrow(acc[k]));
    detail::storeVector(out + i, x);
  }
};

// buf[i] = buf[i] / divisor, finishAverage's division.
template <typename Element>
struct DivideElements {
  using Storage = typename Element::Storage;
  static constexpr size_t kVector = kVectorBytes / sizeof(Storage);

  Storage* buf;
  typename Element::Divisor divisor;

  std::array<ArrayRef, 1> arrays() const { return {{{"buf", buf, sizeof(Storage)}}}; }

  __device__ void scalar(size_t i) const { buf[i] = detail::divide<Element>(buf[i], divisor); }

  __device__ void vector(size_t i) const {
    Storage x[kVector];
    detail::loadVector(buf + i, x);
#pragma unroll
    for (size_t k = 0; k < kVector; ++k) x[k] = detail::divide<Element>(x[k], divisor);
    detail::storeVector(buf + i, x);
  }
};

// Calls visit(Element{}) for the type's element description; false for an unknown type.
template <typename Visit>
bool visitElement(DataType type, Visit&& visit) {
  switch (type) {
    case DataType::Int8: visit(detail::Int8Element{}); return true;
    case DataType::Uint8: visit(detail::Uint8Element{}); return true;
    case DataType::Int16: visit(detail::Int16Element{}); return true;
    case DataType::Int32: visit(detail::Int32Element{}); return true;
    case DataType::Int64: visit(detail::Int64Element{}); return true;
    case DataType::Float16: visit(detail::Float16Element{}); return true;
    case DataType::BFloat16: visit(detail::BFloat16Element{}); return true;
    case DataType::Float32: visit(detail::Float32Element{}); return true;
    case DataType::Float64: visit(detail::Float64Element{}); return true;
    case DataType::Bool: visit(detail::BoolElement{}); return true;
  }
  return false;
}

// Calls visit(Op{}) for the operation; Avg is Sum (the division is finishAverage's).
template <typename Visit>
bool visitOp(ReduceOp op, Visit&& visit) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: visit(detail::SumOp{}); return true;
    case ReduceOp::Min: visit(detail::MinOp{}); return true;
    case ReduceOp::Max: visit(detail::MaxOp{}); return true;
    case ReduceOp::Prod: visit(detail::ProdOp{}); return true;
    case ReduceOp::Adasum: return false;  // not element-wise (src/algorithms/adasum.h)
  }
  return false;
}

[[noreturn]] void throwUnknown(const char* function, DataType type, ReduceOp op) {
  throw InvalidArgument(std::string("ringcomm::cuda::") + function +
                        ": unknown data type or op (dtype " +
                        std::to_string(static_cast<int>(type)) + ", op " +
                        std::to_string(static_cast<int>(op)) + ")");
}

// What an average needs: a type that has one, a divisor of at least 1.
void checkAverage(const char* function, DataType type, int divisor) {
  if (type == DataType::Bool) {
    throw InvalidArgument(std::string("ringcomm::cuda::") + function +
                          ": avg of bool is not defined");
  }
  if (divisor < 1) {
    throw InvalidArgument(std::string("ringcomm::cuda::") + function +
                          ": divisor must be positive, got " + std::to_string(divisor));
  }
}

// Calls visit(Element{}, Op{}) for the type and operation; throws naming `function` for an
// unknown one.
template <typename Visit>
void visitReduction(const char* function, DataType type, ReduceOp op, Visit&& visit) {
  bool known = false;
  visitOp(op, [&](auto operation) {
    known = visitElement(type, [&](auto element) { visit(element, operation); });
  });
  if (!known) throwUnknown(function, type, op);
}

}  // namespace

void reduce(void* out, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
            cudaStream_t stream) {
  if (count == 0) return;
  visitReduction("reduce", type, op, [&](auto element, auto operation) {
    using Element = decltype(element);
    using Op = decltype(operation);
    using Storage = typename Element::Storage;
    const ReduceElements<Element, Op> elements{static_cast<Storage*>(out),
                                               static_cast<const Storage*>(a),
                                               static_cast<const Storage*>(b)};
    detail::launchElementwise(KernelName{"reduce", Element::kName, Op::kName}, elements, count,
                              stream);
  });
}

void reduceInto(void* acc, const void* src, size_t count, DataType type, ReduceOp op,
                cudaStream_t stream) {
  reduce(acc, acc, src, count, type, op, stream);
}

void reduceMany(void* out, const void* const* srcs, int n, size_t count, DataType type,
                ReduceOp op, int divisor, cudaStream_t stream) {
  if (n < 2 || n > kMaxReduceSources) {
    throw InvalidArgument("ringcomm::cuda::reduceMany: takes 2 to " +
                          std::to_string(kMaxReduceSources) + " sources, got " +
                          std::to_string(n));
  }
  if (op == ReduceOp::Avg) checkAverage("reduceMany", type, divisor);
  if (count == 0) return;
  visitReduction("reduceMany", type, op, [&](auto element, auto operation) {
    using Element = decltype(element);
    using Op = decltype(operation);
    using Storage = typename Element::Storage;
    ReduceManyElements<Element, Op> elements{};
    elements.out = static_cast<Storage*>(out);
    for (int k = 0; k < n; ++k) elements.srcs[k] = static_cast<const Storage*>(srcs[k]);
    elements.n = n;
    elements.average = op == ReduceOp::Avg;
    elements.divisor = static_cast<typename Element::Divisor>(divisor);
    detail::launchElementwise(KernelName{"reduceMany", Element::kName, Op::kName}, elements, count,
                              stream);
  });
}

void finishAverage(void* buf, size_t count, DataType type, ReduceOp op, int divisor,
                   cudaStream_t stream) {
  if (op != ReduceOp::Avg) return;
  checkAverage("finishAverage", type, divisor);
  if (count == 0) return;
  const bool known = visitElement(type, [&](auto element) {
    using Element = decltype(element);
    using Storage = typename Element::Storage;
    if constexpr (!std::is_same_v<Element, detail::BoolElement>) {  // refused above
      const DivideElements<Element> elements{static_cast<Storage*>(buf),
                                             static_cast<typename Element::Divisor>(divisor)};
      detail::launchElementwise(KernelName{"finishAverage", Element::kName}, elements, count,
                                stream);
    }
  });
  if (!known) throwUnknown("finishAverage", type, op);
}

}  // namespace ringcomm::cuda
