// What a schedule needs to run: who it is, how to reach peers, the deadline, and scratch memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "common/deadline.h"
#include "transport/transport.h"

namespace ringcomm::algorithms {

// Reusable, 64-byte aligned temporary buffers; grown on demand, kept between collectives so that
// steady-state collectives allocate nothing.
class Scratch {
 public:
  uint8_t* get(int index, size_t bytes) {
    if (buffers_.size() <= static_cast<size_t>(index)) buffers_.resize(index + 1);
    Buffer& buffer = buffers_[index];
    if (buffer.bytes < bytes) {
      const size_t rounded = (bytes + 63) / 64 * 64;
      buffer.data.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
      if (!buffer.data) throw std::bad_alloc();
      buffer.bytes = rounded;
    }
    return buffer.data.get();
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  struct Buffer {
    std::unique_ptr<uint8_t, Free> data;
    size_t bytes = 0;
  };
  std::vector<Buffer> buffers_;
};

struct Context {
  int rank;
  int size;
  transport::Transport& transport;
  const Operation& op;
  MessageTag tag;  // identifies the collective's messages (common/tags.h)
  size_t segmentBytes;
  Scratch& scratch;
};

}  // namespace ringcomm::algorithms
