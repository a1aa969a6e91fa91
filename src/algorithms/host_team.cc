#include "algorithms/host_team.h"

#include <utility>
#include <vector>

#include "algorithms/collectives.h"
#include "algorithms/ring.h"
#include "algorithms/tree.h"
#include "common/bytes.h"
#include "common/trace.h"

namespace ringcomm::algorithms {

bool hostsHoldConsecutiveRanks(const HostLayout& layout) {
  for (const auto& ranks : layout.hosts) {
    for (size_t i = 1; i < ranks.size(); ++i) {
      if (ranks[i] != ranks.front() + static_cast<int>(i)) return false;
    }
  }
  return true;
}

std::unique_ptr<HostTeam> makeHostTeam(const HostLayout& layout, DirectGroup* group) {
  if (group != nullptr) return std::make_unique<SharedMemoryTeam>(layout, *group);
  return std::make_unique<TransportTeam>(layout);
}

// ---- over the transport ----------------------------------------------------------------------

void TransportTeam::allreduce(const Context& ctx, const void* input, void* output, size_t count,
                              DataType type, ReduceOp op) {
  treeAllreduce(local(ctx), input, output, count, type, op);
}

void TransportTeam::reduce(const Context& ctx, const void* input, void* output, size_t count,
                           DataType type, ReduceOp op, int localRoot) {
  ReduceOptions within;
  within.input = input;
  within.output = output;
  within.count = count;
  within.type = type;
  within.op = op;
  within.root = localRoot;
  algorithms::reduce(local(ctx), within);
}

void TransportTeam::broadcast(const Context& ctx, void* buffer, size_t count, DataType type,
                              int localRoot) {
  BroadcastOptions within;
  within.buffer = buffer;
  within.count = count;
  within.type = type;
  within.root = localRoot;
  algorithms::broadcast(local(ctx), within);
}

void TransportTeam::barrier(const Context& ctx) { algorithms::barrier(local(ctx)); }

void TransportTeam::allreduceAcrossHosts(const Context& ctx, const void* input, void* output,
                                         size_t count, DataType type, ReduceOp op,
                                         const plan::HostSlices& slices,
                                         const SliceStep& across) {
  const size_t element = elementSize(type);
  uint8_t* out = static_cast<uint8_t*>(output);
  if (input != out) copyBytes(out, input, count * element);
  const Context host = local(ctx);
  ringReduceScatter(host, out, slices.local, type, op);
  const plan::Block own = slices.local[layout_.localRank];
  if (!slices.across.empty() && own.count > 0) across(out + own.offset * element, own, {});
  ringAllgather(host, out, slices.local, type);
}

void TransportTeam::reduceScatterAcrossHosts(const Context& ctx, const ReduceScatterOptions& o,
                                             const plan::HostSlices& slices,
                                             const SliceStep& across) {
  const size_t element = elementSize(o.type);
  const size_t c = o.count;
  const std::vector<int>& here = layout_.hosts[layout_.host];
  // The input in host-major order: this host's ranks' blocks are then one range. A copy is made
  // anyway, since the steps reduce in place.
  std::vector<size_t> position(ctx.size);
  uint8_t* work = ctx.scratch.get(ScratchBuffer::HostSlice, c * ctx.size * element);
  {
    trace::Span span(trace::Phase::Copy, "input to scratch, host by host");
    size_t next = 0;
    for (const auto& ranks : layout_.hosts) {
      for (int rank : ranks) {
        position[rank] = next;
        copyBytes(work + next++ * c * element,
                  static_cast<const uint8_t*>(o.input) + rank * c * element, c * element);
      }
    }
  }
  // Within the host: local rank j reduces slice j of the whole vector; then across hosts.
  const Context host = local(ctx);
  ringReduceScatter(host, work, slices.local, o.type, o.op);
  const plan::Block mine = slices.local[layout_.localRank];
  if (!slices.across.empty()) across(work + mine.offset * element, mine, {});
  // Within the host: local rank j hands each local rank the piece of its block it reduced.
  const plan::Block held = plan::intersect(mine, {position[here.front()] * c, here.size() * c});
  const plan::Block own{position[ctx.peer(ctx.rank)] * c, c};
  uint8_t* out = static_cast<uint8_t*>(o.output);
  for (size_t i = 0; i < here.size(); ++i) {
    const plan::Block theirs{position[here[i]] * c, c};
    const plan::Block given = plan::intersect(held, theirs);          // mine, in their block
    const plan::Block taken = plan::intersect(slices.local[i], own);  // theirs, in my block
    if (static_cast<int>(i) == layout_.localRank) {
      copyBytes(out + (given.offset - own.offset) * element, work + given.offset * element,
                given.count * element);
      continue;
    }
    host.send(static_cast<int>(i), work + given.offset * element, given.count * element);
    host.recv(static_cast<int>(i), out + (taken.offset - own.offset) * element,
              taken.count * element);
  }
  host.waitAll();
}

// ---- through each other's memory -------------------------------------------------------------

void SharedMemoryTeam::allreduce(const Context& ctx, const void* input, void* output,
                                 size_t count, DataType type, ReduceOp op) {
  group_.allreduce(ctx, input, output, count, type, op);
}

void SharedMemoryTeam::reduce(const Context& ctx, const void* input, void* output, size_t count,
                              DataType type, ReduceOp op, int /*localRoot*/) {
  // The direct schedule's reduce is its all-reduce: every rank reads its slice of every input
  // and the finished slices anyway, and the copy out is to each rank's own buffer.
  group_.allreduce(ctx, input, output, count, type, op);
}

void SharedMemoryTeam::broadcast(const Context& ctx, void* buffer, size_t count, DataType type,
                                 int localRoot) {
  group_.broadcast(ctx, buffer, count, type, localRoot);
}

void SharedMemoryTeam::barrier(const Context& ctx) { group_.barrier(ctx); }

void SharedMemoryTeam::allreduceAcrossHosts(const Context& ctx, const void* input, void* output,
                                            size_t count, DataType type, ReduceOp op,
                                            const plan::HostSlices& slices,
                                            const SliceStep& across) {
  if (group_.allreduceAcrossHosts(ctx, input, output, count, type, op, slices.local, across)) {
    return;
  }
  TransportTeam::allreduceAcrossHosts(ctx, input, output, count, type, op, slices, across);
}

void SharedMemoryTeam::reduceScatterAcrossHosts(const Context& ctx, const ReduceScatterOptions& o,
                                                const plan::HostSlices& slices,
                                                const SliceStep& across) {
  // Each final element goes straight into the output of the local rank whose block holds it:
  // those blocks are one range of the vector only where the host's ranks are consecutive.
  if (hostsHoldConsecutiveRanks(layout_)) {
    const size_t c = o.count;
    std::vector<plan::Block> outputs;
    for (int rank : layout_.hosts[layout_.host]) outputs.push_back({rank * c, c});
    const plan::Block mine = slices.local[layout_.localRank];
    uint8_t* work = ctx.scratch.get(ScratchBuffer::HostSlice, mine.count * elementSize(o.type));
    if (group_.reduceScatterAcrossHosts(ctx, o.input, o.output, work, c * ctx.size, o.type, o.op,
                                        slices.local, outputs, across)) {
      return;
    }
  }
  TransportTeam::reduceScatterAcrossHosts(ctx, o, slices, across);
}

}  // namespace ringcomm::algorithms
