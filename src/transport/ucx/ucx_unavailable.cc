// A build without UCX (CMakeLists.txt found none): RINGCOMM_TRANSPORT=ucx is refused, saying how
// to get it; auto never picks it.
#include "ringcomm/errors.h"
#include "transport/ucx/ucx_network.h"

namespace ringcomm::transport {

std::string ucxHeaders() { return ""; }

std::string ucxVersion(std::string* whyNot) {
  if (whyNot != nullptr) *whyNot = "this build has no UCX (CMake found none)";
  return "";
}

std::string ucxLanes() { return ""; }

bool ucxOffersRdma() { return false; }

std::unique_ptr<MessageNetwork> connectUcx(Store&, int, const bootstrap::Rendezvous&,
                                           const std::vector<int>&,
                                           const Config&, const Operation&,
                                           const std::function<void()>&) {
  throw InvalidArgument(
      "ringcomm: RINGCOMM_TRANSPORT=ucx, but this build has no UCX: install it (Debian/Ubuntu: "
      "libucx-dev; a cluster's own UCX or HPC-X: put its lib/pkgconfig on PKG_CONFIG_PATH) and "
      "reinstall ringcomm, or set RINGCOMM_TRANSPORT=auto");
}

}  // namespace ringcomm::transport
