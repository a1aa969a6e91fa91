// One direction-pair of bytes between this rank and one peer. Two of the three transports are
// byte streams (a TCP socket, a pair of shared-memory rings): framing, queues and waiting live in
// Transport, so a new transport of bytes implements only this. The third, UCX, moves whole
// messages and implements MessageNetwork instead (transport/message_network.h).
#pragma once

#include <cstddef>
#include <string>

namespace ringcomm::transport {

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  virtual const char* kind() const = 0;  // "tcp" or "shm"
  // Non-blocking: move up to `bytes`, return how many moved (0 when the stream is full/empty).
  // Throw TransportError-worthy std::runtime_error text via `failure()` when the peer is gone.
  virtual size_t writeSome(const void* data, size_t bytes) = 0;
  virtual size_t readSome(void* data, size_t bytes) = 0;
  // A socket to poll(), or -1 for streams woken through the shared-memory doorbell.
  virtual int pollFd() const { return -1; }
  // Empty while the peer is healthy; else why it is not (died, aborted, closed the connection).
  virtual std::string failure() const = 0;
  // Tell the peer this rank is going away (it sees the stream fail at once, not at its timeout).
  virtual void close() = 0;
  // A sealed link (transport/tcp/sealed_stream.h): what this rank sends from now on travels as
  // it is, after an authenticated record telling the peer so. Nothing on other streams.
  virtual void stopSealing() {}
};

}  // namespace ringcomm::transport
