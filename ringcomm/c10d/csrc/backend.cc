// The backend's life and its errors: made on a store, in a mailbox or on a communicator, shrunk,
// timed out, aborted and shut down. Its operations: reductions.cc, data_movement.cc,
// point_to_point.cc (through operation_start.h); growing in place: growth.cc.
#include "backend.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gil.h"
#include "ringcomm/config.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"
#include "store_adapter.h"
#include "work.h"

namespace ringcomm::c10d_backend {

RingcommBackend::RingcommBackend(const c10::intrusive_ptr<::c10d::Store>& store, int rank,
                                 int size, std::chrono::milliseconds timeout,
                                 const std::string& secret, Rules shmRules, Rules tcpRules,
                                 double linkLatency, double linkBandwidth,
                                 const std::string& listenAddress)
    : ::c10d::Backend(rank, size) {
  const Config config = configFor(timeout, secret, std::move(shmRules), std::move(tcpRules),
                                  linkLatency, linkBandwidth, listenAddress);
  // torch gives each process group (and device) a store prefix of its own, so the communicator
  // meets under a fixed scope: ranks outside a subgroup create nothing for it.
  communicator_ = Communicator::createInScope(std::make_shared<TorchStoreAdapter>(store),
                                              "ringcomm/", rank, size, config);
}

c10::intrusive_ptr<RingcommBackend> RingcommBackend::meet(
    const std::string& host, int port, const std::string& scope, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& secret, Rules shmRules,
    Rules tcpRules, double linkLatency, double linkBandwidth, const std::string& listenAddress) {
  TORCH_CHECK_VALUE(!secret.empty(), "ringcomm: ranks meet in a mailbox only with a job secret");
  const Config config = configFor(timeout, secret, std::move(shmRules), std::move(tcpRules),
                                  linkLatency, linkBandwidth, listenAddress);
  auto mailbox = std::make_shared<TcpStore>(host, port, config.timeout, secret);
  return c10::make_intrusive<RingcommBackend>(
      Communicator::createInScope(mailbox, scope, rank, size, config));
}

Config RingcommBackend::configFor(std::chrono::milliseconds timeout, const std::string& secret,
                                  Rules shmRules, Rules tcpRules, double linkLatency,
                                  double linkBandwidth, const std::string& listenAddress) {
  Config config = Config::fromEnvironment();
  if (config.listenAddress.empty() && config.socketInterface.empty()) {
    config.listenAddress = listenAddress;
  }
  if (timeout.count() > 0) config.timeout = timeout;
  if (!secret.empty()) config.secret = secret;
  config.shmAllreduceRules = std::move(shmRules);
  config.tcpAllreduceRules = std::move(tcpRules);
  if (config.linkLatency.count() == 0 && linkLatency > 0) {
    config.linkLatency = std::chrono::microseconds(static_cast<int64_t>(linkLatency * 1e6));
  }
  if (config.linkBandwidth == 0) config.linkBandwidth = linkBandwidth;
  return config;
}

RingcommBackend::RingcommBackend(std::shared_ptr<Communicator> communicator)
    : ::c10d::Backend(communicator->rank(), communicator->size()),
      communicator_(std::move(communicator)) {}

RingcommBackend::RingcommBackend(std::shared_ptr<Communicator> communicator, int rank, int size,
                                 std::vector<int> coreRanks)
    : ::c10d::Backend(rank, size), communicator_(std::move(communicator)),
      coreRanks_(std::move(coreRanks)) {
  std::string lost;
  for (int r = 0; r < size; ++r) {
    if (coreRankOf(r) < 0) lost += (lost.empty() ? "" : ", ") + std::to_string(r);
  }
  communicator_->abort("rank(s) " + lost + " of this group died while torch's shrink_group "
                       "formed it: shrink again (shrink_group(ringcomm.c10d.lost_ranks()) "
                       "names them)");
}

int RingcommBackend::coreRankOf(int rank) const {
  return coreRanks_.empty() ? rank : coreRanks_.at(static_cast<size_t>(rank));
}

c10::intrusive_ptr<::c10d::Backend> RingcommBackend::shrink(
    const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
    const c10::intrusive_ptr<Options>& /*optionsOverride: ringcomm has none of torch's*/) {
  // torch's SHRINK_ABORT: end what this group still runs before the survivors meet.
  constexpr int kShrinkAbort = 1;
  if (shrinkFlags & kShrinkAbort) communicator_->abort("shrink_group with SHRINK_ABORT");
  std::vector<bool> excluded(static_cast<size_t>(size_), false);
  std::vector<int> exclude;  // in the communicator's numbering
  for (int64_t r : ranksToExclude) {
    TORCH_CHECK_VALUE(r >= 0 && r < size_, "ringcomm shrink_group: ranks_to_exclude names rank ",
                      r, ", which is not a rank of this group of ", size_);
    excluded[static_cast<size_t>(r)] = true;
    if (coreRankOf(static_cast<int>(r)) >= 0) exclude.push_back(coreRankOf(static_cast<int>(r)));
  }
  std::shared_ptr<Communicator> shrunk = communicator_->shrink(exclude, std::chrono::milliseconds(0));
  // torch numbers the new group: the ranks it keeps, in order. Each one's place in the
  // communicator the survivors formed, found by the rank it had in this one.
  const std::vector<int> former = shrunk->formerRanks();
  std::vector<int> coreRanks;
  int rank = -1;
  bool lostMeanwhile = false;
  for (int r = 0; r < size_; ++r) {
    if (excluded[static_cast<size_t>(r)]) continue;
    if (r == rank_) rank = static_cast<int>(coreRanks.size());
    const auto at = std::find(former.begin(), former.end(), coreRankOf(r));
    coreRanks.push_back(coreRankOf(r) >= 0 && at != former.end()
                            ? static_cast<int>(at - former.begin())
                            : -1);
    lostMeanwhile = lostMeanwhile || coreRanks.back() < 0;
  }
  if (!lostMeanwhile) return c10::make_intrusive<RingcommBackend>(std::move(shrunk));
  return c10::make_intrusive<RingcommBackend>(std::move(shrunk), rank,
                                              static_cast<int>(coreRanks.size()),
                                              std::move(coreRanks));
}

std::vector<int64_t> RingcommBackend::lostRanks() {
  const std::vector<int> alive = communicator_->survivors(std::chrono::milliseconds(0));
  std::vector<int64_t> lost;
  for (int r = 0; r < size_; ++r) {
    const int core = coreRankOf(r);
    if (core < 0 || std::find(alive.begin(), alive.end(), core) == alive.end()) lost.push_back(r);
  }
  return lost;
}

RingcommBackend::~RingcommBackend() {
  // Python drops its last reference to a backend holding the GIL, which the engine's threads may
  // need before the shutdown below can join them (gil.h).
  GilReleased released;
  try {
    communicator_->shutdown();
  } catch (...) {
    // A destructor must not throw; the communicator has already reported its failure.
  }
  communicator_.reset();  // the rest of its teardown, too, leaves other Python threads running
}

void RingcommBackend::setSequenceNumberForGroup() { count_.sequence.store(0); }

uint64_t RingcommBackend::getSequenceNumberForGroup() { return count_.sequence.load(); }

void RingcommBackend::setTimeout(std::chrono::milliseconds timeout) {
  TORCH_CHECK_VALUE(timeout.count() > 0, "ringcomm set_timeout: the timeout must be positive; got ",
                    timeout.count(), " ms");
  defaultTimeout_.store(timeout.count());
}

::c10d::ErrorType RingcommBackend::getError() { return count_.failures->type(); }

std::string RingcommBackend::errorMessage() const { return count_.failures->message(); }

void RingcommBackend::abort() { communicator_->abort("aborted through torch.distributed"); }

void RingcommBackend::shutdown() {
  GilReleased released;  // the engine's threads, which it joins, may need the GIL (gil.h)
  communicator_->shutdown();
}

}  // namespace ringcomm::c10d_backend
