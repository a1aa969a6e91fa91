// Bytes both ways between this rank and one peer: a TCP socket (tcp/), a pair of shared-memory
// rings (shm/). A stream link (peer_link.h: streamLink) frames the messages on it, and Transport
// queues them and waits, so a new kind of link that moves bytes implements this and a LinkKind
// that makes its streams (link_kind.h). UCX moves whole messages and implements MessageNetwork
// instead (message_network.h).
#pragma once

#include <cstddef>
#include <string>

namespace ringcomm::transport {

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  virtual const char* kind() const = 0;  // "tcp" or "shm"
  // Non-blocking: move up to `bytes`, return how many moved (0 when the stream is full/empty,
  // and once the link has failed: a failed peer is not thrown here, failure() says it).
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
