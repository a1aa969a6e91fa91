// Measures the network between hosts for the cost model (cost_model.h): the lowest ranks of the
// first two hosts time a few small round trips, each waking the other end (latency), and one
// large exchange each way at once (what each host's link carries while an all-reduce crosses).
#pragma once

#include "common/deadline.h"
#include "transport/transport.h"
#include "tuning/cost_model.h"

namespace ringcomm::tuning {

// Run by both ends at once, `peer` being the other, one of them the `initiator` (whose figures
// count). Throws as any wait does (a dead peer, the deadline of `op`).
Link probeLink(transport::Transport& transport, int peer, bool initiator, const Operation& op);

}  // namespace ringcomm::tuning
