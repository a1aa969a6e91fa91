#include "transport/shm/segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/process.h"
#include "ringcomm/errors.h"
#include "transport/shm/cross_memory.h"

namespace ringcomm::shm {
namespace {

size_t roundUp(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// Staging areas start on a page so that vector loads and the kernel's page accounting line up.
constexpr size_t kPage = 4096;
// The smallest slot and ring planSegments shrinks to: below this, per-round overheads of the
// direct schedule and the rings dominate, and TCP between local ranks does as well.
constexpr size_t kSmallestSlotBytes = 64 * 1024;
constexpr const char* kShmDirectory = "/dev/shm";

std::string mebibytes(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

std::string errnoText(const std::string& what) { return what + ": " + std::strerror(errno); }

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

std::string SegmentPlan::encode() const {
  std::ostringstream text;
  text << slotBytes << " " << ringBytes << " " << fits << " " << shrunk << " " << room;
  return text.str();
}

SegmentPlan SegmentPlan::decode(const std::string& text) {
  SegmentPlan plan;
  std::istringstream in(text);
  in >> plan.slotBytes >> plan.ringBytes >> plan.fits >> plan.shrunk;
  std::getline(in >> std::ws, plan.room);
  if (!in && !in.eof()) throw Error("ringcomm: malformed shared-memory plan '" + text + "'");
  return plan;
}

size_t slotBytesFor(size_t configured, int localSize, int cores) {
  if (configured != 0) return configured;
  return localSize > cores ? kCrowdedSlotBytes : kDefaultSlotBytes;
}

SegmentPlan planSegments(int localSize, size_t slotBytes, size_t ringBytes) {
  SegmentPlan plan;
  plan.slotBytes = roundUp(slotBytes, kPage);
  plan.ringBytes = roundUp(ringBytes, kPage);
  struct statvfs info {};
  if (statvfs(kShmDirectory, &info) != 0) {
    plan.fits = true;  // nothing to measure (no /dev/shm mount): shm_open will say
    return plan;
  }
  const size_t free = static_cast<size_t>(info.f_bavail) * info.f_frsize;
  auto needed = [&] { return localSize * Segments::bytesFor(localSize, plan.slotBytes, plan.ringBytes); };
  const size_t wanted = needed();
  while (needed() > free &&
         (plan.slotBytes > kSmallestSlotBytes || plan.ringBytes > kSmallestSlotBytes)) {
    size_t& larger = plan.slotBytes >= plan.ringBytes ? plan.slotBytes : plan.ringBytes;
    larger = std::max(kSmallestSlotBytes, roundUp(larger / 2, kPage));
    plan.shrunk = true;
  }
  plan.fits = needed() <= free;
  plan.room = std::string(kShmDirectory) + " has " + mebibytes(free) + " free; " +
              std::to_string(localSize) + " ranks need " + mebibytes(wanted) +
              " with the configured slots";
  return plan;
}

size_t Segments::bytesFor(int localSize, size_t slotBytes, size_t ringBytes) {
  const size_t slots = roundUp(roundUp(sizeof(SegmentHeader), kCacheLine) + sizeof(DirectCounters),
                               kPage);
  const size_t rings = slots + 2 * kDirectSlots * roundUp(slotBytes, kPage);
  return rings + static_cast<size_t>(localSize) *
                     (roundUp(sizeof(RingHeader), kPage) + roundUp(ringBytes, kPage));
}

Segments::Segments(std::string jobKey, std::vector<int> localRanks, int localRank, size_t slotBytes,
                   size_t ringBytes)
    : jobKey_(std::move(jobKey)), localRanks_(std::move(localRanks)), localRank_(localRank),
      slotBytes_(roundUp(slotBytes, kPage)), ringBytes_(roundUp(ringBytes, kPage)),
      bases_(localRanks_.size(), nullptr) {}

Segments::~Segments() {
  exitWatch_.reset();  // its thread rings this rank's doorbell, in memory unmapped below
  if (!unlinked_ && bases_[localRank_] != nullptr) shm_unlink(nameOf(localRank_).c_str());
  for (uint8_t* base : bases_) {
    if (base != nullptr) munmap(base, segmentBytes());
  }
}

size_t Segments::directOffset() const { return roundUp(sizeof(SegmentHeader), kCacheLine); }
size_t Segments::slotsOffset() const {
  return roundUp(directOffset() + sizeof(DirectCounters), kPage);
}
size_t Segments::ringsOffset() const { return slotsOffset() + 2 * kDirectSlots * slotBytes_; }
size_t Segments::segmentBytes() const { return bytesFor(localSize(), slotBytes_, ringBytes_); }

std::string Segments::nameOf(int local) const {
  return "/ringcomm-" + jobKey_ + "-" + std::to_string(localRanks_[local]);
}

void Segments::createOwn() {
  const std::string name = nameOf(localRank_);
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw Error(errnoText("ringcomm: shm_open(" + name + ")"));
  if (ftruncate(fd, static_cast<off_t>(segmentBytes())) != 0) {
    int saved = errno;
    close(fd);
    shm_unlink(name.c_str());
    errno = saved;
    throw Error(errnoText("ringcomm: sizing shared memory " + name + " (is /dev/shm full?)"));
  }
  // Reserved now: pages tmpfs cannot give later would be a SIGBUS on first touch.
  if (const int failed = posix_fallocate(fd, 0, static_cast<off_t>(segmentBytes()))) {
    close(fd);
    shm_unlink(name.c_str());
    throw Error("ringcomm: reserving " + mebibytes(segmentBytes()) + " of shared memory for rank " +
                std::to_string(localRanks_[localRank_]) + " in " + kShmDirectory + ": " +
                std::strerror(failed));
  }
  void* base = mmap(nullptr, segmentBytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    throw Error(errnoText("ringcomm: mmap(" + name + ")"));
  }
  bases_[localRank_] = static_cast<uint8_t*>(base);
  // The file is zero-filled; placement-new documents that the atomics start life here.
  auto* header = new (base) SegmentHeader();
  header->pid = static_cast<int32_t>(getpid());
  header->token = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}() ^
                  static_cast<uint64_t>(header->pid);
  header->tokenAddress = reinterpret_cast<uintptr_t>(&header->token);
  new (bases_[localRank_] + directOffset()) DirectCounters();
  for (int sender = 0; sender < localSize(); ++sender) {
    new (ring(localRank_, sender).header) RingHeader();
  }
}

void Segments::attachPeers() {
  for (int local = 0; local < localSize(); ++local) {
    if (local == localRank_) continue;
    const std::string name = nameOf(local);
    int fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) throw Error(errnoText("ringcomm: attaching shared memory of rank " +
                                      std::to_string(localRanks_[local]) + " (" + name + ")"));
    void* base = mmap(nullptr, segmentBytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) throw Error(errnoText("ringcomm: mmap(" + name + ")"));
    bases_[local] = static_cast<uint8_t*>(base);
  }
}

void Segments::unlinkOwn() {
  if (!unlinked_) shm_unlink(nameOf(localRank_).c_str());
  unlinked_ = true;
}

void Segments::unlinkAll() {
  for (int local = 0; local < localSize(); ++local) shm_unlink(nameOf(local).c_str());
  unlinked_ = true;
}

SegmentHeader& Segments::header(int local) const {
  return *reinterpret_cast<SegmentHeader*>(bases_[local]);
}

DirectCounters& Segments::counters(int local) const {
  return *reinterpret_cast<DirectCounters*>(bases_[local] + directOffset());
}

uint8_t* Segments::slotInput(int local, int slot) const {
  return bases_[local] + slotsOffset() + static_cast<size_t>(slot) * 2 * slotBytes_;
}

uint8_t* Segments::slotResult(int local, int slot) const {
  return slotInput(local, slot) + slotBytes_;
}

RingView Segments::ring(int receiverLocal, int senderLocal) const {
  const size_t stride = roundUp(sizeof(RingHeader), kPage) + ringBytes_;
  uint8_t* at = bases_[receiverLocal] + ringsOffset() + static_cast<size_t>(senderLocal) * stride;
  return RingView{reinterpret_cast<RingHeader*>(at), at + roundUp(sizeof(RingHeader), kPage),
                  ringBytes_};
}

void Segments::ringDoorbell(int local) const {
  SegmentHeader& target = header(local);
  target.doorbell.fetch_add(1, std::memory_order_acq_rel);
  // The sleeper increments `sleepers` before re-checking the doorbell, so either it sees our
  // increment or we see it sleeping: no lost wake-up.
  if (target.sleepers.load(std::memory_order_acquire) != 0) {
    futex(&target.doorbell, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

void Segments::ringAllDoorbells() const {
  for (int local = 0; local < localSize(); ++local) {
    if (local != localRank_) ringDoorbell(local);
  }
}

uint32_t Segments::doorbellSnapshot() const {
  return header(localRank_).doorbell.load(std::memory_order_acquire);
}

namespace {

timespec timespecOf(std::chrono::microseconds wait) {
  return timespec{static_cast<time_t>(wait.count() / 1000000),
                  static_cast<long>((wait.count() % 1000000) * 1000)};
}

}  // namespace

bool Segments::allReached(Progress progress, uint64_t value) const {
  for (int local = 0; local < localSize(); ++local) {
    if ((counters(local).*progress).value.load(std::memory_order_seq_cst) < value) return false;
  }
  return true;
}

void Segments::ringDoorbellsOfWaiters(Progress progress, uint64_t value) const {
  // Sequentially consistent, paired with sleepUntilAllReach(): the caller stored its progress
  // before this, the sleeper registers before it re-reads everyone's progress, so at least one
  // sees the other. And of the ranks that store `value` last, the very last one in that order
  // reads every other's store in allReached(), so someone wakes the sleepers.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  int everyoneThere = -1;  // allReached(), read once and only if someone waits on it
  for (int local = 0; local < localSize(); ++local) {
    if (local == localRank_) continue;
    const SegmentHeader& peer = header(local);
    if (peer.sleepers.load(std::memory_order_seq_cst) == 0) continue;
    const int32_t waitingOn = peer.waitingOn.load(std::memory_order_seq_cst);
    if (waitingOn == kWaitingOnEveryone && everyoneThere < 0) {
      everyoneThere = allReached(progress, value) ? 1 : 0;
    }
    if (waitingOn == kWaitingOnAnyone || (waitingOn == kWaitingOnEveryone && everyoneThere == 1)) {
      ringDoorbell(local);
    }
  }
}

void Segments::sleepOnDoorbell(uint32_t seen, std::chrono::microseconds maxWait) const {
  SegmentHeader& own = header(localRank_);
  own.waitingOn.store(kWaitingOnAnyone, std::memory_order_seq_cst);
  own.sleepers.fetch_add(1, std::memory_order_acq_rel);
  if (own.doorbell.load(std::memory_order_acquire) == seen) {
    const timespec timeout = timespecOf(maxWait);
    futex(&own.doorbell, FUTEX_WAIT, seen, &timeout);
  }
  own.sleepers.fetch_sub(1, std::memory_order_acq_rel);
}

void Segments::sleepUntilAllReach(Progress progress, uint64_t value, uint32_t seen,
                                  std::chrono::microseconds maxWait) const {
  SegmentHeader& own = header(localRank_);
  own.waitingOn.store(kWaitingOnEveryone, std::memory_order_seq_cst);
  own.sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (!allReached(progress, value) && own.doorbell.load(std::memory_order_acquire) == seen) {
    const timespec timeout = timespecOf(maxWait);
    futex(&own.doorbell, FUTEX_WAIT, seen, &timeout);
  }
  own.sleepers.fetch_sub(1, std::memory_order_acq_rel);
  own.waitingOn.store(kWaitingOnAnyone, std::memory_order_relaxed);
}

std::string Segments::probeCrossMemory(bool wanted, size_t minBytes) {
  SegmentHeader& own = header(localRank_);
  own.singleCopyMinBytes = minBytes;
  std::string why;
  if (!wanted) {
    why = "RINGCOMM_SHM_CMA=0";
  } else {
    for (int local = 0; local < localSize() && why.empty(); ++local) {
      if (local == localRank_) continue;
      const SegmentHeader& peer = header(local);
      const std::string failed = shm::probeCrossMemory(peer.pid, peer.tokenAddress, peer.token);
      if (!failed.empty()) {
        why = "rank " + std::to_string(localRanks_[localRank_]) + " cannot read rank " +
              std::to_string(localRanks_[local]) + "'s memory: " + failed;
      }
    }
  }
  const CrossMemoryState state = !wanted        ? CrossMemoryState::Disabled
                                 : why.empty()  ? CrossMemoryState::Usable
                                                : CrossMemoryState::Refused;
  own.crossMemory.store(static_cast<uint32_t>(state), std::memory_order_release);
  return why;
}

std::string Segments::settleCrossMemory() {
  singleCopyMinBytes_ = SIZE_MAX;
  for (int local = 0; local < localSize(); ++local) {
    const auto state =
        static_cast<CrossMemoryState>(header(local).crossMemory.load(std::memory_order_acquire));
    if (state == CrossMemoryState::Usable) continue;
    const std::string rank = std::to_string(localRanks_[local]);
    return state == CrossMemoryState::Disabled ? "RINGCOMM_SHM_CMA=0 on rank " + rank
                                               : "rank " + rank + " cannot read its peers' memory";
  }
  singleCopyMinBytes_ = header(0).singleCopyMinBytes;
  return {};
}

std::string Segments::peerFailure(int local) const {
  const SegmentHeader& peer = header(local);
  if (peer.aborted.load(std::memory_order_acquire) != 0) {
    return std::string("rank ") + std::to_string(localRanks_[local]) + " aborted: " +
           std::string(peer.abortReason, strnlen(peer.abortReason, sizeof(peer.abortReason)));
  }
  if (processGone(peer.pid)) {
    return "rank " + std::to_string(localRanks_[local]) + " (pid " + std::to_string(peer.pid) +
           ") died";
  }
  return {};
}

bool Segments::diedWithoutAborting(int local) const {
  const SegmentHeader& peer = header(local);
  return peer.aborted.load(std::memory_order_acquire) == 0 && processGone(peer.pid);
}

void Segments::watchPeers() {
  std::vector<int> pids;
  for (int local = 0; local < localSize(); ++local) {
    if (local != localRank_) pids.push_back(header(local).pid);
  }
  exitWatch_ = std::make_unique<ExitWatch>(pids, [this](int) { ringDoorbell(localRank_); });
}

void Segments::markAborted(const std::string& reason) {
  SegmentHeader& own = header(localRank_);
  std::strncpy(own.abortReason, reason.c_str(), sizeof(own.abortReason) - 1);
  own.aborted.store(1, std::memory_order_release);
  ringAllDoorbells();
  ringDoorbell(localRank_);
}

std::string Segments::ownAbort() const {
  const SegmentHeader& own = header(localRank_);
  if (own.aborted.load(std::memory_order_acquire) == 0) return {};
  return std::string(own.abortReason, strnlen(own.abortReason, sizeof(own.abortReason)));
}

}  // namespace ringcomm::shm
