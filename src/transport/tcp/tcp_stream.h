// A byte stream to a peer over one TCP connection (non-blocking; progress is driven by Transport).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "transport/byte_stream.h"

namespace ringcomm::transport {

class TcpStream : public ByteStream {
 public:
  // Takes ownership of a connected socket and makes it non-blocking. linkTimeout: how long the
  // peer may go without answering (TCP keepalive probes while the link is idle, the user timeout
  // while data is unacknowledged) before the connection counts as dead. A setting the socket
  // refuses throws TransportError, and the socket is closed.
  TcpStream(int fd, int peer, int socketBufferBytes, std::chrono::milliseconds linkTimeout);
  ~TcpStream() override;
  const char* kind() const override { return "tcp"; }
  size_t writeSome(const void* data, size_t bytes) override;
  size_t readSome(void* data, size_t bytes) override;
  int pollFd() const override { return fd_; }
  std::string failure() const override { return failure_; }
  void close() override;

 private:
  // What a failed send or receive means, from its errno.
  std::string describeFailure(int error) const;

  int fd_;
  int peer_;
  std::chrono::milliseconds linkTimeout_;
  std::string failure_;
};

}  // namespace ringcomm::transport
