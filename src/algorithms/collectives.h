// The collectives other than all-reduce, as schedules over the point-to-point transport.
#pragma once

#include "algorithms/context.h"
#include "ringcomm/options.h"

namespace ringcomm::algorithms {

void reduceScatter(const Context& ctx, const ReduceScatterOptions& options);
void allgather(const Context& ctx, const AllgatherOptions& options);
void broadcast(const Context& ctx, const BroadcastOptions& options);
void reduce(const Context& ctx, const ReduceOptions& options);
void alltoall(const Context& ctx, const AlltoallOptions& options);
void alltoallv(const Context& ctx, const AlltoallvOptions& options);
void gather(const Context& ctx, const GatherOptions& options);
void scatter(const Context& ctx, const ScatterOptions& options);
void barrier(const Context& ctx);

}  // namespace ringcomm::algorithms
