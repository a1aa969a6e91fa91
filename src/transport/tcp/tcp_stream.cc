#include "transport/tcp/tcp_stream.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "common/socket.h"
#include "ringcomm/errors.h"

namespace ringcomm::transport {
namespace {

// setsockopt, checked: a socket that refuses a setting is no link to rely on.
template <typename Value>
void setOption(int fd, int level, int name, const Value& value, const char* what) {
  if (::setsockopt(fd, level, name, &value, sizeof(value)) != 0) {
    throw TransportError(std::string("ringcomm: setsockopt(") + what +
                             ") failed on a TCP link: " + std::strerror(errno),
                         FailureContext{what, -1, -1, 0.0});
  }
}

}  // namespace

TcpStream::TcpStream(int fd, int peer, int socketBufferBytes,
                     std::chrono::milliseconds linkTimeout)
    : fd_(-1), peer_(peer), linkTimeout_(linkTimeout) {
  net::UniqueFd owned(fd);  // closed if a setting fails: the stream never took it
  // connectTcp and acceptTcp already make their sockets non-blocking with TCP_NODELAY; said
  // again here (checked, like the rest), since a stream polls and must never wait for Nagle.
  net::setNoDelay(fd);
  // Large buffers let a whole pipeline segment sit in the kernel while both sides compute.
  net::setBufferSizes(fd, socketBufferBytes);
  // A cut link or a dead host sends nothing: without these, a rank waiting to receive would
  // learn of it only at its collective's deadline. Probes start after half the link timeout of
  // silence and go every second; the user timeout ends the connection when data or probes stay
  // unanswered for the whole link timeout. A peer that is alive answers probes from its kernel,
  // however long its process computes.
  // Linux takes at most 32767 s of idleness and 127 probes.
  const int64_t seconds = std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::seconds>(linkTimeout).count());
  const int one = 1;
  const int idle = static_cast<int>(std::clamp<int64_t>(seconds / 2, 1, 32767));
  const int interval = 1;
  const int probes = static_cast<int>(std::clamp<int64_t>(seconds - idle, 1, 127));
  const auto userTimeout = static_cast<unsigned>(
      std::min<int64_t>(linkTimeout.count(), std::numeric_limits<unsigned>::max()));
  setOption(fd, SOL_SOCKET, SO_KEEPALIVE, one, "SO_KEEPALIVE");
  setOption(fd, IPPROTO_TCP, TCP_KEEPIDLE, idle, "TCP_KEEPIDLE");
  setOption(fd, IPPROTO_TCP, TCP_KEEPINTVL, interval, "TCP_KEEPINTVL");
  setOption(fd, IPPROTO_TCP, TCP_KEEPCNT, probes, "TCP_KEEPCNT");
  setOption(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, userTimeout, "TCP_USER_TIMEOUT");
  net::setNonBlocking(fd);
  fd_ = owned.release();
}

std::string TcpStream::describeFailure(int error) const {
  if (error == ETIMEDOUT) {
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.0f", linkTimeout_.count() / 1000.0);
    return "the link to rank " + std::to_string(peer_) + " is dead: no answer from its host for " +
           seconds + " s (RINGCOMM_LINK_TIMEOUT)";
  }
  // Only a reset comes from the peer's kernel: its process died or closed the connection.
  if (error == ECONNRESET || error == EPIPE) {
    return "connection to rank " + std::to_string(peer_) + " failed (" + std::strerror(error) +
           "): the peer died or aborted";
  }
  // When the link timeout ends a connection after ICMP or routing errors, Linux reports the
  // last of them instead of ETIMEDOUT: no route to the host or its network, a port refused (a
  // REJECT rule), a prohibited route. A host that crashed or lost power gives these too, so
  // this says the link is dead, not whose fault it is.
  return "the link to rank " + std::to_string(peer_) + " is dead (" + std::strerror(error) + ")";
}

TcpStream::~TcpStream() {
  if (fd_ >= 0) ::close(fd_);
}

void TcpStream::close() {
  // shutdown() rather than close(): the peer sees end-of-stream now, the fd stays valid for poll.
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

size_t TcpStream::writeSome(const void* data, size_t bytes) {
  if (!failure_.empty() || bytes == 0) return 0;
  ssize_t n = ::send(fd_, data, bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n >= 0) return static_cast<size_t>(n);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  failure_ = describeFailure(errno);
  return 0;
}

size_t TcpStream::readSome(void* data, size_t bytes) {
  if (!failure_.empty() || bytes == 0) return 0;
  ssize_t n = ::recv(fd_, data, bytes, MSG_DONTWAIT);
  if (n > 0) return static_cast<size_t>(n);
  if (n == 0) {
    failure_ = "rank " + std::to_string(peer_) + " closed its connection (it died or aborted)";
    return 0;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  failure_ = describeFailure(errno);
  return 0;
}

}  // namespace ringcomm::transport
