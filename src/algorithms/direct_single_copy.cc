// The direct schedule's single-copy all-reduce: ranks read and write each other's buffers directly
// (cross-memory attach, src/transport/shm/cross_memory.h) instead of staging them in shared memory.
//
// The staged schedule (direct.cc) is bound by memory bandwidth on a busy host: per rank it copies
// its input into its slot, reads p slices to reduce its own, writes the result twice (output and
// slot) and copies the p-1 other slices out, about five passes over the vector. Here, in one round
// of the same counters and descriptors:
//
//   posted   each rank describes its collective in its slot descriptor, with the addresses of its
//            input and output; peers check the descriptors as the staged path does, so ranks that
//            disagree get a MismatchError before a byte moves.
//   reduce   rank r owns slice r (plan::blockOf). Chunk by chunk it reads slice r's chunk of every
//            peer's input into a landing buffer per peer and reduces its own input's chunk and
//            those, in rank order, into slice r of its output. Only rank r computes slice r, so
//            one order fixes the bits on every rank.
//   push     while the reduced chunk is still in the cache, rank r writes it into every peer's
//            output (process_vm_writev): the all-gather costs no second read of the result from
//            memory, and no synchronisation of its own.
//   done     published. Before returning, a rank waits until every peer is done: peers read its
//            input and write its output, and the caller may reuse both as soon as it returns.
//
// Across hosts (hierarchical.cc) the same round is this host's part: local rank j reduces slice j
// of the host's inputs segment by segment as the exchange with the other hosts reaches it, and
// writes the final segments where they belong: every peer's output for an all-reduce, the one
// output that holds each element for a reduce-scatter (SingleCopyPlan).
//
// In place (input == output) is safe: rank r overwrites chunk c of slice r in peer q's buffer only
// after reading it itself, and no one else reads slice r of q's input (q reads only slice q).
//
// A peer whose input and output lie in buffers from ringcomm.empty() (shared_buffers.h), which
// this rank maps, is read and written with loads and stores instead: the kernel's copies cost
// about twice the CPU time per byte, and 4 ranks on 2 cores are bound by them (bench/RESULTS.md,
// "Shared buffers"). The schedule is the same; a rank may map some peers and copy with the
// kernel for others.
//
// Per rank this moves the input once (S), the own slice once (S/p) and the others' slices once
// (S(p-1)/p, from the cache into the peers' memory): about 2.5S at p = 4 instead of 5S. The
// kernel makes the copies; where it copies slowly (a hypervisor that traps each page's copy), the
// threshold (shm::kSingleCopyMinBytes, RINGCOMM_SHM_CMA_MIN_BYTES) keeps small vectors staged.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "algorithms/direct.h"
#include "plan/plan.h"
#include "common/bytes.h"
#include "common/failure.h"
#include "common/log.h"
#include "common/trace.h"
#include "reduce/reduce.h"
#include "transport/shm/cross_memory.h"
#include "transport/shm/segment.h"
#include "transport/shm/shared_buffers.h"

namespace ringcomm::algorithms {
namespace {

// How much of one peer's slice a rank reads per system call. Each call pins the peer's pages and
// costs a few microseconds, so larger chunks cost less per byte; but the landing buffers, one
// chunk per peer, and the reduced chunk that is then written to every peer should stay in the
// cache. Measured on the 2-core VM (bench/RESULTS.md, issue 14), busbw: 4 ranks at 64 MiB 4.4-4.7,
// 4.7-5.0, 4.6 and 4.2-4.3 GB/s with 128, 256, 512 and 1024 KiB; 16 ranks at 8 MiB 0.89-0.91,
// 0.84, 0.71-0.79 and 0.63-0.68 GB/s with 64, 128, 256 and 512 KiB; 8 ranks at 16 MiB even from
// 64 to 256 KiB. So about 1 MiB of landing buffers in all, within these bounds:
constexpr size_t kLandingBytes = 1 << 20;
constexpr size_t kSmallestChunkBytes = 64 * 1024;
constexpr size_t kLargestChunkBytes = 256 * 1024;
constexpr size_t kLandingAlignment = 4096;
// A helper thread takes a part of a slice only where each part gets at least this much: waking
// one costs about ten microseconds, reducing 256 KiB of 4 inputs about a hundred.
constexpr size_t kBytesPerReduceThread = 256 * 1024;

// Where in `area` (page-aligned) a chunk to or from `remote` starts: at the same offset within a
// cache line, rounded down to `element` (1 for a buffer only the kernel reads). The kernel copies
// with `rep movsb`, which on AMD Zen runs at a third of its speed or less when the destination
// lies 1-31 bytes after the source modulo the page (common/bytes.h). A fixed placement hits that
// for some buffers: a peer's output 16 bytes into a page (numpy's large arrays) written from a
// page-aligned buffer, or any slice whose offset `at` moves it there. Measured with 256 KiB
// process_vm_readv calls on the 2-core VM: 2.0 GB/s at a distance of 16, 5.5-7.4 GB/s at 0, 32,
// 64 and -16.
uint8_t* alignedLike(uint64_t remote, size_t element, uint8_t* area) {
  const size_t withinLine = static_cast<size_t>(remote % 64) / element * element;
  return area + withinLine;
}

// Whether a peer's shared buffer holds all `bytes` of the call from the offset it names.
bool covers(const shm::SharedLocation& location, size_t bytes) {
  return location.serial != 0 && location.offset <= location.bytes &&
         bytes <= location.bytes - location.offset;
}

size_t chunkBytesFor(int size) {
  const size_t chunk = kLandingBytes / static_cast<size_t>(std::max(1, size - 1));
  return std::clamp(chunk, kSmallestChunkBytes, kLargestChunkBytes) / kLandingAlignment *
         kLandingAlignment;
}

}  // namespace

void DirectGroup::accessPeer(int peer, bool write, uint64_t remote, void* local, size_t bytes,
                             const Operation& op) {
  if (write) raiseIfAborted(peer, op);
  const int pid = segments_.pidOf(peer);
  const int failed = write ? shm::writeProcessMemory(pid, remote, local, bytes)
                           : shm::readProcessMemory(pid, remote, local, bytes);
  if (failed == 0) return;
  // A peer that died (ESRCH) or left the collective (EFAULT: its buffer is gone) is named as the
  // staged path names it; anything else says what the kernel said.
  std::string failure = segments_.peerFailure(peer);
  if (failure.empty()) {
    failure = std::string(write ? "writing" : "reading") + " rank " + std::to_string(segments_.globalRank(peer)) +
              "'s memory (" + (write ? "process_vm_writev" : "process_vm_readv") +
              ") failed: " + std::strerror(failed);
  }
  raisePeerFailure<TransportError>(op, segments_.globalRank(peer), failure);
}

void DirectGroup::raiseIfAborted(int peer, const Operation& op) {
  // A peer that failed (a timeout while this rank was slow) may have handed its output back to
  // its caller: write nothing more into it. It marks itself aborted before its error surfaces.
  if (segments_.header(peer).aborted.load(std::memory_order_acquire) != 0) {
    raisePeerFailure<TransportError>(op, segments_.globalRank(peer), segments_.peerFailure(peer));
  }
}

void DirectGroup::writeMappedPeer(int peer, uint8_t* to, const uint8_t* from, size_t bytes,
                                  const Operation& op) {
  raiseIfAborted(peer, op);
  copyBytes(to, from, bytes);
}

bool DirectGroup::allreduceAcrossHosts(const Context& ctx, const void* input, void* output,
                                       size_t count, DataType type, ReduceOp reduceOp,
                                       const std::vector<plan::Block>& blocks,
                                       const SliceStep& across) {
  if (segments_.singleCopyMinBytes() == SIZE_MAX) return false;  // some rank cannot reach others
  SingleCopyPlan plan;
  plan.slices = blocks;
  return reduceSingleCopy(ctx.op, ctx.tag, input, output, count, type, reduceOp, plan, &across);
}

bool DirectGroup::reduceScatterAcrossHosts(const Context& ctx, const void* input, void* output,
                                           uint8_t* work, size_t count, DataType type,
                                           ReduceOp reduceOp,
                                           const std::vector<plan::Block>& blocks,
                                           const std::vector<plan::Block>& outputs,
                                           const SliceStep& across) {
  if (segments_.singleCopyMinBytes() == SIZE_MAX) return false;
  SingleCopyPlan plan;
  plan.slices = blocks;
  plan.outputs = outputs;
  plan.work = work;
  return reduceSingleCopy(ctx.op, ctx.tag, input, output, count, type, reduceOp, plan, &across);
}

bool DirectGroup::allreduceSingleCopy(const Operation& op, const MessageTag& tag, const void* input,
                                      void* output, size_t count, DataType type,
                                      ReduceOp reduceOp) {
  SingleCopyPlan plan;
  for (int j = 0; j < size_; ++j) plan.slices.push_back(plan::blockOf(count, size_, j));
  return reduceSingleCopy(op, tag, input, output, count, type, reduceOp, plan, nullptr);
}

bool DirectGroup::postSingleCopy(const Operation& op, const MessageTag& tag, const void* input,
                                 const void* output, size_t total, size_t outputBytes,
                                 uint64_t round) {
  // Before posting: every peer finished the previous call (its Done), and none touches these
  // buffers until this rank has posted them.
  // The lowest rank's answer goes out with its descriptor; it need not collapse buffers that
  // will be staged (the others learn it only once all have posted).
  const bool askToStage = rank_ == 0 && stageInstead();
  stage(round, tag, total, total, op, input, output, askToStage, outputBytes);
  // Buffers from ringcomm.empty() (found by stage()) are shared memory, which the collapse does
  // not concern.
  const shm::SlotDescriptor& mine = segments_.counters(rank_).descriptor[round % shm::kDirectSlots];
  if (!askToStage && mine.sharedInput.serial == 0) hugePages_.note(input, total);
  if (!askToStage && mine.sharedOutput.serial == 0 && output != input) {
    hugePages_.note(output, outputBytes);
  }
  publish(Phase::Posted, round + 1);
  waitForAll(Phase::Posted, round + 1, op);
  checkDescriptors(round, tag, total, total, op);
  // Every rank reads the lowest's answer from the same round, so they all take the same path.
  // This round moved nothing: done with it at once.
  if (segments_.counters(0).descriptor[round % shm::kDirectSlots].stageInstead.load(
          std::memory_order_relaxed) != 0) {
    publish(Phase::Done, round + 1);
    return false;
  }
  return true;
}

// One single-copy round once every rank has posted its buffers: where each peer's input and
// output are (in its process, or mapped here), and the steps on chunks of this rank's slice:
// reduce a chunk of every input, push the result into every output that holds it.
class DirectGroup::SingleCopyRound {
 public:
  SingleCopyRound(DirectGroup& group, const Operation& op, const void* input, void* output,
                  size_t count, DataType type, ReduceOp reduceOp, const SingleCopyPlan& plan,
                  uint64_t round)
      : group_(group), op_(op), size_(group.size_), rank_(group.rank_),
        element_(elementSize(type)), count_(count), type_(type), reduceOp_(reduceOp),
        plan_(plan), in_(static_cast<const uint8_t*>(input)), out_(static_cast<uint8_t*>(output)),
        own_(plan.slices[group.rank_]), chunkBytes_(chunkBytesFor(size_)),
        areaBytes_(chunkBytes_ + kLandingAlignment), chunkCount_(chunkBytes_ / element_),
        descriptors_(size_), mappedInput_(size_, nullptr), mappedOutput_(size_, nullptr) {
    for (int peer = 0; peer < size_; ++peer) {
      descriptors_[peer] = &group.segments_.counters(peer).descriptor[round % shm::kDirectSlots];
    }
    // One landing area per peer and one for a copy of the reduced chunk placed for a peer (see
    // alignedLike), each a page longer than a chunk, so that a chunk can start anywhere in a
    // line.
    if (!group.peerChunks_) {
      const size_t bytes = areaBytes_ * static_cast<size_t>(size_);  // a multiple of the page
      group.peerChunks_.reset(static_cast<uint8_t*>(std::aligned_alloc(kLandingAlignment, bytes)));
      if (!group.peerChunks_) throw std::bad_alloc();
    }
    peerChunks_ = group.peerChunks_.get();
    bounceArea_ = peerChunks_ + static_cast<size_t>(size_ - 1) * areaBytes_;
    mapSharedBuffers();
  }

  // This rank's slice, chunk by chunk: each reduced chunk goes to the peers while it is still in
  // the cache. Where every peer is mapped, helper threads take parts of the slice.
  void reduceOwnSlice() {
    const int parts = partsOfSlice();
    if (parts > 1 && !group_.helpers_) {
      group_.helpers_ = std::make_unique<HelperThreads>(group_.reduceThreads_ - 1);
      RINGCOMM_LOG(LogLevel::Info, kLogTransport,
                   "single-copy all-reduce between mapped buffers: %d threads per rank reduce "
                   "slices of %zu B and more (RINGCOMM_REDUCE_THREADS)",
                   group_.reduceThreads_, 2 * kBytesPerReduceThread);
    }
    // Each part of the slice is a run of whole chunks, so that parts start on the landing
    // alignment.
    trace::Span span(trace::Phase::Reduce, "this rank's slice, into every peer's output");
    const size_t chunksInSlice = (own_.count + chunkCount_ - 1) / chunkCount_;
    const size_t chunksPerPart = (chunksInSlice + parts - 1) / static_cast<size_t>(parts);
    const auto reducePart = [&](int part) {
      std::vector<const void*> partSources(size_);
      const size_t first = static_cast<size_t>(part) * chunksPerPart * chunkCount_;
      const size_t end = std::min(own_.count, first + chunksPerPart * chunkCount_);
      for (size_t done = first; done < end; done += chunkCount_) {
        const size_t at = (own_.offset + done) * element_;
        const size_t n = std::min(chunkCount_, end - done);
        reduceChunk(partSources, at, n);
        pushChunk(at, n);
      }
    };
    if (parts > 1) {
      group_.helpers_->run(parts, reducePart);
    } else {
      reducePart(0);
    }
  }

  // This rank's slice handed to `across` (the exchange with the other hosts), which reduces and
  // pushes it segment by segment as it reaches each, so that these copies overlap the network's
  // transfers. Segments are in elements of this rank's slice.
  void reduceWithOtherHosts(const SliceStep& across) {
    if (own_.count == 0) return;
    std::vector<const void*> sources(size_);
    const auto reduce = [&](size_t at, size_t n) { reduceChunk(sources, at, n); };
    const auto push = [&](size_t at, size_t n) { pushChunk(at, n); };
    const auto inChunks = [&](const auto& step) {
      return [&, step](const plan::Block& segment) {
        for (size_t done = 0; done < segment.count; done += chunkCount_) {
          step((own_.offset + segment.offset + done) * element_,
               std::min(chunkCount_, segment.count - done));
        }
      };
    };
    trace::Span span(trace::Phase::Reduce, "this rank's slice, with the other hosts");
    across(resultAt(own_.offset * element_), own_, SegmentHooks{inChunks(reduce), inChunks(push)});
  }

 private:
  // The part of a chunk that a peer's output holds, and where there.
  struct Destination {
    size_t at = 0;  // byte offset in the vector
    size_t bytes = 0;
    size_t offset = 0;  // byte offset in the peer's output
  };

  // Peers whose input and output both lie in buffers they allocated through ringcomm.empty()
  // and this rank can map: read and written with loads and stores, not the kernel's copies.
  void mapSharedBuffers() {
    const size_t total = count_ * element_;
    for (int peer = 0; peer < size_; ++peer) {
      const shm::SlotDescriptor& theirs = *descriptors_[peer];
      if (peer == rank_ || !covers(theirs.sharedInput, total) ||
          !covers(theirs.sharedOutput, windowOf(peer).count * element_)) {
        continue;
      }
      const int pid = group_.segments_.pidOf(peer);
      const uint8_t* inputBase = group_.peerBuffers_.map(peer, pid, theirs.sharedInput);
      uint8_t* outputBase =
          inputBase ? group_.peerBuffers_.map(peer, pid, theirs.sharedOutput) : nullptr;
      if (outputBase == nullptr) continue;
      mappedInput_[peer] = inputBase + theirs.sharedInput.offset;
      mappedOutput_[peer] = outputBase + theirs.sharedOutput.offset;
    }
  }

  // The elements of the vector that local rank `peer`'s output holds, from its start.
  plan::Block windowOf(int peer) const {
    return plan_.outputs.empty() ? plan::Block{0, count_} : plan_.outputs[peer];
  }

  // Where this rank's slice is reduced: in its output, which holds it (an all-reduce), or in the
  // work buffer (a reduce-scatter). `at` is a byte offset in the vector, within the slice.
  uint8_t* resultAt(size_t at) const {
    return plan_.work == nullptr ? out_ + at : plan_.work + (at - own_.offset * element_);
  }

  // How many threads reduce this rank's slice: one, unless every peer is mapped here, when no
  // landing or bounce area is shared and threads can take parts of the slice, each element still
  // reduced by one thread in rank order (the same bits).
  int partsOfSlice() const {
    bool everyPeerMapped = plan_.work == nullptr;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer != rank_ && mappedOutput_[peer] == nullptr) everyPeerMapped = false;
    }
    if (!everyPeerMapped) return 1;
    return static_cast<int>(std::clamp<size_t>(own_.count * element_ / kBytesPerReduceThread, 1,
                                               static_cast<size_t>(group_.reduceThreads_)));
  }

  // Reduces [at, at + n elements) of every rank's input into resultAt(at): this rank's own
  // contribution first (it may alias the output), then the peers in rank order.
  void reduceChunk(std::vector<const void*>& sources, size_t at, size_t n) const {
    sources[0] = in_ + at;
    for (int peer = 0, next = 1; peer < size_; ++peer) {
      if (peer == rank_) continue;
      if (mappedInput_[peer] != nullptr) {
        sources[next++] = mappedInput_[peer] + at;
        continue;
      }
      const uint64_t remote = descriptors_[peer]->input.load(std::memory_order_relaxed) + at;
      uint8_t* landing =
          alignedLike(remote, element_, peerChunks_ + static_cast<size_t>(next - 1) * areaBytes_);
      group_.accessPeer(peer, false, remote, landing, n * element_, op_);
      sources[next++] = landing;
    }
    reduce::reduceMany(resultAt(at), sources.data(), size_, n, type_, reduceOp_);
    reduce::finishAverage(resultAt(at), n, type_, reduceOp_, size_);
  }

  // The part of the chunk [at, at + n elements) that `peer`'s output holds, and where there.
  Destination destinationIn(int peer, size_t at, size_t n) const {
    const plan::Block window = windowOf(peer);
    const plan::Block part = plan::intersect(plan::Block{at / element_, n}, window);
    if (part.count == 0) return Destination{};
    return Destination{part.offset * element_, part.count * element_,
                       (part.offset - window.offset) * element_};
  }

  // Writes the reduced chunk [at, at + n elements) into every output that holds a part of it,
  // starting after this rank, so that the ranks do not all write to rank 0 first. A peer whose
  // output lies a few bytes after this rank's (modulo the page) gets the chunk from a copy
  // placed exactly like its output (the kernel needs no alignment to read it), remade when the
  // placement or the part changes from one such peer to the next.
  void pushChunk(size_t at, size_t n) const {
    Destination bounced;        // the part last placed there
    uint8_t* bounce = nullptr;  // where it was placed
    for (int step = 1; step < size_; ++step) {
      const int peer = (rank_ + step) % size_;
      const Destination to = destinationIn(peer, at, n);
      if (to.bytes == 0) continue;
      uint8_t* source = resultAt(to.at);
      if (mappedOutput_[peer] != nullptr) {
        group_.writeMappedPeer(peer, mappedOutput_[peer] + to.offset, source, to.bytes, op_);
        continue;
      }
      const uint64_t remote =
          descriptors_[peer]->output.load(std::memory_order_relaxed) + to.offset;
      if (isShortForwardDistance(reinterpret_cast<const void*>(remote), source)) {
        uint8_t* placed = alignedLike(remote, 1, bounceArea_);
        if (placed != bounce || to.at != bounced.at || to.bytes != bounced.bytes) {
          copyBytes(placed, source, to.bytes);
        }
        bounce = placed;
        bounced = to;
        source = placed;
      }
      group_.accessPeer(peer, true, remote, source, to.bytes, op_);
    }
    // This rank's own part, where it reduced into a work buffer.
    const Destination mine = destinationIn(rank_, at, n);
    if (plan_.work != nullptr && mine.bytes > 0) {
      copyBytes(out_ + mine.offset, resultAt(mine.at), mine.bytes);
    }
  }

  DirectGroup& group_;
  const Operation& op_;
  const int size_;
  const int rank_;
  const size_t element_;
  const size_t count_;
  const DataType type_;
  const ReduceOp reduceOp_;
  const SingleCopyPlan& plan_;
  const uint8_t* const in_;
  uint8_t* const out_;
  const plan::Block own_;  // this rank's slice of the vector
  const size_t chunkBytes_;
  const size_t areaBytes_;
  const size_t chunkCount_;  // elements in a chunk
  std::vector<const shm::SlotDescriptor*> descriptors_;  // every rank's, for this round
  uint8_t* peerChunks_ = nullptr;  // the landing areas, one per peer
  uint8_t* bounceArea_ = nullptr;
  std::vector<const uint8_t*> mappedInput_;  // peers' buffers mapped here, or null
  std::vector<uint8_t*> mappedOutput_;
};

bool DirectGroup::reduceSingleCopy(const Operation& op, const MessageTag& tag, const void* input,
                                   void* output, size_t count, DataType type, ReduceOp reduceOp,
                                   const SingleCopyPlan& plan, const SliceStep* across) {
  const size_t element = elementSize(type);
  const uint64_t round = round_++;
  const size_t outputBytes =
      (plan.outputs.empty() ? count : plan.outputs[rank_].count) * element;
  if (!postSingleCopy(op, tag, input, output, count * element, outputBytes, round)) return false;
  SingleCopyRound single(*this, op, input, output, count, type, reduceOp, plan, round);
  if (across == nullptr) {
    single.reduceOwnSlice();
  } else {
    single.reduceWithOtherHosts(*across);
  }
  publish(Phase::Done, round + 1);
  waitForAll(Phase::Done, round + 1, op);
  return true;
}

}  // namespace ringcomm::algorithms
