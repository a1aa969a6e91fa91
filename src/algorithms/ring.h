// The ring schedules over the point-to-point transport (see ring.cc for the walk-through).
#pragma once

#include "algorithms/context.h"
#include "algorithms/plan.h"
#include "ringcomm/types.h"

namespace ringcomm::algorithms {

// blocks[i] is block i of `buffer`, in elements. After the call, this rank's block `rank` of
// `buffer` holds the reduction over all ranks (averaged if op is Avg); other blocks hold partials.
void ringReduceScatter(const Context& ctx, void* buffer, const std::vector<plan::Block>& blocks,
                       DataType type, ReduceOp op);

// Starting with block `rank` of `buffer` filled in, fills in every other block from its owner.
void ringAllgather(const Context& ctx, void* buffer, const std::vector<plan::Block>& blocks,
                   DataType type);

// All-reduce as ring reduce-scatter followed by ring all-gather.
void ringAllreduce(const Context& ctx, const void* input, void* output, size_t count,
                   DataType type, ReduceOp op);

std::vector<plan::Block> evenBlocks(size_t count, int parts);     // blockOf for every rank
std::vector<plan::Block> equalBlocks(size_t perRank, int parts);  // parts blocks of perRank each

}  // namespace ringcomm::algorithms
