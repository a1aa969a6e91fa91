// The tensor queue (include/ringcomm/tensor_queue.h) from the inside: one class, its work in two
// files, as NCCL splits its enqueue from its progress -
//   tensor_queue.cc  requests coming in (submit, join, their checks), the cycle (announce,
//                    exchange, what is ready, the trace of the negotiation), stalls and closing;
//   queue_runs.cc    running what is ready: fusion, each request kind on host or device memory,
//                    and the requests' completion.
// The queue's thread runs the cycle and the runs; callers only submit, join and shut down.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/trace.h"
#include "queue/negotiation.h"
#include "ringcomm/communicator.h"
#include "ringcomm/config.h"
#include "ringcomm/tensor_queue.h"
#include "queue/queue_device.h"
#include "transport/shm/shared_buffers.h"

namespace ringcomm::queue {

using Clock = std::chrono::steady_clock;

// Shared by both halves (tensor_queue.cc).
std::string rankList(const std::vector<int>& ranks);
// Horovod's names of the operations, as its timeline shows them (NEGOTIATE_ALLREDUCE...).
const char* horovodName(TensorOp op);
int64_t traceTime(Clock::time_point at);
// "a, b and 3 more": names a fused collective in error messages.
std::string namesOf(const std::vector<ReadyTensor>& ready, size_t begin, size_t end);

class TensorQueueImpl : public TensorQueue, public std::enable_shared_from_this<TensorQueueImpl> {
 public:
  TensorQueueImpl(std::shared_ptr<Communicator> comm, JoinPolicy joinPolicy);

  ~TensorQueueImpl() override { shutdown(); }

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }

  TensorWorkPtr submit(TensorRequest request) override;
  std::vector<TensorWorkPtr> submitAll(std::vector<TensorRequest> requests) override;
  TensorWorkPtr join(int device) override;
  TensorQueueStats stats() const override;
  void shutdown() override;

 private:
  struct Pending {
    TensorRequest request;
    std::shared_ptr<const ReadyMark> ready;  // device requests
    TensorWorkPtr work;
    Clock::time_point submitted;
    int64_t traceId = -1;  // the request's number in the trace
    int64_t readyAt = -1;  // trace::now() when every rank had it (while tracing)
    bool warned = false;
    bool expiryAnnounced = false;
  };

  // Fusion decisions must be the same on every rank, so the ranks take the smallest of their
  // configured thresholds (an environment variable set on one node only would otherwise split
  // the same ready list differently); returns that. What a joined rank contributes must be the
  // same everywhere too: a disagreement fails creation on every rank.
  size_t agreeOnSettings(JoinPolicy joinPolicy);

  // An all-to-all without splits sends shape[0] / size rows to each rank (Horovod's default).
  void resolveSplits(TensorRequest& request) const;

  void validate(const TensorRequest& request) const;

  // Reducescatter and Alltoall cut the tensor along its first dimension.
  static void requireRows(const TensorRequest& request);

  bool incomingNames(const std::string& name) const;

  void throwIfClosed() const;

  // ---- the cycle --------------------------------------------------------------------------
  void loop();

  // A caller waits for the request `name`: cycles follow each other at once until it has run
  // (tensor_queue.h).
  void await(const std::string& name);

  // Called with mutex_ held: whether this rank has something to announce.
  bool hasNewsLocked() const;

  // One cycle; false once the queue has closed.
  // `idle`: no rank announced anything and nothing ran (the thread may back off).
  bool cycle(bool* idle);

  // The trace's view of negotiation: when each rank's announcement of a name arrived (rank 0's
  // record of them is Horovod's ticks under NEGOTIATE_ALLREDUCE), and, for the names ready now,
  // the span from the first announcement (or this rank's submission) to readiness.
  void traceNegotiation(const std::vector<CycleMessage>& messages, const CycleOutcome& outcome,
                        int64_t cycleStart);

  // Moves what was submitted since the last cycle into pending_ and announces it.
  CycleMessage nextMessage();

  // All-gathers every rank's message: one collective when they all fit a slot, else two.
  std::vector<CycleMessage> exchange(const CycleMessage& mine);

  void allgatherBytes(const void* input, void* output, size_t bytes);

  // A run of requests (one collective) begins: each one's time in the queue since it was ready.
  int64_t traceRunStart(const std::vector<const Pending*>& run);

  // ... and ended, `run` numbering the collective they shared.
  void traceRunEnd(const std::vector<const Pending*>& run, int64_t start, int64_t runNumber);

  // ---- running what is ready --------------------------------------------------------------
  void run(std::vector<ReadyTensor>& ready);

  // The end of the run of all-reduces from `begin` that can share one collective.
  size_t fusionEnd(const std::vector<ReadyTensor>& ready, size_t begin) const;

  void runAllreduce(const std::vector<ReadyTensor>& ready, size_t begin, size_t end);

  // Where a run of all-reduces is fused: host memory (copyBytes into the queue's fusion buffer)
  // or a device's (copies queued on the queue's stream into its device buffer). `join` fills
  // `count` elements at `at` with what a rank that has joined contributes (fillJoined); `where`
  // is the fusion spans' detail in the trace.
  struct FusionMemory {
    std::function<uint8_t*(size_t bytes)> reserve;
    std::function<void(void* to, const void* from, size_t bytes)> copy;
    std::function<void(void* at, size_t count)> join;
    const char* where = nullptr;
  };

  // Runs the all-reduces ready[begin, end) as one collective: a lone tensor of this rank's in
  // place, several (or a joined rank's) through a fusion buffer in `memory`, copied in, reduced
  // and copied out.
  void allreduceRun(const std::vector<ReadyTensor>& ready, size_t begin, size_t end,
                    const std::vector<std::optional<Pending>>& locals, AllreduceOptions& options,
                    int64_t runNumber, const FusionMemory& memory);

  // The fusion copy's details in the trace: which run, how many bytes, which tensors.
  static void describeFusion(trace::Span& copy, int64_t runNumber, size_t bytes,
                             const std::vector<ReadyTensor>& ready, size_t begin, size_t end);

  // The same on device memory: fused in a device buffer on the queue's stream for the run's
  // device, which waits for each tensor's ready mark (queue_device.h).
  void runDeviceAllreduce(const std::vector<ReadyTensor>& ready, size_t begin, size_t end,
                          const std::vector<std::optional<Pending>>& locals,
                          AllreduceOptions options);

  // A fused Adasum combines each tensor with coefficients of its own: the core is told where
  // each one lies in the fusion buffer.
  static std::vector<size_t> adasumTensors(const std::vector<ReadyTensor>& ready, size_t begin,
                                           size_t end, ReduceOp op);

  // What this rank, having joined, contributes to a reduction by `op` (JoinPolicy).
  void fillJoined(void* data, size_t count, DataType type, ReduceOp op) const;

  // This rank's requests in a run: none where it has joined.
  static std::vector<const Pending*> present(const std::vector<std::optional<Pending>>& locals);

  static std::vector<const Pending*> present(const std::optional<Pending>& local);

  static std::vector<const ReadyMark*> marksOf(const std::vector<const Pending*>& run);

  // The device a run of device requests uses on this rank: its tensors', or for a rank that has
  // joined, the device it named (or last used).
  int runDevice(const std::vector<const Pending*>& run);

  // Ends a device run: its Works order their callers' streams after what it wrote (set before
  // guarded() completes them).
  void finishRun(int device, const std::vector<const Pending*>& run);

  // Ranks' first dimensions may differ: an all-to-all with uneven counts, every rank sending its
  // rows to every rank, lands them in rank order without padding.
  void runAllgather(const ReadyTensor& ready);

  // Horovod's reducescatter: rank r keeps its rows of the reduction, the first shape[0] % size
  // ranks one row more. Every rank submitted it (negotiation refuses joined ranks here).
  void runReducescatter(const ReadyTensor& ready);

  // Each rank sends splits[j] rows to rank j and receives, in rank order, what each rank's
  // announcement says it sends to it: the counts are known everywhere without another message.
  void runAlltoall(const ReadyTensor& ready);

  // What the all-gather and the all-to-all share once their counts are set: the all-to-all of
  // `options` into a buffer of `total` elements (staged out of device memory where `device`),
  // timed, and the rows each rank sent and the bytes received handed to the local Work (before
  // guarded() completes it, which lets the caller read them). A joined rank has no Work.
  void runRows(std::optional<Pending>& local, bool device, AlltoallvOptions& options,
               std::vector<int64_t> rows, size_t total);

  void runBroadcast(const ReadyTensor& ready);

  // Runs a collective: completes these Works, or fails them and rethrows (a failed collective
  // closes the queue). A rank that joined has no Work for the tensor.
  template <typename Body>
  static void guarded(const std::vector<TensorWorkPtr>& works, Body body) {
    try {
      body();
    } catch (...) {
      for (const auto& work : works) work->complete(std::current_exception());
      throw;
    }
    for (const auto& work : works) work->complete(nullptr);
  }

  static std::vector<TensorWorkPtr> worksOf(const std::vector<std::optional<Pending>>& locals);

  static std::vector<TensorWorkPtr> worksOf(const std::optional<Pending>& local);

  std::optional<Pending> takeLocal(const std::string& name);

  void failLocal(const std::string& name, std::exception_ptr error);

  void finishJoin(int lastJoined);

  // ---- stalls, deadlines and closing ------------------------------------------------------
  // Called with mutex_ held (on the queue's thread): this rank's requests that have waited
  // longer than the timeout for ranks that never submitted them, each announced once. Every
  // rank then fails its request for the name; the queue goes on.
  std::vector<Expiry> expiredRequests();

  void warnAboutStalls();

  // Fails everything in flight with `error`, and what is submitted later with closedError(it).
  void closeWith(std::exception_ptr error);

  // What later submissions raise after `error` closed the queue: a peer's failure or a closed
  // communicator as it was (its type names what happened), anything else (an argument the
  // queue's thread refused) as CommunicatorClosed quoting it, so that it is not taken for a bad
  // argument of the new call (Horovod: a HorovodInternalError).
  static std::exception_ptr closedError(std::exception_ptr error);

  std::shared_ptr<Communicator> comm_;
  const Config config_;
  const size_t fusionThresholdBytes_;  // agreed by every rank at creation
  const JoinPolicy joinPolicy_;        // the same on every rank (checked at creation)
  ReadinessTable table_;               // touched by the queue's thread only
  // The fusion buffer, grown to the largest fused run; in memory local peers map, so large fused
  // all-reduces on one host move with loads and stores (shm::SharedBytes).
  shm::SharedBytes fusion_;
  std::unique_ptr<QueueDevice> device_ = createQueueDevice();
  std::thread thread_;

  mutable std::mutex mutex_;
  std::condition_variable submitted_;
  std::set<std::string> awaited_;  // requests a caller waits for, not yet taken to run
  // Whether awaited requests start cycles at once: false after a cycle where every rank was
  // waiting and nothing was announced or ready (queue thread only).
  bool hurry_ = true;
  std::vector<Pending> incoming_;           // submitted, not yet announced
  std::map<std::string, Pending> pending_;  // announced, not yet run
  TensorWorkPtr joinWork_;
  bool joinAnnounced_ = false;
  int joinDevice_ = -1;  // the CUDA device join() named
  int lastDevice_ = -1;  // the CUDA device of the last device run
  bool shutdownRequested_ = false;
  bool closed_ = false;
  std::exception_ptr closedError_;
  TensorQueueStats stats_;

  // The trace (touched by the queue's thread only, but nextTraceId_ under mutex_).
  struct Negotiation {
    int64_t first = 0;                           // trace::now() of the first announcement
    std::vector<std::pair<int, int64_t>> marks;  // (rank, when its announcement arrived)
  };
  std::map<std::string, Negotiation> negotiations_;  // names announced, not yet ready
  int64_t nextTraceId_ = 0;
  int64_t runs_ = 0;  // collectives run, numbering them in the trace
};

}  // namespace ringcomm::queue
