// The communicator behind ringcomm/communicator.h: one class, CommunicatorImpl, whose parts are
// defined in a file each, by concern, so that each reads in one sitting:
//   communicator.cc              forming: create() (rendezvous, links, mailbox), the constructor,
//                                what the log says of a new communicator, shutdown()
//   communicator_regroup.cc      regrouping: duplicate(), split(), shrink(), grow(), and how a
//                                successor takes over the board and the door (handOver)
//   communicator_health.cc       health: what a failure closes, poisons and records (abort, poison,
//                                failWith, markClosed, quietSince), and the checks on peers; its
//                                parts are failure_records.h (the records) and membership.h (who
//                                is alive)
//   communicator_collectives.cc  the collectives: each validated, labelled, numbered and queued on
//                                the engine (enqueue), device buffers through
//                                DeviceCollectives
// Only those four files include this one.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/schedules.h"
#include "common/deadline.h"
#include "common/tags.h"
#include "common/trace.h"
#include "common/wait_policy.h"
#include "core/failure_records.h"
#include "core/membership.h"
#include "core/point_to_point.h"
#include "device/device_collectives.h"
#include "engine/engine.h"
#include "ringcomm/communicator.h"
#include "ringcomm/store.h"
#include "transport/connect.h"
#include "transport/transport.h"

namespace ringcomm {

class CommunicatorImpl : public Communicator {
 public:
  // ---- Forming (communicator.cc) --------------------------------------------------------------
  CommunicatorImpl(int rank, int size, Config config, transport::Links links,
                   std::shared_ptr<Store> store, std::string listenAddress,
                   std::shared_ptr<TcpStoreServer> mailbox, std::vector<MailboxAddress> mailboxes);
  ~CommunicatorImpl() override { shutdown(); }
  void shutdown() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int localRank() const override;
  int localSize() const override { return static_cast<int>(links_.localRanks.size()); }
  int hostIndex() const override { return links_.hostIndex; }
  int hostCount() const override { return links_.hostCount; }
  std::string transportTo(int peer) const override;
  const Config& config() const override { return config_; }

  // ---- Regrouping (communicator_regroup.cc) ---------------------------------------------------
  std::shared_ptr<Communicator> duplicate() override;
  std::shared_ptr<Communicator> shrink(const std::vector<int>& exclude,
                                       std::chrono::milliseconds timeout) override;
  std::vector<int> survivors(std::chrono::milliseconds timeout) override;
  std::shared_ptr<Communicator> split(int color, int key) override;
  std::shared_ptr<Communicator> grow(const GrowOptions& options) override;
  std::string address() const override;
  void publishDoor(std::shared_ptr<Store> board, const std::string& key) override;
  std::vector<int> formerRanks() const override { return formerRanks_; }
  void adoptFormerRanks(std::vector<int> ranks) { formerRanks_ = std::move(ranks); }
  // Keeps `owner` (a mailbox the new communicator meets through) as long as this one.
  void keepAlive(std::shared_ptr<void> owner) { keepAlive_.push_back(std::move(owner)); }

  // ---- Collectives (communicator_collectives.cc) ----------------------------------------------
  Algorithm chooseAllreduceAlgorithm(size_t bytes) const override {
    return schedules_->chooseAllreduce(bytes);
  }
  WorkPtr allreduce(const AllreduceOptions& o) override;
  WorkPtr reduceScatter(const ReduceScatterOptions& o) override;
  WorkPtr allgather(const AllgatherOptions& o) override;
  WorkPtr broadcast(const BroadcastOptions& o) override;
  WorkPtr reduce(const ReduceOptions& o) override;
  WorkPtr alltoall(const AlltoallOptions& o) override;
  WorkPtr alltoallv(const AlltoallvOptions& o) override;
  WorkPtr gather(const GatherOptions& o) override;
  WorkPtr scatter(const ScatterOptions& o) override;
  WorkPtr barrier(const BarrierOptions& o) override;
  WorkPtr send(const SendOptions& o) override;
  WorkPtr recv(const RecvOptions& o) override;

  // ---- Health (communicator_health.cc) --------------------------------------------------------
  void abort(const std::string& reason) override;

 private:
  // Forming.
  void settleLink();
  void logCreation();

  // Regrouping.
  int64_t newcomersWaiting(int expect, Clock::time_point deadline);
  std::shared_ptr<Communicator> formGrown(const Survivors& decided, const std::string& round,
                                          Clock::time_point deadline);
  void handOver(Communicator& successor);
  std::shared_ptr<Communicator> join(const std::vector<int>& ranks, int leader,
                                     const std::string& scope, Clock::time_point deadline,
                                     bool regroup = false);

  // Collectives.
  WorkPtr adasumAllreduce(const AllreduceOptions& o);
  static void describe(trace::Event& event, const OperationLabel& label);
  WorkPtr allreduceOnDevice(const AllreduceOptions& o, Algorithm algorithm,
                            const OperationLabel& label, device::TicketPtr ticket);
  template <typename Options, typename Body>
  WorkPtr enqueue(CollectiveKind kind, const Options& options, OperationLabel label,
                  uint32_t signature, Body body, uint32_t variant = 0);
  template <typename Options, typename Post>
  WorkPtr enqueuePointToPoint(const Options& options, OperationLabel label, Post post);
  static bool movesNothing(const OperationLabel& label);
  void barrier(const algorithms::Context& ctx) { schedules_->barrier(ctx); }

  // Health.
  void warnOfUnreadMessages();
  bool markClosed(const std::string& reason);
  Clock::time_point quietSince();
  std::string closedReason();
  void closeStreams();
  void poison(const std::string& reason, int blamed = -1, bool mismatch = false);
  bool diedWithoutAborting(int peer) const;
  [[noreturn]] void failWith(const PeerError& error);
  void throwIfClosed(const OperationLabel& label);
  void checkPeerRunsTheSame(const Operation& op, bool& published, int peer);

  // ---- State: in the order it is built (the constructor) and torn down --------------------------
  int rank_;
  int size_;
  Config config_;
  transport::Links links_;
  std::shared_ptr<Store> store_;  // this communicator's prefix of the rendezvous store
  std::string listenAddress_;     // where this rank listened: its duplicates listen there too
  std::atomic<int> duplicates_{0};
  std::unique_ptr<WaitPolicy> waitPolicy_;  // before the transport and the direct group: theirs
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<algorithms::Schedules> schedules_;
  std::unique_ptr<DeviceCollectives> device_;  // device buffers; needs no CUDA until used
  algorithms::Scratch scratch_;
  PointToPoint pointToPoint_;  // sends and receives in flight

  std::mutex submitMutex_;  // sequence numbers are handed out in queue order
  uint64_t sequence_ = 0;
  std::mutex stateMutex_;
  std::string closedReason_;
  Clock::time_point closedAt_;
  std::atomic<bool> closed_{false};  // closedReason_ is set: checked on every call without a lock
  std::atomic<bool> abortedHere_{false};  // closed by this rank's abort(), not a failure
  bool shutDown_ = false;
  bool traceOwner_ = false;  // this communicator writes RINGCOMM_TRACE at shutdown
  // Membership (core/membership.h): this rank's mailbox, the agreement over everyone's, and the
  // mailboxes of other communicators whose members meet in them through this one.
  std::shared_ptr<TcpStoreServer> mailbox_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<FailureRecords> records_;  // after membership_, which it asks
  std::mutex membershipMutex_;  // shrink(), grow() and split() number their calls
  int shrinks_ = 0;
  int grows_ = 0;
  std::mutex growMutex_;  // one grow() at a time
  std::shared_ptr<Store> board_;  // where rank 0 publishes the members (publishDoor), and under
  std::string doorKey_;           // which key
  std::vector<int> formerRanks_;  // set once, by the communicator this one replaced
  int survivorQueries_ = 0;
  int splits_ = 0;
  std::vector<std::shared_ptr<void>> keepAlive_;
  std::unique_ptr<engine::Engine> engine_;  // created last, stopped first
};

}  // namespace ringcomm
