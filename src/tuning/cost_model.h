// Picks the all-reduce schedule with an alpha-beta model: time = steps * latency + bytes /
// bandwidth.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "ringcomm/types.h"

namespace ringcomm::tuning {

struct Topology {
  int size = 1;
  bool directAvailable = false;  // every rank on this host, connected through shared memory
  bool singleHost = false;       // every rank on this host (whatever connects them)
  // Across hosts: how many, and the fewest and most ranks on one (most 1: nothing to gather
  // within a host; the fewest is how many slices the hierarchical schedule cuts).
  int hosts = 1;
  int fewestLocal = 1;
  int mostLocal = 1;
  // How much of an N-byte all-reduce the busiest host's link carries each way, in units of N,
  // for the flat schedules on this layout (crossingLoads() computes them): 2(p-1)/p for a ring
  // whose hosts hold consecutive ranks, more when a host's ranks are spread around the ring;
  // the tree's halving partners cross hosts at its widest steps.
  double ringLinkLoad = 0;
  double treeLinkLoad = 0;
};

// The network between hosts, as the model sees it: one message's latency and what one host's
// link carries each way. Config::linkLatency / linkBandwidth (RINGCOMM_LINK_LATENCY_US,
// RINGCOMM_LINK_GBITS, or what `ringcomm-bench tune` measured), or the defaults below.
struct Link {
  double latencySeconds = 0;
  double bytesPerSecond = 0;
};
Link defaultLink();

// hosts[h]: the ranks on host h. The flat ring's and tree's link loads (Topology) for them.
std::pair<double, double> crossingLoads(const std::vector<std::vector<int>>& hosts, int size);

// Config::shmAllreduceRules / tcpAllreduceRules: (most bytes, algorithm), sorted by bytes.
using Rules = std::vector<std::pair<size_t, Algorithm>>;

struct Estimate {
  double ringSeconds;
  double treeSeconds;
  double hierarchicalSeconds;  // infinite on one host, or with one rank per host
};

Estimate estimateAllreduce(const Topology& topology, size_t bytes, const Link& link = Link{});
Algorithm chooseAllreduce(const Topology& topology, size_t bytes, const Link& link = Link{});
// The measured rules for this topology when there are some (and they fit it), else the model.
Algorithm chooseAllreduce(const Topology& topology, size_t bytes, const Rules& shmRules,
                          const Rules& tcpRules, const Link& link = Link{});

// How the hierarchical all-reduce crosses hosts (algorithms/hierarchical.h): every local rank
// with a slice, or only the lowest with the whole vector (small messages); and the schedule
// among one rank per host.
struct CrossChoice {
  bool slices = true;
  Algorithm algorithm = Algorithm::Ring;
};
CrossChoice chooseCrossHost(const Topology& topology, size_t bytes, const Link& link = Link{});

}  // namespace ringcomm::tuning
