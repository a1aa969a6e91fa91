// One kind of link between two ranks (shared memory, TCP, UCX), as connectPeers (connect.h) sees
// it: whether it can reach a peer, and how its links are made. Each kind lives in its folder
// (shm/, tcp/, ucx/) and is registered once, in link_kinds.cc; connectPeers asks them in that
// order and takes, for each peer, the first that reaches it, as NCCL asks its transports in turn
// whether they can connect a pair of ranks.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bootstrap/rendezvous.h"
#include "common/socket.h"
#include "ringcomm/config.h"
#include "ringcomm/store.h"
#include "transport/connect.h"

namespace ringcomm::transport {

// What a kind may need to make its links, and the Links it fills (a byte stream per peer in
// links.streams, or a network in links.networks; the host's segments).
struct LinkContext {
  Store& store;
  int rank;
  const bootstrap::Rendezvous& rendezvous;
  const Config& config;
  net::UniqueFd& listener;  // this rank's TCP port, taken by the kind that serves it
  const std::function<void()>& watch;  // as in connectPeers
  Links& links;
};

// Whether a kind reaches a peer; `why` says why (for the TRANSPORT log), or why not: the error
// when RINGCOMM_TRANSPORT names this kind, a remark in the log when it is worth one (UCX between
// hosts that asked for sealed links), else empty.
struct LinkReach {
  bool reaches = false;
  std::string why;
};

// A kind's entry in the table, as NCCL's ncclTransport is: its names and its three steps, each a
// function of the kind's file.
struct LinkKind {
  // Its word in RINGCOMM_TRANSPORT and in Transport::kindOf: "shm", "tcp", "ucx".
  const char* name;
  // Its name in the log: "shared memory".
  const char* description;
  // Adds to this rank's record, before the rendezvous, what peers need to know to choose this
  // kind (UCX: whether this rank has RDMA). Null for the kinds that need nothing.
  void (*describe)(const Config& config, int size, bootstrap::RankRecord& self);
  // Both ends ask this of the same two records, so a link is the same kind at both.
  LinkReach (*canConnect)(const Config& config, const bootstrap::RankRecord& self,
                          const bootstrap::RankRecord& peer, int peerRank);
  // Makes the links to `peers` (ascending; each one this kind reaches) into setup.links, and
  // returns those it could not link after all (shared memory without room in /dev/shm), which
  // the kinds after it are asked for. Every rank of a pair comes to the same answer. A kind
  // that RINGCOMM_TRANSPORT names throws instead: there is no other kind to ask.
  std::vector<int> (*connect)(LinkContext& setup, const std::vector<int>& peers);
};

// Every kind, in the order they are asked: a peer's link is the first that reaches it, and the
// kinds make their links in this order at every rank.
const std::vector<const LinkKind*>& linkKinds();

}  // namespace ringcomm::transport
