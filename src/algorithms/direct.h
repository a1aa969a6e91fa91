// The direct schedule: all ranks on one host, through shared memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/deadline.h"
#include "common/tags.h"
#include "common/wait_policy.h"
#include "ringcomm/types.h"

namespace ringcomm::shm {
class Segments;
struct DirectCounters;
}

namespace ringcomm::algorithms {

class DirectGroup {
 public:
  // Every rank of the communicator must be in `segments` (one host), local rank == rank.
  DirectGroup(const shm::Segments& segments, WaitPolicy& waitPolicy);

  void allreduce(const Operation& op, const MessageTag& tag, const void* input, void* output, size_t count,
                 DataType type, ReduceOp op_);
  void barrier(const Operation& op, const MessageTag& tag);

 private:
  enum class Phase { Posted, Reduced, Done };
  // A rank's progress counter for `phase`.
  static std::atomic<uint64_t>& counterOf(shm::DirectCounters& counters, Phase phase);
  // Waits until every peer's counter for `phase` reaches `value`.
  void waitForAll(Phase phase, uint64_t value, const Operation& op);
  void publish(Phase phase, uint64_t value);
  void stage(uint64_t round, const MessageTag& tag, size_t bytes, size_t total,
             const Operation& op);
  void checkDescriptors(uint64_t round, const MessageTag& tag, size_t bytes, size_t total,
                        const Operation& op);

  const shm::Segments& segments_;
  int rank_;
  int size_;
  WaitPolicy& waitPolicy_;
  uint64_t round_ = 0;  // rounds ever run on this communicator; the slot is round % 2
};

}  // namespace ringcomm::algorithms
