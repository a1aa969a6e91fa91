#include "tuning/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "plan/plan.h"

namespace ringcomm::tuning {
namespace {

// Link constants for TCP, measured on the 2-core development VM over loopback (bench/RESULTS.md):
// a ping-pong of 8 bytes takes ~25 us one way under poll(); large transfers move ~2.5 GB/s.
constexpr double kTcpLatencySeconds = 25e-6;
constexpr double kTcpSecondsPerByte = 1.0 / 2.5e9;
// Reduction of a received segment into the local one (read two, write one) at ~10 GB/s.
constexpr double kReduceSecondsPerByte = 1.0 / 10e9;

// Between hosts, unless configured or measured (Link, tuning/link_probe.h): a 10 Gbit/s link,
// and about the latency of one message between two network namespaces of the 2-core VM.
constexpr double kDefaultLinkLatencySeconds = 50e-6;
constexpr double kDefaultLinkBytesPerSecond = 10e9 / 8;
// Every byte that crosses hosts also costs CPU time at both ends (the kernel's copies into and
// out of the socket), whatever the wire's speed: kTcpSecondsPerByte, loopback's rate, is added
// to the link's time per byte. It is why, on the 2-core VM, the flat ring lost to the
// hierarchical schedule across 3 hosts at 10 Gbit/s although the link alone would not say so
// (125 against 92 ms at 32 MiB, bench/RESULTS.md, "Issue 24: across hosts").
// Within a host, the hierarchical schedule's two steps (each rank reduces its slice straight
// from the others' inputs, then writes it into their outputs) cost about this per byte of the
// vector, and a synchronisation of the host's ranks about this: the single-copy all-reduce of 64
// MiB at 4 ranks on the 2-core VM took 25 ms (bench/RESULTS.md, issue 14).
constexpr double kHostSecondsPerByte = 1.0 / 2.7e9;
constexpr double kHostSyncSeconds = 20e-6;
// From this size every local rank carries a slice across; below it the host's lowest rank
// carries the whole vector (one connection, the fewest messages and synchronisations). Measured
// on the 2-core VM, 2 hosts of 2 and 4 ranks at 1 and 10 Gbit/s: the lowest rank alone was
// faster up to 512 KiB (at 10 Gbit/s, 4 ranks: 1.29 against 1.70 ms), the slices from 1 MiB
// (3.1 against 3.4 ms; 4.9 against 7.8 ms at 2 MiB).
constexpr size_t kSlicesFromBytes = 1 << 20;
// Recursive halving and doubling moves as many bytes across hosts as the ring, but each step
// waits for its whole message before the next starts, where the ring pipelines segments. Across
// 4 hosts on the 2-core VM it took 0.8-2.1 times the ring's time from 256 KiB on (1.1-2.1 at 1
// Gbit/s), and won below 64 KiB, where its fewer steps count (bench/RESULTS.md, "Issue 24").
constexpr double kTreeStepLoss = 1.5;

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

// Seconds per byte that crosses hosts: the wire's, and the CPU time of the copies at each end.
double crossingSecondsPerByte(const Link& link) {
  return 1.0 / link.bytesPerSecond + kTcpSecondsPerByte;
}

// An all-reduce of `bytes` among one rank per host, each host's link carrying 2(H-1)/H of them
// either way: the ring, or the tree (fewer steps, unpipelined, and a non-power of two's fold
// sends the whole vector twice more).
double ringAcross(int hosts, double bytes, const Link& link) {
  const double h = hosts;
  return 2.0 * (h - 1) * link.latencySeconds +
         2.0 * (h - 1) / h * bytes * crossingSecondsPerByte(link);
}

double treeAcross(int hosts, double bytes, const Link& link) {
  const double h = hosts;
  const bool powerOfTwo = (hosts & (hosts - 1)) == 0;
  const double fold = powerOfTwo ? 0.0 : 2.0 * bytes * crossingSecondsPerByte(link);
  return 2.0 * plan::log2Ceil(hosts) * link.latencySeconds +
         kTreeStepLoss * 2.0 * (h - 1) / h * bytes * crossingSecondsPerByte(link) + fold;
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
  estimate.ringSeconds = 2.0 * (p - 1) * link.latencySeconds +
                         topology.ringLinkLoad * n * crossingSecondsPerByte(link);
  estimate.treeSeconds = 2.0 * plan::log2Ceil(topology.size) * link.latencySeconds +
                         kTreeStepLoss * topology.treeLinkLoad * n * crossingSecondsPerByte(link);
  if (topology.mostLocal > 1) {
    const CrossChoice cross = chooseCrossHost(topology, bytes, given);
    const double across = cross.algorithm == Algorithm::Tree ? treeAcross(topology.hosts, n, link)
                                                             : ringAcross(topology.hosts, n, link);
    estimate.hierarchicalSeconds = 2.0 * kHostSyncSeconds + n * kHostSecondsPerByte + across;
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
  choice.slices = bytes >= kSlicesFromBytes && topology.fewestLocal > 1;
  // Each slice's group crosses with its share; the host's link carries them all alike.
  const double carried = static_cast<double>(bytes) / (choice.slices ? topology.fewestLocal : 1);
  const int hosts = std::max(2, topology.hosts);
  choice.algorithm = treeAcross(hosts, carried, link) < ringAcross(hosts, carried, link)
                         ? Algorithm::Tree
                         : Algorithm::Ring;
  return choice;
}

}  // namespace ringcomm::tuning
