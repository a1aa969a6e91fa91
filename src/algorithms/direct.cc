// The direct schedule: the single-host all-reduce that touches memory the fewest times.
//
// A staged ring moves every byte through a shared-memory ring buffer 2(p-1) times. Here each rank
// copies its input once into its own staging slot; then rank j reduces slice j of the vector by
// reading slice j straight from every peer's slot (its own from its input), publishes the result
// in its slot, and finally every rank copies the p-1 reduced slices of the others into its output.
// Reduce-scatter + all-gather again, but each hop is a plain load from a peer's memory.
//
// A vector larger than a slot runs as several rounds; rounds take the slots in turn
// (round % kDirectSlots), so a rank can stage the next rounds while slower peers still read
// earlier ones. Slots are sized to stay in the shared
// last-level cache, so staging traffic rarely reaches DRAM: what does is the input read and the
// output write, which is the single-host limit of 2pN bytes.
//
// Synchronisation is three counters per rank (posted, reduced, done: rounds completed in each
// phase) that peers poll, spin-then-sleep on the doorbell (a publisher wakes only the peers asleep
// waiting on it). A slot is rewritten in round k only
// after every peer is done with round k - kDirectSlots, i.e. has finished reading it.
//
// Small vectors skip the reduce-scatter: every rank stages its whole input and reduces the whole
// vector from all slots in rank order. The order is the same on every rank, so the bits are too,
// and one synchronisation point is saved.
#include "algorithms/direct.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "plan/plan.h"
#include "common/bytes.h"
#include "common/failure.h"
#include "common/log.h"
#include "common/spin.h"
#include "common/tags.h"
#include "common/trace.h"
#include "reduce/reduce.h"
#include "transport/shm/segment.h"

namespace ringcomm::algorithms {
namespace {

// Below this many bytes per round, every rank reduces the whole vector itself (see above).
// Above it, splitting the reduction p ways saves more than the extra synchronisation costs.
constexpr size_t kWholeVectorBytes = 16 * 1024;
constexpr std::chrono::milliseconds kHealthCheckInterval{100};
// Beyond how many local ranks per core a single-copy-sized all-reduce stages through the slots
// when other processes take the cores. The kernel's copies cost about twice the CPU time per byte of
// the ranks' own (12 against 18 GB/s from DRAM, 19 against 35 from the cache, one core of the
// 2-core VM), which decides once the ranks are short of CPU time. Measured there with 4 busy
// processes and the ranks in one session (bench/RESULTS.md, issue 14), busbw single-copy against
// staged: 16 ranks at 8 MiB 0.19-0.21 against 0.24-0.27 GB/s; 8 ranks even; 4 ranks 0.74-0.99
// against 0.47-0.83, so the single copy stays below this crowding. Quiet, 16 ranks: 0.69-0.90
// against 0.48-0.63.
constexpr int kStagingRanksPerCore = 4;
// With RINGCOMM_SHM_CMA_BUSY_CORES=auto: stage once other processes use this share of the job's
// cores, and only where the ranks share one scheduling group (common/cpu_share.h). Measured with
// 16 ranks at 8 MiB on the 2-core VM (bench/RESULTS.md, "Ranks in sessions of their own"), per
// call single copy against staged: ranks in one session beside 1 busy process (others about 1
// core) 48 against 56 ms, beside 2 (1.3 cores) 75 against 61, beside 4 (1.5-1.6 cores) 120
// against 90-107. Each rank in a session of its own, as ringcomm-run, mpiexec and torchrun start
// them, the single copy won beside 4, 8 and 16 busy processes (others 0.7, 1.0 and 1.5 cores): 40
// against 58, 51 against 83 and 67 against 102 ms. A second sweep (bench/scheduling_groups.py) had
// one session beside 1 busy process favour the single copy again (41 against 49 ms), so the share
// is above what 1 busy process takes of 2 cores. Beside 8 and 16 staging lost there too (248
// against 217, 444 against 380 ms), which this does not catch.
constexpr double kAutoBusyShareOfCores = 0.6;


}  // namespace

DirectGroup::DirectGroup(const shm::Segments& segments, WaitPolicy& waitPolicy,
                         const Config& config)
    : segments_(segments), rank_(segments.localRank()), size_(segments.localSize()),
      waitPolicy_(waitPolicy), hugePages_(config.shmCrossMemoryHugePages),
      reduceThreads_(reduceThreadsFor(config.reduceThreads, size_)),
      busyCores_(config.shmCrossMemoryBusyCores) {
  // The lowest local rank decides for everyone, from its own configuration, as it does the
  // single-copy threshold (shm::Segments::settleCrossMemory).
  if (rank_ != 0 || config.shmCrossMemory != CrossMemory::Auto) return;
  std::vector<int> pids;
  for (int local = 0; local < size_; ++local) pids.push_back(segments_.pidOf(local));
  othersCpuUse_ = std::make_unique<OthersCpuUse>(pids, config.shmCrossMemoryOthersCoresFile);
  // The cores of all local ranks together: ranks bound one to a core are not crowded.
  const int jobCores = othersCpuUse_->jobCores();
  if (size_ <= kStagingRanksPerCore * jobCores) othersCpuUse_.reset();
  // A threshold the user set holds for any ranks; the automatic one only for ranks that share
  // one scheduling group (see kAutoBusyShareOfCores).
  if (busyCores_ < 0) {
    busyCores_ = kAutoBusyShareOfCores * jobCores;
    if (othersCpuUse_ && !shareOneAutogroup(pids)) othersCpuUse_.reset();
  }
}

bool DirectGroup::stageInstead() {
  if (!othersCpuUse_) return false;
  const double others = othersCpuUse_->cores();
  // Back to the single copy only once others use under half the threshold: use that hovers
  // about it does not flip the path every window.
  const bool instead = stagingInstead_ ? others >= busyCores_ / 2 : others >= busyCores_;
  if (instead != stagingInstead_) {
    RINGCOMM_LOG(LogLevel::Info, kLogTransport,
                 instead ? "other processes used %.2f cores' worth of CPU time: %d local ranks "
                           "stage all-reduces of %zu B and more through shared memory"
                         : "other processes used %.2f cores' worth of CPU time: %d local ranks "
                           "read all-reduces of %zu B and more from each other again",
                 others, size_, segments_.singleCopyMinBytes());
    stagingInstead_ = instead;
  }
  return instead;
}

shm::Segments::Progress DirectGroup::progressOf(Phase phase) {
  switch (phase) {
    case Phase::Posted: return &shm::DirectCounters::posted;
    case Phase::Reduced: return &shm::DirectCounters::reduced;
    case Phase::Done: break;
  }
  return &shm::DirectCounters::done;
}

void DirectGroup::publish(Phase phase, uint64_t value) {
  const shm::Segments::Progress progress = progressOf(phase);
  (segments_.counters(rank_).*progress).value.store(value, std::memory_order_seq_cst);
  segments_.ringDoorbellsOfWaiters(progress, value);
}

int DirectGroup::firstBehind(Phase phase, uint64_t value, int from) const {
  const shm::Segments::Progress progress = progressOf(phase);
  for (int peer = from; peer < size_; ++peer) {
    if ((segments_.counters(peer).*progress).value.load(std::memory_order_acquire) < value) {
      return peer;
    }
  }
  return -1;
}

void DirectGroup::waitForAll(Phase phase, uint64_t value, const Operation& op) {
  // Counters only grow: the peers found there stay there, so each scan resumes at the first
  // one that was not (this rank's own counter is there already).
  int behind = firstBehind(phase, value, 0);
  if (behind < 0) return;
  trace::Span span(trace::Phase::Wait, phase == Phase::Posted    ? "peers staged"
                                       : phase == Phase::Reduced ? "peers reduced their slices"
                                                                 : "peers done with the slot");
  SpinBudget spin = waitPolicy_.budget();
  auto lastHealthCheck = Clock::now();
  while (true) {
    const uint32_t doorbell = segments_.doorbellSnapshot();
    const int stillBehind = firstBehind(phase, value, behind);
    if (stillBehind < 0) return;
    // A peer got there meanwhile: the others are moving too, polling is worth it again.
    if (stillBehind != behind) spin.reset();
    behind = stillBehind;
    if (spin.spinAgain()) continue;
    const int behindRank = segments_.globalRank(behind);
    op.noteWaitingFor(behindRank);
    if (op.expired()) {
      const char* what = phase == Phase::Posted    ? "to stage its input"
                         : phase == Phase::Reduced ? "to publish its reduced slice"
                                                   : "to finish reading the previous round";
      raisePeerFailure<TimeoutError>(op, behindRank,
                                     "timed out waiting for rank " + std::to_string(behindRank) +
                                         " " + what + " (shared-memory direct schedule)");
    }
    // Asleep until the last of the peers gets there: one wake-up per wait, not one per peer.
    segments_.sleepUntilAllReach(progressOf(phase), value, doorbell,
                                 std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::min(op.remaining(), kHealthCheckInterval)));
    // This rank aborted (from another thread): nothing its peers do will end this wait.
    if (const std::string reason = segments_.ownAbort(); !reason.empty()) {
      raisePeerFailure<TransportError>(op, -1, "this rank's communicator closed: " + reason);
    }
    if (Clock::now() - lastHealthCheck >= kHealthCheckInterval || segments_.peerExited()) {
      // Every peer still behind, looked at again after the sleep: one that got there and then
      // exited (its part done, it returned and was killed) is not a failure of this collective,
      // and a dead one need not be the first of them. Taking `behind` from before the sleep once
      // failed one survivor where the others completed, which put them a collective apart.
      for (int peer = firstBehind(phase, value, behind); peer >= 0;
           peer = firstBehind(phase, value, peer + 1)) {
        std::string failure = segments_.peerFailure(peer);
        if (!failure.empty()) {
          raisePeerFailure<TransportError>(op, segments_.globalRank(peer), failure);
        }
      }
      lastHealthCheck = Clock::now();
    }
  }
}

void DirectGroup::stage(uint64_t round, const MessageTag& tag, size_t bytes, size_t total,
                        const Operation& op, const void* input, const void* output,
                        bool stageInstead, size_t outputBytes) {
  // The slot of this round was last used kDirectSlots rounds ago: wait until everyone read it.
  if (round >= shm::kDirectSlots) waitForAll(Phase::Done, round - shm::kDirectSlots + 1, op);
  shm::SlotDescriptor& descriptor = segments_.counters(rank_).descriptor[round % shm::kDirectSlots];
  descriptor.tag.store(tag.id, std::memory_order_relaxed);
  descriptor.bytes.store(bytes, std::memory_order_relaxed);
  descriptor.total.store(total, std::memory_order_relaxed);
  descriptor.signature.store(tag.signature, std::memory_order_relaxed);
  descriptor.input.store(reinterpret_cast<uintptr_t>(input), std::memory_order_relaxed);
  descriptor.output.store(reinterpret_cast<uintptr_t>(output), std::memory_order_relaxed);
  descriptor.stageInstead.store(stageInstead ? 1 : 0, std::memory_order_relaxed);
  // Only the single-copy path passes buffers; the staged rounds skip the lookup's lock.
  const auto sharedLocation = [](const void* buffer, size_t length) {
    if (buffer == nullptr) return shm::SharedLocation{};
    return shm::findSharedBuffer(buffer, length).value_or(shm::SharedLocation{});
  };
  descriptor.sharedInput = sharedLocation(input, total);
  descriptor.sharedOutput = sharedLocation(output, outputBytes == SIZE_MAX ? total : outputBytes);
}

void DirectGroup::checkDescriptors(uint64_t round, const MessageTag& tag, size_t bytes,
                                   size_t total, const Operation& op) {
  for (int peer = 0; peer < size_; ++peer) {
    const shm::SlotDescriptor& theirs =
        segments_.counters(peer).descriptor[round % shm::kDirectSlots];
    const uint64_t theirTag = theirs.tag.load(std::memory_order_relaxed);
    const uint64_t theirBytes = theirs.bytes.load(std::memory_order_relaxed);
    const uint64_t theirTotal = theirs.total.load(std::memory_order_relaxed);
    const uint32_t theirSignature = theirs.signature.load(std::memory_order_relaxed);
    if (theirTag == tag.id && theirBytes == bytes && theirSignature != tag.signature) {
      raisePeerFailure<MismatchError>(
          op, segments_.globalRank(peer),
          "rank " + std::to_string(segments_.globalRank(peer)) + " called " + describeTag(tag.id) + " with " +
              describeSignature(theirSignature, 0) + ", but this rank with " +
              describeSignature(tag.signature, 0) +
              ((tag.signature >> 16) != 0 ? " (ranks must agree on the element type and the root)"
                                          : " (ranks must agree on the element type and reduction)"));
    }
    if (theirTag != tag.id || theirBytes != bytes || theirTotal != total) {
      raisePeerFailure<MismatchError>(
          op, segments_.globalRank(peer),
          "rank " + std::to_string(segments_.globalRank(peer)) + " staged " + describeTag(static_cast<uint32_t>(theirTag)) +
              " of " + std::to_string(theirTotal) + " bytes, but this rank staged " +
              describeTag(tag.id) + " of " + std::to_string(total) +
              " bytes (ranks called different collectives, or with different sizes)");
    }
  }
}

void DirectGroup::allreduce(const Context& ctx, const void* input, void* output, size_t count,
                            DataType type, ReduceOp reduceOp) {
  const Operation& op = ctx.op;
  const MessageTag& tag = ctx.tag;
  const size_t element = elementSize(type);
  if (count * element >= segments_.singleCopyMinBytes() &&
      allreduceSingleCopy(op, tag, input, output, count, type, reduceOp)) {
    return;
  }
  const size_t roundCount = std::max<size_t>(1, segments_.slotBytes() / element);
  const uint8_t* in = static_cast<const uint8_t*>(input);
  uint8_t* out = static_cast<uint8_t*>(output);
  std::vector<const void*> sources(size_);

  for (size_t done = 0; done < count; done += roundCount) {
    const size_t n = std::min(roundCount, count - done);
    const size_t bytes = n * element;
    const uint64_t round = round_++;
    const int slot = static_cast<int>(round % shm::kDirectSlots);
    const uint8_t* roundIn = in + done * element;
    uint8_t* roundOut = out + done * element;
    uint8_t* staging = segments_.slotInput(rank_, slot);

    stage(round, tag, bytes, count * element, op);
    if (bytes <= kWholeVectorBytes) {
      {
        trace::Span span(trace::Phase::Stage, "into the shared-memory slot");
        copyBytes(staging, roundIn, bytes);
      }
      publish(Phase::Posted, round + 1);
      waitForAll(Phase::Posted, round + 1, op);
      checkDescriptors(round, tag, bytes, count * element, op);
      for (int peer = 0; peer < size_; ++peer) sources[peer] = segments_.slotInput(peer, slot);
      trace::Span span(trace::Phase::Reduce, "whole vector from every slot");
      reduce::reduceMany(roundOut, sources.data(), size_, n, type, reduceOp);
      reduce::finishAverage(roundOut, n, type, reduceOp, size_);
      publish(Phase::Done, round + 1);
      continue;
    }

    // Stage everything but this rank's own slice, which it reads from its input directly.
    const plan::Block own = plan::blockOf(n, size_, rank_);
    const size_t ownEnd = (own.offset + own.count) * element;
    {
      trace::Span span(trace::Phase::Stage, "into the shared-memory slot");
      copyBytes(staging, roundIn, own.offset * element);
      copyBytes(staging + ownEnd, roundIn + ownEnd, bytes - ownEnd);
    }
    publish(Phase::Posted, round + 1);

    waitForAll(Phase::Posted, round + 1, op);
    checkDescriptors(round, tag, bytes, count * element, op);
    // This rank's own contribution first (it may alias the output), then the peers in rank order:
    // a fixed order per slice, and only this rank computes this slice, so all ranks agree.
    const size_t at = own.offset * element;
    sources[0] = roundIn + at;
    for (int peer = 0, next = 1; peer < size_; ++peer) {
      if (peer != rank_) sources[next++] = segments_.slotInput(peer, slot) + at;
    }
    {
      trace::Span span(trace::Phase::Reduce, "this rank's slice");
      reduce::reduceMany(roundOut + at, sources.data(), size_, own.count, type, reduceOp);
      reduce::finishAverage(roundOut + at, own.count, type, reduceOp, size_);
      copyBytes(segments_.slotResult(rank_, slot) + at, roundOut + at, own.count * element);
    }
    publish(Phase::Reduced, round + 1);

    waitForAll(Phase::Reduced, round + 1, op);
    trace::Span span(trace::Phase::Gather, "the others' reduced slices");
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      const plan::Block theirs = plan::blockOf(n, size_, peer);
      copyBytes(roundOut + theirs.offset * element,
                segments_.slotResult(peer, slot) + theirs.offset * element,
                theirs.count * element);
    }
    publish(Phase::Done, round + 1);
  }
}

void DirectGroup::broadcast(const Context& ctx, void* buffer, size_t count, DataType type,
                            int root) {
  const Operation& op = ctx.op;
  const MessageTag& tag = ctx.tag;
  const size_t element = elementSize(type);
  const size_t roundCount = std::max<size_t>(1, segments_.slotBytes() / element);
  uint8_t* data = static_cast<uint8_t*>(buffer);
  // One round even for an empty vector: the ranks still compare what they called.
  size_t done = 0;
  do {
    const size_t n = std::min(roundCount, count - done);
    const size_t bytes = n * element;
    const uint64_t round = round_++;
    const int slot = static_cast<int>(round % shm::kDirectSlots);
    stage(round, tag, bytes, count * element, op);
    if (rank_ == root) {
      trace::Span span(trace::Phase::Stage, "into the shared-memory slot");
      copyBytes(segments_.slotInput(rank_, slot), data + done * element, bytes);
    }
    publish(Phase::Posted, round + 1);
    // Every rank's descriptor, not only the root's: a rank that names another root is caught by
    // all of them, the root included, rather than only by itself.
    waitForAll(Phase::Posted, round + 1, op);
    checkDescriptors(round, tag, bytes, count * element, op);
    if (rank_ != root) {
      trace::Span span(trace::Phase::Gather, "from the root's slot");
      copyBytes(data + done * element, segments_.slotInput(root, slot), bytes);
    }
    // The root's slot is rewritten only once every rank has published this (stage()).
    publish(Phase::Done, round + 1);
    done += n;
  } while (done < count);
}

void DirectGroup::barrier(const Context& ctx) {
  const Operation& op = ctx.op;
  const MessageTag& tag = ctx.tag;
  const uint64_t round = round_++;
  stage(round, tag, 0, 0, op);
  publish(Phase::Posted, round + 1);
  waitForAll(Phase::Posted, round + 1, op);
  checkDescriptors(round, tag, 0, 0, op);
  publish(Phase::Done, round + 1);
}

}  // namespace ringcomm::algorithms
