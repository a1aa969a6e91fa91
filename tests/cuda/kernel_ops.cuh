// The reductions the kernel tests run, and the kernels' per-element operation for each (what
// the "host" tests apply on the CPU).
#pragma once

#include "cuda/element_ops.cuh"
#include "ringcomm/types.h"

namespace ringcomm::cudatest {

inline constexpr ReduceOp kReduceOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min,
                                          ReduceOp::Max, ReduceOp::Prod};

// Calls f(Op{}) with the kernels' operation for op (Avg is Sum: the division comes after).
template <typename F>
void withKernelOp(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return f(cuda::detail::SumOp{});
    case ReduceOp::Min: return f(cuda::detail::MinOp{});
    case ReduceOp::Max: return f(cuda::detail::MaxOp{});
    case ReduceOp::Prod: return f(cuda::detail::ProdOp{});
    case ReduceOp::Adasum: return;  // not element-wise
  }
}

}  // namespace ringcomm::cudatest
