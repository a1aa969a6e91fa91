#include "plan/plan.h"

#include <algorithm>

namespace ringcomm::plan {

Block blockOf(size_t count, int parts, int index) {
  const size_t base = count / parts;
  const size_t extra = count % parts;
  const size_t i = static_cast<size_t>(index);
  const size_t offset = i * base + (i < extra ? i : extra);
  return Block{offset, base + (i < extra ? 1 : 0)};
}

Block intersect(const Block& a, const Block& b) {
  const size_t begin = std::max(a.offset, b.offset);
  const size_t end = std::min(a.offset + a.count, b.offset + b.count);
  return end > begin ? Block{begin, end - begin} : Block{begin, 0};
}

std::vector<Block> segmentsOf(const Block& block, size_t segmentCount) {
  std::vector<Block> segments;
  if (segmentCount == 0) segmentCount = 1;
  for (size_t done = 0; done < block.count; done += segmentCount) {
    const size_t n = block.count - done < segmentCount ? block.count - done : segmentCount;
    segments.push_back(Block{block.offset + done, n});
  }
  return segments;
}

namespace {
int wrap(int value, int size) { return ((value % size) + size) % size; }
}  // namespace

RingStep ringReduceScatterStep(int rank, int size, int step) {
  // Step 0 sends block r-1; the last step (size-2) receives block r, completing it here.
  return RingStep{wrap(rank - step - 1, size), wrap(rank - step - 2, size)};
}

RingStep ringAllgatherStep(int rank, int size, int step) {
  // Step 0 sends the block this rank owns after reduce-scatter.
  return RingStep{wrap(rank - step, size), wrap(rank - step - 1, size)};
}

HostSlices planHostSlices(const std::vector<std::vector<int>>& hosts, int host, int localRank,
                          size_t count) {
  HostSlices plan;
  plan.slices = static_cast<int>(hosts.front().size());
  for (const auto& ranks : hosts) plan.slices = std::min(plan.slices, static_cast<int>(ranks.size()));
  const int localSize = static_cast<int>(hosts[host].size());
  for (int j = 0; j < localSize; ++j) {
    plan.local.push_back(j < plan.slices ? blockOf(count, plan.slices, j) : Block{count, 0});
  }
  if (localRank < plan.slices) {
    for (const auto& ranks : hosts) plan.across.push_back(ranks[localRank]);
  }
  return plan;
}

int log2Ceil(int size) {
  int log = 0;
  while ((1 << log) < size) ++log;
  return log;
}

TreePlan planTree(int rank, int size, size_t count) {
  TreePlan plan;
  int pow2 = 1;
  while (pow2 * 2 <= size) pow2 *= 2;
  const int extra = size - pow2;

  if (rank < 2 * extra) {
    plan.foldPeer = rank % 2 == 0 ? rank + 1 : rank - 1;
    if (rank % 2 == 0) {
      plan.foldedOut = true;
      return plan;
    }
    plan.virtualRank = rank / 2;
  } else {
    plan.virtualRank = rank - extra;
  }
  auto realRank = [extra](int virtualRank) {
    return virtualRank < extra ? 2 * virtualRank + 1 : virtualRank + extra;
  };

  Block range{0, count};
  for (int mask = pow2 / 2; mask >= 1; mask /= 2) {
    const size_t lowerCount = range.count / 2;
    const Block lower{range.offset, lowerCount};
    const Block upper{range.offset + lowerCount, range.count - lowerCount};
    const bool keepLower = (plan.virtualRank & mask) == 0;
    TreeStep step;
    step.peer = realRank(plan.virtualRank ^ mask);
    step.keep = keepLower ? lower : upper;
    step.send = keepLower ? upper : lower;
    plan.halving.push_back(step);
    range = step.keep;
  }
  plan.owned = range;
  return plan;
}

}  // namespace ringcomm::plan
