// All-to-all grouped by host: one message per destination rank from each other host, not one per
// pair of ranks.
//
// The flat all-to-all (collectives.cc) sends every block straight to its destination: between two
// hosts of L ranks, L * L messages cross the network each way, each of one block. Here every
// block to another host travels with the other blocks of its host to the same destination:
//
//   within the host   each rank hands local rank k ("the carrier") the blocks it has for the
//                     remote ranks that k carries (remote local index modulo this host's size),
//                     packed in one message, and exchanges its blocks for the host's own ranks
//                     directly;
//   across hosts      each carrier sends every remote rank it carries one message: that rank's
//                     blocks from all of this host's ranks, in local order, which land in the
//                     destination's output as one range (as launchers number hosts' ranks
//                     consecutively).
//
// Between two hosts of L ranks, L messages of L blocks cross each way instead of L * L of one:
// what pays where a message's cost is its latency, not its bytes. Each byte still crosses once;
// the price is two copies within the host (pack, regroup), which is why Schedules::alltoall
// takes this schedule for small blocks only. Every rank drives its own share across, in parallel.
#include <cstdint>
#include <vector>

#include "algorithms/hierarchical.h"
#include "common/bytes.h"
#include "common/trace.h"

namespace ringcomm::algorithms {

void hierarchicalAlltoall(const Context& ctx, const HostLayout& layout, const AlltoallOptions& o) {
  const size_t block = o.count * elementSize(o.type);
  const uint8_t* in = static_cast<const uint8_t*>(o.input);
  uint8_t* out = static_cast<uint8_t*>(o.output);
  const int me = ctx.peer(ctx.rank);
  if (in == out) {
    uint8_t* copy = ctx.scratch.get(ScratchBuffer::InputCopy, block * ctx.size);
    copyBytes(copy, in, block * ctx.size);
    in = copy;
  }
  moveBytes(out + me * block, in + me * block, block);

  const std::vector<int>& local = layout.hosts[layout.host];
  const int localSize = static_cast<int>(local.size());
  // carried[k]: the remote ranks local rank k carries, in rank order.
  std::vector<std::vector<int>> carried(localSize);
  for (size_t h = 0; h < layout.hosts.size(); ++h) {
    if (static_cast<int>(h) == layout.host) continue;
    const std::vector<int>& theirs = layout.hosts[h];
    for (size_t i = 0; i < theirs.size(); ++i) {
      carried[static_cast<int>(i) % localSize].push_back(theirs[i]);
    }
  }
  const std::vector<int>& mine = carried[layout.localRank];
  const Context localCtx = ctx.subgroup(local);

  // Within the host: pack, per carrier, this rank's blocks for what it carries, in its order.
  std::vector<size_t> packedAt(localSize + 1, 0);
  for (int k = 0; k < localSize; ++k) packedAt[k + 1] = packedAt[k] + carried[k].size() * block;
  uint8_t* packed = ctx.scratch.get(ScratchBuffer::Packed, packedAt[localSize]);
  {
    trace::Span span(trace::Phase::Copy, "blocks for other hosts, by carrier");
    for (int k = 0; k < localSize; ++k) {
      for (size_t i = 0; i < carried[k].size(); ++i) {
        copyBytes(packed + packedAt[k] + i * block, in + carried[k][i] * block, block);
      }
    }
  }
  // carriedFrom[s]: what local rank s handed this one (this rank's own packing for itself).
  const size_t handed = mine.size() * block;
  uint8_t* carriedFrom = ctx.scratch.get(ScratchBuffer::Carried, handed * localSize);
  copyBytes(carriedFrom + layout.localRank * handed, packed + packedAt[layout.localRank], handed);
  // Shifted pairing, as the flat schedule's: the block for the peer itself, then its packing.
  for (int distance = 1; distance < localSize; ++distance) {
    const int to = (layout.localRank + distance) % localSize;
    const int from = (layout.localRank - distance + localSize) % localSize;
    localCtx.send(to, in + local[to] * block, block);
    localCtx.send(to, packed + packedAt[to], packedAt[to + 1] - packedAt[to]);
    localCtx.recv(from, out + local[from] * block, block);
    localCtx.recv(from, carriedFrom + from * handed, handed);
  }
  localCtx.waitAll();

  // Across hosts: each carried rank's blocks from every local rank, in local order, as one
  // message; from each other host, one message into this rank's output.
  uint8_t* outgoing = ctx.scratch.get(ScratchBuffer::Outgoing, handed * localSize);
  {
    trace::Span span(trace::Phase::Copy, "blocks regrouped by destination");
    for (size_t i = 0; i < mine.size(); ++i) {
      for (int s = 0; s < localSize; ++s) {
        copyBytes(outgoing + (i * localSize + s) * block, carriedFrom + s * handed + i * block,
                  block);
      }
    }
  }
  trace::Span span(trace::Phase::Collective, "across hosts");
  for (size_t i = 0; i < mine.size(); ++i) {
    ctx.send(mine[i], outgoing + i * localSize * block, localSize * block);
  }
  for (size_t h = 0; h < layout.hosts.size(); ++h) {
    if (static_cast<int>(h) == layout.host) continue;
    const std::vector<int>& theirs = layout.hosts[h];
    const int carrier = theirs[layout.localRank % theirs.size()];
    // Their ranks are consecutive (hostsHoldConsecutiveRanks, which Schedules::alltoall checks).
    ctx.recv(carrier, out + theirs.front() * block, theirs.size() * block);
  }
  ctx.waitAll();
}

}  // namespace ringcomm::algorithms
