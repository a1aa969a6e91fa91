// The direct schedule's single-copy all-reduce: ranks read each other's buffers directly
// (cross-memory attach, src/transport/shm/cross_memory.h) instead of staging them in shared memory.
//
// The staged schedule (direct.cc) is bound by memory bandwidth on a busy host: per rank it copies
// its input into its slot, reads p slices to reduce its own, writes the result twice (output and
// slot) and copies the p-1 other slices out, about five passes over the vector. Here, in one round
// of the same counters and descriptors:
//
//   posted          each rank describes its collective in its slot descriptor, with the
//                   addresses of its input and output; peers check the descriptors as the staged
//                   path does, so ranks that disagree get a MismatchError before a byte is read.
//   reduce-scatter  rank r owns slice r (plan::blockOf). Chunk by chunk it reads slice r's chunk
//                   of every peer's input into a landing buffer per peer (in the last-level
//                   cache), and reduces its own input's chunk and those, in rank order, straight
//                   into slice r of its output. Only rank r computes slice r, so one order fixes
//                   the bits on every rank.
//   reduced         published. Each rank then takes the other slices as their owners publish them
//                   (whichever is ready first, not in a fixed order, so a rank that has not had a
//                   core yet holds up only its own slice):
//   all-gather      rank q's output slice q is read into this rank's output slice q, one copy.
//   done            published. Before returning, a rank waits until every peer is done: peers read
//                   its input and output, which the caller may reuse as soon as it returns.
//
// In place (input == output) is safe: in the reduce-scatter peers read only slices q != r of rank
// r's input while r writes slice r; r writes slice q in the all-gather only after q published
// "reduced", i.e. after q finished reading r's slice q.
//
// Per rank this moves the input once (S), the own slice once (S/p) and the others' slices once
// each way (2S(p-1)/p): about 2.75S at p = 4 instead of 5S; the landing buffers stay in the cache.
// The kernel makes the copies: where it copies slowly (a hypervisor that traps each page's copy),
// the threshold (shm::kSingleCopyMinBytes, RINGCOMM_SHM_CMA_MIN_BYTES) keeps small vectors staged.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "algorithms/direct.h"
#include "algorithms/plan.h"
#include "common/failure.h"
#include "common/trace.h"
#include "reduce/reduce.h"
#include "transport/shm/cross_memory.h"
#include "transport/shm/segment.h"

namespace ringcomm::algorithms {
namespace {

// How much of one peer's slice a rank reads per system call. Each call pins the peer's pages and
// costs a few microseconds, so larger chunks cost less per byte; the landing buffers, one chunk per
// peer, then outgrow the L2 cache, which matters less. Measured on the 2-core VM (bench/RESULTS.md,
// issue 14), 16 ranks at 8 MiB: 0.29, 0.34, 0.47, 0.80 and 0.65 GB/s busbw with 8, 16, 64, 256 and
// 1024 KiB; 4 ranks at 32 MiB: 1.6, 1.7-2.0, 1.8-2.2, 2.0 and 1.4 GB/s with 16, 64, 256, 1024 and
// 4096 KiB (a busy machine: the order held, the values moved).
constexpr size_t kChunkBytes = 256 * 1024;
constexpr size_t kLandingAlignment = 4096;

}  // namespace

void DirectGroup::readPeer(int peer, uint64_t remote, void* local, size_t bytes,
                           const Operation& op) {
  const int failed = shm::readProcessMemory(segments_.pidOf(peer), remote, local, bytes);
  if (failed == 0) return;
  // A peer that died (ESRCH) or left the collective (EFAULT: its buffer is gone) is named as the
  // staged path names it; anything else says what the kernel said.
  std::string failure = segments_.peerFailure(peer);
  if (failure.empty()) {
    failure = "reading rank " + std::to_string(peer) + "'s memory (process_vm_readv) failed: " +
              std::strerror(failed);
  }
  raisePeerFailure<TransportError>(op, peer, failure);
}

void DirectGroup::allreduceSingleCopy(const Operation& op, const MessageTag& tag,
                                      const void* input, void* output, size_t count, DataType type,
                                      ReduceOp reduceOp) {
  const size_t element = elementSize(type);
  const size_t total = count * element;
  const uint64_t round = round_++;
  const uint8_t* in = static_cast<const uint8_t*>(input);
  uint8_t* out = static_cast<uint8_t*>(output);

  stage(round, tag, total, total, op, input, output);
  publish(Phase::Posted, round + 1);
  waitForAll(Phase::Posted, round + 1, op);
  checkDescriptors(round, tag, total, total, op);
  std::vector<const shm::SlotDescriptor*> descriptors(size_);
  for (int peer = 0; peer < size_; ++peer) {
    descriptors[peer] = &segments_.counters(peer).descriptor[round % shm::kDirectSlots];
  }

  const size_t chunkBytes = kChunkBytes;
  if (!peerChunks_) {
    const size_t bytes = chunkBytes * static_cast<size_t>(size_ - 1);  // a multiple of the page
    peerChunks_.reset(static_cast<uint8_t*>(std::aligned_alloc(kLandingAlignment, bytes)));
    if (!peerChunks_) throw std::bad_alloc();
  }

  {
    trace::Span span(trace::Phase::Reduce, "this rank's slice, reading peers' inputs");
    const plan::Block own = plan::blockOf(count, size_, rank_);
    const size_t chunkCount = chunkBytes / element;
    std::vector<const void*> sources(size_);
    for (size_t done = 0; done < own.count; done += chunkCount) {
      const size_t n = std::min(chunkCount, own.count - done);
      const size_t at = (own.offset + done) * element;
      // This rank's own contribution first (it may alias the output), then the peers in rank
      // order.
      sources[0] = in + at;
      for (int peer = 0, next = 1; peer < size_; ++peer) {
        if (peer == rank_) continue;
        uint8_t* landing = peerChunks_.get() + static_cast<size_t>(next - 1) * chunkBytes;
        readPeer(peer, descriptors[peer]->input.load(std::memory_order_relaxed) + at, landing,
                 n * element, op);
        sources[next++] = landing;
      }
      reduce::reduceMany(out + at, sources.data(), size_, n, type, reduceOp);
      reduce::finishAverage(out + at, n, type, reduceOp, size_);
    }
  }
  publish(Phase::Reduced, round + 1);

  {
    trace::Span span(trace::Phase::Gather, "the others' reduced slices, from their outputs");
    std::vector<int> pending;
    for (int step = 1; step < size_; ++step) pending.push_back((rank_ + step) % size_);
    while (!pending.empty()) {
      // The first peer that has published its slice, or, when none has, wait for the first.
      auto ready = std::find_if(pending.begin(), pending.end(), [&](int peer) {
        return counterOf(segments_.counters(peer), Phase::Reduced).load(std::memory_order_acquire) >
               round;
      });
      if (ready == pending.end()) {
        waitFor(pending.front(), Phase::Reduced, round + 1, op);
        ready = pending.begin();
      }
      const int peer = *ready;
      pending.erase(ready);
      const plan::Block slice = plan::blockOf(count, size_, peer);
      const size_t at = slice.offset * element;
      readPeer(peer, descriptors[peer]->output.load(std::memory_order_relaxed) + at, out + at,
               slice.count * element, op);
    }
  }
  publish(Phase::Done, round + 1);
  waitForAll(Phase::Done, round + 1, op);
}

}  // namespace ringcomm::algorithms
