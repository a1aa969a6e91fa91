#include "transport/tcp/tcp_stream.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ringcomm::transport {

TcpStream::TcpStream(int fd, int peer, int socketBufferBytes) : fd_(fd), peer_(peer) {
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Large buffers let a whole pipeline segment sit in the kernel while both sides compute.
  setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &socketBufferBytes, sizeof(socketBufferBytes));
  setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &socketBufferBytes, sizeof(socketBufferBytes));
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
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
  failure_ = "connection to rank " + std::to_string(peer_) + " failed (" + std::strerror(errno) +
             "): the peer died or aborted";
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
  failure_ = "connection to rank " + std::to_string(peer_) + " failed (" + std::strerror(errno) +
             "): the peer died or aborted";
  return 0;
}

}  // namespace ringcomm::transport
