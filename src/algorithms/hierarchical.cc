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
// (one rank per host), leaving the result in place on every member.
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

// The reduce-scatter's steps within the host through each other's memory (DirectGroup), which
// overlap the exchange across hosts: as the ring across hosts reaches each segment of local rank
// j's slice, j reduces it over the host's inputs (produce), and each finished segment of this
// host's part goes straight into the output of the local rank whose block holds it (consume).
// False, having moved nothing, where the host's ranks cannot reach each other's memory or a
// host's ranks are not consecutive.
bool reduceScatterThroughMemory(const Context& ctx, const HostLayout& layout,
                                DirectGroup& hostGroup, const plan::HostSlices& slices,
                                const ReduceScatterOptions& o) {
  if (!hostsHoldConsecutiveRanks(layout)) return false;
  const size_t element = elementSize(o.type);
  const size_t c = o.count;
  std::vector<plan::Block> hostRange;
  for (const auto& ranks : layout.hosts) hostRange.push_back({ranks.front() * c, ranks.size() * c});
  std::vector<plan::Block> outputs;
  for (int rank : layout.hosts[layout.host]) outputs.push_back({rank * c, c});
  const plan::Block mine = slices.local[layout.localRank];
  uint8_t* work = ctx.scratch.get(ScratchBuffer::HostSlice, mine.count * element);
  const auto acrossHosts = [&](uint8_t* slice, const plan::Block& block,
                               const SegmentHooks& withinHost) {
    // Of the slice, each host keeps the part that falls in its ranks' blocks.
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
  return hostGroup.reduceScatterAcrossHosts(ctx.op, ctx.tag, o.input, o.output, work, c * ctx.size,
                                            o.type, partialOp(o.op), slices.local, outputs,
                                            acrossHosts);
}

// Large vectors: every local rank reduces, carries across and shares back a slice of its own.
void allreduceBySlices(const Context& ctx, const HostLayout& layout, DirectGroup* hostGroup,
                       const void* input, const AllreduceOptions& o, const CrossHost& cross) {
  const size_t element = elementSize(o.type);
  uint8_t* out = static_cast<uint8_t*>(o.output);
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
  if (hostGroup != nullptr &&
      hostGroup->allreduceAcrossHosts(ctx.op, ctx.tag, input, out, o.count, o.type, partialOp(o.op),
                                      slices.local, finishSlice)) {
    return;
  }
  // The ranks of this host cannot read each other's memory (or were asked to stage): the ring
  // over the host's sub-group, through shared-memory rings or sockets.
  if (input != out) copyBytes(out, input, o.count * element);
  const Context local = ctx.subgroup(layout.hosts[layout.host]);
  ringReduceScatter(local, out, slices.local, o.type, partialOp(o.op));
  const plan::Block own = slices.local[layout.localRank];
  if (!slices.across.empty() && own.count > 0) finishSlice(out + own.offset * element, own, {});
  ringAllgather(local, out, slices.local, o.type);
}

// Small vectors: the host reduces the whole vector, its lowest rank combines it with the other
// hosts' lowest ranks, and the result is broadcast within the host.
void allreduceThroughLeaders(const Context& ctx, const HostLayout& layout, DirectGroup* hostGroup,
                             const void* input, const AllreduceOptions& o, const CrossHost& cross) {
  const Context local = ctx.subgroup(layout.hosts[layout.host]);
  if (hostGroup != nullptr) {
    hostGroup->allreduce(ctx.op, ctx.tag, input, o.output, o.count, o.type, partialOp(o.op));
  } else {
    treeAllreduce(local, input, o.output, o.count, o.type, partialOp(o.op));
  }
  if (layout.localRank == 0) {
    std::vector<int> leaders;
    for (const auto& ranks : layout.hosts) leaders.push_back(ranks.front());
    combineAcross(ctx.subgroup(leaders), o.output, o.count, o, cross);
    reduce::finishAverage(o.output, o.count, o.type, o.op, ctx.size);
  }
  if (hostGroup != nullptr) {
    hostGroup->broadcast(ctx.op, ctx.tag, o.output, o.count, o.type, 0);
  } else {
    BroadcastOptions share;
    share.buffer = o.output;
    share.count = o.count;
    share.type = o.type;
    share.root = 0;
    broadcast(local, share);
  }
}

}  // namespace

bool hostsHoldConsecutiveRanks(const HostLayout& layout) {
  for (const auto& ranks : layout.hosts) {
    for (size_t i = 1; i < ranks.size(); ++i) {
      if (ranks[i] != ranks.front() + static_cast<int>(i)) return false;
    }
  }
  return true;
}

void hierarchicalAllreduce(const Context& ctx, const HostLayout& layout, DirectGroup* hostGroup,
                           const AllreduceOptions& o, const CrossHost& cross) {
  // The steps work in the output; a scaled input is scaled there first.
  const void* input = o.input;
  if (o.prescale != 1.0) {
    if (o.input != o.output) copyBytes(o.output, o.input, o.count * elementSize(o.type));
    codec::scale(o.output, o.count, o.type, o.prescale);
    input = o.output;
  }
  if (cross.slices) {
    allreduceBySlices(ctx, layout, hostGroup, input, o, cross);
  } else {
    allreduceThroughLeaders(ctx, layout, hostGroup, input, o, cross);
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

void hierarchicalReduceScatter(const Context& ctx, const HostLayout& layout, DirectGroup* hostGroup,
                               const ReduceScatterOptions& o) {
  const size_t element = elementSize(o.type);
  const size_t c = o.count;
  const size_t total = c * ctx.size;
  const int hosts = static_cast<int>(layout.hosts.size());
  const std::vector<int>& local = layout.hosts[layout.host];
  const plan::HostSlices slices =
      plan::planHostSlices(layout.hosts, layout.host, layout.localRank, total);
  if (hostGroup != nullptr && reduceScatterThroughMemory(ctx, layout, *hostGroup, slices, o)) {
    reduce::finishAverage(o.output, c, o.type, o.op, ctx.size);
    return;
  }
  // The input in host-major order (as hierarchicalAllgather's): host h's ranks' blocks are then
  // one range, D_h. A copy is made anyway, since the steps reduce in place.
  std::vector<plan::Block> hostRange(hosts);
  std::vector<size_t> position(ctx.size);
  uint8_t* work = ctx.scratch.get(ScratchBuffer::HostSlice, total * element);
  {
    trace::Span span(trace::Phase::Copy, "input to scratch, host by host");
    size_t next = 0;
    for (int h = 0; h < hosts; ++h) {
      hostRange[h] = {next * c, layout.hosts[h].size() * c};
      for (int rank : layout.hosts[h]) {
        position[rank] = next;
        copyBytes(work + next++ * c * element,
                  static_cast<const uint8_t*>(o.input) + rank * c * element, c * element);
      }
    }
  }
  // Within the host: local rank j reduces slice j of the whole vector.
  const Context localCtx = ctx.subgroup(local);
  ringReduceScatter(localCtx, work, slices.local, o.type, partialOp(o.op));
  // Across hosts: of slice j, each host keeps the part that falls in its own ranks' blocks.
  const plan::Block mine = slices.local[layout.localRank];
  if (!slices.across.empty()) {
    std::vector<plan::Block> parts;
    for (int h = 0; h < hosts; ++h) parts.push_back(plan::intersect(mine, hostRange[h]));
    trace::Span span(trace::Phase::Collective, "across hosts");
    ringReduceScatter(ctx.subgroup(slices.across), work, parts, o.type, partialOp(o.op));
  }
  // Within the host: local rank j hands each local rank the piece of its block it reduced.
  const plan::Block held = plan::intersect(mine, hostRange[layout.host]);
  const plan::Block own{position[ctx.peer(ctx.rank)] * c, c};
  uint8_t* out = static_cast<uint8_t*>(o.output);
  for (size_t i = 0; i < local.size(); ++i) {
    const plan::Block theirs{position[local[i]] * c, c};
    const plan::Block given = plan::intersect(held, theirs);          // mine, in their block
    const plan::Block taken = plan::intersect(slices.local[i], own);  // theirs, in my block
    if (static_cast<int>(i) == layout.localRank) {
      copyBytes(out + (given.offset - own.offset) * element, work + given.offset * element,
                given.count * element);
      continue;
    }
    localCtx.send(static_cast<int>(i), work + given.offset * element, given.count * element);
    localCtx.recv(static_cast<int>(i), out + (taken.offset - own.offset) * element,
                  taken.count * element);
  }
  localCtx.waitAll();
  reduce::finishAverage(out, c, o.type, o.op, ctx.size);
}

void hierarchicalBroadcast(const Context& ctx, const HostLayout& layout, DirectGroup* hostGroup,
                           const BroadcastOptions& o) {
  const std::vector<int> chosen = representatives(layout, o.root);
  const int me = chosen[layout.host];
  if (ctx.peer(ctx.rank) == me) {
    BroadcastOptions across = o;
    across.root = hostOf(layout, o.root);
    trace::Span span(trace::Phase::Collective, "across hosts");
    broadcast(ctx.subgroup(chosen), across);
  }
  const int localRoot = localIndexOf(layout, me);
  if (hostGroup != nullptr) {
    hostGroup->broadcast(ctx.op, ctx.tag, o.buffer, o.count, o.type, localRoot);
  } else {
    BroadcastOptions within = o;
    within.root = localRoot;
    broadcast(ctx.subgroup(layout.hosts[layout.host]), within);
  }
}

void hierarchicalReduce(const Context& ctx, const HostLayout& layout, DirectGroup* hostGroup,
                        const ReduceOptions& o) {
  const std::vector<int> chosen = representatives(layout, o.root);
  const int me = chosen[layout.host];
  const size_t bytes = o.count * elementSize(o.type);
  uint8_t* work = ctx.scratch.get(ScratchBuffer::HostSlice, bytes);
  // Within the host: the host's sum (or min, max, product) at its representative.
  if (hostGroup != nullptr) {
    hostGroup->allreduce(ctx.op, ctx.tag, o.input, work, o.count, o.type, partialOp(o.op));
  } else {
    ReduceOptions within = o;
    within.output = work;
    within.root = localIndexOf(layout, me);
    within.op = partialOp(o.op);
    reduce(ctx.subgroup(layout.hosts[layout.host]), within);
  }
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

void hierarchicalBarrier(const Context& ctx, const HostLayout& layout, DirectGroup* hostGroup) {
  const Context local = ctx.subgroup(layout.hosts[layout.host]);
  const auto withinHost = [&] {
    if (hostGroup != nullptr) {
      hostGroup->barrier(ctx.op, ctx.tag);
    } else {
      barrier(local);
    }
  };
  withinHost();
  if (layout.localRank == 0) {
    std::vector<int> leaders;
    for (const auto& ranks : layout.hosts) leaders.push_back(ranks.front());
    barrier(ctx.subgroup(leaders));
  }
  withinHost();
}

}  // namespace ringcomm::algorithms
