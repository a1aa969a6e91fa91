#include "tuning/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "algorithms/plan.h"

namespace ringcomm::tuning {
namespace {

// Link constants for TCP, measured on the 2-core development VM over loopback (bench/RESULTS.md):
// a ping-pong of 8 bytes takes ~25 us one way under poll(); large transfers move ~2.5 GB/s.
constexpr double kTcpLatencySeconds = 25e-6;
constexpr double kTcpSecondsPerByte = 1.0 / 2.5e9;
// Reduction of a received segment into the local one (read two, write one) at ~10 GB/s.
constexpr double kReduceSecondsPerByte = 1.0 / 10e9;

// Between hosts, unless configured or measured (Link): a 10 Gbit/s link, and the latency of one
// message between two network namespaces of the 2-core VM (bench/RESULTS.md, "Across hosts").
constexpr double kDefaultLinkLatencySeconds = 50e-6;
constexpr double kDefaultLinkBytesPerSecond = 10e9 / 8;
// Within a host, the hierarchical schedule's two steps (each rank reduces its slice straight
// from the others' inputs, then writes it into their outputs) cost about this per byte of the
// vector, and a synchronisation of the host's ranks about this: the single-copy all-reduce of 64
// MiB at 4 ranks on the 2-core VM took 25 ms (bench/RESULTS.md, issue 14).
constexpr double kHostSecondsPerByte = 1.0 / 2.7e9;
constexpr double kHostSyncSeconds = 20e-6;
// Below this many bytes per slice, the host's lowest rank carries the whole vector across (one
// connection, the fewest messages) rather than every local rank a slice of it.
constexpr size_t kSmallestSliceBytes = 64 * 1024;

double ringSeconds(int size, double bytes) {
  const double p = size;
  return 2.0 * (p - 1) * kTcpLatencySeconds + 2.0 * (p - 1) / p * bytes * kTcpSecondsPerByte +
         (p - 1) / p * bytes * kReduceSecondsPerByte;
}

double treeSeconds(int size, double bytes) {
  const double p = size;
  const int steps = plan::log2Ceil(size);
  const bool powerOfTwo = (size & (size - 1)) == 0;
  // The fold for a non-power of two sends the whole vector twice more, on the critical path.
  const double fold = powerOfTwo ? 0.0 : 2.0 * (kTcpLatencySeconds + bytes * kTcpSecondsPerByte);
  return 2.0 * steps * kTcpLatencySeconds + 2.0 * (p - 1) / p * bytes * kTcpSecondsPerByte +
         (p - 1) / p * bytes * kReduceSecondsPerByte + fold;
}

Link orDefault(const Link& link) {
  Link filled = link;
  if (filled.latencySeconds <= 0) filled.latencySeconds = kDefaultLinkLatencySeconds;
  if (filled.bytesPerSecond <= 0) filled.bytesPerSecond = kDefaultLinkBytesPerSecond;
  return filled;
}

// The schedule among one rank per host: H ranks, each host's link carrying 2(H-1)/H of `bytes`
// either way; the tree takes fewer steps, the ring pipelines its segments.
Algorithm crossSchedule(int hosts, double bytes, const Link& link) {
  const double h = hosts;
  const double load = 2.0 * (h - 1) / h * bytes / link.bytesPerSecond;
  const bool powerOfTwo = (hosts & (hosts - 1)) == 0;
  const double fold = powerOfTwo ? 0.0 : 2.0 * bytes / link.bytesPerSecond;
  const double ring = 2.0 * (h - 1) * link.latencySeconds + load;
  const double tree = 2.0 * plan::log2Ceil(hosts) * link.latencySeconds + load + fold;
  return tree < ring ? Algorithm::Tree : Algorithm::Ring;
}

}  // namespace

Link defaultLink() {
  return Link{kDefaultLinkLatencySeconds, kDefaultLinkBytesPerSecond};
}

std::pair<double, double> crossingLoads(const std::vector<std::vector<int>>& hosts, int size) {
  std::vector<int> hostOf(size, 0);
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (int rank : hosts[h]) hostOf[rank] = static_cast<int>(h);
  }
  // Per host, in units of the vector: what its ranks send to ranks on other hosts.
  std::vector<double> ring(hosts.size(), 0.0);
  std::vector<double> tree(hosts.size(), 0.0);
  const double p = size;
  const size_t unit = size_t{1} << 30;  // a vector of this many elements stands for "N"
  for (int rank = 0; rank < size; ++rank) {
    const int h = hostOf[rank];
    if (hostOf[(rank + 1) % size] != h) ring[h] += 2.0 * (p - 1) / p;
    const plan::TreePlan tree_plan = plan::planTree(rank, size, unit);
    if (tree_plan.foldPeer >= 0 && hostOf[tree_plan.foldPeer] != h) tree[h] += 1.0;
    for (const plan::TreeStep& step : tree_plan.halving) {
      // The halving sends `send`, the doubling sends `keep` back.
      if (hostOf[step.peer] != h) {
        tree[h] += static_cast<double>(step.send.count + step.keep.count) / unit;
      }
    }
  }
  return {*std::max_element(ring.begin(), ring.end()), *std::max_element(tree.begin(), tree.end())};
}

Estimate estimateAllreduce(const Topology& topology, size_t bytes, const Link& given) {
  const double n = static_cast<double>(bytes);
  Estimate estimate{ringSeconds(topology.size, n), treeSeconds(topology.size, n),
                    std::numeric_limits<double>::infinity()};
  if (topology.hosts <= 1) return estimate;
  // Across hosts, the busiest link bounds the flat schedules; the hierarchical one sends each
  // host's share once, after and before a pass within the host.
  const Link link = orDefault(given);
  const double p = topology.size;
  const double h = topology.hosts;
  estimate.ringSeconds =
      2.0 * (p - 1) * link.latencySeconds + topology.ringLinkLoad * n / link.bytesPerSecond;
  estimate.treeSeconds = 2.0 * plan::log2Ceil(topology.size) * link.latencySeconds +
                         topology.treeLinkLoad * n / link.bytesPerSecond;
  if (topology.mostLocal > 1) {
    const CrossChoice cross = chooseCrossHost(topology, bytes, given);
    const double steps =
        cross.algorithm == Algorithm::Tree ? 2.0 * plan::log2Ceil(topology.hosts) : 2.0 * (h - 1);
    estimate.hierarchicalSeconds = 2.0 * kHostSyncSeconds + n * kHostSecondsPerByte +
                                   steps * link.latencySeconds +
                                   2.0 * (h - 1) / h * n / link.bytesPerSecond;
  }
  return estimate;
}

Algorithm chooseAllreduce(const Topology& topology, size_t bytes, const Link& link) {
  // Through shared memory the direct schedule wins at every size: one synchronisation round for
  // small vectors, and the fewest passes over memory for large ones (bench/RESULTS.md).
  if (topology.directAvailable) return Algorithm::Direct;
  const Estimate estimate = estimateAllreduce(topology, bytes, link);
  if (estimate.hierarchicalSeconds < std::min(estimate.ringSeconds, estimate.treeSeconds)) {
    return Algorithm::Hierarchical;
  }
  return estimate.treeSeconds < estimate.ringSeconds ? Algorithm::Tree : Algorithm::Ring;
}

Algorithm chooseAllreduce(const Topology& topology, size_t bytes, const Rules& shmRules,
                          const Rules& tcpRules, const Link& link) {
  // Measured on one host: across hosts the links are another network, and each host's rules
  // could differ while every rank must choose alike.
  const Rules& rules = topology.directAvailable ? shmRules : tcpRules;
  if (!topology.singleHost || rules.empty()) return chooseAllreduce(topology, bytes, link);
  Algorithm chosen = rules.back().second;
  for (const auto& [most, algorithm] : rules) {
    if (bytes <= most) {
      chosen = algorithm;
      break;
    }
  }
  const bool fits = chosen != Algorithm::Auto && chosen != Algorithm::Hierarchical &&
                    (chosen != Algorithm::Direct || topology.directAvailable);
  return fits ? chosen : chooseAllreduce(topology, bytes, link);
}

CrossChoice chooseCrossHost(const Topology& topology, size_t bytes, const Link& given) {
  const Link link = orDefault(given);
  CrossChoice choice;
  const int slices = std::max(1, topology.fewestLocal);
  choice.slices = bytes / slices >= kSmallestSliceBytes;
  const double carried =
      choice.slices ? static_cast<double>(bytes) / slices : static_cast<double>(bytes);
  choice.algorithm = crossSchedule(std::max(2, topology.hosts), carried, link);
  return choice;
}

}  // namespace ringcomm::tuning
