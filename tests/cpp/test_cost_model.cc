// The cost model across hosts: what the flat schedules make each host's link carry, and which
// schedule it picks for a layout, a link and a size.
#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "check.h"
#include "tuning/cost_model.h"

using namespace ringcomm;
using namespace ringcomm::tuning;

namespace {

Topology across(const std::vector<std::vector<int>>& hosts) {
  Topology topology;
  topology.size = 0;
  for (const auto& ranks : hosts) topology.size += static_cast<int>(ranks.size());
  topology.hosts = static_cast<int>(hosts.size());
  topology.fewestLocal = topology.size;
  for (const auto& ranks : hosts) {
    topology.fewestLocal = std::min(topology.fewestLocal, static_cast<int>(ranks.size()));
    topology.mostLocal = std::max(topology.mostLocal, static_cast<int>(ranks.size()));
  }
  std::tie(topology.ringLinkLoad, topology.treeLinkLoad) = crossingLoads(hosts, topology.size);
  return topology;
}

bool near(double a, double b) {
  return std::fabs(a - b) < 1e-9;
}

}  // namespace

TEST(flatRingCarriesTwiceTheVectorPerCrossingEdge) {
  // Hosts of consecutive ranks: one edge of the ring leaves each host.
  CHECK(near(crossingLoads({{0, 1}, {2, 3}}, 4).first, 1.5));
  CHECK(near(crossingLoads({{0, 1, 2, 3}, {4, 5, 6, 7}}, 8).first, 1.75));
  // Interleaved hosts: every edge crosses, two leave each host.
  CHECK(near(crossingLoads({{0, 2}, {1, 3}}, 4).first, 3.0));
  // The tree's first halving step at 2 x 4 ranks pairs every rank across hosts: half the vector
  // each way, and the doubling sends it back.
  CHECK(near(crossingLoads({{0, 1, 2, 3}, {4, 5, 6, 7}}, 8).second, 4.0));
}

TEST(severalRanksOnEveryHostTakeTheHierarchicalSchedule) {
  const Link gigabit{50e-6, 1e9 / 8};
  const Link tenGigabit{50e-6, 10e9 / 8};
  for (const auto& hosts : std::vector<std::vector<std::vector<int>>>{
           {{0, 1}, {2, 3}}, {{0, 1, 2}, {3, 4}, {5, 6}}, {{0, 1, 2, 3}, {4, 5, 6, 7}}}) {
    for (size_t bytes : {size_t(8), size_t(1) << 16, size_t(1) << 20, size_t(64) << 20}) {
      CHECK(chooseAllreduce(across(hosts), bytes, gigabit) == Algorithm::Hierarchical);
      CHECK(chooseAllreduce(across(hosts), bytes, tenGigabit) == Algorithm::Hierarchical);
    }
  }
  // A host of one rank leaves the hierarchical schedule one slice: on a slow link it still sends
  // less, on a fast one the model may find the flat ring as good (within 10% on the 2-core VM).
  const auto unequal = across({{0, 1}, {2}, {3, 4}, {5, 6, 7}});
  CHECK(chooseAllreduce(unequal, 64 << 20, gigabit) == Algorithm::Hierarchical);
  // One rank per host: nothing to gather within a host, the flat schedules.
  const Algorithm flat = chooseAllreduce(across({{0}, {1}, {2}}), 64 << 20, gigabit);
  CHECK(flat == Algorithm::Ring || flat == Algorithm::Tree);
}

TEST(smallVectorsCrossThroughOneRankPerHostLargeOnesInSlices) {
  const Topology topology = across({{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}});
  const Link link{50e-6, 10e9 / 8};
  CHECK(!chooseCrossHost(topology, 4096, link).slices);
  CHECK(chooseCrossHost(topology, 4096, link).algorithm == Algorithm::Tree);
  CHECK(chooseCrossHost(topology, 64 << 20, link).slices);
  CHECK(chooseCrossHost(topology, 64 << 20, link).algorithm == Algorithm::Ring);
  // A host with a single rank leaves nothing to slice.
  CHECK(!chooseCrossHost(across({{0, 1}, {2}}), 64 << 20, link).slices);
}

TEST(aSlowerLinkMovesTheTreeToRingCrossoverDown) {
  const Topology topology = across({{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  size_t fast = 0;
  size_t slow = 0;
  for (size_t bytes = 1024; bytes <= (size_t(1) << 20); bytes *= 2) {
    if (chooseCrossHost(topology, bytes, Link{50e-6, 100e9 / 8}).algorithm == Algorithm::Tree) {
      fast = bytes;
    }
    if (chooseCrossHost(topology, bytes, Link{50e-6, 1e9 / 8}).algorithm == Algorithm::Tree) {
      slow = bytes;
    }
  }
  CHECK(slow < fast);
}
