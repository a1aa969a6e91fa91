// Shared memory as a kind of link (link_kind.h): between the ranks of one host, a pair of rings
// in the host's segments per peer (shm_stream.h), set up by every local rank together
// (shm_setup.cc). Where /dev/shm has too little room, the host's ranks link by TCP instead.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "ringcomm/errors.h"
#include "transport/link_kind.h"
#include "transport/link_setup.h"
#include "transport/shm/shm_stream.h"

namespace ringcomm::transport {
namespace {

LinkReach sharedMemoryReaches(const Config& config, const bootstrap::RankRecord& self,
                              const bootstrap::RankRecord& peer, int peerRank) {
  if (peer.hostId == self.hostId) return {true, "same host"};
  if (config.transport != TransportKind::Shm) return {false, ""};
  return {false, "RINGCOMM_TRANSPORT=shm, but rank " + std::to_string(peerRank) +
                     " is on another host (" + peer.address + "); use auto, tcp or ucx"};
}

std::vector<int> makeSharedMemoryLinks(LinkContext& setup, const std::vector<int>& peers) {
  Links& links = setup.links;
  if (!setUpSharedMemory(setup.store, setup.rank, links, setup.rendezvous, setup.config,
                         setup.config.timeout)) {
    if (setup.config.transport == TransportKind::Shm) {
      throw Error("ringcomm: RINGCOMM_TRANSPORT=shm, but the ranks on this host cannot have "
                  "shared memory (see the warning above); use auto or tcp");
    }
    return peers;
  }
  for (int peer : peers) {
    const auto at = std::find(links.localRanks.begin(), links.localRanks.end(), peer);
    const int peerLocal = static_cast<int>(at - links.localRanks.begin());
    links.streams[peer] = std::make_unique<ShmStream>(*links.segments, peerLocal);
  }
  return {};
}

}  // namespace

extern const LinkKind sharedMemoryLinks{"shm", "shared memory", nullptr, sharedMemoryReaches,
                                        makeSharedMemoryLinks};

}  // namespace ringcomm::transport
