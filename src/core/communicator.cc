// The communicator: rendezvous and connection at creation, then each collective validated on the
// caller's thread, given a sequence number (its wire tag), and run by the engine.
#include "ringcomm/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "algorithms/adasum.h"
#include "algorithms/collectives.h"
#include "algorithms/schedules.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/trace_gather.h"
#include "device/device_collectives.h"
#include "core/failure_records.h"
#include "core/forming.h"
#include "core/membership.h"
#include "core/point_to_point.h"
#include "common/bytes.h"
#include "common/failure.h"
#include "common/log.h"
#include "common/socket.h"
#include "common/tags.h"
#include "common/trace.h"
#include "engine/engine.h"
#include "transport/connect.h"
#include "transport/tcp/sealed_stream.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_network.h"
#include "tuning/link_probe.h"

namespace ringcomm {
namespace {

// At shutdown, how long rank 0 waits for the other ranks' parts of RINGCOMM_TRACE (at most: the
// communicator's own timeout when shorter). A rank that died never sends one.
constexpr std::chrono::milliseconds kTraceGatherWait{30000};
// How often grow(expect > 0) looks again for the newcomers it waits for.
constexpr std::chrono::milliseconds kKnockPoll{20};

OperationLabel labelOf(const char* collective, size_t count, DataType type, bool perRank = false,
                       int root = -1) {
  OperationLabel label;
  label.collective = collective;
  label.count = count;
  label.type = toString(type);
  label.bytes = count * elementSize(type);  // for the trace (describe() names it for send/recv)
  label.perRank = perRank;
  label.root = root;
  return label;
}

// Where a send's or receive's bytes are, as the transport takes them: its message's device
// buffer, or host memory (a staged copy, or the caller's own).
transport::Memory memoryOf(const device::Message* message) {
  return message != nullptr && message->onDevice() ? transport::Memory::Cuda
                                                   : transport::Memory::Host;
}

class CommunicatorImpl : public Communicator {
 public:
  // `mailbox`: this rank's membership mailbox (core/membership.h), `mailboxes` every rank's;
  // none for a communicator of one rank.
  CommunicatorImpl(int rank, int size, Config config, transport::Links links,
                   std::shared_ptr<Store> store, std::string listenAddress,
                   std::shared_ptr<TcpStoreServer> mailbox, std::vector<MailboxAddress> mailboxes)
      : rank_(rank), size_(size), config_(std::move(config)), links_(std::move(links)),
        store_(std::move(store)), listenAddress_(std::move(listenAddress)),
        mailbox_(std::move(mailbox)) {
    if (mailbox_) {
      membership_ = std::make_unique<Membership>(rank_, std::move(mailboxes), config_.secret,
                                                 config_.linkTimeout);
    }
    records_ = std::make_unique<FailureRecords>(
        rank_, store_, membership_.get(), config_.secret,
        [this](int peer) { return diedWithoutAborting(peer); });
    waitPolicy_ = std::make_unique<WaitPolicy>(config_.spinCount, config_.yieldCount,
                                               static_cast<int>(links_.localRanks.size()));
    transport_ = std::make_unique<transport::Transport>(
        rank_, std::move(links_.streams), std::move(links_.network), links_.segments.get(),
        *waitPolicy_);
    scratch_.registerWith(transport_.get());
    settleLink();
    const algorithms::HostLayout layout{links_.hostRanks, links_.hostIndex, localRank()};
    schedules_ = std::make_unique<algorithms::Schedules>(rank_, size_, config_, layout,
                                                         links_.segments.get(), *waitPolicy_);
    device_ = std::make_unique<DeviceCollectives>(rank_, size_, config_, layout);
    engine_ = std::make_unique<engine::Engine>(
        [this](bool mayBlock) {
          return pointToPoint_.poll(*transport_, mayBlock,
                                    [this](const PeerError& error) { failWith(error); });
        });
    traceOwner_ = trace::claimTraceFile();
    logCreation();
  }

  ~CommunicatorImpl() override { shutdown(); }

  std::shared_ptr<Communicator> duplicate() override {
    Config config = config_;
    config.listenAddress = listenAddress_;
    const std::string scope = "duplicate/" + std::to_string(duplicates_.fetch_add(1)) + "/";
    return createInScope(store_, scope, rank_, size_, config);
  }

  std::shared_ptr<Communicator> shrink(const std::vector<int>& exclude,
                                       std::chrono::milliseconds timeout) override {
    std::set<int> dropped;
    for (int r : exclude) {
      if (r < 0 || r >= size_) {
        throw InvalidArgument("shrink: exclude names rank " + std::to_string(r) +
                              ", which is not a rank of this communicator of " +
                              std::to_string(size_));
      }
      if (r == rank_) {
        throw InvalidArgument("shrink: exclude names this rank (" + std::to_string(r) +
                              "); a rank leaves a shrink by not calling it");
      }
      dropped.insert(r);
    }
    const auto deadline =
        net::deadlineAfter(timeout.count() > 0 ? timeout : config_.timeout);
    if (!membership_) return duplicate();  // one rank: nobody to agree with
    std::lock_guard<std::mutex> lock(membershipMutex_);
    const std::string call = "shrink/" + std::to_string(shrinks_++);
    for (int attempt = 0;; ++attempt) {
      const std::string round = call + "/" + std::to_string(attempt);
      const Survivors survivors = membership_->agree(round, dropped, deadline, quietSince());
      try {
        std::shared_ptr<Communicator> shrunk =
            join(survivors.ranks, survivors.leader, round + "/comm/", deadline, true);
        setFormerRanks(*shrunk, survivors.ranks);
        handOver(*shrunk);
        return shrunk;
      } catch (const PeerError& error) {
        // A survivor failed while the new communicator formed: every survivor that saw it
        // agrees again, and the next round finds who is gone.
        if (Clock::now() >= deadline) throw;
        RINGCOMM_LOG(LogLevel::Warn, kLogInit,
                     "shrink: the survivors' communicator did not form (%s); agreeing again",
                     error.what());
      }
    }
  }

  std::vector<int> survivors(std::chrono::milliseconds timeout) override {
    if (!membership_) return {0};
    const auto deadline = net::deadlineAfter(timeout.count() > 0 ? timeout : config_.timeout);
    std::lock_guard<std::mutex> lock(membershipMutex_);
    const std::string round = "survivors/" + std::to_string(survivorQueries_++);
    return membership_->agree(round, {}, deadline, quietSince()).ranks;
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    const int64_t mine[2] = {color, key};
    std::vector<int64_t> all(2 * static_cast<size_t>(size_));
    AllgatherOptions exchange;
    exchange.input = mine;
    exchange.output = all.data();
    exchange.count = 2;
    exchange.type = DataType::Int64;
    exchange.name = "split";
    allgather(exchange)->wait();
    std::lock_guard<std::mutex> lock(membershipMutex_);
    const std::string scope =
        "split/" + std::to_string(splits_++) + "/" + std::to_string(color) + "/";
    if (color < 0) return nullptr;
    std::vector<std::pair<int64_t, int>> group;  // (key, rank)
    for (int r = 0; r < size_; ++r) {
      if (all[2 * static_cast<size_t>(r)] == color) group.emplace_back(all[2 * r + 1], r);
    }
    std::sort(group.begin(), group.end());
    std::vector<int> ranks;
    int leader = size_;
    for (const auto& [ignored, r] : group) {
      ranks.push_back(r);
      leader = std::min(leader, r);
    }
    return join(ranks, leader, scope, net::deadlineAfter(config_.timeout));
  }

  std::shared_ptr<Communicator> grow(const GrowOptions& options) override {
    options.validate();
    if (closed_.load(std::memory_order_acquire)) {
      throw CommunicatorClosed("ringcomm: grow: this communicator is closed (" + closedReason() +
                               "): shrink() it first, then grow the survivors' communicator");
    }
    if (!membership_) {
      throw InvalidArgument("grow: a communicator of one rank made by create() has no mailbox "
                            "for newcomers to reach; create it with the others, or shrink to it");
    }
    std::unique_lock<std::mutex> growing(growMutex_, std::try_to_lock);
    if (!growing.owns_lock()) {
      throw InvalidArgument("grow: another grow of this communicator is under way: one at a time");
    }
    const auto deadline = net::deadlineAfter(
        options.timeout.count() > 0 ? options.timeout : config_.timeout);
    if (newcomersWaiting(options.expect, deadline) == 0) return nullptr;
    std::lock_guard<std::mutex> lock(membershipMutex_);
    const std::string call = "grow/" + std::to_string(grows_++);
    for (int attempt = 0;; ++attempt) {
      const std::string round = call + "/" + std::to_string(attempt);
      const Survivors decided = membership_->agree(
          round, {}, deadline, quietSince(), membership_->knocks(kDoorLook));
      if (decided.joiners.empty() && static_cast<int>(decided.ranks.size()) == size_) {
        return nullptr;  // those that knocked died before they were admitted
      }
      try {
        std::shared_ptr<Communicator> grown = formGrown(decided, round, deadline);
        membership_->admitted(decided);
        handOver(*grown);
        return grown;
      } catch (const PeerError& error) {
        if (Clock::now() >= deadline) throw;
        RINGCOMM_LOG(LogLevel::Warn, kLogInit,
                     "grow: the grown communicator did not form (%s); agreeing again",
                     error.what());
      }
    }
  }

  std::vector<int> formerRanks() const override { return formerRanks_; }

  std::string address() const override {
    if (!membership_) return "";
    const MailboxAddress& own = membership_->ownAddress();
    return net::formatHostPort(own.host, own.port);
  }

  void publishDoor(std::shared_ptr<Store> board, const std::string& key) override {
    if (!board || key.empty()) throw InvalidArgument("publishDoor: a board and a key are needed");
    {
      // Only the fields: the store's round trip below must not hold the lock every failure
      // path takes (markClosed, quietSince).
      std::lock_guard<std::mutex> lock(stateMutex_);
      board_ = board;
      doorKey_ = key;
    }
    if (rank_ != 0 || !membership_) return;
    std::string members;
    for (int r = 0; r < size_; ++r) {
      const MailboxAddress& address = membership_->addressOf(r);
      members += net::formatHostPort(address.host, address.port) + "\n";
    }
    // Best effort: the board may have died with a rank that served it (env://).
    if (!board->trySet(key, Bytes(members.begin(), members.end()), kDoorLook)) {
      RINGCOMM_LOG(LogLevel::Info, kLogInit,
                   "the members' addresses could not be published under %s: its store does not "
                   "answer; newcomers need a member's address",
                   key.c_str());
    }
  }

  void adoptFormerRanks(std::vector<int> ranks) { formerRanks_ = std::move(ranks); }

  // Keeps `owner` (a mailbox the new communicator meets through) as long as this one.
  void keepAlive(std::shared_ptr<void> owner) { keepAlive_.push_back(std::move(owner)); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int localRank() const override {
    for (size_t i = 0; i < links_.localRanks.size(); ++i) {
      if (links_.localRanks[i] == rank_) return static_cast<int>(i);
    }
    return 0;
  }
  int localSize() const override { return static_cast<int>(links_.localRanks.size()); }
  int hostIndex() const override { return links_.hostIndex; }
  int hostCount() const override { return links_.hostCount; }
  std::string transportTo(int peer) const override {
    if (peer < 0 || peer >= size_) throw InvalidArgument("peer out of range");
    return transport_->kindOf(peer);
  }
  const Config& config() const override { return config_; }

  Algorithm chooseAllreduceAlgorithm(size_t bytes) const override {
    return schedules_->chooseAllreduce(bytes);
  }

  WorkPtr allreduce(const AllreduceOptions& o) override {
    o.validate();
    if (o.op == ReduceOp::Adasum) return adasumAllreduce(o);
    const auto [algorithm, why] = schedules_->chooseAllreduce(o);
    if (log::enabled(LogLevel::Info, kLogAlgo)) schedules_->logAllreduceChoice(o, algorithm, why);
    OperationLabel label = labelOf("allreduce", o.count, o.type);
    label.algorithm = toString(algorithm);
    label.reduceOp = toString(o.op);
    if (o.compression != Compression::None) label.compression = toString(o.compression);
    if (device::TicketPtr ticket = device_->prepare(o, {o.input, o.output}, "allreduce")) {
      return allreduceOnDevice(o, algorithm, label, std::move(ticket));
    }
    return enqueue(CollectiveKind::Allreduce, o, label, signatureOf(&o.type, &o.op, -1),
                   [this, o, algorithm](const algorithms::Context& ctx) {
                     schedules_->allreduce(ctx, o, algorithm);
                   },
                   variantOf(algorithm, o.compression));
  }

  // The collectives below take host or device buffers alike: DeviceCollectives::staged runs
  // their host schedule on staged copies of device buffers.
  WorkPtr reduceScatter(const ReduceScatterOptions& o) override {
    o.validate();
    OperationLabel label = labelOf("reduce_scatter", o.count, o.type, true);
    label.reduceOp = toString(o.op);
    const size_t bytes = o.count * elementSize(o.type);
    return enqueue(CollectiveKind::ReduceScatter, o, label, signatureOf(&o.type, &o.op, -1),
                   device_->staged(o, "reduce_scatter", {bytes * size_}, {bytes},
                                   [this](const algorithms::Context& ctx, const auto& part) {
                                     schedules_->reduceScatter(ctx, part);
                                   }));
  }

  WorkPtr allgather(const AllgatherOptions& o) override {
    o.validate();
    const size_t bytes = o.count * elementSize(o.type);
    return enqueue(CollectiveKind::Allgather, o, labelOf("allgather", o.count, o.type, true),
                   signatureOf(&o.type, nullptr, -1),
                   device_->staged(o, "allgather", {bytes}, {bytes * size_},
                                   [this](const algorithms::Context& ctx, const auto& part) {
                                     schedules_->allgather(ctx, part);
                                   }));
  }

  WorkPtr broadcast(const BroadcastOptions& o) override {
    o.validate(size_);
    device::TicketPtr ticket = device_->prepare(o, {o.buffer}, "broadcast");
    if (!ticket || o.count == 0) {
      return enqueue(CollectiveKind::Broadcast, o,
                     labelOf("broadcast", o.count, o.type, false, o.root),
                     signatureOf(&o.type, nullptr, o.root),
                     [this, o](const algorithms::Context& ctx) {
                       schedules_->broadcast(ctx, o);
                     });
    }
    return enqueue(CollectiveKind::Broadcast, o,
                   labelOf("broadcast", o.count, o.type, false, o.root),
                   signatureOf(&o.type, nullptr, o.root),
                   [this, o, ticket](const algorithms::Context& ctx) {
                     device_->broadcast(*ticket, ctx, o);
                   },
                   withMemoryPath(0, MemoryPath::DeviceChunked));
  }

  WorkPtr reduce(const ReduceOptions& o) override {
    o.validate(size_);
    if (rank_ == o.root && o.output == nullptr && o.count > 0) {
      throw InvalidArgument("reduce: output is null on the root");
    }
    OperationLabel label = labelOf("reduce", o.count, o.type, false, o.root);
    label.reduceOp = toString(o.op);
    const size_t bytes = o.count * elementSize(o.type);
    return enqueue(CollectiveKind::Reduce, o, label, signatureOf(&o.type, &o.op, o.root),
                   device_->staged(o, "reduce", {bytes}, {bytes, rank_ == o.root},
                                   [this](const algorithms::Context& ctx, const auto& part) {
                                     schedules_->reduce(ctx, part);
                                   }));
  }

  WorkPtr alltoall(const AlltoallOptions& o) override {
    o.validate();
    const size_t bytes = o.count * elementSize(o.type) * size_;
    return enqueue(CollectiveKind::Alltoall, o, labelOf("alltoall", o.count, o.type, true),
                   signatureOf(&o.type, nullptr, -1),
                   device_->staged(o, "alltoall", {bytes}, {bytes},
                                   [this](const algorithms::Context& ctx, const auto& part) {
                                     schedules_->alltoall(ctx, part);
                                   }));
  }

  WorkPtr alltoallv(const AlltoallvOptions& o) override {
    o.validate(size_, rank_);
    size_t total = 0;
    for (size_t count : o.sendCounts) total += count;
    // The extent of each buffer the counts and offsets reach.
    size_t sent = 0;
    size_t received = 0;
    for (size_t j = 0; j < o.sendCounts.size(); ++j) {
      if (o.sendCounts[j] > 0) sent = std::max(sent, o.sendOffsets[j] + o.sendCounts[j]);
    }
    for (size_t j = 0; j < o.recvCounts.size(); ++j) {
      if (o.recvCounts[j] > 0) received = std::max(received, o.recvOffsets[j] + o.recvCounts[j]);
    }
    const size_t unit = elementSize(o.type);
    return enqueue(CollectiveKind::Alltoall, o, labelOf("alltoallv", total, o.type),
                   signatureOf(&o.type, nullptr, -1),
                   device_->staged(o, "alltoallv", {sent * unit}, {received * unit},
                                   [](const algorithms::Context& ctx, const auto& part) {
                                     algorithms::alltoallv(ctx, part);
                                   }));
  }

  WorkPtr gather(const GatherOptions& o) override {
    o.validate(size_, rank_);
    const size_t bytes = o.count * elementSize(o.type);
    return enqueue(CollectiveKind::Gather, o, labelOf("gather", o.count, o.type, true, o.root),
                   signatureOf(&o.type, nullptr, o.root),
                   device_->staged(o, "gather", {bytes}, {bytes * size_, rank_ == o.root},
                                   [](const algorithms::Context& ctx, const auto& part) {
                                     algorithms::gather(ctx, part);
                                   }));
  }

  WorkPtr scatter(const ScatterOptions& o) override {
    o.validate(size_, rank_);
    const size_t bytes = o.count * elementSize(o.type);
    return enqueue(CollectiveKind::Scatter, o, labelOf("scatter", o.count, o.type, true, o.root),
                   signatureOf(&o.type, nullptr, o.root),
                   device_->staged(o, "scatter", {bytes * size_, rank_ == o.root}, {bytes},
                                   [](const algorithms::Context& ctx, const auto& part) {
                                     algorithms::scatter(ctx, part);
                                   }));
  }

  WorkPtr barrier(const BarrierOptions& o) override {
    OperationLabel label;
    label.collective = "barrier";
    return enqueue(CollectiveKind::Barrier, o, label, 0,
                   [this](const algorithms::Context& ctx) { barrier(ctx); });
  }

  WorkPtr send(const SendOptions& o) override {
    o.validate(size_, rank_);
    const device::TicketPtr ticket = device_->prepare(o, {o.buffer}, "send");
    return enqueuePointToPoint(
        o, PointToPoint::labelOf("send", o.peer, o.tag, o.bytes),
        [this, o, ticket](const algorithms::Context& ctx) {
          PointToPoint::Posted posted;
          posted.message = device_->message(ticket, ctx, o.peer, const_cast<void*>(o.buffer),
                                            o.bytes, true);
          posted.request =
              ctx.transport.postSend(o.peer, posted.message ? posted.message->data() : o.buffer,
                                     o.bytes, PointToPoint::tagOf(o.tag, o.type),
                                     memoryOf(posted.message.get()));
          return posted;
        });
  }

  WorkPtr recv(const RecvOptions& o) override {
    o.validate(size_, rank_);
    const device::TicketPtr ticket = device_->prepare(o, {o.buffer}, "recv");
    return enqueuePointToPoint(
        o, PointToPoint::labelOf("recv", o.peer, o.tag, o.bytes),
        [this, o, ticket](const algorithms::Context& ctx) {
          const MessageTag tag = PointToPoint::tagOf(o.tag, o.type);
          // A receive from any rank waits here, in its turn, for a sender to show itself.
          const int peer =
              o.peer == kAnySource ? ctx.transport.waitForAnySender(tag, ctx.op) : o.peer;
          if (o.source != nullptr) *o.source = peer;
          PointToPoint::Posted posted;
          posted.message = device_->message(ticket, ctx, peer, o.buffer, o.bytes, false);
          posted.request =
              ctx.transport.postRecv(peer, posted.message ? posted.message->data() : o.buffer,
                                     o.bytes, tag, memoryOf(posted.message.get()));
          return posted;
        });
  }

  void abort(const std::string& reason) override {
    if (!markClosed("communicator aborted on rank " + std::to_string(rank_) + ": " + reason)) return;
    // Before the waits in flight can fail (failWith reads it): they fail because of this.
    abortedHere_.store(true, std::memory_order_release);
    if (links_.segments) links_.segments->markAborted(reason);
    closeStreams();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(stateMutex_);
      if (shutDown_) return;
      shutDown_ = true;
    }
    // Lets queued work finish (each piece has a deadline).
    const bool engineStopped = engine_->stop();
    if (traceOwner_) {
      // Before the streams close: rank 0 serves the store these parts travel through, and
      // waits for them; the others only hand theirs over.
      trace::writeTrace(*store_, rank_, size_, std::min(kTraceGatherWait, config_.timeout));
    }
    const bool healthy = markClosed("communicator was shut down on rank " + std::to_string(rank_));
    // The engine's threads are gone: sends and receives still in flight will not complete. They
    // say what closed the communicator first: an abort() just before the shutdown (torch drops
    // an aborted group's backend at once) may have come before the engine looked at them.
    pointToPoint_.abandon(closedReason());
    if (healthy) warnOfUnreadMessages();
    closeStreams();
    // Unmap the shared memory now rather than when the object goes (Python may hold it long
    // after): nothing touches it once closed, as every call checks that first. Not when a
    // callback on an engine thread shut down: that thread may still be on its way out of it.
    if (engineStopped) {
      schedules_->release();
      links_.segments.reset();
    }
    // This rank's failure record into the job's store before its mailbox closes: a peer that
    // finds the mailbox refusing looks in the store only briefly (a rank gone without a record
    // must not cost it long), and once missed the record there as the reporter was still on its
    // way (a mismatch taken for a lost connection, seen under CI's load).
    records_->finish();
    // A communicator that met through it (a shrink's or split's, on the rank that led) keeps it.
    mailbox_.reset();
  }

 private:
  // How many newcomers wait, as every member agrees (each counts those that knocked at its own
  // mailbox; an all-reduce takes the largest count, so that all decide alike): at once where
  // `expect` is 0, else once at least `expect` do, by `deadline`. Whether the deadline passed
  // travels in the same all-reduce: members that gave up at different moments would leave the
  // others waiting in the next one.
  int64_t newcomersWaiting(int expect, Clock::time_point deadline) {
    for (;;) {
      int64_t seen[2] = {static_cast<int64_t>(membership_->knocks(kDoorLook).size()),
                         Clock::now() >= deadline ? 1 : 0};
      AllreduceOptions count;
      count.input = seen;
      count.output = seen;
      count.count = 2;
      count.type = DataType::Int64;
      count.op = ReduceOp::Max;
      count.name = "newcomers waiting (grow)";
      count.runInCaller = true;
      allreduce(count)->wait();
      const int64_t waiting = seen[0];
      if (waiting >= std::max(1, expect) || expect == 0) return waiting;
      if (seen[1] != 0) {
        throw TimeoutError("ringcomm: grow: " + std::to_string(expect) +
                               " newcomers expected, " + std::to_string(waiting) +
                               " asked to join by the deadline",
                           FailureContext{"grow", rank_, -1, 0.0});
      }
      std::this_thread::sleep_for(kKnockPoll);
    }
  }

  // The grown communicator the members agreed on in `round`: its survivors in their order, then
  // the joiners; meets in the leader's mailbox, where the leader first writes every member's
  // address for the newcomers (who know none but the one they knocked at).
  std::shared_ptr<Communicator> formGrown(const Survivors& decided, const std::string& round,
                                          Clock::time_point deadline) {
    std::vector<MailboxAddress> members;
    for (int r : decided.ranks) members.push_back(membership_->addressOf(r));
    for (const Joiner& joiner : decided.joiners) members.push_back(joiner.address);
    if (decided.leader == rank_) {
      std::string former;
      for (int r : decided.ranks) former += std::to_string(r) + " ";
      membership_->post(round + "/former", Bytes(former.begin(), former.end()), kDoorLook);
      membership_->post(round + "/members", encodeMembers(members), kDoorLook);
    }
    membership_->welcome(decided, round);
    const int newRank = static_cast<int>(
        std::find(decided.ranks.begin(), decided.ranks.end(), rank_) - decided.ranks.begin());
    Config config = config_;
    config.listenAddress = listenAddress_;
    std::shared_ptr<Communicator> grown =
        formAmong(membership_->client(decided.leader, deadline), members, newRank,
                  round + "/comm/", config, deadline);
    // This rank's mailbox outlives this communicator: the members met in the leader's, and any
    // member's holds its claim to go on and where it went (FormingStore::commit, door/successor).
    static_cast<CommunicatorImpl&>(*grown).keepAlive(mailbox_);
    std::vector<int> former = decided.ranks;
    former.resize(decided.ranks.size() + decided.joiners.size(), -1);
    setFormerRanks(*grown, std::move(former));
    return grown;
  }

  // What a communicator that replaces this one (a shrink's, a grow's) takes over: the board
  // where the first rank publishes the members, and the way to it for newcomers that knocked
  // here too late.
  void handOver(Communicator& successor) {
    std::shared_ptr<Store> board;
    std::string key;
    {
      std::lock_guard<std::mutex> lock(stateMutex_);
      board = board_;
      key = doorKey_;
    }
    if (board) successor.publishDoor(board, key);
    const std::string where = successor.address();
    if (membership_ && !where.empty()) {
      membership_->post("door/successor", Bytes(where.begin(), where.end()), kDoorLook);
    }
  }

  // The communicator of `ranks` (this communicator's ranks, in the new order), meeting in
  // `leader`'s mailbox under `scope`: a shrink's survivors, or a split's group.
  // `regroup`: the new communicator replaces this one (a shrink), and keeps a mailbox for
  // newcomers however few its ranks.
  std::shared_ptr<Communicator> join(const std::vector<int>& ranks, int leader,
                                     const std::string& scope, Clock::time_point deadline,
                                     bool regroup = false) {
    const int newRank = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) -
                                         ranks.begin());
    Config config = config_;
    config.listenAddress = listenAddress_;
    const auto setup = std::max(std::chrono::milliseconds(1), millisecondsLeft(deadline));
    if (!membership_) {
      return createCommunicator(store_, scope, newRank, static_cast<int>(ranks.size()), config,
                                setup, nullptr, regroup);
    }
    const std::shared_ptr<FormingStore> forming =
        membership_->forming(leader, ranks, scope, deadline);
    std::shared_ptr<Communicator> created;
    try {
      created = createCommunicator(forming, scope, newRank, static_cast<int>(ranks.size()),
                                   config, setup, [&forming] { forming->check(); }, regroup);
      forming->commit(deadline);
    } catch (const PeerError& error) {
      forming->abandon(error.what());
      throw;
    }
    // As in formGrown: this rank's mailbox lives as long as the communicator that replaced this.
    if (mailbox_) static_cast<CommunicatorImpl&>(*created).keepAlive(mailbox_);
    return created;
  }

  // Across hosts: the network's figures every rank's cost model takes (tuning/link_probe.h).
  void settleLink() {
    if (links_.hostCount < 2) return;
    OperationLabel label;
    label.collective = "measuring the network between hosts";
    const Operation op(label, rank_, config_.timeout);
    const tuning::Link link =
        tuning::agreeOnLink(*transport_, *store_, rank_, links_.hostRanks[1].front(), config_, op);
    config_.linkLatency =
        std::chrono::microseconds(std::max<int64_t>(1, link.latencySeconds * 1e6));
    config_.linkBandwidth = link.bytesPerSecond;
    // auto: links this fast send unsealed from here on, on every rank alike (the figures are
    // agreed); each sends an authenticated last record first (transport/tcp/sealed_stream.h).
    if (config_.wireProtection == WireProtection::Auto && transport::wireProtectionBuilt() &&
        link.bytesPerSecond > transport::kAutoSealMaxBytesPerSecond) {
      transport_->stopSealing();
      if (rank_ == 0) {
        RINGCOMM_LOG(LogLevel::Info, kLogAuth,
                     "links between hosts carry %.1f Gbit/s, more than RINGCOMM_WIRE_PROTECTION="
                     "auto checks (%.1f): their frames go unsealed (integrity: sealed always)",
                     link.bytesPerSecond * 8 / 1e9, transport::kAutoSealMaxBytesPerSecond * 8 / 1e9);
      }
    }
  }

  // Adasum has a schedule of its own (src/algorithms/adasum.h), on host memory: device buffers
  // are staged whole (allreducePath), since its coefficients come from the whole vector.
  WorkPtr adasumAllreduce(const AllreduceOptions& o) {
    if (!plan::isPowerOfTwo(size_)) {
      throw InvalidArgument("allreduce: op adasum needs a power-of-two number of ranks; this "
                            "communicator has " + std::to_string(size_));
    }
    OperationLabel label = labelOf("allreduce", o.count, o.type);
    label.algorithm = "adasum";
    label.reduceOp = toString(o.op);
    if (device::TicketPtr ticket = device_->prepare(o, {o.input, o.output}, "allreduce")) {
      return allreduceOnDevice(o, Algorithm::Auto, label, std::move(ticket));
    }
    return enqueue(CollectiveKind::Allreduce, o, label, signatureOf(&o.type, &o.op, -1),
                   [this, o](const algorithms::Context& ctx) {
                     schedules_->allreduce(ctx, o, Algorithm::Auto);
                   },
                   variantOf(Algorithm::Auto, o.compression));
  }

  // What the log says about a new communicator: the configuration in force and how each peer is
  // reached (the transport's own lines say why).
  void logCreation() {
    if (!log::enabled(LogLevel::Info, kLogInit) && !log::enabled(LogLevel::Info, kLogTransport)) {
      return;
    }
    const int yields = waitPolicy_->yields();  // before crowded(): it may recheck the load
    RINGCOMM_LOG(LogLevel::Info, kLogInit,
                 "communicator: rank %d of %d, host %d of %d (%d local rank(s)); timeout %.1f s, "
                 "stall warning %.1f s, link timeout %.1f s; transport %s, algorithm %s, "
                 "segment %zu B, shm slots %zu B, rings %zu B, spin %d, yield %d%s",
                 rank_, size_, links_.hostIndex, links_.hostCount, localSize(),
                 config_.timeout.count() / 1000.0, config_.stallWarning.count() / 1000.0,
                 config_.linkTimeout.count() / 1000.0, toString(config_.transport),
                 toString(config_.algorithm), config_.segmentBytes,
                 links_.segments ? links_.segments->slotBytes() : config_.shmSlotBytes,
                 config_.shmRingBytes, config_.spinCount, yields,
                 config_.yieldCount < 0 ? (waitPolicy_->crowded() ? " (auto: cores crowded)"
                                                                 : " (auto: a core to spare)")
                                        : "");
    std::map<std::string, std::string> peersByKind;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      std::string& list = peersByKind[transport_->kindOf(peer)];
      list += (list.empty() ? "" : ",") + std::to_string(peer);
    }
    for (const auto& [kind, peers] : peersByKind) {
      RINGCOMM_LOG(LogLevel::Info, kLogTransport, "%s to rank(s) %s", kind.c_str(),
                   peers.c_str());
    }
    schedules_->logAvailability();
  }

  static void describe(trace::Event& event, const OperationLabel& label) {
    event.id = label.sequence;
    event.label = label.name;
    event.bytes = label.bytes;
    if (label.algorithm != nullptr) {
      event.args = std::string("\"algorithm\": \"") + label.algorithm + "\"";
    }
    if (label.compression != nullptr) {
      event.args += std::string(event.args.empty() ? "" : ", ") + "\"compression\": \"" +
                    label.compression + "\"";
    }
  }

  // A message that nothing received: a send whose recv the peer never posted (collectives'
  // senders wait for an acknowledgement, so a collective cannot leave one behind). The next
  // receive would catch it (a MismatchError); after the last call only its arrival here can, so
  // say so rather than let the mistake pass.
  void warnOfUnreadMessages() {
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      const std::string unread = transport_->unreadMessageFrom(peer);
      if (unread.empty()) continue;
      std::fprintf(stderr,
                   "ringcomm: warning: rank %d shut down with a message from rank %d that no "
                   "receive matched: %s. A send had no matching recv, so the ranks' calls "
                   "disagreed and some rank's results may be wrong\n",
                   rank_, peer, unread.c_str());
    }
  }


  // The all-reduce of device buffers, on the path every rank picks alike (DeviceCollectives).
  WorkPtr allreduceOnDevice(const AllreduceOptions& o, Algorithm algorithm,
                            const OperationLabel& label, device::TicketPtr ticket) {
    const MemoryPath path = device_->allreducePath(o, *ticket);
    return enqueue(
        CollectiveKind::Allreduce, o, label, signatureOf(&o.type, &o.op, -1),
        [this, o, algorithm, path, ticket](const algorithms::Context& ctx) {
          device_->allreduce(
              ticket, ctx, o, path,
              [&](const AllreduceOptions& host) { schedules_->allreduce(ctx, host, algorithm); },
              [&] { barrier(ctx); });
        },
        withMemoryPath(variantOf(algorithm, o.compression), path));
  }

  void barrier(const algorithms::Context& ctx) { schedules_->barrier(ctx); }

  // Returns false if it was already closed.
  bool markClosed(const std::string& reason) {
    std::lock_guard<std::mutex> lock(stateMutex_);
    if (!closedReason_.empty()) return false;
    closedReason_ = reason;
    closedAt_ = Clock::now();
    closed_.store(true, std::memory_order_release);
    return true;
  }

  // Since when peers that do not answer now may have been silent (Membership::agree): a link
  // timeout before this communicator failed, or now while it runs.
  Clock::time_point quietSince() {
    std::lock_guard<std::mutex> lock(stateMutex_);
    return closedReason_.empty() ? Clock::now() : closedAt_ - config_.linkTimeout;
  }

  std::string closedReason() {
    std::lock_guard<std::mutex> lock(stateMutex_);
    return closedReason_;
  }

  void closeStreams() {
    // Only shutdown() on sockets here: safe while the engine thread is still using them.
    transport_->closeStreams();
  }

  // `blamed`: the peer this rank's failure names (-1: none), recorded with the reason so that
  // ranks further along can follow the failure back to where it started; `mismatch`: whether
  // that failure was ranks disagreeing on a collective (a MismatchError), which those ranks then
  // raise too.
  void poison(const std::string& reason, int blamed = -1, bool mismatch = false) {
    if (!markClosed(reason)) return;
    // Leave the reason where peers can read it (core/failure_records.h): a TCP peer only sees the
    // connection close, and a peer that timed out waiting for this rank wants to know what this
    // rank was waiting for.
    records_->record(reason, blamed, mismatch);
    // Peers waiting on this rank learn of the failure now instead of at their own timeout.
    if (links_.segments) links_.segments->markAborted(reason);
    transport_->abort();
  }

  // Whether `peer` shares this host's memory and its process is gone without having aborted.
  bool diedWithoutAborting(int peer) const {
    if (!links_.segments) return false;
    for (size_t local = 0; local < links_.localRanks.size(); ++local) {
      if (links_.segments->globalRank(static_cast<int>(local)) == peer) {
        return links_.segments->diedWithoutAborting(static_cast<int>(local));
      }
    }
    return false;
  }

  [[noreturn]] void failWith(const PeerError& error) {
    // An operation in flight when this rank aborted: its waits ended because of the abort (they
    // see it on shared memory, or their sockets closed under them, which reads as the peer's
    // "closed its connection"). CommunicatorClosed, with the abort's reason, as abort() says.
    if (abortedHere_.load(std::memory_order_acquire)) {
      throw CommunicatorClosed("ringcomm: " + error.context().operation + ": " + closedReason());
    }
    bool mismatch = dynamic_cast<const MismatchError*>(&error) != nullptr;
    // First, so that peers reading our reason are not kept waiting.
    poison(error.what(), error.context().peer, mismatch);
    const std::string what = records_->traced(error, mismatch);
    // Ranks that disagreed on a collective: every rank raises it as such, also those that only
    // saw the first to notice close its connection (they too called something else).
    if (mismatch) throw MismatchError(what, error.context());
    if (dynamic_cast<const TimeoutError*>(&error)) throw TimeoutError(what, error.context());
    if (dynamic_cast<const TransportError*>(&error)) throw TransportError(what, error.context());
    throw PeerError(what, error.context());
  }

  template <typename Options, typename Body>
  WorkPtr enqueue(CollectiveKind kind, const Options& options, OperationLabel label,
                  uint32_t signature, Body body, uint32_t variant = 0) {
    std::lock_guard<std::mutex> lock(submitMutex_);
    const uint64_t sequence = sequence_++;
    label.sequence = static_cast<int64_t>(sequence);
    return submit(options, label, MessageTag{collectiveTag(sequence, kind), signature, variant},
                  std::move(body));
  }

  // Sends and receives are posted in their turn and complete later, as their bytes move (during
  // later collectives' waits, or polled by the engine between them): a receive posted before the
  // matching send, or two ranks sending each other more than a buffer holds, must not deadlock.
  template <typename Options, typename Post>
  WorkPtr enqueuePointToPoint(const Options& options, OperationLabel label, Post post) {
    std::lock_guard<std::mutex> lock(submitMutex_);
    label.name = options.name;
    throwIfClosed(label);
    const std::chrono::milliseconds timeout =
        options.timeout.count() > 0 ? options.timeout : config_.timeout;
    return engine_->submitDeferred([this, label, timeout, post](const WorkPtr& work) {
      throwIfClosed(label);
      Operation op(label, rank_, timeout, config_.stallWarning);
      algorithms::Context ctx{rank_, size_, *transport_, op, MessageTag{}, config_.segmentBytes,
                              scratch_};
      try {
        PointToPoint::Posted posted = post(ctx);
        pointToPoint_.add(std::move(posted), std::move(op), work);
      } catch (const PeerError& error) {
        failWith(error);
      }
    });
  }

  void throwIfClosed(const OperationLabel& label) {
    if (!closed_.load(std::memory_order_acquire)) return;
    throw CommunicatorClosed("ringcomm: " + label.describe() + ": " + closedReason());
  }

  template <typename Body>
  WorkPtr submit(const CommonOptions& options, const OperationLabel& label, MessageTag tag,
                 Body body) {
    OperationLabel named = label;
    named.name = options.name;
    throwIfClosed(named);
    const std::chrono::milliseconds timeout =
        options.timeout.count() > 0 ? options.timeout : config_.timeout;
    auto task = [this, label = std::move(named), tag, timeout, body = std::move(body)]() {
      throwIfClosed(label);
      trace::Span span(trace::Phase::Collective, label.collective);
      if (span.active()) describe(span.event(), label);
      Operation op(label, rank_, timeout, config_.stallWarning);
      bool published = false;
      op.checkPeer = [this, &op, &published](int peer) {
        checkPeerRunsTheSame(op, published, peer);
      };
      algorithms::Context ctx{rank_, size_, *transport_, op, tag, config_.segmentBytes, scratch_};
      try {
        if (movesNothing(label)) {
          schedules_->barrier(ctx);
        } else {
          body(ctx);
        }
      } catch (const PeerError& error) {
        failWith(error);
      } catch (const CommunicatorClosed&) {
        throw;
      } catch (const std::exception& error) {
        poison(error.what());
        throw;
      }
    };
    return engine_->submit(std::move(task), options.runInCaller);
  }

  // A collective whose schedule would exchange no message here: no elements, where every rank
  // must give as many. It meets the others anyway, in a barrier under its own tag, so that a
  // rank that gave elements where this one gave none (or the reverse) gets this one's empty
  // frames or its record (checkPeerRunsTheSame) and both raise a MismatchError naming both
  // calls, instead of this rank returning and the other waiting out its timeout. Every rank
  // with none: a barrier, no more. A broadcast already meets with empty messages; an alltoallv's
  // counts are each rank's own.
  static bool movesNothing(const OperationLabel& label) {
    if (label.type == nullptr || label.count != 0) return false;
    const std::string collective = label.collective;
    return collective != "broadcast" && collective != "alltoallv";
  }

  // A collective that has waited a while for `peer`: this rank puts what it runs in the store
  // (once) and reads what the peer runs. The same collective number with another kind, type,
  // reduction, root, schedule, compression or size is a MismatchError naming both: ranks that
  // disagree so often wait for messages the other never sends (gather against scatter, ring
  // against tree, all-reduce against all-gather on shared memory).
  void checkPeerRunsTheSame(const Operation& op, bool& published, int peer) {
    const std::optional<std::string> theirs = records_->otherCollectiveOf(op, published, peer);
    if (!theirs) return;
    raisePeerFailure<MismatchError>(
        op, peer,
        "rank " + std::to_string(peer) + " runs " + *theirs +
            " (ranks called different collectives, or with another size, type, reduction, "
            "root, algorithm or compression)");
  }

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

std::atomic<uint64_t> communicatorsCreated{0};

}  // namespace

void keepAlive(Communicator& communicator, std::shared_ptr<void> owner) {
  static_cast<CommunicatorImpl&>(communicator).keepAlive(std::move(owner));
}

void setFormerRanks(Communicator& communicator, std::vector<int> ranks) {
  static_cast<CommunicatorImpl&>(communicator).adoptFormerRanks(std::move(ranks));
}

std::string listenAddressFor(const Config& config, Store& store) {
  if (!config.listenAddress.empty()) return config.listenAddress;
  if (!config.socketInterface.empty()) return bootstrap::interfaceAddress(config.socketInterface);
  // The interface that reaches the store reaches the other ranks too (through the namespaces
  // of an elastic job's generations, and of torch's process groups).
  Store* inner = &store;
  while (auto* prefixed = dynamic_cast<PrefixStore*>(inner)) inner = &prefixed->inner();
  if (auto* tcp = dynamic_cast<TcpStore*>(inner)) return tcp->localAddress();
  return "127.0.0.1";
}

std::shared_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, int rank, int size,
                                                   const Config& config) {
  return createInScope(std::move(store),
                       "ringcomm/" + std::to_string(communicatorsCreated.fetch_add(1)) + "/", rank,
                       size, config);
}

std::shared_ptr<Communicator> Communicator::createInScope(std::shared_ptr<Store> store,
                                                          const std::string& scope, int rank,
                                                          int size, const Config& config) {
  return createCommunicator(std::move(store), scope, rank, size, config, config.timeout, nullptr,
                            false);
}

std::shared_ptr<Communicator> createCommunicator(std::shared_ptr<Store> store,
                                                 const std::string& scope, int rank, int size,
                                                 const Config& config,
                                                 std::chrono::milliseconds setupTimeout,
                                                 const std::function<void()>& watch,
                                                 bool withMailbox) {
  configureObservability(config, rank);
  if (!store) throw InvalidArgument("Communicator::create: store is null");
  if (size < 1) throw InvalidArgument("size must be >= 1; got " + std::to_string(size));
  if (rank < 0 || rank >= size) {
    throw InvalidArgument("rank must be in [0, " + std::to_string(size) + "); got " + std::to_string(rank));
  }
  if (config.secret.empty() && size > 1) {
    throw InvalidArgument(
        "Communicator::create: no job secret (Config::secret); every rank needs the same one "
        "(RINGCOMM_SECRET, RINGCOMM_SECRET_FILE, or one a launcher made)");
  }
  const std::string address = listenAddressFor(config, *store);
  auto scoped = std::make_shared<PrefixStore>(scope, store);

  net::UniqueFd listener = net::listenTcp(address, 0);
  bootstrap::RankRecord self;
  self.hostId = bootstrap::localHostId(config);
  self.address = address;
  self.port = net::localAddress(listener.get()).port();
  self.pid = static_cast<int>(getpid());
  self.rdma = config.transport == TransportKind::Auto && size > 1 && transport::ucxOffersRdma();
  // Served from now until the communicator is shut down: the survivors of a failure agree
  // through it (core/membership.h).
  std::shared_ptr<TcpStoreServer> mailbox;
  if (size > 1 || withMailbox) {
    mailbox = std::make_shared<TcpStoreServer>(address, 0, config.secret);
    self.mailboxPort = mailbox->port();
  }

  const bootstrap::Rendezvous rendezvous =
      bootstrap::rendezvous(*scoped, rank, size, self, setupTimeout);
  Config setup = config;
  setup.timeout = setupTimeout;
  transport::Links links =
      transport::connectPeers(*scoped, rank, rendezvous, std::move(listener), setup, watch);
  std::vector<MailboxAddress> mailboxes;
  for (const bootstrap::RankRecord& record : rendezvous.ranks) {
    const bool local = record.hostId == self.hostId;
    mailboxes.push_back(MailboxAddress{record.address, record.mailboxPort, local ? record.pid : 0});
  }
  return std::make_shared<CommunicatorImpl>(rank, size, config, std::move(links), scoped,
                                            address, std::move(mailbox), std::move(mailboxes));
}

}  // namespace ringcomm
