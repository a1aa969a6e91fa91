#include "algorithms/schedules.h"

#include <algorithm>
#include <string>
#include <utility>

#include "algorithms/adasum.h"
#include "algorithms/collectives.h"
#include "algorithms/ring.h"
#include "algorithms/tree.h"
#include "codec/codec.h"
#include "common/bytes.h"
#include "common/log.h"
#include "ringcomm/errors.h"

namespace ringcomm::algorithms {
namespace {

// All-to-all blocks up to this size go grouped by host across hosts. Measured on the 2-core VM,
// 2 hosts of 2 and 4 ranks (bench/RESULTS.md, "All-to-all grouped by host"): at 1 Gbit/s grouped
// is 1.2-1.5x the flat schedule's busbw up to blocks of 8 KiB and 0.9-0.96x from 64 KiB (two
// more copies within the host, for the same bytes across); at 10 Gbit/s, where both hosts share
// the two cores, the two are even up to blocks of 8 KiB, and grouped falls far behind from 32.
constexpr size_t kGroupedAlltoallBlockBytes = 8 * 1024;

// The power of two at or above `bytes`: the all-reduce's choice is logged once per such bucket.
size_t sizeBucket(size_t bytes) {
  size_t bucket = 1;
  while (bucket < bytes && bucket < (size_t{1} << 62)) bucket <<= 1;
  return bucket;
}

tuning::Topology topologyOf(int size, const HostLayout& layout, bool hostSharesMemory) {
  tuning::Topology topology;
  topology.size = size;
  topology.singleHost = layout.hosts.size() == 1;
  topology.directAvailable = topology.singleHost && hostSharesMemory;
  topology.hosts = static_cast<int>(layout.hosts.size());
  topology.fewestLocal = size;
  topology.mostLocal = 1;
  for (const auto& ranks : layout.hosts) {
    topology.fewestLocal = std::min(topology.fewestLocal, static_cast<int>(ranks.size()));
    topology.mostLocal = std::max(topology.mostLocal, static_cast<int>(ranks.size()));
  }
  if (!topology.singleHost) {
    std::tie(topology.ringLinkLoad, topology.treeLinkLoad) =
        tuning::crossingLoads(layout.hosts, size);
  }
  return topology;
}

}  // namespace

Schedules::Schedules(int rank, int size, const Config& config, HostLayout layout,
                     const shm::Segments* segments, WaitPolicy& waitPolicy)
    : rank_(rank),
      size_(size),
      config_(config),
      layout_(std::move(layout)),
      topology_(topologyOf(size, layout_, segments != nullptr)),
      link_{config.linkLatency.count() / 1e6, config.linkBandwidth} {
  if (segments != nullptr) hostGroup_ = std::make_unique<DirectGroup>(*segments, waitPolicy, config);
  hostTeam_ = makeHostTeam(layout_, hostGroup_.get());
}

Algorithm Schedules::chooseAllreduce(size_t bytes) const {
  if (config_.algorithm != Algorithm::Auto) return config_.algorithm;
  return tuning::chooseAllreduce(topology_, bytes, config_.shmAllreduceRules,
                                 config_.tcpAllreduceRules, link_);
}

Schedules::AllreduceChoice Schedules::chooseAllreduce(const AllreduceOptions& o) const {
  AllreduceChoice choice{o.algorithm, "asked for by the call"};
  if (choice.algorithm == Algorithm::Auto) {
    choice.algorithm = chooseAllreduce(o.count * elementSize(o.type));
    choice.why = config_.algorithm != Algorithm::Auto ? "forced by RINGCOMM_ALGORITHM"
                                                      : "chosen by the cost model";
    // Compression is carried by the ring schedule, across hosts in the hierarchical one
    // (validate() refused an explicit other one).
    if (o.compression != Compression::None && choice.algorithm != Algorithm::Ring &&
        choice.algorithm != Algorithm::Hierarchical) {
      choice = {Algorithm::Ring, "compression travels with the ring schedule"};
    }
  }
  if (size_ == 1) choice = {Algorithm::Ring, "one rank: a copy"};  // every schedule is a copy
  if (choice.algorithm == Algorithm::Direct && direct() == nullptr) {
    throw InvalidArgument(
        "allreduce: algorithm 'direct' needs every rank on this host, connected through shared "
        "memory (RINGCOMM_TRANSPORT=auto or shm); use 'ring', 'tree' or 'hierarchical'");
  }
  return choice;
}

void Schedules::allreduce(const Context& ctx, const AllreduceOptions& o, Algorithm algorithm) {
  if (algorithm == Algorithm::Ring) {
    ringAllreduce(ctx, o.input, o.output, o.count, o.type, o.op, o.compression, o.prescale,
                  o.postscale);
    return;
  }
  if (algorithm == Algorithm::Hierarchical) {
    const CrossHost cross =
        tuning::chooseCrossHost(topology_, o.count * elementSize(o.type), link_);
    hierarchicalAllreduce(ctx, *hostTeam_, o, cross);
    return;
  }
  // The other schedules reduce in place: scale a copy of the input first if asked to.
  const void* input = o.input;
  if (o.prescale != 1.0) {
    if (o.input != o.output) copyBytes(o.output, o.input, o.count * elementSize(o.type));
    codec::scale(o.output, o.count, o.type, o.prescale);
    input = o.output;
  }
  if (o.op == ReduceOp::Adasum) {
    adasumAllreduce(ctx, input, o.output, o.count, o.type, o.tensorCounts);
  } else if (algorithm == Algorithm::Direct) {
    direct()->allreduce(ctx, input, o.output, o.count, o.type, o.op);
  } else {
    treeAllreduce(ctx, input, o.output, o.count, o.type, o.op);
  }
  codec::scale(o.output, o.count, o.type, o.postscale);
}

void Schedules::allgather(const Context& ctx, const AllgatherOptions& o) {
  if (acrossHosts()) {
    hierarchicalAllgather(ctx, layout_, o);
  } else {
    algorithms::allgather(ctx, o);
  }
}

void Schedules::reduceScatter(const Context& ctx, const ReduceScatterOptions& o) {
  if (acrossHosts()) {
    hierarchicalReduceScatter(ctx, *hostTeam_, o);
  } else {
    algorithms::reduceScatter(ctx, o);
  }
}

void Schedules::broadcast(const Context& ctx, const BroadcastOptions& o) {
  // Every rank on this host: one copy into the root's slot and one out of it, where the tree
  // and the chain copy twice per hop. Faster at every size measured (bench/RESULTS.md,
  // "Broadcast through the direct schedule's slots").
  if (DirectGroup* group = direct()) {
    group->broadcast(ctx, o.buffer, o.count, o.type, o.root);
  } else if (acrossHosts()) {
    hierarchicalBroadcast(ctx, *hostTeam_, o);
  } else {
    algorithms::broadcast(ctx, o);
  }
}

void Schedules::reduce(const Context& ctx, const ReduceOptions& o) {
  if (acrossHosts()) {
    hierarchicalReduce(ctx, *hostTeam_, o);
  } else {
    algorithms::reduce(ctx, o);
  }
}

void Schedules::alltoall(const Context& ctx, const AlltoallOptions& o) {
  if (acrossHosts() && o.count * elementSize(o.type) <= kGroupedAlltoallBlockBytes &&
      hostsHoldConsecutiveRanks(layout_)) {
    hierarchicalAlltoall(ctx, layout_, o);
  } else {
    algorithms::alltoall(ctx, o);
  }
}

void Schedules::barrier(const Context& ctx) {
  if (DirectGroup* group = direct()) {
    group->barrier(ctx);
  } else if (acrossHosts()) {
    hierarchicalBarrier(ctx, *hostTeam_);
  } else {
    algorithms::barrier(ctx);
  }
}

void Schedules::logAvailability() const {
  RINGCOMM_LOG(LogLevel::Info, kLogAlgo, "direct shared-memory schedule %s",
               direct() ? "available (every rank on this host, through shared memory)"
                        : "unavailable (not every rank shares this host's memory)");
  if (!everyRankOnThisHost()) {
    RINGCOMM_LOG(
        LogLevel::Info, kLogAlgo,
        "%zu hosts, %d to %d ranks each: the hierarchical schedule reduces within a "
        "host %s; model of the link: %.0f us, %.2f GB/s",
        layout_.hosts.size(), topology_.fewestLocal, topology_.mostLocal,
        hostGroup_ ? "through shared memory" : "over the transport",
        (link_.latencySeconds > 0 ? link_.latencySeconds : tuning::defaultLink().latencySeconds) *
            1e6,
        (link_.bytesPerSecond > 0 ? link_.bytesPerSecond : tuning::defaultLink().bytesPerSecond) /
            1e9);
  }
}

void Schedules::logAllreduceChoice(const AllreduceOptions& o, Algorithm algorithm,
                                   const char* why) {
  const size_t bytes = o.count * elementSize(o.type);
  const bool everyCall = log::enabled(LogLevel::Trace, kLogAlgo);
  {
    std::lock_guard<std::mutex> lock(logMutex_);
    const bool first = loggedChoices_
                           .insert({sizeBucket(bytes), static_cast<int>(algorithm),
                                    static_cast<int>(o.compression)})
                           .second;
    if (!first && !everyCall) return;
  }
  const tuning::Estimate estimate = tuning::estimateAllreduce(topology_, bytes, link_);
  std::string chunking;
  if (algorithm == Algorithm::Direct) {
    const size_t slot = direct()->slotBytes();
    chunking = std::to_string((bytes + slot - 1) / std::max<size_t>(slot, 1)) +
               " round(s) of up to " + std::to_string(slot) + " B";
  } else if (algorithm == Algorithm::Ring) {
    const size_t block = (bytes + size_ - 1) / size_;
    chunking = std::to_string(size_) + " block(s) of ~" + std::to_string(block) + " B in " +
               std::to_string((block + config_.segmentBytes - 1) /
                              std::max<size_t>(config_.segmentBytes, 1)) +
               " segment(s) of up to " + std::to_string(config_.segmentBytes) + " B";
  } else if (algorithm == Algorithm::Hierarchical) {
    const CrossHost cross = tuning::chooseCrossHost(topology_, bytes, link_);
    chunking = cross.slices
                   ? std::to_string(topology_.fewestLocal) + " slice(s) per host, each across " +
                         "hosts by " + toString(cross.algorithm)
                   : std::string("the whole vector across hosts by each host's lowest rank, ") +
                         toString(cross.algorithm);
  } else {
    chunking = "recursive halving/doubling over the whole vector";
  }
  RINGCOMM_LOG(everyCall ? LogLevel::Trace : LogLevel::Info, kLogAlgo,
               "allreduce of %zu B (%s%s%s): %s, %s; %s; model estimates ring %.1f us, tree "
               "%.1f us, hierarchical %.1f us",
               bytes, toString(o.type), o.compression != Compression::None ? ", " : "",
               o.compression != Compression::None ? toString(o.compression) : "",
               toString(algorithm), why, chunking.c_str(), estimate.ringSeconds * 1e6,
               estimate.treeSeconds * 1e6, estimate.hierarchicalSeconds * 1e6);
}

}  // namespace ringcomm::algorithms
