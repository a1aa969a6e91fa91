#include "ringcomm/build_info.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "codec/codec_f16c.h"
#include "reduce/dispatch.h"
#include "transport/cuda/device_path.h"
#include "transport/tcp/sealed_stream.h"
#include "transport/ucx/ucx_network.h"

namespace ringcomm {

BuildInfo buildInfo() {
  BuildInfo info;
#if defined(__clang__)
  info.compiler = __VERSION__;  // "Debian Clang 14.0.6" and the like: it names itself
#elif defined(__GNUC__)
  info.compiler = std::string("GCC ") + __VERSION__;
#endif
  info.reduceKernels = reduce::activeKernelName();
  info.halfCodec = codec::f16c::available() ? "f16c" : "portable";
  if (transport::wireProtectionBuilt()) {
    info.wireProtection = "AES-256-GCM, " + transport::wireProtectionLibrary();
  }
  info.ucx = transport::ucxHeaders();
  device::describeBuild(info);  // the CUDA half: cuda_path.cc, or no_cuda.cc
  return info;
}

UcxInfo ucxInfo() {
  UcxInfo info;
  info.version = transport::ucxVersion(&info.whyNot);
  if (!info.version.empty()) info.lanes = transport::ucxLanes();
  return info;
}

namespace {

// Whether something listens at the socket `path`, of whichever type it is: a connection that is
// closed at once (the daemon sees a client that sent no command), or for a datagram socket a
// connect(), which sends nothing. Driver 580's MPS control endpoint refuses stream connections
// (EPROTOTYPE): the socket types are tried in turn until one is the endpoint's. Without
// blocking: a listener whose backlog is full (EAGAIN) is there too; a socket nobody listens on
// any more, as a daemon that quit leaves behind, refuses (ECONNREFUSED) whatever its type.
bool socketAnswers(const std::string& path) {
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) return false;
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  for (const int type : {SOCK_STREAM, SOCK_SEQPACKET, SOCK_DGRAM}) {
    const int fd = socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const bool connected =
        connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
    const int error = errno;
    close(fd);
    if (connected || error == EAGAIN) return true;
    if (error != EPROTOTYPE) return false;  // this type was the endpoint's: nobody answered
  }
  return false;
}

}  // namespace

bool mpsRunning(const std::string& pipeDirectory) {
  const std::string control = pipeDirectory + "/control";
  struct stat info {};
  if (stat(control.c_str(), &info) != 0) return false;
  if (S_ISSOCK(info.st_mode)) return socketAnswers(control);
  // An older driver's pipe is taken at its word: opening it to ask would hand the daemon an
  // end-of-file on its command channel.
  return S_ISFIFO(info.st_mode);
}

}  // namespace ringcomm
