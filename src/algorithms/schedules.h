// Which schedule runs a collective on this communicator, and running it: the one place that knows
// where the ranks are (one host or several, which share memory), the direct group of this host's
// ranks and the cost model. The communicator validates, numbers and queues a collective; what
// runs on the engine thread is one of these calls.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/direct.h"
#include "algorithms/hierarchical.h"
#include "common/wait_policy.h"
#include "ringcomm/config.h"
#include "ringcomm/options.h"
#include "transport/shm/segment.h"
#include "tuning/cost_model.h"

namespace ringcomm::algorithms {

class Schedules {
 public:
  // `segments`: this host's shared memory, or null when no peer shares it.
  Schedules(int rank, int size, const Config& config, HostLayout layout,
            const shm::Segments* segments, WaitPolicy& waitPolicy);

  // What an all-reduce runs, and why (for the log).
  struct AllreduceChoice {
    Algorithm algorithm;
    const char* why;
  };
  // Resolves Auto (the tuning rules, else the cost model), compression and the one-rank case;
  // throws InvalidArgument for a schedule this layout cannot run.
  AllreduceChoice chooseAllreduce(const AllreduceOptions& options) const;
  // What Auto resolves to for this many bytes (RINGCOMM_ALGORITHM when set).
  Algorithm chooseAllreduce(size_t bytes) const;

  // The all-reduce on host buffers (or staged copies of device ones) with the chosen schedule.
  void allreduce(const Context& ctx, const AllreduceOptions& options, Algorithm algorithm);
  // Across hosts with several ranks on some, these know the hosts (hierarchical.h); else the
  // flat schedules (collectives.h), and the direct schedule's where it has one.
  void allgather(const Context& ctx, const AllgatherOptions& options);
  void reduceScatter(const Context& ctx, const ReduceScatterOptions& options);
  void broadcast(const Context& ctx, const BroadcastOptions& options);
  void reduce(const Context& ctx, const ReduceOptions& options);
  // Small blocks across hosts travel grouped by host (hierarchical_alltoall.cc); else flat.
  void alltoall(const Context& ctx, const AlltoallOptions& options);
  void barrier(const Context& ctx);

  // Logs the choice once per size bucket and schedule (every call at TRACE).
  void logAllreduceChoice(const AllreduceOptions& options, Algorithm algorithm, const char* why);
  // One line on the direct and hierarchical schedules, for the communicator's creation log.
  void logAvailability() const;

  bool everyRankOnThisHost() const { return static_cast<int>(layout_.hosts.size()) == 1; }
  // Releases this host's shared-memory schedule (at shutdown, once nothing runs).
  void release() {
    hostTeam_.reset();
    hostGroup_.reset();
  }

 private:
  // The direct schedule over the whole communicator: every rank on this host, sharing memory.
  DirectGroup* direct() const { return everyRankOnThisHost() ? hostGroup_.get() : nullptr; }
  // Whether the schedules that know the hosts apply: several hosts, and some with several ranks.
  bool acrossHosts() const { return !everyRankOnThisHost() && topology_.mostLocal > 1; }

  int rank_;
  int size_;
  const Config& config_;
  HostLayout layout_;
  tuning::Topology topology_;
  tuning::Link link_;
  // The direct schedule of this host's ranks, when they share memory: the whole all-reduce on
  // one host, the steps within the host of the hierarchical one (through hostTeam_).
  std::unique_ptr<DirectGroup> hostGroup_;
  // This host's ranks as a team (host_team.h), for the hierarchical schedules.
  std::unique_ptr<HostTeam> hostTeam_;
  std::mutex logMutex_;
  std::set<std::tuple<size_t, int, int>> loggedChoices_;  // (size bucket, algorithm, codec)
};

}  // namespace ringcomm::algorithms
