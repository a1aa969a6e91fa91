// The direct schedule: all ranks on one host, through shared memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

#include "algorithms/context.h"
#include "plan/plan.h"
#include "algorithms/ring.h"
#include "common/cpu_share.h"
#include "common/helper_threads.h"
#include "common/deadline.h"
#include "common/tags.h"
#include "common/wait_policy.h"
#include "ringcomm/config.h"
#include "ringcomm/types.h"
#include "transport/shm/huge_pages.h"
#include "transport/shm/segment.h"
#include "transport/shm/shared_buffers.h"

namespace ringcomm::algorithms {

class DirectGroup {
 public:
  // Every rank of the communicator must be in `segments` (one host), local rank == rank.
  // From `config`: whether buffers that come back collapse into huge pages
  // (shm::HugePageAdvice), and when crowded ranks stage large all-reduces (stageInstead()).
  DirectGroup(const shm::Segments& segments, WaitPolicy& waitPolicy, const Config& config);

  // Each takes the communicator's `ctx` (its operation and tag; the group is the whole
  // communicator, or the host's ranks of a hierarchical schedule: see HostTeam).
  void allreduce(const Context& ctx, const void* input, void* output, size_t count,
                 DataType type, ReduceOp reduceOp);
  void barrier(const Context& ctx);
  size_t slotBytes() const { return segments_.slotBytes(); }

  // This host's part of a hierarchical all-reduce (hierarchical.h), through each other's memory:
  // local rank j reduces blocks[j] of every local rank's input into its own output and writes
  // the result into every local peer's output, segment by segment as `across` asks through the
  // hooks it is given (produce: reduce a segment of the slice over this host; consume: write the
  // final segment into the peers' outputs), while it combines the slice with the other hosts'.
  // Returns false, having moved nothing, when the ranks cannot reach each other's memory or the
  // lowest asked them to stage (stageInstead()); the caller then runs those steps over the
  // transport. `reduceOp` must not be Avg: the average is over every host's ranks, which
  // `across` knows.
  using SliceStep = std::function<void(uint8_t* slice, const plan::Block& block,
                                       const SegmentHooks& withinHost)>;
  bool allreduceAcrossHosts(const Context& ctx, const void* input, void* output, size_t count,
                            DataType type, ReduceOp reduceOp,
                            const std::vector<plan::Block>& blocks, const SliceStep& across);
  // This host's part of a hierarchical reduce-scatter, the same way: local rank j reduces
  // blocks[j] of every local rank's input (`count` elements each) into `work`, hands it to
  // `across` with the hooks, and writes each final element into the output of the local rank
  // that holds it (outputs[i]: the elements of the vector local rank i's output holds).
  bool reduceScatterAcrossHosts(const Context& ctx, const void* input, void* output,
                                uint8_t* work, size_t count, DataType type, ReduceOp reduceOp,
                                const std::vector<plan::Block>& blocks,
                                const std::vector<plan::Block>& outputs, const SliceStep& across);
  // The root stages its buffer in its slot, round by round; the others copy it out. `tag` carries
  // the root in its signature, so ranks that disagree on it get a MismatchError.
  void broadcast(const Context& ctx, void* buffer, size_t count, DataType type, int root);

 private:
  enum class Phase { Posted, Reduced, Done };
  // Which of each rank's progress counters (shm::DirectCounters) counts `phase`.
  static shm::Segments::Progress progressOf(Phase phase);
  // Waits until every peer's counter for `phase` reaches `value`.
  void waitForAll(Phase phase, uint64_t value, const Operation& op);
  // The first local rank from `from` on whose counter for `phase` is below `value`, or -1.
  int firstBehind(Phase phase, uint64_t value, int from) const;
  void publish(Phase phase, uint64_t value);
  // Describes this rank's part of `round` for the peers (checkDescriptors); `input` and `output`
  // are the caller's buffers on the single-copy path, null on the staged one.
  // `outputBytes`: the output's length where it differs from `total` (a reduce-scatter's).
  void stage(uint64_t round, const MessageTag& tag, size_t bytes, size_t total, const Operation& op,
             const void* input = nullptr, const void* output = nullptr, bool stageInstead = false,
             size_t outputBytes = SIZE_MAX);
  void checkDescriptors(uint64_t round, const MessageTag& tag, size_t bytes, size_t total,
                        const Operation& op);

  // What one single-copy round reduces and where its results go.
  struct SingleCopyPlan {
    std::vector<plan::Block> slices;  // slices[j]: the elements of the vector local rank j reduces
    // outputs[i]: the elements of the vector local rank i's output holds, from its start; empty
    // when every output holds the whole vector (an all-reduce).
    std::vector<plan::Block> outputs;
    // Where this rank reduces its slice when its output does not hold it; null: in its output.
    uint8_t* work = nullptr;
  };
  // The all-reduce that reads peers' buffers with cross-memory attach (direct_single_copy.cc).
  // Returns false, having moved nothing, when the lowest local rank asked every rank to stage
  // this one through the slots instead (stageInstead()).
  bool allreduceSingleCopy(const Operation& op, const MessageTag& tag, const void* input,
                           void* output, size_t count, DataType type, ReduceOp reduceOp);
  // Its round, for any `plan`: each rank reduces its slice of every local input and writes it
  // into the outputs that hold it; with `across`, each hands its slice to it first
  // (allreduceAcrossHosts, reduceScatterAcrossHosts).
  bool reduceSingleCopy(const Operation& op, const MessageTag& tag, const void* input, void* output,
                        size_t count, DataType type, ReduceOp reduceOp, const SingleCopyPlan& plan,
                        const SliceStep* across);
  // Its first step: posts this rank's buffers for `round` (`total` bytes in, `outputBytes` out)
  // and checks the peers' descriptors. Returns false, the round done, when the lowest local rank
  // asked every rank to stage this one instead.
  bool postSingleCopy(const Operation& op, const MessageTag& tag, const void* input,
                      const void* output, size_t total, size_t outputBytes, uint64_t round);
  // The rest of the round: the peers' buffers and the steps on chunks of this rank's slice.
  class SingleCopyRound;
  // Raises naming `peer` if it has failed: its output may be its caller's again.
  void raiseIfAborted(int peer, const Operation& op);
  // Copies `bytes` into local peer `peer`'s output, mapped here at `to`, unless it has failed.
  void writeMappedPeer(int peer, uint8_t* to, const uint8_t* from, size_t bytes,
                       const Operation& op);
  // Reads `bytes` at `remote` in local peer `peer`'s process into `local`, or writes them there;
  // raises naming the peer.
  void accessPeer(int peer, bool write, uint64_t remote, void* local, size_t bytes,
                  const Operation& op);

  // On the lowest local rank: whether other processes now take enough of the cores that crowded
  // ranks do better staging a single-copy-sized all-reduce (common/cpu_share.h). Says so in the
  // log when the answer changes.
  bool stageInstead();

  struct FreeAligned {
    void operator()(uint8_t* p) const { std::free(p); }
  };

  const shm::Segments& segments_;
  int rank_;
  int size_;
  WaitPolicy& waitPolicy_;
  uint64_t round_ = 0;  // rounds ever run on this communicator; the slot is round % kDirectSlots
  // The single-copy path's landing area for peers' chunks, allocated on its first use.
  std::unique_ptr<uint8_t, FreeAligned> peerChunks_;
  shm::HugePageAdvice hugePages_;
  // Peers' buffers allocated through ringcomm.empty(), mapped here by the single-copy path.
  shm::PeerBufferMappings peerBuffers_;
  // Threads that reduce this rank's slice where every peer's buffers are mapped here
  // (RINGCOMM_REDUCE_THREADS), and the helpers among them, started on first use.
  int reduceThreads_;
  std::unique_ptr<HelperThreads> helpers_;
  // Only on the lowest local rank, and only where stageInstead() may say yes.
  std::unique_ptr<OthersCpuUse> othersCpuUse_;
  double busyCores_;
  bool stagingInstead_ = false;
};

}  // namespace ringcomm::algorithms
