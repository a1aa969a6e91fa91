// A byte stream to a peer on the same host: this rank writes into the ring in the peer's segment
// and reads from the ring in its own. Single producer, single consumer, lock-free.
#pragma once

#include <cstddef>
#include <string>

#include "transport/byte_stream.h"
#include "transport/shm/segment.h"

namespace ringcomm::transport {

class ShmStream : public ByteStream {
 public:
  ShmStream(const shm::Segments& segments, int peerLocal);
  const char* kind() const override { return "shm"; }
  size_t writeSome(const void* data, size_t bytes) override;
  size_t readSome(void* data, size_t bytes) override;
  std::string failure() const override;
  void close() override {}  // the abort flag in this rank's header tells every local peer at once

 private:
  const shm::Segments& segments_;
  int peerLocal_;
  shm::RingView outgoing_;  // in the peer's segment
  shm::RingView incoming_;  // in this rank's segment
};

}  // namespace ringcomm::transport
