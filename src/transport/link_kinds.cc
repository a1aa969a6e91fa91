// The kinds of link, in the order connectPeers asks them (link_kind.h): shared memory within a
// host; UCX between hosts that both have RDMA; TCP for every other pair, and for the ranks of a
// host that found no room for shared memory. A new kind is its folder and a line here.
#include "transport/link_kind.h"

namespace ringcomm::transport {

extern const LinkKind sharedMemoryLinks;  // shm/shm_kind.cc
extern const LinkKind ucxLinks;           // ucx/ucx_kind.cc
extern const LinkKind tcpLinks;           // tcp/tcp_kind.cc

const std::vector<const LinkKind*>& linkKinds() {
  static const std::vector<const LinkKind*> kinds{&sharedMemoryLinks, &ucxLinks, &tcpLinks};
  return kinds;
}

}  // namespace ringcomm::transport
