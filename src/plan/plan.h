// Pure planning for the schedules: which elements each rank owns, sends and receives at each
// step. No I/O here, so every function is unit-tested without a socket (tests/cpp/test_plan.cc).
//
// Vocabulary:
//   count   - elements in the whole vector
//   block   - one rank's share of the vector: blockOf(count, parts, i), contiguous, in rank order;
//             the first count % parts blocks hold one element more than the rest
//   segment - a piece of a block no larger than the pipelining unit; the ring sends a block as a
//             train of segments so the next hop starts while the previous one is still arriving
#pragma once

#include <cstddef>
#include <vector>

namespace ringcomm::plan {

struct Block {
  size_t offset = 0;  // in elements
  size_t count = 0;
  bool operator==(const Block& other) const {
    return offset == other.offset && count == other.count;
  }
};

Block blockOf(size_t count, int parts, int index);

// The elements `a` and `b` share (none: an empty block at the later start).
Block intersect(const Block& a, const Block& b);

// Splits a block into consecutive segments of at most segmentCount elements (none if empty).
std::vector<Block> segmentsOf(const Block& block, size_t segmentCount);

// The ring: rank r sends to r+1 and receives from r-1 at every step (modulo size).
// Reduce-scatter runs steps 0..size-2 and leaves rank r owning the fully reduced block r.
// All-gather runs steps 0..size-2 starting from that state and leaves every block everywhere.
// At step s+1 a rank sends exactly the block it received at step s, which is what lets segments
// flow on as soon as they arrive.
struct RingStep {
  int sendBlock;
  int recvBlock;
};
RingStep ringReduceScatterStep(int rank, int size, int step);
RingStep ringAllgatherStep(int rank, int size, int step);

// Recursive halving + doubling (Rabenseifner) for any rank count.
//
// With pow2 the largest power of two <= size and extra = size - pow2, the first 2*extra ranks
// pair up before the halving: each even one hands its whole vector to the odd one above it and
// sits out ("folded"); the odd ones and ranks >= 2*extra take part as virtual ranks 0..pow2-1.
// Halving step i exchanges half of the current range with the partner at distance pow2/2^(i+1):
// send the half the partner keeps, receive and reduce the half this rank keeps. After the last
// step virtual rank v owns block v of pow2 nearly equal blocks. Doubling replays the steps in
// reverse, sending the owned range and receiving the partner's. Finally each odd rank of a pair
// hands the whole result back to its folded partner.
struct TreeStep {
  int peer;    // real rank of the partner
  Block send;  // what the partner keeps (sent at halving, received at doubling)
  Block keep;  // what this rank keeps (received at halving, sent at doubling)
};

struct TreePlan {
  bool foldedOut = false;  // an even rank below 2*extra: hands its data over and waits
  int foldPeer = -1;       // the partner in a folded pair, or -1
  int virtualRank = -1;    // -1 when folded out
  Block owned;             // block owned after halving (participants only)
  std::vector<TreeStep> halving;
};
TreePlan planTree(int rank, int size, size_t count);

// The hierarchical schedules' division of labour across hosts (algorithms/hierarchical.h). The
// vector is cut into one slice per rank of the smallest host (`slices` of them); local rank j of
// every host carries slice j across the hosts, so each host's ranks drive their slices over
// connections of their own in parallel. Local ranks past the smallest host's count carry none:
// their slices are empty, placed at the end of the vector.
struct HostSlices {
  int slices = 0;
  std::vector<Block> local;  // local[j]: the slice local rank j of this host carries
  // The ranks that carry this rank's slice, local rank j of every host in host order (this rank
  // among them); empty when this rank carries none.
  std::vector<int> across;
};
// hosts[h]: the communicator ranks on host h, in local-rank order; this rank is local rank
// `localRank` of host `host`.
HostSlices planHostSlices(const std::vector<std::vector<int>>& hosts, int host, int localRank,
                          size_t count);

// ceil(log2(size)), for the cost model and tests.
int log2Ceil(int size);

}  // namespace ringcomm::plan
