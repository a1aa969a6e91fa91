// A byte stream to a peer over one TCP connection (non-blocking; progress is driven by Transport).
#pragma once

#include <cstddef>
#include <string>

#include "transport/byte_stream.h"

namespace ringcomm::transport {

class TcpStream : public ByteStream {
 public:
  // Takes ownership of a connected socket and makes it non-blocking.
  TcpStream(int fd, int peer, int socketBufferBytes);
  ~TcpStream() override;
  const char* kind() const override { return "tcp"; }
  size_t writeSome(const void* data, size_t bytes) override;
  size_t readSome(void* data, size_t bytes) override;
  int pollFd() const override { return fd_; }
  std::string failure() const override { return failure_; }
  void close() override;

 private:
  int fd_;
  int peer_;
  std::string failure_;
};

}  // namespace ringcomm::transport
