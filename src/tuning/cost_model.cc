#include "tuning/cost_model.h"

#include "algorithms/plan.h"

namespace ringcomm::tuning {
namespace {

// Link constants for TCP, measured on the 2-core development VM over loopback (bench/RESULTS.md):
// a ping-pong of 8 bytes takes ~25 us one way under poll(); large transfers move ~2.5 GB/s.
constexpr double kTcpLatencySeconds = 25e-6;
constexpr double kTcpSecondsPerByte = 1.0 / 2.5e9;
// Reduction of a received segment into the local one (read two, write one) at ~10 GB/s.
constexpr double kReduceSecondsPerByte = 1.0 / 10e9;

}  // namespace

Estimate estimateAllreduce(const Topology& topology, size_t bytes) {
  const double p = topology.size;
  const double n = static_cast<double>(bytes);
  const double moved = 2.0 * (p - 1) / p * n * kTcpSecondsPerByte;
  const double reduced = (p - 1) / p * n * kReduceSecondsPerByte;
  Estimate estimate;
  estimate.ringSeconds = 2.0 * (p - 1) * kTcpLatencySeconds + moved + reduced;
  const int steps = plan::log2Ceil(topology.size);
  const bool powerOfTwo = (topology.size & (topology.size - 1)) == 0;
  // The fold for a non-power of two sends the whole vector twice more, on the critical path.
  const double fold = powerOfTwo ? 0.0 : 2.0 * (kTcpLatencySeconds + n * kTcpSecondsPerByte);
  estimate.treeSeconds = 2.0 * steps * kTcpLatencySeconds + moved + reduced + fold;
  return estimate;
}

Algorithm chooseAllreduce(const Topology& topology, size_t bytes) {
  // Through shared memory the direct schedule wins at every size: one synchronisation round for
  // small vectors, and the fewest passes over memory for large ones (bench/RESULTS.md).
  if (topology.directAvailable) return Algorithm::Direct;
  const Estimate estimate = estimateAllreduce(topology, bytes);
  return estimate.treeSeconds < estimate.ringSeconds ? Algorithm::Tree : Algorithm::Ring;
}

Algorithm chooseAllreduce(const Topology& topology, size_t bytes, const Rules& shmRules,
                          const Rules& tcpRules) {
  // Measured on one host: across hosts the links are another network, and each host's rules
  // could differ while every rank must choose alike.
  const Rules& rules = topology.directAvailable ? shmRules : tcpRules;
  if (!topology.singleHost || rules.empty()) return chooseAllreduce(topology, bytes);
  Algorithm chosen = rules.back().second;
  for (const auto& [most, algorithm] : rules) {
    if (bytes <= most) {
      chosen = algorithm;
      break;
    }
  }
  const bool fits = chosen != Algorithm::Auto &&
                    (chosen != Algorithm::Direct || topology.directAvailable);
  return fits ? chosen : chooseAllreduce(topology, bytes);
}

}  // namespace ringcomm::tuning
