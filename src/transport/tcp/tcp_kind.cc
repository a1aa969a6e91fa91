// TCP as a kind of link (link_kind.h): it reaches every peer, so it is asked last, and takes
// the pairs no other kind reached. Its links are made on first use (tcp_dialer.h), or all here
// with RINGCOMM_LINKS=at_start (tcp_setup.cc).
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "transport/link_kind.h"
#include "transport/link_setup.h"
#include "transport/tcp/tcp_dialer.h"

namespace ringcomm::transport {
namespace {

LinkReach tcpReaches(const Config& config, const bootstrap::RankRecord& self,
                     const bootstrap::RankRecord& peer, int /*peerRank*/) {
  if (peer.hostId != self.hostId) return {true, "another host"};
  if (config.transport != TransportKind::Tcp) return {true, "same host, without shared memory"};
  return {true, "same host, but RINGCOMM_TRANSPORT=tcp"};
}

std::vector<int> makeTcpLinks(LinkContext& setup, const std::vector<int>& peers) {
  // A TCP link proves this communicator, not only the job: its handshake's secret is the
  // job's joined with the communicator's key, which every member read from the rendezvous. A
  // link made on first use may be dialed long after creation, to a port that a peer which
  // closed this communicator gave up and another communicator of the job took since: that
  // dial now fails the proof, as a closed peer's should, instead of becoming a link of the
  // other communicator.
  Config config = setup.config;
  config.secret = setup.config.secret + "/communicator " + setup.rendezvous.jobKey;
  if (config.links == LinkSetup::OnFirstUse) {
    const std::string& myHost = setup.rendezvous.ranks[setup.rank].hostId;
    std::map<int, TcpDialer::PeerAddress> addresses;
    for (int peer : peers) {
      const bootstrap::RankRecord& record = setup.rendezvous.ranks[peer];
      addresses[peer] = {record.address, record.port, record.hostId != myHost};
    }
    setup.links.dialer = std::make_unique<TcpDialer>(setup.rank, std::move(addresses),
                                                     std::move(setup.listener), config);
  } else {
    setUpTcp(setup.rank, peers, setup.links, setup.rendezvous, std::move(setup.listener),
             config, config.timeout, setup.watch);
  }
  return {};
}

}  // namespace

extern const LinkKind tcpLinks{"tcp", "TCP", nullptr, tcpReaches, makeTcpLinks};

}  // namespace ringcomm::transport
