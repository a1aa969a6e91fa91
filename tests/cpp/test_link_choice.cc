// How a rank reaches each peer (transport/connect.h chooseLink, asking the kinds of
// transport/link_kinds.cc in turn): shared memory within a host, TCP between, UCX between hosts
// that both have RDMA (unless sealing is asked for), and what RINGCOMM_TRANSPORT forces.
#include <string>

#include "check.h"
#include "ringcomm/config.h"
#include "ringcomm/errors.h"
#include "transport/connect.h"
#include "transport/link_kind.h"

using namespace ringcomm;
using transport::chooseLink;

namespace {

bootstrap::RankRecord rankOn(const std::string& host, bool rdma) {
  bootstrap::RankRecord record;
  record.hostId = host;
  record.address = "10.0.0.1";
  record.rdma = rdma;
  return record;
}

// The chosen kind's name: "shm", "tcp" or "ucx".
std::string kindFor(TransportKind transport, WireProtection protection, bool selfRdma,
                 bool peerRdma, bool sameHost) {
  Config config;
  config.transport = transport;
  config.wireProtection = protection;
  return chooseLink(config, rankOn("a", selfRdma), rankOn(sameHost ? "a" : "b", peerRdma), 1)
      .kind->name;
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
  CHECK(kindFor(automatic, unsealed, true, true, false) == "ucx");
  CHECK(kindFor(automatic, unsealed, true, false, false) == "tcp");
  CHECK(kindFor(automatic, unsealed, false, true, false) == "tcp");
  CHECK(kindFor(automatic, unsealed, true, true, true) == "shm");
  // Sealing asked for: UCX cannot, so TCP.
  CHECK(kindFor(automatic, WireProtection::Integrity, true, true, false) == "tcp");
  CHECK(kindFor(automatic, WireProtection::Encrypt, true, true, false) == "tcp");
  CHECK(kindFor(automatic, WireProtection::Off, true, true, false) == "ucx");
}

TEST(link_choice_follows_what_ringcomm_transport_forces) {
  const auto unsealed = WireProtection::Auto;
  CHECK(kindFor(TransportKind::Tcp, unsealed, true, true, true) == "tcp");
  CHECK(kindFor(TransportKind::Tcp, unsealed, true, true, false) == "tcp");
  CHECK(kindFor(TransportKind::Ucx, unsealed, false, false, true) == "ucx");
  CHECK(kindFor(TransportKind::Ucx, unsealed, false, false, false) == "ucx");
  CHECK(kindFor(TransportKind::Shm, unsealed, false, false, true) == "shm");
  CHECK(refuses(TransportKind::Shm, unsealed, false));
  CHECK(refuses(TransportKind::Ucx, WireProtection::Integrity, true));
  CHECK(refuses(TransportKind::Ucx, WireProtection::Encrypt, false));
}

TEST(link_choice_says_why_a_kind_asked_before_declined) {
  Config config;
  config.wireProtection = WireProtection::Integrity;
  const auto choice = chooseLink(config, rankOn("a", true), rankOn("b", true), 1);
  CHECK(std::string(choice.kind->name) == "tcp");
  CHECK(choice.why == "another host; RDMA, but RINGCOMM_WIRE_PROTECTION");
}

TEST(link_choice_every_registered_kind_is_a_word_ringcomm_transport_takes) {
  for (const transport::LinkKind* kind : transport::linkKinds()) {
    CHECK(std::string(toString(parseTransportKind(kind->name))) == kind->name);
  }
}
