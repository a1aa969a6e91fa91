// Horovod's model of collectives, for training loops: each rank submits named tensors whenever
// they are ready, in any order, and a background thread does the rest. Once per cycle
// (Config::cycleTime) the ranks tell each other which names they have submitted; a name submitted
// by every rank is ready, and every rank runs the ready collectives in the same order, fusing
// consecutive all-reduces of one kind into one buffer of up to Config::fusionThresholdBytes.
//
// Ranks that disagree about a name (shape, dtype, op, root) all get a MismatchError naming the
// ranks; a name some ranks never submit is reported after Config::stallWarning and fails, after
// Config::timeout, on every rank that submitted it, naming the ranks that did not. Both failures
// are the request's own: the queue goes on. A rank that called join() counts as having submitted
// every name until every rank has joined; what it contributes is the queue's JoinPolicy.
//
// Requests always complete on the queue's thread, even at one rank, so an asynchronous request is
// in flight when submit() returns, as in Horovod.
//
// While a caller waits for a request (Work::wait) that has not run yet, the rank's cycles follow
// each other without sleeping: nothing it submits meanwhile can join what it waits for, and the
// ranks meet in each exchange as soon as the slowest arrives (by its own caller's wait or its
// cycle time). A training step's last gradients are then negotiated when the optimizer waits for
// them, not a cycle later on any rank. Where every rank waits and a cycle moves nothing (names
// some rank never submits), the cycle time applies again.
//
// CUDA tensors (a build with CUDA): a request is ordered after the work its caller's stream had
// queued when it was submitted, without the caller waiting for it. The queue's thread fuses
// device tensors in device memory on a stream of its own, and a completed Work's results are
// ordered on a caller's stream by orderResultsOn() (src/queue/queue_device.h). Ranks
// must agree on whether a name is in device memory: a MismatchError otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ringcomm/communicator.h"
#include "ringcomm/export.h"
#include "ringcomm/types.h"
#include "ringcomm/work.h"

namespace ringcomm {

enum class TensorOp : uint8_t { Allreduce, Allgather, Broadcast, Reducescatter, Alltoall };

// What a rank that has joined contributes to the requests the other ranks go on submitting.
enum class JoinPolicy : uint8_t {
  // Horovod's: zeros to every all-reduce, whatever its op (an average still divides by every
  // rank); an all-gather, broadcast, reduce-scatter or all-to-all fails with a MismatchError.
  Zeros,
  // ringcomm's: the reduction's identity, so an average divides by the ranks that contributed
  // (float types only); no rows to an all-gather; a broadcast is relayed (but not from a joined
  // root); reduce-scatter and all-to-all fail.
  Contributors,
};

RINGCOMM_API const char* toString(JoinPolicy policy);
RINGCOMM_API JoinPolicy parseJoinPolicy(const std::string& name);  // "zeros" or "contributors"

RINGCOMM_API const char* toString(TensorOp op);

// One named tensor. Buffers are the caller's until the Work completes.
struct RINGCOMM_API TensorRequest {
  TensorOp op = TensorOp::Allreduce;
  std::string name;  // unique among this rank's requests in flight; the same on every rank
  DataType type = DataType::Float32;
  // Must match on every rank, except the first dimension (rows) of an all-gather's or an
  // all-to-all's tensor, which may differ.
  std::vector<int64_t> shape;
  // Allreduce: input and output (which may be equal) of shape's element count. Broadcast: output
  // is the buffer, sent from root. Allgather, Reducescatter, Alltoall: input only; the result is
  // the Work's `gathered` and `rows`.
  const void* input = nullptr;
  void* output = nullptr;
  ReduceOp reduceOp = ReduceOp::Sum;  // Avg: see JoinPolicy for how joined ranks count
  Compression compression = Compression::None;
  // Allreduce and Reducescatter: the input is multiplied by prescale before the reduction and
  // the result by postscale after (float types only).
  double prescale = 1.0;
  double postscale = 1.0;
  int root = 0;  // broadcast
  // Alltoall: rows sent to each rank, in rank order (one entry per rank, summing to shape[0]);
  // empty: shape[0] / size rows to each (which must divide evenly).
  std::vector<int64_t> splits;
  // The buffers are CUDA device memory, ready after the work queued so far on `stream` (the
  // caller's cudaStream_t) at submission.
  bool deviceMemory = false;
  void* stream = nullptr;

  size_t count() const;  // elements: the product of shape
};

// A submitted request (or join). Read the results after wait().
class RINGCOMM_API TensorWork : public Work {
 public:
  // The rows that make up `gathered`, one count per rank in rank order: for Allgather every
  // rank's first dimension; for Reducescatter the rows of the reduced tensor each rank keeps
  // (the first shape[0] % size ranks keep one more, as in Horovod); for Alltoall the rows this
  // rank received from each rank. `gathered` holds this rank's result: Allgather every rank's
  // rows, Reducescatter this rank's rows of the reduction, Alltoall the rows received, in rank
  // order.
  std::vector<int64_t> rows;
  std::vector<uint8_t> gathered;
  // Join: the rank that joined last.
  int lastJoined = -1;
  // Device requests: makes a caller's stream (a cudaStream_t) wait until the results are written;
  // call it after wait(). Empty for host requests, whose results are there when wait() returns.
  std::function<void(void* stream)> orderResultsOn;
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
  // Collective: every rank calls it, with the same join policy (else InvalidArgument on every
  // rank). `comm` must be the queue's own (Communicator::duplicate()): the queue runs
  // collectives on it from its thread, which must not interleave with others'.
  static std::shared_ptr<TensorQueue> create(std::shared_ptr<Communicator> comm,
                                             JoinPolicy joinPolicy = JoinPolicy::Zeros);
  virtual ~TensorQueue() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Validates the request (InvalidArgument) and queues it for the next cycle.
  virtual TensorWorkPtr submit(TensorRequest request) = 0;
  // Several at once: they are announced in the same cycle, so they tend to fuse.
  virtual std::vector<TensorWorkPtr> submitAll(std::vector<TensorRequest> requests) = 0;
  // Completes when every rank has joined; lastJoined says which rank came last. `device`: the
  // CUDA device whose memory this rank lends to the device collectives it takes part in without
  // data (-1: the device of its last device request).
  virtual TensorWorkPtr join(int device = -1) = 0;
  virtual TensorQueueStats stats() const = 0;
  // Tells every rank the queue is closing: requests still waiting fail with CommunicatorClosed.
  // Waits for the thread, then shuts the communicator down. Idempotent.
  virtual void shutdown() = 0;
};

}  // namespace ringcomm
