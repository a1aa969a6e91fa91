#include "algorithms/hierarchical.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "algorithms/collectives.h"
#include "plan/plan.h"
#include "algorithms/ring.h"
#include "algorithms/tree.h"
#include "codec/codec.h"
#include "common/bytes.h"
#include "common/trace.h"
#include "reduce/reduce.h"

namespace ringcomm::algorithms {
namespace {

int hostOf(const HostLayout& layout, int rank) {
  for (size_t h = 0; h < layout.hosts.size(); ++h) {
    for (int member : layout.hosts[h]) {
      if (member == rank) return static_cast<int>(h);
    }
  }
  return -1;
}

// One rank per host: `root` on its own host, the lowest rank on every other.
std::vector<int> representatives(const HostLayout& layout, int root) {
  const int rootHost = hostOf(layout, root);
  std::vector<int> chosen;
  for (size_t h = 0; h < layout.hosts.size(); ++h) {
    chosen.push_back(static_cast<int>(h) == rootHost ? root : layout.hosts[h].front());
  }
  return chosen;
}

// `rank`'s index among this host's ranks.
int localIndexOf(const HostLayout& layout, int rank) {
  const std::vector<int>& local = layout.hosts[layout.host];
  for (size_t i = 0; i < local.size(); ++i) {
    if (local[i] == rank) return static_cast<int>(i);
  }
  return 0;
}

// What the steps before the last one reduce with: an average is a sum until the very end, where
// it divides by every host's ranks (the sub-groups would divide by their own sizes).
ReduceOp partialOp(ReduceOp op) {
  return op == ReduceOp::Avg ? ReduceOp::Sum : op;
}

// Combines `count` elements at `data` with the same elements of the other ranks of `group`
// (one rank per host), leaving the result in place on every member. `hooks` produce the
// elements within this host before the ring first reads them and take them once final
// (SegmentHooks); the tree, which does not pipeline, produces all first and hands all over last.
void combineAcross(const Context& group, void* data, size_t count, const AllreduceOptions& o,
                   const CrossHost& cross, const SegmentHooks& hooks = {}) {
  const plan::Block whole{0, count};
  trace::Span span(trace::Phase::Collective, "across hosts");
  if (group.size > 1 && cross.algorithm == Algorithm::Ring) {
    ringAllreduce(group, data, data, count, o.type, partialOp(o.op), o.compression, 1.0, 1.0,
                  &hooks);
    return;
  }
  if (hooks.produce) hooks.produce(whole);
  if (group.size > 1 && o.compression == Compression::None) {
    treeAllreduce(group, data, data, count, o.type, partialOp(o.op));
  } else if (group.size > 1) {
    ringAllreduce(group, data, data, count, o.type, partialOp(o.op), o.compression);
  }
  if (hooks.consume) hooks.consume(whole);
}

// Large vectors: every local rank reduces, carries across and shares back a slice of its own.
void allreduceBySlices(const Context& ctx, HostTeam& team, const void* input,
                       const AllreduceOptions& o, const CrossHost& cross) {
  const HostLayout& layout = team.layout();
  const size_t element = elementSize(o.type);
  const plan::HostSlices slices =
      plan::planHostSlices(layout.hosts, layout.host, layout.localRank, o.count);
  const Context across = ctx.subgroup(slices.across);
  // Each final segment is averaged over every rank before this host's ranks get it.
  const auto finishSlice = [&](uint8_t* slice, const plan::Block& block,
                               const SegmentHooks& withinHost) {
    SegmentHooks hooks{withinHost.produce, [&](const plan::Block& segment) {
                         reduce::finishAverage(slice + segment.offset * element, segment.count,
                                               o.type, o.op, ctx.size);
                         if (withinHost.consume) withinHost.consume(segment);
                       }};
    combineAcross(across, slice, block.count, o, cross, hooks);
  };
  team.allreduceAcrossHosts(ctx, input, o.output, o.count, o.type, partialOp(o.op), slices,
                            finishSlice);
}

// Small vectors: the host reduces the whole vector, its lowest rank combines it with the other
// hosts' lowest ranks, and the result is broadcast within the host.
void allreduceThroughLeaders(const Context& ctx, HostTeam& team, const void* input,
                             const AllreduceOptions& o, const CrossHost& cross) {
  const HostLayout& layout = team.layout();
  team.allreduce(ctx, input, o.output, o.count, o.type, partialOp(o.op));
  if (layout.localRank == 0) {
    std::vector<int> leaders;
    for (const auto& ranks : layout.hosts) leaders.push_back(ranks.front());
    combineAcross(ctx.subgroup(leaders), o.output, o.count, o, cross);
    reduce::finishAverage(o.output, o.count, o.type, o.op, ctx.size);
  }
  team.broadcast(ctx, o.output, o.count, o.type, 0);
}

}  // namespace

void hierarchicalAllreduce(const Context& ctx, HostTeam& team, const AllreduceOptions& o,
                           const CrossHost& cross) {
  // The steps work in the output; a scaled input is scaled there first.
  const void* input = o.input;
  if (o.prescale != 1.0) {
    if (o.input != o.output) copyBytes(o.output, o.input, o.count * elementSize(o.type));
    codec::scale(o.output, o.count, o.type, o.prescale);
    input = o.output;
  }
  if (cross.slices) {
    allreduceBySlices(ctx, team, input, o, cross);
  } else {
    allreduceThroughLeaders(ctx, team, input, o, cross);
  }
  codec::scale(o.output, o.count, o.type, o.postscale);
}

void hierarchicalAllgather(const Context& ctx, const HostLayout& layout,
                           const AllgatherOptions& o) {
  const size_t element = elementSize(o.type);
  const size_t c = o.count;
  const int hosts = static_cast<int>(layout.hosts.size());
  // The blocks in host-major order (host 0's ranks, then host 1's...), where each host's blocks
  // are one range: the output's own order when every host holds consecutive ranks, as launchers
  // place them; else a buffer of our own, reordered into the output at the end.
  std::vector<size_t> position(ctx.size);  // each rank's block's index in host-major order
  std::vector<size_t> hostStart(hosts);    // each host's first block there
  size_t next = 0;
  bool inOrder = true;
  for (int h = 0; h < hosts; ++h) {
    hostStart[h] = next;
    for (int rank : layout.hosts[h]) {
      inOrder = inOrder && static_cast<size_t>(rank) == next;
      position[rank] = next++;
    }
  }
  uint8_t* work = inOrder ? static_cast<uint8_t*>(o.output)
                          : ctx.scratch.get(ScratchBuffer::HostSlice, c * ctx.size * element);
  uint8_t* own = work + position[ctx.peer(ctx.rank)] * c * element;
  if (own != o.input) moveBytes(own, o.input, c * element);

  // Within the host: every local rank gets the host's blocks.
  const std::vector<int>& local = layout.hosts[layout.host];
  const Context localCtx = ctx.subgroup(local);
  std::vector<plan::Block> blocks;
  for (size_t i = 0; i < local.size(); ++i) blocks.push_back({(hostStart[layout.host] + i) * c, c});
  ringAllgather(localCtx, work, blocks, o.type);

  // Slice j of host h's blocks: local rank j carries it (plan::HostSlices' division).
  const plan::HostSlices slices =
      plan::planHostSlices(layout.hosts, layout.host, layout.localRank, 0);
  const auto sliceOf = [&](int h, int j) {
    const size_t hostCount = layout.hosts[h].size() * c;
    if (j >= slices.slices) return plan::Block{(hostStart[h] * c) + hostCount, 0};
    const plan::Block part = plan::blockOf(hostCount, slices.slices, j);
    return plan::Block{hostStart[h] * c + part.offset, part.count};
  };
  // Across hosts: local rank j of every host exchanges slice j of each host's blocks.
  if (!slices.across.empty()) {
    std::vector<plan::Block> carried;
    for (int h = 0; h < hosts; ++h) carried.push_back(sliceOf(h, layout.localRank));
    trace::Span span(trace::Phase::Collective, "across hosts");
    ringAllgather(ctx.subgroup(slices.across), work, carried, o.type);
  }
  // Within the host again: the slices of every other host's blocks.
  for (int h = 0; h < hosts; ++h) {
    if (h == layout.host) continue;
    std::vector<plan::Block> theirs;
    for (size_t j = 0; j < local.size(); ++j) theirs.push_back(sliceOf(h, static_cast<int>(j)));
    ringAllgather(localCtx, work, theirs, o.type);
  }
  if (!inOrder) {
    uint8_t* out = static_cast<uint8_t*>(o.output);
    for (int rank = 0; rank < ctx.size; ++rank) {
      copyBytes(out + rank * c * element, work + position[rank] * c * element, c * element);
    }
  }
}

void hierarchicalReduceScatter(const Context& ctx, HostTeam& team,
                               const ReduceScatterOptions& o) {
  const HostLayout& layout = team.layout();
  const size_t c = o.count;
  const plan::HostSlices slices =
      plan::planHostSlices(layout.hosts, layout.host, layout.localRank, c * ctx.size);
  // Each host's ranks' blocks in host-major order (the team's): one range per host.
  std::vector<plan::Block> hostRange;
  size_t next = 0;
  for (const auto& ranks : layout.hosts) {
    hostRange.push_back({next * c, ranks.size() * c});
    next += ranks.size();
  }
  // Across hosts: of slice j, each host keeps the part that falls in its own ranks' blocks.
  const auto acrossHosts = [&](uint8_t* slice, const plan::Block& block,
                               const SegmentHooks& withinHost) {
    std::vector<plan::Block> parts;
    for (const plan::Block& range : hostRange) {
      const plan::Block part = plan::intersect(block, range);
      parts.push_back(
          {std::min(part.offset, block.offset + block.count) - block.offset, part.count});
    }
    trace::Span span(trace::Phase::Collective, "across hosts");
    ringReduceScatter(ctx.subgroup(slices.across), slice, parts, o.type, partialOp(o.op),
                      Compression::None, &withinHost);
  };
  ReduceScatterOptions partial = o;
  partial.op = partialOp(o.op);
  team.reduceScatterAcrossHosts(ctx, partial, slices, acrossHosts);
  reduce::finishAverage(o.output, c, o.type, o.op, ctx.size);
}

void hierarchicalBroadcast(const Context& ctx, HostTeam& team, const BroadcastOptions& o) {
  const HostLayout& layout = team.layout();
  const std::vector<int> chosen = representatives(layout, o.root);
  const int me = chosen[layout.host];
  if (ctx.peer(ctx.rank) == me) {
    BroadcastOptions across = o;
    across.root = hostOf(layout, o.root);
    trace::Span span(trace::Phase::Collective, "across hosts");
    broadcast(ctx.subgroup(chosen), across);
  }
  team.broadcast(ctx, o.buffer, o.count, o.type, localIndexOf(layout, me));
}

void hierarchicalReduce(const Context& ctx, HostTeam& team, const ReduceOptions& o) {
  const HostLayout& layout = team.layout();
  const std::vector<int> chosen = representatives(layout, o.root);
  const int me = chosen[layout.host];
  const size_t bytes = o.count * elementSize(o.type);
  uint8_t* work = ctx.scratch.get(ScratchBuffer::HostSlice, bytes);
  // Within the host: the host's sum (or min, max, product) at its representative.
  team.reduce(ctx, o.input, work, o.count, o.type, partialOp(o.op), localIndexOf(layout, me));
  if (ctx.peer(ctx.rank) != me) return;
  ReduceOptions across = o;
  across.input = work;
  across.root = hostOf(layout, o.root);
  across.op = partialOp(o.op);
  {
    trace::Span span(trace::Phase::Collective, "across hosts");
    reduce(ctx.subgroup(chosen), across);
  }
  if (me == o.root) reduce::finishAverage(o.output, o.count, o.type, o.op, ctx.size);
}

void hierarchicalBarrier(const Context& ctx, HostTeam& team) {
  const HostLayout& layout = team.layout();
  team.barrier(ctx);
  if (layout.localRank == 0) {
    std::vector<int> leaders;
    for (const auto& ranks : layout.hosts) leaders.push_back(ranks.front());
    barrier(ctx.subgroup(leaders));
  }
  team.barrier(ctx);
}

}  // namespace ringcomm::algorithms
