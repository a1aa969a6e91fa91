// Picks the all-reduce schedule with an alpha-beta model: time = steps * latency + bytes / bandwidth.
#pragma once

#include <cstddef>

#include "ringcomm/types.h"

namespace ringcomm::tuning {

struct Topology {
  int size = 1;
  bool directAvailable = false;  // every rank on this host, connected through shared memory
};

struct Estimate {
  double ringSeconds;
  double treeSeconds;
};

Estimate estimateAllreduce(const Topology& topology, size_t bytes);
Algorithm chooseAllreduce(const Topology& topology, size_t bytes);

}  // namespace ringcomm::tuning
