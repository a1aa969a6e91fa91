// UCX as a kind of link (link_kind.h): between hosts whose ranks both have RDMA, unless the job
// asks for sealed links, which UCX cannot make (it moves frames, and RDMA reads memory, as they
// are); to every peer when RINGCOMM_TRANSPORT=ucx. Its links are one network (ucx_network.h).
#include <string>
#include <vector>

#include "common/deadline.h"
#include "ringcomm/errors.h"
#include "transport/link_kind.h"
#include "transport/ucx/ucx_network.h"

namespace ringcomm::transport {
namespace {

bool sealingAsked(const Config& config) {
  return config.wireProtection == WireProtection::Integrity ||
         config.wireProtection == WireProtection::Encrypt;
}

// Only auto looks for RDMA; asking loads UCX, which a forced kind or a lone rank never needs.
void describeForUcx(const Config& config, int size, bootstrap::RankRecord& self) {
  self.rdma = config.transport == TransportKind::Auto && size > 1 && ucxOffersRdma();
}

LinkReach ucxReaches(const Config& config, const bootstrap::RankRecord& self,
                     const bootstrap::RankRecord& peer, int /*peerRank*/) {
  if (config.transport == TransportKind::Ucx) {
    if (!sealingAsked(config)) return {true, "RINGCOMM_TRANSPORT=ucx"};
    return {false,
            std::string("RINGCOMM_WIRE_PROTECTION=") +
                (config.wireProtection == WireProtection::Encrypt ? "encrypt" : "integrity") +
                ", but RINGCOMM_TRANSPORT=ucx cannot seal what it sends (UCX moves frames, and "
                "RDMA reads memory, as they are); use RINGCOMM_TRANSPORT=auto or tcp for "
                "sealed links, or RINGCOMM_WIRE_PROTECTION=off"};
  }
  if (peer.hostId == self.hostId || !(self.rdma && peer.rdma)) return {false, ""};
  if (sealingAsked(config)) return {false, "RDMA, but RINGCOMM_WIRE_PROTECTION"};
  return {true, "another host, RDMA at both ends"};
}

std::vector<int> makeUcxLinks(LinkContext& setup, const std::vector<int>& peers) {
  OperationLabel label;
  label.collective = "connecting to peers over UCX";
  const Operation op(label, setup.rank, setup.config.timeout);
  setup.links.networks.push_back(connectUcx(setup.store, setup.rank, setup.rendezvous, peers,
                                            setup.config, op, setup.watch));
  return {};
}

}  // namespace

extern const LinkKind ucxLinks{"ucx", "UCX", describeForUcx, ucxReaches, makeUcxLinks};

}  // namespace ringcomm::transport
