// Schedules for the collectives other than all-reduce. Each is the textbook choice for its
// bandwidth regime: rings for the reduce-scatter / all-gather family (every link busy, each byte
// sent once per hop), a binomial tree for small broadcasts (log2 p latency) and a pipelined chain
// for large ones, direct exchanges for the personalised collectives (gather, scatter, all-to-all),
// and a dissemination barrier (log2 p rounds of empty messages).
//
// In broadcast, scatter and gather some ranks only send. Each receiver answers the rank it
// received from with an empty acknowledgement, and senders wait for it: ranks that disagree about
// the root (each naming itself) then meet each other's data where they wait for the
// acknowledgement and raise a MismatchError at once, instead of all returning different data.
// It costs one message latency at the end of these collectives.
#include "algorithms/collectives.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "plan/plan.h"
#include "algorithms/ring.h"
#include "common/bytes.h"
#include "common/trace.h"
#include "reduce/reduce.h"

namespace ringcomm::algorithms {
namespace {

// Broadcasts up to this size go down a binomial tree; larger ones down a pipelined chain, which
// moves each byte over each link once and keeps all links busy.
constexpr size_t kBroadcastTreeBytes = 256 * 1024;

// Tells `sender` that this rank received its first message of the collective and agrees on it.
void acknowledge(const Context& ctx, int sender) {
  ctx.send(sender, nullptr, 0, acknowledgementOf(ctx.tag));
}

void expectAcknowledgement(const Context& ctx, int receiver) {
  ctx.recv(receiver, nullptr, 0, acknowledgementOf(ctx.tag));
}

uint8_t* bytesAt(const void* base, size_t elements, DataType type) {
  return const_cast<uint8_t*>(static_cast<const uint8_t*>(base)) + elements * elementSize(type);
}

void broadcastTree(const Context& ctx, uint8_t* buffer, size_t bytes, int root) {
  // Binomial tree over ranks relative to the root: receive from the parent, then send to
  // children at decreasing distances.
  const int p = ctx.size;
  const int relative = (ctx.rank - root + p) % p;
  int mask = 1;
  while (mask < p) {
    if (relative & mask) {
      const int parent = (relative - mask + root) % p;
      ctx.wait(ctx.recv(parent, buffer, bytes));
      acknowledge(ctx, parent);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (relative + mask < p) {
      const int child = (relative + mask + root) % p;
      ctx.send(child, buffer, bytes);
      expectAcknowledgement(ctx, child);
    }
  }
  ctx.waitAll();
}

void broadcastChain(const Context& ctx, uint8_t* buffer, size_t bytes, int root) {
  const int p = ctx.size;
  const int relative = (ctx.rank - root + p) % p;
  const int next = relative + 1 < p ? (ctx.rank + 1) % p : -1;
  const int previous = (ctx.rank + p - 1) % p;
  const auto segments = plan::segmentsOf(plan::Block{0, bytes}, ctx.segmentBytes);
  if (relative == 0) {
    for (const auto& segment : segments) {
      ctx.send(next, buffer + segment.offset, segment.count);
    }
  } else {
    std::vector<transport::Transport::Request> received;
    for (const auto& segment : segments) {
      received.push_back(ctx.recv(previous, buffer + segment.offset, segment.count));
    }
    for (size_t i = 0; i < segments.size(); ++i) {
      ctx.wait(received[i]);
      if (i == 0) acknowledge(ctx, previous);  // the first segment shows it agrees
      if (next >= 0) {
        ctx.send(next, buffer + segments[i].offset, segments[i].count);
      }
    }
  }
  if (next >= 0) expectAcknowledgement(ctx, next);
  ctx.waitAll();
}

}  // namespace

void reduceScatter(const Context& ctx, const ReduceScatterOptions& o) {
  const size_t element = elementSize(o.type);
  const size_t total = o.count * ctx.size;
  // The ring reduces in place, and the input is the caller's: work on a copy.
  uint8_t* work = ctx.scratch.get(ScratchBuffer::InputCopy, total * element);
  if (total > 0) {
    trace::Span span(trace::Phase::Copy, "input to scratch");
    copyBytes(work, o.input, total * element);
  }
  ringReduceScatter(ctx, work, equalBlocks(o.count, ctx.size), o.type, o.op);
  if (o.count > 0) {
    trace::Span span(trace::Phase::Copy, "own block to output");
    copyBytes(o.output, work + ctx.rank * o.count * element, o.count * element);
  }
}

void allgather(const Context& ctx, const AllgatherOptions& o) {
  uint8_t* own = bytesAt(o.output, ctx.rank * o.count, o.type);
  if (own != o.input && o.count > 0) {
    trace::Span span(trace::Phase::Copy, "input to its place in the output");
    moveBytes(own, o.input, o.count * elementSize(o.type));
  }
  ringAllgather(ctx, o.output, equalBlocks(o.count, ctx.size), o.type);
}

void broadcast(const Context& ctx, const BroadcastOptions& o) {
  if (ctx.size == 1) return;
  const size_t bytes = o.count * elementSize(o.type);
  uint8_t* buffer = static_cast<uint8_t*>(o.buffer);
  if (bytes <= kBroadcastTreeBytes || ctx.size == 2) {
    broadcastTree(ctx, buffer, bytes, o.root);
  } else {
    broadcastChain(ctx, buffer, bytes, o.root);
  }
}

void reduce(const Context& ctx, const ReduceOptions& o) {
  const size_t element = elementSize(o.type);
  const size_t bytes = o.count * element;
  uint8_t* work = ctx.scratch.get(ScratchBuffer::InputCopy, bytes);
  if (bytes > 0) {
    trace::Span span(trace::Phase::Copy, "input to scratch");
    copyBytes(work, o.input, bytes);
  }
  // Reduce-scatter around the ring, then every rank hands its finished block to the root.
  const std::vector<plan::Block> blocks = evenBlocks(o.count, ctx.size);
  ringReduceScatter(ctx, work, blocks, o.type, o.op);
  const plan::Block& own = blocks[ctx.rank];
  if (ctx.rank != o.root) {
    ctx.send(o.root, work + own.offset * element, own.count * element);
  } else {
    uint8_t* out = static_cast<uint8_t*>(o.output);
    copyBytes(out + own.offset * element, work + own.offset * element, own.count * element);
    for (int peer = 0; peer < ctx.size; ++peer) {
      if (peer == ctx.rank) continue;
      const plan::Block& theirs = blocks[peer];
      ctx.recv(peer, out + theirs.offset * element, theirs.count * element);
    }
  }
  ctx.waitAll();
}

void alltoall(const Context& ctx, const AlltoallOptions& o) {
  const size_t blockBytes = o.count * elementSize(o.type);
  const uint8_t* in = static_cast<const uint8_t*>(o.input);
  uint8_t* out = static_cast<uint8_t*>(o.output);
  const int p = ctx.size;
  // In place needs the outgoing blocks kept aside before incoming ones overwrite them.
  if (in == out && p > 1) {
    uint8_t* copy = ctx.scratch.get(ScratchBuffer::InputCopy, blockBytes * p);
    copyBytes(copy, in, blockBytes * p);
    in = copy;
  }
  moveBytes(out + ctx.rank * blockBytes, in + ctx.rank * blockBytes, blockBytes);
  // Shifted pairing: at distance d talk to r+d and r-d, so no rank is everyone's first target.
  for (int distance = 1; distance < p; ++distance) {
    const int to = (ctx.rank + distance) % p;
    const int from = (ctx.rank - distance + p) % p;
    ctx.send(to, in + to * blockBytes, blockBytes);
    ctx.recv(from, out + from * blockBytes, blockBytes);
  }
  ctx.waitAll();
}

void alltoallv(const Context& ctx, const AlltoallvOptions& o) {
  const size_t element = elementSize(o.type);
  const uint8_t* in = static_cast<const uint8_t*>(o.input);
  uint8_t* out = static_cast<uint8_t*>(o.output);
  const int p = ctx.size;
  const int r = ctx.rank;
  moveBytes(out + o.recvOffsets[r] * element, in + o.sendOffsets[r] * element,
            o.recvCounts[r] * element);
  // The same shifted pairing as alltoall. A block's length travels in its frame header, so ranks
  // that disagree on a count get a MismatchError rather than misplaced data.
  for (int distance = 1; distance < p; ++distance) {
    const int to = (r + distance) % p;
    const int from = (r - distance + p) % p;
    ctx.send(to, in + o.sendOffsets[to] * element, o.sendCounts[to] * element);
    ctx.recv(from, out + o.recvOffsets[from] * element, o.recvCounts[from] * element);
  }
  ctx.waitAll();
}

void gather(const Context& ctx, const GatherOptions& o) {
  const size_t blockBytes = o.count * elementSize(o.type);
  if (ctx.rank != o.root) {
    ctx.send(o.root, o.input, blockBytes);
    expectAcknowledgement(ctx, o.root);
  } else {
    uint8_t* out = static_cast<uint8_t*>(o.output);
    moveBytes(out + ctx.rank * blockBytes, o.input, blockBytes);
    std::vector<transport::Transport::Request> received(ctx.size);
    for (int peer = 0; peer < ctx.size; ++peer) {
      if (peer != ctx.rank) {
        received[peer] = ctx.recv(peer, out + peer * blockBytes, blockBytes);
      }
    }
    for (int peer = 0; peer < ctx.size; ++peer) {
      if (peer == ctx.rank) continue;
      ctx.wait(received[peer]);
      acknowledge(ctx, peer);
    }
  }
  ctx.waitAll();
}

void scatter(const Context& ctx, const ScatterOptions& o) {
  const size_t blockBytes = o.count * elementSize(o.type);
  if (ctx.rank != o.root) {
    ctx.wait(ctx.recv(o.root, o.output, blockBytes));
    acknowledge(ctx, o.root);
  } else {
    const uint8_t* in = static_cast<const uint8_t*>(o.input);
    for (int peer = 0; peer < ctx.size; ++peer) {
      if (peer == ctx.rank) continue;
      ctx.send(peer, in + peer * blockBytes, blockBytes);
      expectAcknowledgement(ctx, peer);
    }
    moveBytes(o.output, in + ctx.rank * blockBytes, blockBytes);
  }
  ctx.waitAll();
}

void barrier(const Context& ctx) {
  // Dissemination: in round k every rank signals r + 2^k and hears from r - 2^k; after
  // ceil(log2 p) rounds everyone has heard, directly or not, from everyone.
  const int p = ctx.size;
  for (int distance = 1; distance < p; distance *= 2) {
    ctx.send((ctx.rank + distance) % p, nullptr, 0);
    ctx.recv((ctx.rank - distance + p) % p, nullptr, 0);
    ctx.waitAll();
  }
}

}  // namespace ringcomm::algorithms
