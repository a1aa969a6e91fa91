// Builds the links of a communicator: for each peer, the first kind of link that reaches it
// (link_kind.h; the kinds are registered in link_kinds.cc: shared memory within a host, UCX
// between hosts that both have RDMA, TCP otherwise), or the one RINGCOMM_TRANSPORT names.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/rendezvous.h"
#include "common/socket.h"
#include "ringcomm/config.h"
#include "ringcomm/store.h"
#include "transport/byte_stream.h"
#include "transport/message_network.h"
#include "transport/shm/segment.h"
#include "transport/tcp/tcp_dialer.h"

namespace ringcomm::transport {

struct Links {
  std::vector<std::unique_ptr<ByteStream>> streams;  // by peer; null for this rank
  // Makes the TCP links on first use (RINGCOMM_LINKS=on_first_use): null where they were all
  // made here, or there are none.
  std::unique_ptr<TcpDialer> dialer;
  // Reach the peers without a stream (UCX): a network per kind of link that makes one.
  std::vector<std::unique_ptr<MessageNetwork>> networks;
  std::unique_ptr<shm::Segments> segments;           // null when no peer shares memory
  std::vector<int> localRanks;                       // ranks on this host, ascending
  int hostIndex = 0;
  int hostCount = 1;
  // Every host's ranks, ascending; hosts in the order of their lowest rank (hostIndex's order).
  std::vector<std::vector<int>> hostRanks;
};

struct LinkKind;

// How this rank reaches a peer, before the kind has made its links (shared memory may find no
// room, and leave the peer to the kinds after it), and why, in words for the TRANSPORT log.
// Both ends come to the same answer from the same records, so a link is one kind at both.
// Throws InvalidArgument where the kind RINGCOMM_TRANSPORT names cannot reach the peer (shm to
// another host; ucx where sealing is asked for).
struct LinkChoice {
  const LinkKind* kind;
  std::string why;
};
LinkChoice chooseLink(const Config& config, const bootstrap::RankRecord& self,
                      const bootstrap::RankRecord& peer, int peerRank);

// Adds to this rank's record what peers need to choose its links (link_kind.h: describe).
void describeLinks(const Config& config, int size, bootstrap::RankRecord& self);

// `watch`, where given, is called at least every 100 ms while waiting for a peer, and raises
// where the communicator can no longer form (a peer that gave up forming it, or is gone).
Links connectPeers(Store& store, int rank, const bootstrap::Rendezvous& rendezvous,
                   net::UniqueFd listener, const Config& config,
                   const std::function<void()>& watch = nullptr);

}  // namespace ringcomm::transport
