// How a rank reaches each peer (transport/connect.h chooseLink): shared memory within a host,
// TCP between, UCX between hosts that both have RDMA (unless sealing is asked for), and what
// RINGCOMM_TRANSPORT forces.
#include <string>

#include "check.h"
#include "ringcomm/config.h"
#include "ringcomm/errors.h"
#include "transport/connect.h"

using namespace ringcomm;
using transport::chooseLink;
using transport::LinkKind;

namespace {

bootstrap::RankRecord rankOn(const std::string& host, bool rdma) {
  bootstrap::RankRecord record;
  record.hostId = host;
  record.address = "10.0.0.1";
  record.rdma = rdma;
  return record;
}

LinkKind kindFor(TransportKind transport, WireProtection protection, bool selfRdma,
                 bool peerRdma, bool sameHost) {
  Config config;
  config.transport = transport;
  config.wireProtection = protection;
  return chooseLink(config, rankOn("a", selfRdma), rankOn(sameHost ? "a" : "b", peerRdma), 1)
      .kind;
}

bool refuses(TransportKind transport, WireProtection protection, bool sameHost) {
  try {
    kindFor(transport, protection, true, true, sameHost);
  } catch (const InvalidArgument&) {
    return true;
  }
  return false;
}

}  // namespace

TEST(link_choice_auto_takes_ucx_only_between_hosts_with_rdma_at_both_ends) {
  const auto automatic = TransportKind::Auto;
  const auto unsealed = WireProtection::Auto;
  CHECK(kindFor(automatic, unsealed, true, true, false) == LinkKind::Ucx);
  CHECK(kindFor(automatic, unsealed, true, false, false) == LinkKind::Tcp);
  CHECK(kindFor(automatic, unsealed, false, true, false) == LinkKind::Tcp);
  CHECK(kindFor(automatic, unsealed, true, true, true) == LinkKind::Shm);
  // Sealing asked for: UCX cannot, so TCP.
  CHECK(kindFor(automatic, WireProtection::Integrity, true, true, false) == LinkKind::Tcp);
  CHECK(kindFor(automatic, WireProtection::Encrypt, true, true, false) == LinkKind::Tcp);
  CHECK(kindFor(automatic, WireProtection::Off, true, true, false) == LinkKind::Ucx);
}

TEST(link_choice_follows_what_ringcomm_transport_forces) {
  const auto unsealed = WireProtection::Auto;
  CHECK(kindFor(TransportKind::Tcp, unsealed, true, true, true) == LinkKind::Tcp);
  CHECK(kindFor(TransportKind::Tcp, unsealed, true, true, false) == LinkKind::Tcp);
  CHECK(kindFor(TransportKind::Ucx, unsealed, false, false, true) == LinkKind::Ucx);
  CHECK(kindFor(TransportKind::Ucx, unsealed, false, false, false) == LinkKind::Ucx);
  CHECK(kindFor(TransportKind::Shm, unsealed, false, false, true) == LinkKind::Shm);
  CHECK(refuses(TransportKind::Shm, unsealed, false));
  CHECK(refuses(TransportKind::Ucx, WireProtection::Integrity, true));
  CHECK(refuses(TransportKind::Ucx, WireProtection::Encrypt, false));
}
