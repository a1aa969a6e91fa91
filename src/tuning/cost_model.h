// Picks the all-reduce schedule with an alpha-beta model: time = steps * latency + bytes / bandwidth.
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
};

// Config::shmAllreduceRules / tcpAllreduceRules: (most bytes, algorithm), sorted by bytes.
using Rules = std::vector<std::pair<size_t, Algorithm>>;

struct Estimate {
  double ringSeconds;
  double treeSeconds;
};

Estimate estimateAllreduce(const Topology& topology, size_t bytes);
Algorithm chooseAllreduce(const Topology& topology, size_t bytes);
// The measured rules for this topology when there are some (and they fit it), else the model.
Algorithm chooseAllreduce(const Topology& topology, size_t bytes, const Rules& shmRules,
                          const Rules& tcpRules);

}  // namespace ringcomm::tuning
