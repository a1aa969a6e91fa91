// The tensor queue's agreement (include/ringcomm/tensor_queue.h): what a rank announces each
// cycle, how it travels, and the table every rank keeps of who announced what.
//
// There is no coordinator: every rank receives every rank's message (one all-gather per cycle)
// and feeds the same messages, in rank order, to its own table. The table is pure, so every rank
// reaches the same answers - which names are ready, in what order, which disagree - and acts on
// them alike without another message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ringcomm/tensor_queue.h"

namespace ringcomm::queue {

// A request as the other ranks see it: everything but the buffers.
struct Announcement {
  TensorOp op = TensorOp::Allreduce;
  DataType type = DataType::Float32;
  ReduceOp reduceOp = ReduceOp::Sum;
  Compression compression = Compression::None;
  int32_t root = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  bool device = false;  // the tensors are CUDA device memory
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;  // Alltoall: rows to each rank (resolved: never empty)
  std::string name;

  static Announcement of(const TensorRequest& request);
  size_t count() const;
  // "allreduce of float32 [2, 3] (sum)": what error messages quote.
  std::string describe() const;
};

// Two all-reduces one collective can carry: same dtype, op, wire compression, scale factors and
// memory (host or device); the tensors may differ in shape: this is what fusion asks.
bool reduceAlike(const Announcement& a, const Announcement& b);

// A request of one rank that waited past the timeout for ranks that never submitted it: every
// rank forgets the name and fails its own request for it, if any, with `reason`. The queue goes
// on.
struct Expiry {
  std::string name;
  std::string reason;
};

// What one rank says in one cycle.
struct CycleMessage {
  bool join = false;      // this rank called join() since its last message
  bool shutdown = false;  // this rank is closing its queue
  bool awaiting = false;  // a caller on this rank waits for a request not yet run
  std::vector<Expiry> expired;
  std::vector<Announcement> announcements;
};

std::vector<uint8_t> encode(const CycleMessage& message);
// Throws Error when the bytes are not a message (a peer running another version).
CycleMessage decode(const uint8_t* data, size_t size);

// A name every rank has announced or joined for.
struct ReadyTensor {
  std::string name;
  std::vector<std::optional<Announcement>> byRank;  // empty where that rank had joined
  // Non-empty when the ranks disagree (or the request cannot run with the ranks that joined):
  // every rank fails its request with this message.
  std::string error;

  const Announcement& reference() const;  // the lowest announcing rank's
  int contributors() const;               // ranks that announced it (did not join)
};

struct CycleOutcome {
  std::vector<ReadyTensor> ready;  // in the order every rank runs them
  bool allJoined = false;          // every rank has joined: join() completes, joins reset
  int lastJoined = -1;
  int shutdownBy = -1;  // the lowest rank that closed its queue this cycle, or -1
  std::vector<Expiry> expired;  // names forgotten this cycle, each once
};

class ReadinessTable {
 public:
  ReadinessTable(int size, JoinPolicy joinPolicy);

  // One message per rank, in rank order.
  CycleOutcome record(const std::vector<CycleMessage>& messages);
  // The ranks that have neither announced `name` nor joined (for stall reports).
  std::vector<int> missing(const std::string& name) const;

 private:
  struct Entry {
    std::vector<std::optional<Announcement>> byRank;
    uint64_t order = 0;  // when the first rank announced it: ready names run in this order
  };
  bool isReady(const Entry& entry) const;
  std::string disagreement(const std::string& name, const Entry& entry) const;

  int size_;
  JoinPolicy joinPolicy_;
  uint64_t nextOrder_ = 0;
  std::map<std::string, Entry> entries_;
  std::vector<bool> joined_;
  int lastJoined_ = -1;
};

}  // namespace ringcomm::queue
