// How this rank reaches each peer: the kind of link chosen per peer, then the links built, kind
// by kind (link_setup.h: shared memory, TCP; UCX: ucx/ucx_network.h). TCP links are made on
// first use (tcp/tcp_dialer.h), or here with RINGCOMM_LINKS=at_start.
#include "transport/connect.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/deadline.h"
#include "common/log.h"
#include "ringcomm/errors.h"
#include "transport/link_setup.h"
#include "transport/shm/shm_stream.h"
#include "transport/ucx/ucx_network.h"

namespace ringcomm::transport {

LinkChoice chooseLink(const Config& config, const bootstrap::RankRecord& self,
                      const bootstrap::RankRecord& peer, int peerRank) {
  const bool sameHost = peer.hostId == self.hostId;
  const bool sealingAsked = config.wireProtection == WireProtection::Integrity ||
                            config.wireProtection == WireProtection::Encrypt;
  switch (config.transport) {
    case TransportKind::Shm:
      if (!sameHost) {
        throw InvalidArgument("RINGCOMM_TRANSPORT=shm, but rank " + std::to_string(peerRank) +
                              " is on another host (" + peer.address + "); use auto, tcp or ucx");
      }
      return {LinkKind::Shm, "same host"};
    case TransportKind::Tcp:
      return {LinkKind::Tcp, sameHost ? "same host, but RINGCOMM_TRANSPORT=tcp" : "another host"};
    case TransportKind::Ucx:
      if (sealingAsked) {
        throw InvalidArgument(
            std::string("RINGCOMM_WIRE_PROTECTION=") +
            (config.wireProtection == WireProtection::Encrypt ? "encrypt" : "integrity") +
            ", but RINGCOMM_TRANSPORT=ucx cannot seal what it sends (UCX moves frames, and RDMA "
            "reads memory, as they are); use RINGCOMM_TRANSPORT=auto or tcp for sealed links, "
            "or RINGCOMM_WIRE_PROTECTION=off");
      }
      return {LinkKind::Ucx, "RINGCOMM_TRANSPORT=ucx"};
    case TransportKind::Auto:
      break;
  }
  if (sameHost) return {LinkKind::Shm, "same host"};
  // UCX cannot seal frames: a configuration that asks for sealing keeps these links on TCP.
  if (!(self.rdma && peer.rdma)) return {LinkKind::Tcp, "another host"};
  if (sealingAsked) return {LinkKind::Tcp, "another host; RDMA, but RINGCOMM_WIRE_PROTECTION"};
  return {LinkKind::Ucx, "another host, RDMA at both ends"};
}

Links connectPeers(Store& store, int rank, const bootstrap::Rendezvous& rendezvous,
                   net::UniqueFd listener, const Config& config,
                   const std::function<void()>& watch) {
  const int size = static_cast<int>(rendezvous.ranks.size());
  Links links;
  links.streams.resize(size);

  std::vector<std::string> hosts;
  for (const auto& record : rendezvous.ranks) {
    if (std::find(hosts.begin(), hosts.end(), record.hostId) == hosts.end()) {
      hosts.push_back(record.hostId);
    }
  }
  const std::string& myHost = rendezvous.ranks[rank].hostId;
  links.hostCount = static_cast<int>(hosts.size());
  links.hostIndex = static_cast<int>(std::find(hosts.begin(), hosts.end(), myHost) - hosts.begin());
  links.hostRanks.resize(hosts.size());
  for (int peer = 0; peer < size; ++peer) {
    const std::string& host = rendezvous.ranks[peer].hostId;
    links.hostRanks[std::find(hosts.begin(), hosts.end(), host) - hosts.begin()].push_back(peer);
  }
  links.localRanks = links.hostRanks[links.hostIndex];

  std::vector<int> shmPeers;
  std::vector<int> tcpPeers;
  std::vector<int> ucxPeers;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const bootstrap::RankRecord& record = rendezvous.ranks[peer];
    const LinkChoice choice = chooseLink(config, rendezvous.ranks[rank], record, peer);
    (choice.kind == LinkKind::Ucx   ? ucxPeers
     : choice.kind == LinkKind::Shm ? shmPeers
                                    : tcpPeers)
        .push_back(peer);
    RINGCOMM_LOG(LogLevel::Info, kLogTransport, "rank %d (%s:%d): %s (%s)", peer,
                 record.address.c_str(), record.port,
                 choice.kind == LinkKind::Ucx   ? "UCX"
                 : choice.kind == LinkKind::Shm ? "shared memory"
                                                : "TCP",
                 choice.why);
  }

  if (!shmPeers.empty() &&
      !setUpSharedMemory(store, rank, links, rendezvous, config, config.timeout)) {
    if (config.transport == TransportKind::Shm) {
      throw Error("ringcomm: RINGCOMM_TRANSPORT=shm, but the ranks on this host cannot have "
                  "shared memory (see the warning above); use auto or tcp");
    }
    RINGCOMM_LOG(LogLevel::Info, kLogTransport,
                 "falling back to TCP for the %zu peer(s) on this host (no shared memory)",
                 shmPeers.size());
    tcpPeers.insert(tcpPeers.end(), shmPeers.begin(), shmPeers.end());
    std::sort(tcpPeers.begin(), tcpPeers.end());
    shmPeers.clear();
  }
  if (!shmPeers.empty()) {
    for (int peer : shmPeers) {
      const int peerLocal = static_cast<int>(
          std::find(links.localRanks.begin(), links.localRanks.end(), peer) - links.localRanks.begin());
      links.streams[peer] = std::make_unique<ShmStream>(*links.segments, peerLocal);
    }
  }
  // A TCP link proves this communicator, not only the job: its handshake's secret is the job's
  // joined with the communicator's key, which every member read from the rendezvous. A link made
  // on first use may be dialed long after creation, to a port that a peer which closed this
  // communicator gave up and another communicator of the job took since: that dial now fails
  // the proof, as a closed peer's should, instead of becoming a link of the other communicator.
  Config tcpConfig = config;
  tcpConfig.secret = config.secret + "/communicator " + rendezvous.jobKey;
  if (config.links == LinkSetup::OnFirstUse && !tcpPeers.empty()) {
    std::map<int, TcpDialer::PeerAddress> addresses;
    for (int peer : tcpPeers) {
      const bootstrap::RankRecord& record = rendezvous.ranks[peer];
      addresses[peer] = {record.address, record.port, record.hostId != myHost};
    }
    links.dialer = std::make_unique<TcpDialer>(rank, std::move(addresses), std::move(listener),
                                               tcpConfig);
  } else {
    setUpTcp(rank, tcpPeers, links, rendezvous, std::move(listener), tcpConfig, config.timeout,
             watch);
  }
  if (!ucxPeers.empty()) {
    OperationLabel label;
    label.collective = "connecting to peers over UCX";
    const Operation op(label, rank, config.timeout);
    links.network = connectUcx(store, rank, rendezvous, ucxPeers, config, op, watch);
  }
  return links;
}

}  // namespace ringcomm::transport
