// A build without OpenSSL (CMakeLists.txt found no libcrypto): links cannot be protected, and a
// configuration that asks for it is refused, saying how to get it.
#include <string>
#include <utility>

#include "ringcomm/errors.h"
#include "transport/tcp/sealed_stream.h"

namespace ringcomm::transport {

bool wireProtectionBuilt() { return false; }

std::string wireProtectionLibrary() { return ""; }

std::unique_ptr<ByteStream> sealStream(std::unique_ptr<ByteStream>, int, WireProtection,
                                       const auth::LinkKeys&) {
  throw InvalidArgument(
      "ringcomm: RINGCOMM_WIRE_PROTECTION asks for integrity or encryption, but this build has "
      "no OpenSSL: install its headers (Debian/Ubuntu: libssl-dev; RHEL: openssl-devel) and "
      "reinstall ringcomm, or set RINGCOMM_WIRE_PROTECTION=off");
}

}  // namespace ringcomm::transport
