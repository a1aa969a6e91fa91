// RINGCOMM_TRANSPORT=ucx's setup: peers meet through the store, open their endpoints and prove
// the job's secret both ways before connectUcx returns (ucx_network.h); and what UCX is here.
#include "transport/ucx/ucx_network.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/rendezvous.h"
#include "common/failure.h"
#include "common/log.h"
#include "ringcomm/errors.h"
#include "transport/ucx/ucx_api.h"
#include "transport/ucx/ucx_worker.h"

namespace ringcomm::transport {
namespace {

// How long setup waits for the store at once before it calls the watch again.
constexpr std::chrono::milliseconds kSetupWatchInterval{100};

}  // namespace

std::string ucxHeaders() {
  return std::to_string(UCP_API_MAJOR) + "." + std::to_string(UCP_API_MINOR);
}

std::string ucxVersion(std::string* whyNot) {
  const UcxApi* ucx = ucxApi(whyNot);
  if (ucx == nullptr) return "";
  unsigned major = 0;
  unsigned minor = 0;
  unsigned release = 0;
  ucx->ucp_get_version(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

// UCX's network device: the interface ringcomm's own TCP listens on (RINGCOMM_SOCKET_IFNAME,
// the listen address, or the route to the store), whatever each host calls it. UCX's choice
// where UCX_NET_DEVICES is set, where this host has RDMA (its devices are UCX's to pick, and
// TCP's interface is not theirs), or where the ranks listen on loopback (one host).
static std::string netDeviceFor(const std::string& listenAddress) {
  if (std::getenv("UCX_NET_DEVICES") != nullptr || ucxOffersRdma()) return "";
  if (listenAddress.empty() || listenAddress.rfind("127.", 0) == 0) return "";
  return bootstrap::interfaceOf(listenAddress);
}

std::unique_ptr<MessageNetwork> connectUcx(Store& store, int rank,
                                           const bootstrap::Rendezvous& rendezvous,
                                           const std::vector<int>& peers, const Config& config,
                                           const Operation& op,
                                           const std::function<void()>& watch) {
  const int size = static_cast<int>(rendezvous.ranks.size());
  auto network = std::make_unique<UcxNetwork>(rank, size, config.secret,
                                              netDeviceFor(rendezvous.ranks[rank].address));
  const bool rendezvousChosen = std::getenv("UCX_RNDV_THRESH") != nullptr;
  store.set("ucx/" + std::to_string(rank), network->publication());
  std::vector<std::string> keys;
  for (int peer : peers) keys.push_back("ucx/" + std::to_string(peer));
  for (;;) {
    try {
      store.wait(keys, std::max(std::chrono::milliseconds(1),
                                std::min(kSetupWatchInterval, op.remaining())));
      break;
    } catch (const TimeoutError&) {
      if (watch) watch();
      if (op.expired()) {
        raisePeerFailure<TimeoutError>(op, -1, "timed out waiting for peers' UCX addresses");
      }
    }
  }
  for (int peer : peers) {
    try {
      const bootstrap::RankRecord& record = rendezvous.ranks[peer];
      const bool sameHost = record.hostId == rendezvous.ranks[rank].hostId;
      // To another host without RDMA at both ends the lane is TCP, where a rendezvous only adds
      // round trips (nothing is read in place): frames go eager, as UCX_RNDV_THRESH=inf would
      // have it for them alone (1 MiB all-reduces 1.4x as fast over 1 Gbit/s). Within a host,
      // and over RDMA, UCX chooses (cross-memory attach, zero-copy). UCX_RNDV_THRESH decides
      // where a user sets it.
      const bool rdma = record.rdma && rendezvous.ranks[rank].rdma;
      network->open(peer, store.get("ucx/" + std::to_string(peer), op.remaining()),
                    sameHost ? record.pid : 0, !sameHost && !rdma && !rendezvousChosen);
    } catch (const PeerError&) {
      throw;
    } catch (const Error& error) {
      raisePeerFailure<TransportError>(op, peer, error.what());
    }
  }
  auto lastWatch = Clock::now();
  while (!network->everyoneProven()) {
    if (!network->progress() && network->readyToSleep()) {
      pollfd fd{network->eventFd(), POLLIN, 0};
      ::poll(&fd, 1, static_cast<int>(std::min(kSetupWatchInterval, op.remaining()).count()));
    }
    for (int peer : peers) {
      if (network->provenBothWays(peer)) continue;
      const std::string failure = network->failure(peer);
      if (!failure.empty()) raisePeerFailure<TransportError>(op, peer, failure);
    }
    if (watch && Clock::now() - lastWatch >= kSetupWatchInterval) {
      watch();
      lastWatch = Clock::now();
    }
    if (op.expired()) {
      raisePeerFailure<TimeoutError>(op, -1,
                                     "timed out waiting for ranks " + network->unproven() +
                                         " to prove the job's secret over UCX");
    }
  }
  if (network->refused() > 0) {
    RINGCOMM_LOG(LogLevel::Warn, kLogAuth,
                 "rank %d dropped %zu UCX message(s) from endpoints that had not proved the "
                 "job's secret (strangers, or ranks of another job)",
                 rank, network->refused());
  }
  RINGCOMM_LOG(LogLevel::Info, kLogAuth,
               "%zu UCX link(s) proved the job's secret both ways (HMAC-SHA256 over a fresh "
               "nonce) before any frame; their payloads travel unsealed",
               peers.size());
  if (log::enabled(LogLevel::Info, kLogTransport)) {
    for (int peer : peers) {
      RINGCOMM_LOG(LogLevel::Info, kLogTransport, "rank %d over UCX %s: %s", peer,
                   ucxVersion().c_str(), network->lanesTo(peer).c_str());
    }
  }
  return network;
}

}  // namespace ringcomm::transport
