// Rabenseifner's all-reduce: log2(p) halving steps, each exchanging half of the remaining range
// with a partner and reducing the half kept, then log2(p) doubling steps that undo the halving
// with copies. Latency grows with log2(p) instead of p, so it wins for small and medium messages
// on a network; bandwidth stays 2(p-1)/p of the vector per rank, like the ring. Non-powers of two
// fold the surplus ranks in first (see plan.h). Every element's final value is computed by exactly
// one rank and copied to the others, so all ranks hold the same bits.
#include "algorithms/tree.h"

#include <cstdint>
#include <cstring>

#include "plan/plan.h"
#include "common/bytes.h"
#include "common/trace.h"
#include "reduce/reduce.h"

namespace ringcomm::algorithms {

void treeAllreduce(const Context& ctx, const void* input, void* output, size_t count,
                   DataType type, ReduceOp op) {
  const size_t element = elementSize(type);
  const size_t bytes = count * element;
  uint8_t* out = static_cast<uint8_t*>(output);
  if (input != output) copyBytes(output, input, bytes);
  if (ctx.size == 1) return;

  const plan::TreePlan plan = plan::planTree(ctx.rank, ctx.size, count);
  auto at = [&](const plan::Block& block) { return out + block.offset * element; };

  if (plan.foldedOut) {
    ctx.send(plan.foldPeer, out, bytes);
    ctx.recv(plan.foldPeer, out, bytes);
    ctx.waitAll();
    return;
  }

  uint8_t* scratch = ctx.scratch.get(ScratchBuffer::Received, bytes);
  if (plan.foldPeer >= 0) {
    auto request = ctx.recv(plan.foldPeer, scratch, bytes);
    ctx.wait(request);
    trace::Span span(trace::Phase::Reduce, "fold-in");
    reduce::reduceInto(out, scratch, count, type, op);
  }

  {
    trace::Span halving(trace::Phase::ReduceScatter, "recursive halving");
    for (const plan::TreeStep& step : plan.halving) {
      ctx.send(step.peer, at(step.send), step.send.count * element);
      uint8_t* into = scratch + step.keep.offset * element;
      auto request = ctx.recv(step.peer, into, step.keep.count * element);
      ctx.wait(request);
      trace::Span span(trace::Phase::Reduce);
      reduce::reduceInto(at(step.keep), into, step.keep.count, type, op);
    }
    reduce::finishAverage(at(plan.owned), plan.owned.count, type, op, ctx.size);
    // The halving sends read ranges the doubling receives overwrite: let them drain first.
    ctx.waitAll();
  }

  trace::Span doubling(trace::Phase::Gather, "recursive doubling");
  for (auto step = plan.halving.rbegin(); step != plan.halving.rend(); ++step) {
    ctx.send(step->peer, at(step->keep), step->keep.count * element);
    ctx.recv(step->peer, at(step->send), step->send.count * element);
    ctx.waitAll();
  }

  if (plan.foldPeer >= 0) {
    ctx.send(plan.foldPeer, out, bytes);
    ctx.waitAll();
  }
}

}  // namespace ringcomm::algorithms
