// The communicator: one per group of ranks, owning the transports and the engine thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ringcomm/config.h"
#include "ringcomm/errors.h"
#include "ringcomm/export.h"
#include "ringcomm/options.h"
#include "ringcomm/store.h"
#include "ringcomm/types.h"
#include "ringcomm/work.h"

namespace ringcomm {

class RINGCOMM_API Communicator {
 public:
  // Collective over all ranks: every rank calls it with the same store (or store prefix) and size.
  // Each process numbers its communicators, and the n-th of every process meet under the store
  // prefix "ringcomm/<n>/": all processes must create them in the same order.
  static std::shared_ptr<Communicator> create(std::shared_ptr<Store> store, int rank, int size,
                                              const Config& config);
  // The same, meeting under `scope` instead of a number: for callers whose store is already
  // private to this group of ranks (torch.distributed gives every process group its own prefix),
  // so processes outside the group need not create a communicator to keep the count.
  static std::shared_ptr<Communicator> createInScope(std::shared_ptr<Store> store,
                                                     const std::string& scope, int rank, int size,
                                                     const Config& config);
  virtual ~Communicator() = default;

  // Collective: a new communicator over the same ranks, with connections and an engine of its
  // own, so that its collectives never interleave with this one's. Every rank calls it, in the
  // same order relative to its other duplicate() calls.
  virtual std::shared_ptr<Communicator> duplicate() = 0;

  // Collective over the ranks still alive (MPI ULFM's MPIX_Comm_shrink): called by the survivors
  // after a failure, or to drop the ranks in `exclude` on purpose (every caller names the same).
  // They agree on who goes on without the rendezvous store or the data links (src/core/
  // membership.h), and get a new communicator of those ranks, renumbered in their old order,
  // with connections and shared memory of its own. This one is left as it is. Raises
  // MembershipError on a side of a partition without a strict majority of the ranks not known to
  // be gone (a tie stops both), and on a rank the others went on without; TimeoutError when no
  // decision comes within `timeout` (0: Config::timeout).
  virtual std::shared_ptr<Communicator> shrink(const std::vector<int>& exclude,
                                               std::chrono::milliseconds timeout) = 0;

  // Collective over the ranks still alive: which ranks of this communicator go on, as every
  // survivor agrees (the agreement of shrink() without a new communicator; what MPI ULFM's
  // failure acknowledgement gives). For callers that must name the lost ranks themselves, as
  // torch.distributed.shrink_group does. Raises as shrink() does.
  virtual std::vector<int> survivors(std::chrono::milliseconds timeout) = 0;

  // Collective over the members (ncclCommGrow, torchcomms' reconfigure): admits the processes
  // that asked to join (join() below) into a new communicator of the members, in their order,
  // then the newcomers, in the order the members knew them. The members agree through the
  // agreement of shrink(), so a member that dies meanwhile is left out, as is a newcomer that
  // died; every member and every newcomer ends with the same communicator, or all raise. This
  // one is left as it is. Returns nullptr where nobody asked (cheap: one small all-reduce), or
  // raises what this communicator's all-reduce raises (a member lost: shrink first);
  // TimeoutError where fewer than options.expect asked by the timeout; InvalidArgument while
  // another grow of this communicator runs.
  virtual std::shared_ptr<Communicator> grow(const GrowOptions& options) = 0;

  // A new process joins a running communicator: it proves the job's secret (Config::secret) to
  // a member found through `options`, asks to join, and waits until the members grow(). Returns
  // its communicator in the grown group (its rank: after the members'). Raises TransportError
  // where no member proves the secret (another job, or a wrong secret), TimeoutError where the
  // members did not admit it by the timeout.
  static std::shared_ptr<Communicator> join(const JoinOptions& options, const Config& config);

  // The rank each member had in the communicator this one replaced (shrink()'s, grow()'s), by
  // rank; -1 for a newcomer. Empty for a communicator made otherwise. Callers that number ranks
  // themselves (torch's groups) map their numbering through it.
  virtual std::vector<int> formerRanks() const = 0;

  // Where newcomers reach this rank ("host:port" of its mailbox, core/membership.h); empty for a
  // communicator of one rank made by create().
  virtual std::string address() const = 0;
  // Keeps the members' addresses under `key` in `board` (the launcher's store), written by rank
  // 0 now and by the first rank of every communicator that shrink() and grow() make from this
  // one, so that a replacement started later finds the members however they changed. A board
  // that is gone (it died with a rank) is skipped.
  virtual void publishDoor(std::shared_ptr<Store> board, const std::string& key) = 0;

  // Collective (MPI's Comm_split): a communicator of the ranks that pass the same `color`,
  // numbered by `key`, then by rank; nullptr for a negative color (MPI_UNDEFINED).
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int localRank() const = 0;  // index among the ranks of this host
  virtual int localSize() const = 0;
  virtual int hostIndex() const = 0;  // index of this host among hosts (cross rank)
  virtual int hostCount() const = 0;
  // The transport used to reach each peer ("shm" or "tcp"), for diagnostics and tests.
  virtual std::string transportTo(int peer) const = 0;
  virtual const Config& config() const = 0;

  // Every collective is queued on the engine thread and returns at once; Work::wait() blocks.
  // Collectives run in the order they are called on every rank.
  virtual WorkPtr allreduce(const AllreduceOptions& options) = 0;
  virtual WorkPtr reduceScatter(const ReduceScatterOptions& options) = 0;
  virtual WorkPtr allgather(const AllgatherOptions& options) = 0;
  virtual WorkPtr broadcast(const BroadcastOptions& options) = 0;
  virtual WorkPtr reduce(const ReduceOptions& options) = 0;
  virtual WorkPtr alltoall(const AlltoallOptions& options) = 0;
  virtual WorkPtr alltoallv(const AlltoallvOptions& options) = 0;
  virtual WorkPtr gather(const GatherOptions& options) = 0;
  virtual WorkPtr scatter(const ScatterOptions& options) = 0;
  virtual WorkPtr barrier(const BarrierOptions& options) = 0;
  virtual WorkPtr send(const SendOptions& options) = 0;
  virtual WorkPtr recv(const RecvOptions& options) = 0;

  // The algorithm Auto resolves to for an all-reduce of this many bytes (for the bench and tests).
  virtual Algorithm chooseAllreduceAlgorithm(size_t bytes) const = 0;

  // Fails pending and future work with CommunicatorClosed and tells peers, so they fail fast too.
  virtual void abort(const std::string& reason) = 0;
  // Waits for queued work, then releases sockets and shared memory. Idempotent.
  virtual void shutdown() = 0;
};

}  // namespace ringcomm
