// Whether a CUDA MPS control daemon runs (mps.h): a look at its control endpoint, with no CUDA
// call, so that it works in any build.
#include "device/mps.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace ringcomm::device {

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

}  // namespace ringcomm::device
