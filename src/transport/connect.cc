// How this rank reaches each peer: the kind of link chosen per peer (link_kind.h, the kinds in
// link_kinds.cc), then the links made, kind by kind, in the table's order.
#include "transport/connect.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "ringcomm/errors.h"
#include "transport/link_kind.h"

namespace ringcomm::transport {

namespace {

// The first kind from linkKinds()[first] on that reaches `peer`, or the one RINGCOMM_TRANSPORT
// names. A kind that declines with a reason worth saying adds it to the chosen one's.
LinkChoice chooseFrom(size_t first, const Config& config, const bootstrap::RankRecord& self,
                      const bootstrap::RankRecord& peer, int peerRank) {
  const std::vector<const LinkKind*>& kinds = linkKinds();
  const bool forced = config.transport != TransportKind::Auto;
  std::string remarks;
  for (size_t at = first; at < kinds.size(); ++at) {
    const LinkKind* kind = kinds[at];
    if (forced && std::strcmp(kind->name, toString(config.transport)) != 0) continue;
    LinkReach reach = kind->canConnect(config, self, peer, peerRank);
    if (reach.reaches) return {kind, reach.why + remarks};
    if (forced) throw InvalidArgument(reach.why);
    if (!reach.why.empty()) remarks += "; " + reach.why;
  }
  throw Error("ringcomm: internal error: no kind of link reaches rank " + std::to_string(peerRank));
}

size_t indexOf(const LinkKind* kind) {
  const std::vector<const LinkKind*>& kinds = linkKinds();
  return static_cast<size_t>(std::find(kinds.begin(), kinds.end(), kind) - kinds.begin());
}

// Every host's ranks, ascending; hosts in the order of their lowest rank.
void groupByHost(int rank, const bootstrap::Rendezvous& rendezvous, Links& links) {
  std::vector<std::string> hosts;
  for (const auto& record : rendezvous.ranks) {
    if (std::find(hosts.begin(), hosts.end(), record.hostId) == hosts.end()) {
      hosts.push_back(record.hostId);
    }
  }
  const auto hostOf = [&](int r) {
    const std::string& host = rendezvous.ranks[r].hostId;
    return static_cast<int>(std::find(hosts.begin(), hosts.end(), host) - hosts.begin());
  };
  links.hostCount = static_cast<int>(hosts.size());
  links.hostIndex = hostOf(rank);
  links.hostRanks.resize(hosts.size());
  for (int peer = 0; peer < static_cast<int>(rendezvous.ranks.size()); ++peer) {
    links.hostRanks[hostOf(peer)].push_back(peer);
  }
  links.localRanks = links.hostRanks[links.hostIndex];
}

}  // namespace

LinkChoice chooseLink(const Config& config, const bootstrap::RankRecord& self,
                      const bootstrap::RankRecord& peer, int peerRank) {
  return chooseFrom(0, config, self, peer, peerRank);
}

void describeLinks(const Config& config, int size, bootstrap::RankRecord& self) {
  for (const LinkKind* kind : linkKinds()) {
    if (kind->describe != nullptr) kind->describe(config, size, self);
  }
}

Links connectPeers(Store& store, int rank, const bootstrap::Rendezvous& rendezvous,
                   net::UniqueFd listener, const Config& config,
                   const std::function<void()>& watch) {
  const int size = static_cast<int>(rendezvous.ranks.size());
  Links links;
  links.streams.resize(size);
  groupByHost(rank, rendezvous, links);

  const std::vector<const LinkKind*>& kinds = linkKinds();
  std::vector<std::vector<int>> peersOf(kinds.size());  // by kind, ascending
  const bootstrap::RankRecord& self = rendezvous.ranks[rank];
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const bootstrap::RankRecord& record = rendezvous.ranks[peer];
    const LinkChoice choice = chooseLink(config, self, record, peer);
    peersOf[indexOf(choice.kind)].push_back(peer);
    RINGCOMM_LOG(LogLevel::Info, kLogTransport, "rank %d (%s:%d): %s (%s)", peer,
                 record.address.c_str(), record.port, choice.kind->description,
                 choice.why.c_str());
  }

  LinkContext context{store, rank, rendezvous, config, listener, watch, links};
  for (size_t at = 0; at < kinds.size(); ++at) {
    if (peersOf[at].empty()) continue;
    const std::vector<int> left = kinds[at]->connect(context, peersOf[at]);
    if (left.empty()) continue;
    // The ranks of a pair come to the same answer, so both ask the same kinds after this one.
    RINGCOMM_LOG(LogLevel::Info, kLogTransport, "%s could not link %zu peer(s); asking the next "
                 "kinds of link", kinds[at]->description, left.size());
    Config automatic = config;
    automatic.transport = TransportKind::Auto;
    for (int peer : left) {
      const LinkChoice choice = chooseFrom(at + 1, automatic, self, rendezvous.ranks[peer], peer);
      std::vector<int>& next = peersOf[indexOf(choice.kind)];
      next.insert(std::upper_bound(next.begin(), next.end(), peer), peer);
    }
  }
  return links;
}

}  // namespace ringcomm::transport
