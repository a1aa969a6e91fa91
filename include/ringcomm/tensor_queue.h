// Horovod's model of collectives, for training loops: each rank submits named tensors whenever
// they are ready, in any order, and a background thread does the rest. Once per cycle
// (Config::cycleTime) the ranks tell each other which names they have submitted; a name submitted
// by every rank is ready, and every rank runs the ready collectives in the same order, fusing
// consecutive all-reduces of one kind into one buffer of up to Config::fusionThresholdBytes.
//
// Ranks that disagree about a name (shape, dtype, op, root) all get a MismatchError naming the
// ranks; a name some ranks never submit is reported after Config::stallWarning and fails every
// rank after Config::timeout, naming the ranks that did not submit it. A rank that called join()
// counts as having submitted every name, contributing nothing, until every rank has joined.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringcomm/communicator.h"
#include "ringcomm/export.h"
#include "ringcomm/types.h"
#include "ringcomm/work.h"

namespace ringcomm {

enum class TensorOp : uint8_t { Allreduce, Allgather, Broadcast };

RINGCOMM_API const char* toString(TensorOp op);

// One named tensor. Buffers are the caller's until the Work completes.
struct RINGCOMM_API TensorRequest {
  TensorOp op = TensorOp::Allreduce;
  std::string name;  // unique among this rank's requests in flight; the same on every rank
  DataType type = DataType::Float32;
  // Must match on every rank, except an all-gather's first dimension (rows), which may differ.
  std::vector<int64_t> shape;
  // Allreduce: input and output (which may be equal) of shape's element count. Allgather: input
  // only (the result is the Work's gathered()). Broadcast: output is the buffer, sent from root.
  const void* input = nullptr;
  void* output = nullptr;
  ReduceOp reduceOp = ReduceOp::Sum;  // Avg divides by the ranks that contributed (not joined)
  Compression compression = Compression::None;
  double prescale = 1.0;
  double postscale = 1.0;
  int root = 0;  // broadcast

  size_t count() const;  // elements: the product of shape
};

// A submitted request (or join). Read the results after wait().
class RINGCOMM_API TensorWork : public Work {
 public:
  // Allgather: every rank's first dimension, in rank order, and the concatenated rows.
  std::vector<int64_t> rows;
  std::vector<uint8_t> gathered;
  // Join: the rank that joined last.
  int lastJoined = -1;
};

using TensorWorkPtr = std::shared_ptr<TensorWork>;

// What the queue has done, for tests and benchmarks.
struct TensorQueueStats {
  uint64_t cycles = 0;
  uint64_t allreduces = 0;      // collectives run for all-reduce requests
  uint64_t fusedTensors = 0;    // all-reduce requests that shared their collective with another
};

class RINGCOMM_API TensorQueue {
 public:
  // Collective: every rank calls it. `comm` must be the queue's own (Communicator::duplicate()):
  // the queue runs collectives on it from its thread, which must not interleave with others'.
  static std::shared_ptr<TensorQueue> create(std::shared_ptr<Communicator> comm);
  virtual ~TensorQueue() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Validates the request (InvalidArgument) and queues it for the next cycle.
  virtual TensorWorkPtr submit(TensorRequest request) = 0;
  // Several at once: they are announced in the same cycle, so they tend to fuse.
  virtual std::vector<TensorWorkPtr> submitAll(std::vector<TensorRequest> requests) = 0;
  // Completes when every rank has joined; lastJoined says which rank came last.
  virtual TensorWorkPtr join() = 0;
  virtual TensorQueueStats stats() const = 0;
  // Tells every rank the queue is closing: requests still waiting fail with CommunicatorClosed.
  // Waits for the thread, then shuts the communicator down. Idempotent.
  virtual void shutdown() = 0;
};

}  // namespace ringcomm
