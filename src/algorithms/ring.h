// The ring schedules over the point-to-point transport (see ring.cc for the walk-through).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "algorithms/context.h"
#include "plan/plan.h"
#include "ringcomm/types.h"

namespace ringcomm::algorithms {

// What a schedule running inside another (hierarchical.h) may do per segment of the ring's
// buffer, so that its own work overlaps the ring's transfers: `produce` fills a segment just
// before the ring first reads it (the reduce-scatter's first send of it, or its first reduction
// into it), `consume` takes a segment once it holds its final value and the ring no longer reads
// it (it may change it in place): in a reduce-scatter, the segments of this rank's own block as
// each is finished. Segments are in elements of the ring's buffer. Either may be empty.
struct SegmentHooks {
  std::function<void(const plan::Block& segment)> produce;
  std::function<void(const plan::Block& segment)> consume;
};

// blocks[i] is block i of `buffer`, in elements. After the call, this rank's block `rank` of
// `buffer` holds the reduction over all ranks (averaged if op is Avg); other blocks hold partials.
// With a compression other than None (float32 sum/avg only), segments travel as 16-bit floats and
// each hop accumulates in float32.
void ringReduceScatter(const Context& ctx, void* buffer, const std::vector<plan::Block>& blocks,
                       DataType type, ReduceOp op, Compression compression = Compression::None,
                       const SegmentHooks* hooks = nullptr);

// Starting with block `rank` of `buffer` filled in, fills in every other block from its owner.
// With compression, each owner rounds its block to the wire format once (keeping the rounded
// value itself too), so every rank ends with the same bits.
void ringAllgather(const Context& ctx, void* buffer, const std::vector<plan::Block>& blocks,
                   DataType type, Compression compression = Compression::None,
                   const SegmentHooks* hooks = nullptr);

// All-reduce as ring reduce-scatter followed by ring all-gather; prescale multiplies the input
// first and postscale the result (float32/float64).
void ringAllreduce(const Context& ctx, const void* input, void* output, size_t count,
                   DataType type, ReduceOp op, Compression compression = Compression::None,
                   double prescale = 1.0, double postscale = 1.0,
                   const SegmentHooks* hooks = nullptr);

std::vector<plan::Block> evenBlocks(size_t count, int parts);     // blockOf for every rank
std::vector<plan::Block> equalBlocks(size_t perRank, int parts);  // parts blocks of perRank each

}  // namespace ringcomm::algorithms
