// Adasum's planner and element kernels (src/algorithms/adasum.h), without a transport: each
// level's halves pair up with the peer's, the final ranges tile the vector, tensor counts follow
// the ranges, and the kernels keep Horovod's rules (a tiny norm keeps its vector as it is).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/adasum.h"
#include "check.h"
#include "reduce/half.h"
#include "ringcomm/errors.h"
#include "ringcomm/types.h"

using namespace ringcomm;
using namespace ringcomm::plan;

TEST(adasumLevelsPairUpAndTheLastRangesTileTheVector) {
  for (int size : {1, 2, 4, 8, 16}) {
    for (size_t count : {0, 1, 2, 3, 13, 1009}) {
      std::vector<std::vector<AdasumLevel>> plans;
      for (int rank = 0; rank < size; ++rank) plans.push_back(planAdasum(rank, size, count));
      size_t covered = 0;
      for (int rank = 0; rank < size; ++rank) {
        const auto& levels = plans[rank];
        CHECK_EQ(levels.size(), static_cast<size_t>(log2Ceil(size)));
        for (size_t i = 0; i < levels.size(); ++i) {
          const AdasumLevel& mine = levels[i];
          const AdasumLevel& theirs = plans[mine.peer][i];
          CHECK_EQ(mine.distance, 1 << i);
          CHECK_EQ(theirs.peer, rank);
          CHECK(mine.left != theirs.left);
          // What I keep is what the peer gives, and the left one keeps the first half.
          CHECK(mine.keep == theirs.give);
          CHECK(mine.give == theirs.keep);
          CHECK_EQ(mine.keep.count + mine.give.count,
                   i == 0 ? count : levels[i - 1].keep.count);
          if (mine.left) CHECK_EQ(mine.keep.count, (mine.keep.count + mine.give.count) >> 1);
        }
        covered += levels.empty() ? count : levels.back().keep.count;
      }
      CHECK_EQ(covered, count);
    }
  }
}

TEST(adasumTensorCountsFollowTheRange) {
  const std::vector<size_t> counts{3, 0, 5, 2};
  CHECK(tensorCountsIn(counts, Block{0, 10}) == counts);
  CHECK(tensorCountsIn(counts, Block{2, 4}) == (std::vector<size_t>{1, 0, 3, 0}));
  CHECK(tensorCountsIn(counts, Block{8, 2}) == (std::vector<size_t>{0, 0, 0, 2}));
  CHECK(tensorCountsIn(counts, Block{5, 0}) == (std::vector<size_t>{0, 0, 0, 0}));
}

TEST(adasumKernelsFollowHorovod) {
  using algorithms::adasum::coefficient;
  using algorithms::adasum::combine;
  using algorithms::adasum::dotAndNorms;
  CHECK(coefficient(3.0, 0.0) == 1.0);        // a vector of zeros is added as it is
  CHECK(coefficient(1e-200, 1e-160) == 1.0);  // below sqrt(DBL_MIN): no division
  CHECK(coefficient(2.0, 4.0) == 0.75);
  const float a[3] = {1, 2, 3};
  const float b[3] = {4, 5, 6};
  const auto sums = dotAndNorms(a, b, 3, DataType::Float32);
  CHECK(sums.dot == 32.0 && sums.aNormSq == 14.0 && sums.bNormSq == 77.0);
  double x[2] = {1, 2};
  const double y[2] = {2, 4};
  combine(x, y, 2, DataType::Float64, 0.5, 0.25);
  CHECK(x[0] == 1.0 && x[1] == 2.0);
  // float16: combined in float32, rounded to nearest even once.
  uint16_t h[1] = {reduce::detail::floatToHalfBits(1.0f)};
  const uint16_t g[1] = {reduce::detail::floatToHalfBits(2048.0f)};
  combine(h, g, 1, DataType::Float16, 1.0, 1.0);
  CHECK_EQ(reduce::detail::halfBitsToFloat(h[0]), 2048.0f);  // 2049 ties to even
  bool refused = false;
  try {
    int32_t i[1] = {1};
    dotAndNorms(i, i, 1, DataType::Int32);
  } catch (const InvalidArgument&) {
    refused = true;
  }
  CHECK(refused);
}
