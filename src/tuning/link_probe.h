// Measures the network between hosts for the cost model (cost_model.h): the lowest ranks of the
// first two hosts time a few small round trips, each waking the other end (latency), and one
// large exchange each way at once (what each host's link carries while an all-reduce crosses).
#pragma once

#include "common/deadline.h"
#include "ringcomm/config.h"
#include "ringcomm/store.h"
#include "transport/transport.h"
#include "tuning/cost_model.h"

namespace ringcomm::tuning {

// Run by both ends at once, `peer` being the other, one of them the `initiator` (whose figures
// count). Throws as any wait does (a dead peer, the deadline of `op`).
Link probeLink(transport::Transport& transport, int peer, bool initiator, const Operation& op);

// The figures every rank of a communicator spanning hosts uses, the same on all: rank 0's. What
// its `config` says (Config::linkLatency, linkBandwidth: RINGCOMM_LINK_*, or its host's link
// file), else measured now between rank 0 and `secondHostRank` (the lowest rank of the second
// host). Rank 0 tells that rank through `store` whether to measure, and everyone the result.
// Every rank of the communicator calls it at creation.
Link agreeOnLink(transport::Transport& transport, Store& store, int rank, int secondHostRank,
                 const Config& config, const Operation& op);

}  // namespace ringcomm::tuning
