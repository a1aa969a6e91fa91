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

// Scratch's buffers, by role. A schedule that runs another inside it (the hierarchical ones run
// the ring and the tree on sub-groups; reduce-scatter runs the ring on its copy of the input)
// keeps its data in a buffer the inner one does not take: one list, so that a new role cannot
// take a buffer another already holds.
enum class ScratchBuffer : int {
  Received,       // what a peer sent, before it is reduced in: the ring's (one parity), the
                  // tree's, Adasum's
  ReceivedOther,  // the ring's other parity
  InputCopy,      // the input set aside: for a schedule that works in place (reduce-scatter,
                  // reduce), or whose output overwrites it (all-to-all in place, flat or not)
  Wire,           // the ring's encoded segments in flight (a compressed all-reduce)
  HostSlice,      // the hierarchical collectives' share of their host's data
  Packed,         // hierarchical all-to-all: what this rank hands each carrier of its host
  Carried,        // ... what the host's ranks handed this one, rank by rank
  Outgoing,       // ... the messages this rank sends across, regrouped
  Count
};

// Reusable, 64-byte aligned temporary buffers, one per ScratchBuffer; grown on demand, kept
// between collectives so that steady-state collectives allocate nothing. Each is registered with
// the transport while it lives (a network that moves memory by RDMA registers it once).
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { release(); }

  // The transport whose network the buffers are registered with, from now on (it outlives them).
  void registerWith(transport::Transport* transport) { transport_ = transport; }

  uint8_t* get(ScratchBuffer which, size_t bytes) {
    const auto index = static_cast<size_t>(which);
    if (buffers_.size() <= index) buffers_.resize(static_cast<size_t>(ScratchBuffer::Count));
    Buffer& buffer = buffers_[index];
    if (buffer.bytes < bytes) {
      const size_t rounded = (bytes + 63) / 64 * 64;
      if (buffer.data && transport_ != nullptr) transport_->forgetLongLived(buffer.data.get());
      buffer.data.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
      if (!buffer.data) throw std::bad_alloc();
      buffer.bytes = rounded;
      if (transport_ != nullptr) transport_->registerLongLived(buffer.data.get(), rounded);
    }
    return buffer.data.get();
  }

  // Frees every buffer (unregistered first).
  void release() {
    for (Buffer& buffer : buffers_) {
      if (buffer.data && transport_ != nullptr) transport_->forgetLongLived(buffer.data.get());
    }
    buffers_.clear();
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
  transport::Transport* transport_ = nullptr;
};

// A schedule runs among `size` ranks numbered 0..size-1, this one being `rank`: the whole
// communicator, or a sub-group of it (the ranks of one host, or one rank per host: see
// hierarchical.h), whose members map the schedule's numbers to the communicator's. Schedules
// reach peers only through send() and recv(), so the same code runs on any group.
struct Context {
  int rank;
  int size;
  transport::Transport& transport;
  const Operation& op;
  MessageTag tag;  // identifies the collective's messages (common/tags.h)
  size_t segmentBytes;
  Scratch& scratch;
  // members[i]: the communicator rank of the schedule's rank i; null for the whole communicator.
  const std::vector<int>* members = nullptr;

  int peer(int groupRank) const { return members ? (*members)[groupRank] : groupRank; }
  transport::Transport::Request send(int to, const void* data, size_t bytes,
                                     const MessageTag& messageTag) const {
    return transport.postSend(peer(to), data, bytes, messageTag);
  }
  transport::Transport::Request send(int to, const void* data, size_t bytes) const {
    return send(to, data, bytes, tag);
  }
  transport::Transport::Request recv(int from, void* data, size_t bytes,
                                     const MessageTag& messageTag) const {
    return transport.postRecv(peer(from), data, bytes, messageTag);
  }
  transport::Transport::Request recv(int from, void* data, size_t bytes) const {
    return recv(from, data, bytes, tag);
  }
  void wait(const transport::Transport::Request& request) const { transport.wait(request, op); }
  void waitAll() const { transport.waitAll(op); }

  // The same collective on a sub-group: `members` (communicator ranks, this one among them) in
  // the order the schedule numbers them. `members` must outlive the returned context.
  Context subgroup(const std::vector<int>& groupMembers) const {
    Context sub = *this;
    sub.members = &groupMembers;
    sub.size = static_cast<int>(groupMembers.size());
    const int me = peer(rank);
    sub.rank = -1;
    for (int i = 0; i < sub.size; ++i) {
      if (groupMembers[i] == me) sub.rank = i;
    }
    return sub;
  }
};

}  // namespace ringcomm::algorithms
