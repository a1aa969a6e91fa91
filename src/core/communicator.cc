// The communicator's forming (communicator_impl.h): create() and what it takes (rendezvous, the
// links to the peers, this rank's mailbox), the constructor, what the log says of a new
// communicator, and shutdown().
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/rendezvous.h"
#include "bootstrap/trace_gather.h"
#include "common/log.h"
#include "common/socket.h"
#include "common/trace.h"
#include "core/communicator_impl.h"
#include "core/forming.h"
#include "transport/connect.h"
#include "transport/tcp/sealed_stream.h"
#include "tuning/link_probe.h"

namespace ringcomm {
namespace {

// At shutdown, how long rank 0 waits for the other ranks' parts of RINGCOMM_TRACE (at most: the
// communicator's own timeout when shorter). A rank that died never sends one.
constexpr std::chrono::milliseconds kTraceGatherWait{30000};

std::atomic<uint64_t> communicatorsCreated{0};

}  // namespace

// `mailbox`: this rank's membership mailbox (core/membership.h), `mailboxes` every rank's;
// none for a communicator of one rank.
CommunicatorImpl::CommunicatorImpl(int rank, int size, Config config, transport::Links links,
                                   std::shared_ptr<Store> store, std::string listenAddress,
                                   std::shared_ptr<TcpStoreServer> mailbox,
                                   std::vector<MailboxAddress> mailboxes)
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
      rank_, std::move(links_.streams), std::move(links_.networks), links_.segments.get(),
      *waitPolicy_, std::move(links_.dialer));
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

int CommunicatorImpl::localRank() const {
  for (size_t i = 0; i < links_.localRanks.size(); ++i) {
    if (links_.localRanks[i] == rank_) return static_cast<int>(i);
  }
  return 0;
}

std::string CommunicatorImpl::transportTo(int peer) const {
  if (peer < 0 || peer >= size_) throw InvalidArgument("peer out of range");
  return transport_->kindOf(peer);
}

void CommunicatorImpl::shutdown() {
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

// Across hosts: the network's figures every rank's cost model takes (tuning/link_probe.h).
void CommunicatorImpl::settleLink() {
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

// What the log says about a new communicator: the configuration in force and how each peer is
// reached (the transport's own lines say why).
void CommunicatorImpl::logCreation() {
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
    const std::string kind = std::string(transport_->kindOf(peer)) +
                             (transport_->linked(peer) ? "" : " (linked on first use)");
    std::string& list = peersByKind[kind];
    list += (list.empty() ? "" : ",") + std::to_string(peer);
  }
  for (const auto& [kind, peers] : peersByKind) {
    RINGCOMM_LOG(LogLevel::Info, kLogTransport, "%s to rank(s) %s", kind.c_str(),
                 peers.c_str());
  }
  schedules_->logAvailability();
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
  transport::describeLinks(config, size, self);  // what peers need to choose their links to it
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
