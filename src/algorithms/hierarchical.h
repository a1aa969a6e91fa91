// Schedules that know the hosts: each host's bytes cross the network once.
//
// A flat ring over ranks on several hosts sends 2(p-1)/p of the vector over each host's link, and
// the more ranks a host has the more of its ring's edges cross hosts in a tree. What a host must
// send is its share of the vector: N bytes each way between two hosts. These schedules get there
// by composing the others on sub-groups (Context::subgroup):
//
//   within the host   reduce the host's inputs, every local rank its own slice (the direct
//                     schedule through each other's memory, or the ring over the host's
//                     sub-group);
//   across hosts      local rank j of every host combines slice j (ring or tree on the sub-group
//                     of one rank per host), so every rank of a host drives its own slice over its
//                     own connection, in parallel;
//   within the host   share the finished slices (the same schedules).
//
// Small vectors, where the latency of each step decides, go through one rank per host instead:
// the host reduces the whole vector (direct schedule), its lowest rank combines it with the
// other hosts' lowest ranks, and the result is broadcast within the host.
//
// Every element's final value is computed once, by one group in a fixed order, and copied to the
// others, so every rank holds the same bits, and a run is deterministic for a given layout.
#pragma once

#include <vector>

#include "algorithms/context.h"
#include "algorithms/host_team.h"
#include "ringcomm/options.h"
#include "tuning/cost_model.h"

namespace ringcomm::algorithms {

// How it crosses hosts (tuning::chooseCrossHost): every local rank with a slice, or the lowest
// with the whole vector; ring or tree among one rank per host.
using CrossHost = tuning::CrossChoice;

// Each takes the whole communicator's `ctx`, and this host's team (host_team.h: its ranks'
// steps through each other's memory or over the transport), which knows the layout.
void hierarchicalAllreduce(const Context& ctx, HostTeam& team, const AllreduceOptions& options,
                           const CrossHost& cross);

// Every host gathers its ranks' blocks, local rank j of every host exchanges slice j of each
// host's blocks with the other hosts, and the slices are shared within each host: each host
// receives the other hosts' blocks once.
void hierarchicalAllgather(const Context& ctx, const HostLayout& layout,
                           const AllgatherOptions& options);

// Every host reduces the whole vector, local rank j slice j of it; local rank j of every host
// reduces slice j across hosts, each host keeping the part that belongs to its ranks; the host's
// ranks hand each other those parts. Each host sends its partial sum of the other hosts' blocks
// once, and receives the other hosts' partial sums of its own once. On a team that shares memory
// the steps within the host go through it, overlapping the exchange across hosts.
void hierarchicalReduceScatter(const Context& ctx, HostTeam& team,
                               const ReduceScatterOptions& options);

// Each rank hands the blocks for other hosts to the local rank that carries their destination,
// which sends each destination its host's blocks in one message (hierarchical_alltoall.cc).
// Requires hostsHoldConsecutiveRanks(layout).
void hierarchicalAlltoall(const Context& ctx, const HostLayout& layout,
                          const AlltoallOptions& options);

// The root and one rank of every other host (its lowest) broadcast among themselves, then each
// host from that rank: the vector crosses into each host once.
void hierarchicalBroadcast(const Context& ctx, HostTeam& team, const BroadcastOptions& options);

// The reverse: each host reduces to that rank, which reduce among themselves to the root.
void hierarchicalReduce(const Context& ctx, HostTeam& team, const ReduceOptions& options);

// Each host's ranks meet, then one rank per host, then each host's again.
void hierarchicalBarrier(const Context& ctx, HostTeam& team);

}  // namespace ringcomm::algorithms
