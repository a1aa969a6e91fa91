// Recursive halving reduce-scatter + recursive doubling all-gather (Rabenseifner), any rank count.
#pragma once

#include <cstddef>

#include "algorithms/context.h"
#include "ringcomm/types.h"

namespace ringcomm::algorithms {

void treeAllreduce(const Context& ctx, const void* input, void* output, size_t count,
                   DataType type, ReduceOp op);

}  // namespace ringcomm::algorithms
