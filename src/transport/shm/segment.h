// The shared-memory segments of the ranks on one host.
//
// Each rank creates one segment (shm_open + mmap) and maps every local peer's. A segment holds:
//   - a header: the rank's doorbell (a futex word peers bump when they change something this rank
//     may be waiting for), its pid (so peers can tell it died), its abort flag and reason, and
//     what peers need to read its memory directly (cross_memory.h);
//   - the staging area of the direct schedule: progress counters and kDirectSlots slots of
//     input + result;
//   - one incoming ring per local peer, for point-to-point traffic (the sender writes `head`, this
//     rank reads and advances `tail`).
// Segment names are unlinked as soon as every local rank has mapped them, so a crash leaks nothing.
//
// A segment's memory is reserved when it is made (posix_fallocate), not on first touch: a /dev/shm
// too small for it (Docker's and Kubernetes' default is 64 MiB) is an error at setup, never a
// SIGBUS in the middle of a collective. Before that, the lowest local rank sizes every rank's
// segment to the room /dev/shm has (planSegments).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/process.h"
#include "transport/shm/shared_buffers.h"

namespace ringcomm::shm {

constexpr size_t kCacheLine = 64;
// Staging slots of the direct schedule per rank. Rounds use them in turn, so a rank can run this
// many rounds minus one ahead of its slowest peer before it has to wait for it.
constexpr int kDirectSlots = 4;

struct alignas(kCacheLine) PaddedCounter {
  std::atomic<uint64_t> value{0};
};

// A sleeper's `waitingOn`: it waits for any change (a point-to-point ring, an abort).
constexpr int32_t kWaitingOnAnyone = -1;
// A sleeper's `waitingOn`: it waits until every local rank has reached a phase of the direct
// schedule; the rank that gets there last wakes it (Segments::ringDoorbellsOfWaiters).
constexpr int32_t kWaitingOnEveryone = -2;

struct alignas(kCacheLine) SegmentHeader {
  std::atomic<uint32_t> doorbell{0};
  std::atomic<uint32_t> sleepers{0};
  // kWaitingOnEveryone or kWaitingOnAnyone. A rank that publishes progress wakes the sleepers
  // waiting on everyone only when it was the last to get there. With 16 ranks on 2 cores, waking
  // all 15 peers at every publication made ~15 times the context switches the schedule needs,
  // and waking a sleeper for each peer it waited on in turn still about 3 times (bench/RESULTS.md,
  // "One wake-up per wait"): the ranks woken for nothing took the cores from the ones with work.
  std::atomic<int32_t> waitingOn{kWaitingOnAnyone};
  alignas(kCacheLine) std::atomic<uint32_t> aborted{0};
  int32_t pid = 0;
  char abortReason[240] = {};
  // Cross-memory attach, written once at setup. `token` is a random word and `tokenAddress` its
  // address in the owner's process: a peer that reads that address through the owner's pid and
  // finds the token knows the pid reaches this rank (probeCrossMemory()).
  uint64_t token = 0;
  uint64_t tokenAddress = 0;
  // What this rank found when it probed every peer (CrossMemoryState), and, on the lowest local
  // rank, the all-reduce size from which the direct schedule reads peers' buffers directly.
  std::atomic<uint32_t> crossMemory{0};
  uint64_t singleCopyMinBytes = 0;
};

enum class CrossMemoryState : uint32_t { Unknown, Usable, Disabled, Refused };

// What a rank is staging in a slot of the direct schedule; peers compare it with their own, so
// that ranks calling different collectives get a MismatchError instead of wrong numbers.
struct alignas(kCacheLine) SlotDescriptor {
  std::atomic<uint64_t> tag{0};
  std::atomic<uint64_t> bytes{0};  // of this round
  std::atomic<uint64_t> total{0};  // of the whole collective: ranks whose sizes differ in the
                                   // last round only are caught in the first
  std::atomic<uint32_t> signature{0};  // see MessageTag
  // The single-copy path: the addresses of the caller's input and output in this rank's process,
  // which peers read with process_vm_readv. 0 on the staged path.
  std::atomic<uint64_t> input{0};
  std::atomic<uint64_t> output{0};
  // Set by the lowest local rank alone, on the single-copy path: other processes take the cores,
  // so every rank stages this all-reduce through the slots instead (DirectGroup::allreduce).
  std::atomic<uint32_t> stageInstead{0};
  // The single-copy path: where the input and output lie in buffers that peers can map
  // (shared_buffers.h); serial 0 where they do not. Written before Posted, read after it.
  SharedLocation sharedInput;
  SharedLocation sharedOutput;
};

struct DirectCounters {
  PaddedCounter posted;   // rounds whose input this rank has staged
  PaddedCounter reduced;  // rounds whose reduced slice this rank has published
  PaddedCounter done;     // rounds this rank has finished reading from everyone
  SlotDescriptor descriptor[kDirectSlots];
};

struct alignas(kCacheLine) RingHeader {
  PaddedCounter head;  // bytes ever written (by the sender)
  PaddedCounter tail;  // bytes ever read (by the receiver)
};

struct RingView {
  RingHeader* header = nullptr;
  uint8_t* data = nullptr;
  size_t capacity = 0;
};

// How large the segments of this host's ranks are: the same for every local rank (they map each
// other's), chosen by the lowest one from the room in /dev/shm.
struct SegmentPlan {
  size_t slotBytes = 0;
  size_t ringBytes = 0;
  bool fits = false;  // false: not even the smallest segments fit; ranks use TCP between them
  bool shrunk = false;  // smaller than configured, to fit
  std::string room;     // "/dev/shm has X MiB free; N ranks need Y MiB", for warnings

  std::string encode() const;
  static SegmentPlan decode(const std::string& text);
};

// The direct schedule's staging slot when RINGCOMM_SHM_SLOT_BYTES is not set (0): small enough
// that every rank's slots stay in the last-level cache (include/ringcomm/config.h) ...
constexpr size_t kDefaultSlotBytes = 512 * 1024;
// ... unless local ranks outnumber the cores: then each of a round's three synchronisations waits
// for ranks to get a core, and fewer, larger rounds win. Measured on the 2-core VM, back to back
// (bench/RESULTS.md, issue 14): 16 ranks with 4 busy processes, 8 MiB: 0.65-0.72x MPICH with
// 512 KiB slots, 1.00-1.19x with 2 MiB; 4 ranks quiet, 32 MiB: 1.95 against 2.8-2.9 GB/s busbw.
constexpr size_t kCrowdedSlotBytes = 4 * kDefaultSlotBytes;
size_t slotBytesFor(size_t configured, int localSize, int cores);

// The all-reduce size from which the direct schedule reads peers' buffers directly
// (src/algorithms/direct_single_copy.cc) when RINGCOMM_SHM_CMA_MIN_BYTES is not set. Measured on
// the 2-core VM, staged against single copy, back to back, a busy machine (bench/RESULTS.md, issue
// 14): at 16 ranks single copy is slower at 4 MiB (22.3-25.0 ms against 14.7-22.8: three
// synchronisations of every rank per call) and 1.6-2.2x faster at 8 MiB (34.9-39.0 ms against
// 56.9-85.5); at 4 ranks 1.2-1.7x faster from 4 MiB, slower at 2 MiB; at 2 ranks mixed at 4 MiB,
// 2-4x faster at 8 MiB.
constexpr size_t kSingleCopyMinBytes = 8 << 20;

// Halves the configured slot and ring sizes (down to kSmallestSlotBytes) until localSize segments
// fit in the free space of /dev/shm.
SegmentPlan planSegments(int localSize, size_t slotBytes, size_t ringBytes);

class Segments {
 public:
  // localRanks: the global ranks on this host, in order; this rank is localRanks[localRank].
  Segments(std::string jobKey, std::vector<int> localRanks, int localRank, size_t slotBytes,
           size_t ringBytes);
  ~Segments();
  Segments(const Segments&) = delete;
  Segments& operator=(const Segments&) = delete;

  // The bytes of one rank's segment, for localSize ranks with these slot and ring sizes.
  static size_t bytesFor(int localSize, size_t slotBytes, size_t ringBytes);

  void createOwn();    // phase 1: throws Error when /dev/shm cannot hold it
  void attachPeers();  // phase 2, once every local rank has created its own
  void unlinkOwn();    // phase 3, once every local rank has attached
  // After a failed setup: unlinks every local rank's segment name (a rank that died cannot).
  void unlinkAll();

  int localRank() const { return localRank_; }
  int localSize() const { return static_cast<int>(localRanks_.size()); }
  int globalRank(int local) const { return localRanks_[local]; }

  SegmentHeader& header(int local) const;
  DirectCounters& counters(int local) const;
  uint8_t* slotInput(int local, int slot) const;
  uint8_t* slotResult(int local, int slot) const;
  size_t slotBytes() const { return slotBytes_; }
  RingView ring(int receiverLocal, int senderLocal) const;

  // Wakes `local` if it sleeps on its doorbell; cheap when it does not.
  void ringDoorbell(int local) const;
  void ringAllDoorbells() const;
  uint32_t doorbellSnapshot() const;
  // A progress counter of the direct schedule: DirectCounters::posted, ::reduced or ::done.
  using Progress = PaddedCounter DirectCounters::*;
  // Whether every local rank's `progress` counter has reached `value`.
  bool allReached(Progress progress, uint64_t value) const;
  // Call after storing this rank's `progress` counter as `value`. Wakes the local peers asleep
  // waiting on anything, and, if every local rank has now reached `value`, those asleep
  // waiting on everyone (sleepUntilAllReach).
  void ringDoorbellsOfWaiters(Progress progress, uint64_t value) const;
  // Sleeps until this rank's doorbell moves past `seen` or `maxWait` passes.
  void sleepOnDoorbell(uint32_t seen, std::chrono::microseconds maxWait) const;
  // Sleeps until every local rank's `progress` counter reaches `value` (the last to get there
  // rings this rank's doorbell), the doorbell moves past `seen` otherwise, or `maxWait` passes;
  // not at all if they are all there. Only one thread of a rank may sleep this way at a time
  // (the engine's: every collective runs on it).
  void sleepUntilAllReach(Progress progress, uint64_t value, uint32_t seen,
                          std::chrono::microseconds maxWait) const;

  // Cross-memory attach, settled at setup in two steps with a synchronisation between them.
  // probeCrossMemory(), after attachPeers(): this rank tries to read every peer's token and
  // publishes what it found (and, on the lowest local rank, `minBytes`). Returns why it cannot,
  // or "" when it can (or is not `wanted` to). settleCrossMemory(), once every local rank has
  // probed: every rank reads the same headers, so every rank takes the same decision: single
  // copy when all of them can, from the lowest local rank's threshold. Returns why not, or "".
  std::string probeCrossMemory(bool wanted, size_t minBytes);
  std::string settleCrossMemory();
  // The all-reduce bytes from which the direct schedule reads peers' buffers directly; SIZE_MAX
  // when it never does.
  size_t singleCopyMinBytes() const { return singleCopyMinBytes_; }
  int pidOf(int local) const { return header(local).pid; }

  // After attachPeers(): from now on a local peer's process that exits rings this rank's doorbell
  // at once (ExitWatch), as an abort does, so a sleeping wait looks at its peers then rather
  // than at its next look. peerExited(): whether one has.
  void watchPeers();
  bool peerExited() const { return exitWatch_ && exitWatch_->anyExited(); }

  // Empty if local peer `local` is alive and has not aborted; else a description.
  std::string peerFailure(int local) const;
  // Whether local peer `local`'s process is gone without having aborted: it recorded no reason
  // for its end anywhere, and none will come.
  bool diedWithoutAborting(int local) const;
  // Raises this rank's abort flag with `reason` and rings every local rank's doorbell, its own
  // included: peers then fail naming this rank, and this rank's own waits (on an engine thread,
  // when abort() came from another) wake and end, where they would otherwise sleep on until
  // their deadline for peers that are alive but not calling the operation.
  void markAborted(const std::string& reason);
  // Empty until markAborted() ran on this rank; then its reason.
  std::string ownAbort() const;

 private:
  size_t segmentBytes() const;
  size_t directOffset() const;
  size_t slotsOffset() const;
  size_t ringsOffset() const;
  std::string nameOf(int local) const;

  std::string jobKey_;
  std::vector<int> localRanks_;
  int localRank_;
  size_t slotBytes_;
  size_t ringBytes_;
  std::vector<uint8_t*> bases_;
  bool unlinked_ = false;
  size_t singleCopyMinBytes_ = SIZE_MAX;
  std::unique_ptr<ExitWatch> exitWatch_;  // reset before the segments are unmapped
};

}  // namespace ringcomm::shm
