// Ring reduce-scatter and all-gather, chunked and pipelined.
//
// The vector is cut into one block per rank. In reduce-scatter each of the size-1 steps moves one
// block one hop to the right, and the receiver folds its own contribution into it; after the last
// step rank r holds block r reduced over everyone. All-gather then moves the finished blocks
// around the ring the same way, copying instead of reducing.
//
// Blocks travel as trains of segments (Context::segmentBytes): as soon as segment j of a block
// has arrived and been reduced, it is posted onward, so the transfer of step s+1 overlaps the
// reduction of step s instead of waiting for the whole block. Receives for step s+1 are posted
// before step s is processed, into the other of two scratch buffers, so the transport can take
// them off the wire while this rank reduces.
#include "algorithms/ring.h"

#include <cstring>

#include "reduce/reduce.h"

namespace ringcomm::algorithms {
namespace {

using plan::Block;
using transport::Transport;

struct Posted {
  Block segment;
  Transport::Request request;
};

}  // namespace

std::vector<Block> evenBlocks(size_t count, int parts) {
  std::vector<Block> blocks;
  for (int i = 0; i < parts; ++i) blocks.push_back(plan::blockOf(count, parts, i));
  return blocks;
}

std::vector<Block> equalBlocks(size_t perRank, int parts) {
  std::vector<Block> blocks;
  for (int i = 0; i < parts; ++i) blocks.push_back(Block{perRank * i, perRank});
  return blocks;
}

void ringReduceScatter(const Context& ctx, void* buffer, const std::vector<Block>& blocks,
                       DataType type, ReduceOp op) {
  if (ctx.size == 1) return;
  const int p = ctx.size;
  const int right = (ctx.rank + 1) % p;
  const int left = (ctx.rank + p - 1) % p;
  const size_t element = elementSize(type);
  const size_t segmentCount = std::max<size_t>(1, ctx.segmentBytes / element);
  uint8_t* base = static_cast<uint8_t*>(buffer);

  size_t largest = 0;
  for (const Block& block : blocks) largest = std::max(largest, block.count);
  uint8_t* scratch[2] = {ctx.scratch.get(0, largest * element), ctx.scratch.get(1, largest * element)};

  auto postReceives = [&](int step) {
    std::vector<Posted> posted;
    const Block block = blocks[plan::ringReduceScatterStep(ctx.rank, p, step).recvBlock];
    for (const Block& segment : plan::segmentsOf(block, segmentCount)) {
      uint8_t* into = scratch[step % 2] + (segment.offset - block.offset) * element;
      posted.push_back({segment, ctx.transport.postRecv(left, into, segment.count * element, ctx.tag)});
    }
    return posted;
  };

  // Step 0 sends this rank's own contribution to block r-1; later steps forward what arrived.
  const Block first = blocks[plan::ringReduceScatterStep(ctx.rank, p, 0).sendBlock];
  for (const Block& segment : plan::segmentsOf(first, segmentCount)) {
    ctx.transport.postSend(right, base + segment.offset * element, segment.count * element, ctx.tag);
  }
  std::vector<Posted> current = postReceives(0);
  for (int step = 0; step < p - 1; ++step) {
    std::vector<Posted> next;
    if (step + 1 < p - 1) next = postReceives(step + 1);
    const Block block = blocks[plan::ringReduceScatterStep(ctx.rank, p, step).recvBlock];
    for (const Posted& posted : current) {
      ctx.transport.wait(posted.request, ctx.op);
      uint8_t* mine = base + posted.segment.offset * element;
      const uint8_t* theirs = scratch[step % 2] + (posted.segment.offset - block.offset) * element;
      reduce::reduceInto(mine, theirs, posted.segment.count, type, op);
      if (step + 1 < p - 1) {
        ctx.transport.postSend(right, mine, posted.segment.count * element, ctx.tag);
      }
    }
    current = std::move(next);
  }
  const Block& own = blocks[ctx.rank];
  reduce::finishAverage(base + own.offset * element, own.count, type, op, p);
  ctx.transport.waitAll(ctx.op);
}

void ringAllgather(const Context& ctx, void* buffer, const std::vector<Block>& blocks,
                   DataType type) {
  if (ctx.size == 1) return;
  const int p = ctx.size;
  const int right = (ctx.rank + 1) % p;
  const int left = (ctx.rank + p - 1) % p;
  const size_t element = elementSize(type);
  const size_t segmentCount = std::max<size_t>(1, ctx.segmentBytes / element);
  uint8_t* base = static_cast<uint8_t*>(buffer);

  for (const Block& segment : plan::segmentsOf(blocks[ctx.rank], segmentCount)) {
    ctx.transport.postSend(right, base + segment.offset * element, segment.count * element, ctx.tag);
  }
  for (int step = 0; step < p - 1; ++step) {
    const Block block = blocks[plan::ringAllgatherStep(ctx.rank, p, step).recvBlock];
    std::vector<Posted> posted;
    for (const Block& segment : plan::segmentsOf(block, segmentCount)) {
      posted.push_back({segment, ctx.transport.postRecv(left, base + segment.offset * element,
                                                        segment.count * element, ctx.tag)});
    }
    for (const Posted& arrived : posted) {
      ctx.transport.wait(arrived.request, ctx.op);
      if (step + 1 < p - 1) {
        ctx.transport.postSend(right, base + arrived.segment.offset * element,
                               arrived.segment.count * element, ctx.tag);
      }
    }
  }
  ctx.transport.waitAll(ctx.op);
}

void ringAllreduce(const Context& ctx, const void* input, void* output, size_t count,
                   DataType type, ReduceOp op) {
  if (input != output) std::memcpy(output, input, count * elementSize(type));
  const std::vector<Block> blocks = evenBlocks(count, ctx.size);
  ringReduceScatter(ctx, output, blocks, type, op);
  ringAllgather(ctx, output, blocks, type);
}

}  // namespace ringcomm::algorithms
