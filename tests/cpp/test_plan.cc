// The schedule planners, checked without any transport: blocks tile the vector, ring steps chain
// (what a rank receives at step s it sends at step s+1), and the tree plan pairs ranks
// symmetrically and leaves each participant owning a distinct block that together cover all.
#include <algorithm>
#include <cstddef>
#include <set>
#include <vector>

#include "plan/plan.h"
#include "check.h"

using namespace ringcomm::plan;

TEST(blocksTileTheVector) {
  for (size_t count : {0, 1, 2, 7, 64, 1009, 1000003}) {
    for (int parts = 1; parts <= 9; ++parts) {
      size_t next = 0;
      size_t smallest = count, largest = 0;
      for (int i = 0; i < parts; ++i) {
        Block b = blockOf(count, parts, i);
        CHECK_EQ(b.offset, next);
        next += b.count;
        smallest = std::min(smallest, b.count);
        largest = std::max(largest, b.count);
      }
      CHECK_EQ(next, count);
      CHECK(largest - smallest <= 1);
    }
  }
}

TEST(segmentsCoverABlockInOrder) {
  Block block{100, 1000};
  auto segments = segmentsOf(block, 300);
  CHECK_EQ(segments.size(), size_t(4));
  CHECK(segments[0] == (Block{100, 300}));
  CHECK(segments[3] == (Block{1000, 100}));
  CHECK(segmentsOf(Block{5, 0}, 300).empty());
  CHECK_EQ(segmentsOf(Block{0, 10}, 0).size(), size_t(10));  // a zero unit still makes progress
}

TEST(ringReduceScatterChainsAndEndsOnOwnBlock) {
  for (int size = 2; size <= 8; ++size) {
    for (int rank = 0; rank < size; ++rank) {
      const int left = (rank + size - 1) % size;
      std::set<int> received;
      for (int step = 0; step < size - 1; ++step) {
        RingStep mine = ringReduceScatterStep(rank, size, step);
        // What I receive is what my left neighbour sends at the same step.
        CHECK_EQ(mine.recvBlock, ringReduceScatterStep(left, size, step).sendBlock);
        if (step + 1 < size - 1) {
          CHECK_EQ(ringReduceScatterStep(rank, size, step + 1).sendBlock, mine.recvBlock);
        }
        received.insert(mine.recvBlock);
      }
      CHECK_EQ(ringReduceScatterStep(rank, size, size - 2).recvBlock, rank);
      CHECK_EQ(received.size(), size_t(size - 1));
    }
  }
}

TEST(ringAllgatherStartsFromOwnBlockAndCollectsAll) {
  for (int size = 2; size <= 8; ++size) {
    for (int rank = 0; rank < size; ++rank) {
      const int left = (rank + size - 1) % size;
      CHECK_EQ(ringAllgatherStep(rank, size, 0).sendBlock, rank);
      std::set<int> have{rank};
      for (int step = 0; step < size - 1; ++step) {
        RingStep mine = ringAllgatherStep(rank, size, step);
        CHECK_EQ(mine.recvBlock, ringAllgatherStep(left, size, step).sendBlock);
        CHECK(have.count(mine.sendBlock) == 1);  // only forward what we already hold
        have.insert(mine.recvBlock);
      }
      CHECK_EQ(have.size(), size_t(size));
    }
  }
}

TEST(treePlanPairsSymmetricallyAndCoversTheVector) {
  for (int size = 1; size <= 13; ++size) {
    for (size_t count : {0, 1, 5, 1009}) {
      std::vector<TreePlan> plans;
      for (int rank = 0; rank < size; ++rank) plans.push_back(planTree(rank, size, count));
      int pow2 = 1;
      while (pow2 * 2 <= size) pow2 *= 2;
      int participants = 0;
      size_t covered = 0;
      std::vector<Block> owned;
      for (int rank = 0; rank < size; ++rank) {
        const TreePlan& plan = plans[rank];
        if (plan.foldPeer >= 0) CHECK_EQ(plans[plan.foldPeer].foldPeer, rank);
        if (plan.foldedOut) {
          CHECK(plan.halving.empty());
          continue;
        }
        ++participants;
        CHECK_EQ(int(plan.halving.size()), log2Ceil(pow2));
        for (size_t i = 0; i < plan.halving.size(); ++i) {
          const TreeStep& step = plan.halving[i];
          const TreeStep& theirs = plans[step.peer].halving[i];
          CHECK_EQ(theirs.peer, rank);
          CHECK(theirs.keep == step.send);  // I send exactly what my partner keeps
          CHECK(theirs.send == step.keep);
        }
        covered += plan.owned.count;
        owned.push_back(plan.owned);
      }
      CHECK_EQ(participants, pow2);
      CHECK_EQ(covered, count);
      std::sort(owned.begin(), owned.end(), [](const Block& a, const Block& b) { return a.offset < b.offset; });
      size_t next = 0;
      for (const Block& b : owned) {
        CHECK_EQ(b.offset, next);
        next += b.count;
      }
    }
  }
}

TEST(log2CeilRoundsUp) {
  CHECK_EQ(log2Ceil(1), 0);
  CHECK_EQ(log2Ceil(2), 1);
  CHECK_EQ(log2Ceil(3), 2);
  CHECK_EQ(log2Ceil(8), 3);
  CHECK_EQ(log2Ceil(9), 4);
}

// The hierarchical schedules' division of labour: one slice per rank of the smallest host, the
// slices tile the vector, local rank j of every host carries slice j, the others none.
TEST(hostSlicesTileTheVectorAndPairLocalRanksAcrossHosts) {
  const std::vector<std::vector<int>> hosts = {{0, 1, 2}, {3, 4}, {5, 6, 7, 8}};
  for (size_t count : {0, 1, 7, 1009}) {
    for (int host = 0; host < 3; ++host) {
      for (int local = 0; local < static_cast<int>(hosts[host].size()); ++local) {
        const HostSlices plan = planHostSlices(hosts, host, local, count);
        CHECK_EQ(plan.slices, 2);
        CHECK_EQ(plan.local.size(), hosts[host].size());
        CHECK(plan.local[0] == blockOf(count, 2, 0));
        CHECK(plan.local[1] == blockOf(count, 2, 1));
        for (size_t j = 2; j < plan.local.size(); ++j) CHECK_EQ(plan.local[j].count, size_t(0));
        if (local < 2) {
          CHECK(plan.across == (std::vector<int>{hosts[0][local], hosts[1][local], hosts[2][local]}));
        } else {
          CHECK(plan.across.empty());
        }
      }
    }
  }
}
