#include "device/ipc.h"

#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "cuda/kernels.h"
#include "device/device_path.h"
#include "device/ipc_plan.h"
#include "device/mps.h"
#include "ringcomm/errors.h"

namespace ringcomm::device {
namespace {

static_assert(kMaxIpcRanks == cuda::kMaxReduceSources, "one reduceMany takes every rank's slice");

// Peer buffers kept mapped per device; beyond this the mappings are closed and reopened as needed
// (a mapping keeps the peer's allocation alive after the peer frees it).
constexpr size_t kMaxOpenPeerBuffers = 512;

enum IpcEvent { kInputReady = 0, kReduced = 1, kIpcEvents = 2 };

// Room for a reason that names two ranks and their GPUs' UUIDs (ipcBlocker).
constexpr size_t kWhyBytes = 256;

template <size_t N>
void copyWhy(char (&why)[N], const std::string& text) {
  std::strncpy(why, text.c_str(), N - 1);
}

// The start of the allocation that holds `address`, through the driver's cuMemGetAddressRange
// (found at run time, so the library does not link libcuda).
uintptr_t allocationBase(const void* address) {
  using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static const auto getRange =
      reinterpret_cast<GetAddressRange>(driverEntryPoint("cuMemGetAddressRange"));
  if (getRange == nullptr) throw Error("ringcomm: the CUDA driver has no cuMemGetAddressRange");
  CUdeviceptr base = 0;
  size_t bytes = 0;
  const CUresult result = getRange(&base, &bytes, reinterpret_cast<CUdeviceptr>(address));
  if (result != CUDA_SUCCESS) {
    throw Error("ringcomm: cuMemGetAddressRange failed with CUresult " + std::to_string(result));
  }
  return static_cast<uintptr_t>(base);
}

void exportBuffer(const void* address, cudaIpcMemHandle_t* handle, uint64_t* offset) {
  const uintptr_t base = allocationBase(address);
  check(cudaIpcGetMemHandle(handle, reinterpret_cast<void*>(base)), "cudaIpcGetMemHandle");
  *offset = reinterpret_cast<uintptr_t>(address) - base;
}

template <typename Handle>
std::string cacheKey(int peer, const Handle& handle) {
  std::string key(reinterpret_cast<const char*>(&peer), sizeof(peer));
  key.append(reinterpret_cast<const char*>(&handle), sizeof(handle));
  return key;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

}  // namespace

// Round 1's message of one rank.
struct IpcAllreduce::Record {
  RankDevice who;  // its process and its GPU (ipc_plan.h)
  int32_t ok = 0;  // 0: this rank cannot export its buffers (see `why`)
  cudaIpcMemHandle_t input{};
  uint64_t inputOffset = 0;
  cudaIpcMemHandle_t scratch{};
  cudaIpcEventHandle_t events[kIpcEvents]{};
  char why[kWhyBytes] = {};
};

// This rank's IPC resources on one device, and what it has mapped of its peers'.
struct IpcAllreduce::PerDevice {
  DeviceState& state;
  uint8_t uuid[16] = {};
  cudaEvent_t events[kIpcEvents] = {};
  cudaIpcEventHandle_t eventHandles[kIpcEvents]{};
  void* scratch = nullptr;
  size_t scratchBytes = 0;
  cudaIpcMemHandle_t scratchHandle{};
  // Outgrown scratch buffers, kept until shutdown: a peer may still have one mapped.
  std::vector<void*> retiredScratch;
  std::map<std::string, void*> openBuffers;       // (peer, handle) -> mapped allocation base
  std::map<std::string, cudaEvent_t> openEvents;  // (peer, handle) -> opened event

  explicit PerDevice(DeviceState& s) : state(s) { deviceUuid(s.device, uuid); }

  ~PerDevice() {
    // As ~DeviceState: errors ignored, the thread's device put back (where it has a context),
    // this rank's stream drained.
    int previous = state.device;
    if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(state.device) != cudaSuccess) {
      return;
    }
    const DeviceGuard restore(previous, DeviceGuard::kRestoreOnly);
    cudaStreamSynchronize(state.compute);
    for (auto& [key, base] : openBuffers) cudaIpcCloseMemHandle(base);
    for (auto& [key, event] : openEvents) cudaEventDestroy(event);
    for (cudaEvent_t event : events) {
      if (event != nullptr) cudaEventDestroy(event);
    }
    if (scratch != nullptr) cudaFree(scratch);
    for (void* old : retiredScratch) cudaFree(old);
  }

  void ensureEvents() {
    if (events[0] != nullptr) return;
    for (int i = 0; i < kIpcEvents; ++i) {
      events[i] = newEvent(cudaEventDisableTiming | cudaEventInterprocess);
      check(cudaIpcGetEventHandle(&eventHandles[i], events[i]), "cudaIpcGetEventHandle");
    }
  }

  // At least `bytes` of scratch, exported. Grown by doubling, so a job that grows its buffers
  // step by step re-exports a handful of times.
  void ensureScratch(size_t bytes) {
    if (bytes <= scratchBytes) return;
    const size_t grown = std::max(bytes, 2 * scratchBytes);
    void* fresh = nullptr;
    check(cudaMalloc(&fresh, grown), "cudaMalloc (the IPC all-reduce's scratch)");
    cudaIpcMemHandle_t handle{};
    const cudaError_t exported = cudaIpcGetMemHandle(&handle, fresh);
    if (exported != cudaSuccess) {
      cudaFree(fresh);
      check(exported, "cudaIpcGetMemHandle (the IPC all-reduce's scratch)");
    }
    if (scratch != nullptr) retiredScratch.push_back(scratch);
    scratch = fresh;
    scratchBytes = grown;
    scratchHandle = handle;
  }

  // Called before an all-reduce maps its peers' buffers (never between two of its mappings,
  // which it is about to use): closes every cached mapping when `coming` more would not fit.
  void makeRoomForMappings(size_t coming) {
    if (openBuffers.size() + coming <= kMaxOpenPeerBuffers) return;
    // Kernels of earlier all-reduces may still read these mappings: let this rank's compute
    // stream drain first (its own stream only).
    check(cudaStreamSynchronize(state.compute), "cudaStreamSynchronize");
    for (auto& [unused, base] : openBuffers) cudaIpcCloseMemHandle(base);
    openBuffers.clear();
  }

  const uint8_t* openBuffer(int peer, const cudaIpcMemHandle_t& handle) {
    const std::string key = cacheKey(peer, handle);
    auto found = openBuffers.find(key);
    if (found != openBuffers.end()) return static_cast<const uint8_t*>(found->second);
    void* base = nullptr;
    check(cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess),
          "cudaIpcOpenMemHandle");
    openBuffers.emplace(key, base);
    return static_cast<const uint8_t*>(base);
  }

  cudaEvent_t openEvent(int peer, const cudaIpcEventHandle_t& handle) {
    const std::string key = cacheKey(peer, handle);
    auto found = openEvents.find(key);
    if (found != openEvents.end()) return found->second;
    cudaEvent_t event = nullptr;
    check(cudaIpcOpenEventHandle(&event, handle), "cudaIpcOpenEventHandle");
    openEvents.emplace(key, event);
    return event;
  }
};

IpcAllreduce::IpcAllreduce(int rank, int size, std::string mpsPipeDirectory,
                           bool stageWhenTimeSliced)
    : rank_(rank), size_(size), mpsPipeDirectory_(std::move(mpsPipeDirectory)),
      stageWhenTimeSliced_(stageWhenTimeSliced) {}

IpcAllreduce::~IpcAllreduce() = default;

IpcAllreduce::PerDevice& IpcAllreduce::stateFor(DeviceState& device) {
  auto& state = devices_[device.device];
  if (!state) state = std::make_unique<PerDevice>(device);
  return *state;
}

// Round 2's answer of one rank: could it map every peer's buffers and events, and if not, why.
struct IpcAllreduce::Verdict {
  uint8_t ok = 0;
  char why[kWhyBytes - 1] = {};
};

// What this rank has mapped of its peers' for one all-reduce: each one's input and scratch, and
// its events (kIpcEvents per rank, by rank); null for this rank.
struct IpcAllreduce::PeerMappings {
  explicit PeerMappings(int size)
      : input(size, nullptr), scratch(size, nullptr),
        events(static_cast<size_t>(size) * kIpcEvents, nullptr) {}

  std::vector<const uint8_t*> input;
  std::vector<const uint8_t*> scratch;
  std::vector<cudaEvent_t> events;
};

bool IpcAllreduce::run(const CudaTicket& t, const Operation& op, const Peers& peers,
                       const void* input, void* output, size_t count, DataType type,
                       ReduceOp reduceOp, const SliceStep* betweenHalves) {
  if (unavailable_) return false;
  if (stagesTimeSliced_) return false;
  DeviceState& s = t.state();
  DeviceGuard guard(s.device);
  PerDevice& d = stateFor(s);
  const size_t elementBytes = elementSize(type);
  const size_t perRank = ipcSlice(count, elementBytes, size_, 0).count;  // the longest

  // Step 1, round 1: every rank's input, scratch and events. A rank that cannot export them
  // says why, and every rank stages instead.
  const Record mine = describeThisRank(t, d, input, perRank * elementBytes);
  std::vector<Record> records(size_);
  peers.allgather(&mine, records.data(), sizeof(Record));
  if (!sharingChecked_ && stageTimeSliced(records, s.device)) return false;

  // Map every peer's input, scratch and events (cached).
  Verdict verdict;
  verdict.ok = mine.ok != 0;
  PeerMappings mapped(size_);
  if (verdict.ok) mapPeers(d, mine, records, mapped, verdict);
  // Step 2: this rank's slice of every rank's input into its scratch.
  if (verdict.ok) reduceOwnSlice(s, d, input, count, type, reduceOp, mapped, verdict);
  // Round 2: did every rank get this far?
  if (!everyRankMapped(verdict, mine, records, s, d, op, peers)) return false;

  auto* scratch = static_cast<uint8_t*>(d.scratch);
  if (betweenHalves != nullptr) {
    // This rank's reduced slice, changed in place (its all-reduce across hosts), before any peer
    // reads it: the step's copies start after the reduction (the state's `done`, which they wait
    // for), the slice is "reduced" again once they are over, and the barrier keeps every peer
    // from waiting on that event before it is recorded there.
    const Slice own = ipcSlice(count, elementBytes, size_, rank_);
    check(cudaEventRecord(s.done, s.compute), "cudaEventRecord");
    (*betweenHalves)(scratch, own.begin, own.count);
    check(cudaStreamWaitEvent(s.compute, s.done, 0), "cudaStreamWaitEvent (the slice's step)");
    check(cudaEventRecord(d.events[kReduced], s.compute), "cudaEventRecord");
    peers.barrier();
  }

  // Step 3: every rank's slice from its scratch, each after that rank's "reduced".
  copySlices(s, d, output, count, elementBytes, mapped);
  finish(t, s.compute);
  return true;
}

IpcAllreduce::Record IpcAllreduce::describeThisRank(const CudaTicket& t, PerDevice& d,
                                                   const void* input, size_t sliceBytes) {
  DeviceState& s = t.state();
  Record mine;
  static const uint64_t pidNamespace = currentPidNamespace();
  mine.who.pid = static_cast<int64_t>(getpid());
  mine.who.pidNamespace = pidNamespace;
  std::memcpy(mine.who.uuid, d.uuid, sizeof(mine.who.uuid));
  // Read in the first all-reduce's records only.
  mine.who.mps = !sharingChecked_ && mpsRunning(mpsPipeDirectory_);
  mine.who.stageWhenTimeSliced = stageWhenTimeSliced_;
  try {
    d.ensureEvents();
    d.ensureScratch(std::max(sliceBytes, kSliceAlignBytes));
    startAfterCaller(t, s.compute);
    // Recorded before the handles go out: a peer that has them may wait on this event.
    check(cudaEventRecord(d.events[kInputReady], s.compute), "cudaEventRecord");
    std::memcpy(mine.events, d.eventHandles, sizeof(mine.events));
    exportBuffer(input, &mine.input, &mine.inputOffset);
    mine.scratch = d.scratchHandle;
    mine.ok = 1;
  } catch (const Error& error) {
    cudaGetLastError();
    copyWhy(mine.why, error.what());
  }
  return mine;
}

bool IpcAllreduce::stageTimeSliced(const std::vector<Record>& records, int device) {
  std::vector<RankDevice> who;
  for (const Record& record : records) who.push_back(record.who);
  sharingChecked_ = true;
  // From every rank's records, so that all decide alike; a rank that forces IPC keeps it for
  // all (ranks configured apart would otherwise take different paths).
  stagesTimeSliced_ = anyDeviceTimeSliced(who) &&
                      std::all_of(who.begin(), who.end(), [](const RankDevice& r) {
                        return r.stageWhenTimeSliced != 0;
                      });
  warnIfSharingWithoutMps(who);
  if (stagesTimeSliced_) {
    // Nothing read a peer's memory yet: every rank stages this one alike, and every later one,
    // so the scratch and events made for this round go (no peer has opened them).
    devices_.erase(device);
  }
  return stagesTimeSliced_;
}

void IpcAllreduce::mapPeers(PerDevice& d, const Record& mine, const std::vector<Record>& records,
                            PeerMappings& mapped, Verdict& verdict) {
  d.makeRoomForMappings(2 * static_cast<size_t>(size_));
  for (int peer = 0; peer < size_ && verdict.ok; ++peer) {
    if (peer == rank_) continue;
    const Record& record = records[peer];
    const std::string blocker =
        record.ok ? ipcBlocker(rank_, peer, mine.who, record.who,
                               peerAccess(d.state.device, record.who.uuid))
                  : std::string();
    if (!record.ok) {
      verdict.ok = 0;  // that rank says why itself
    } else if (!blocker.empty()) {
      verdict.ok = 0;
      copyWhy(verdict.why, blocker);
    } else {
      try {
        mapped.input[peer] = d.openBuffer(peer, record.input) + record.inputOffset;
        mapped.scratch[peer] = d.openBuffer(peer, record.scratch);
        for (int e = 0; e < kIpcEvents; ++e) {
          mapped.events[peer * kIpcEvents + e] = d.openEvent(peer, record.events[e]);
        }
      } catch (const Error& error) {
        cudaGetLastError();
        verdict.ok = 0;
        copyWhy(verdict.why, "rank " + std::to_string(rank_) + " mapping rank " +
                                 std::to_string(peer) + "'s memory: " + error.what());
      }
    }
  }
}

void IpcAllreduce::reduceOwnSlice(DeviceState& s, PerDevice& d, const void* input, size_t count,
                                  DataType type, ReduceOp reduceOp, const PeerMappings& mapped,
                                  Verdict& verdict) {
  const size_t elementBytes = elementSize(type);
  try {
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      check(cudaStreamWaitEvent(s.compute, mapped.events[peer * kIpcEvents + kInputReady], 0),
            "cudaStreamWaitEvent (peer's input ready)");
    }
    const Slice own = ipcSlice(count, elementBytes, size_, rank_);
    if (own.count > 0) {
      // One pass over every rank's slice, in rank order (as the host's direct schedule adds),
      // the average folded in: each input byte read once, the slice written once.
      const size_t at = own.begin * elementBytes;
      std::vector<const void*> slices(size_);
      for (int r = 0; r < size_; ++r) {
        slices[r] = (r == rank_ ? static_cast<const uint8_t*>(input) : mapped.input[r]) + at;
      }
      cuda::reduceMany(static_cast<uint8_t*>(d.scratch), slices.data(), size_, own.count, type,
                       reduceOp, size_, s.compute);
    }
    check(cudaEventRecord(d.events[kReduced], s.compute), "cudaEventRecord");
  } catch (const Error& error) {
    cudaGetLastError();
    verdict.ok = 0;
    copyWhy(verdict.why, std::string("rank ") + std::to_string(rank_) + ": " + error.what());
  }
}

bool IpcAllreduce::everyRankMapped(const Verdict& verdict, const Record& mine,
                                   const std::vector<Record>& records, DeviceState& s,
                                   PerDevice& d, const Operation& op, const Peers& peers) {
  std::vector<Verdict> verdicts(size_);
  peers.allgather(&verdict, verdicts.data(), sizeof(Verdict));
  const bool everyone = std::all_of(verdicts.begin(), verdicts.end(),
                                    [](const Verdict& v) { return v.ok != 0; });
  if (everyone) return true;
  // Every rank stages this all-reduce and the later ones. Step 2's kernels may still read
  // peers' inputs, which staging then writes (in place): every rank waits for its own before a
  // last round lets any of them go on.
  if (mine.ok) {
    check(cudaEventRecord(d.events[kReduced], s.compute), "cudaEventRecord");
    waitFor(d.events[kReduced], op, "the IPC all-reduce's reads, before staging instead");
  }
  peers.barrier();
  unavailable_ = true;
  if (rank_ == 0) {
    // Every rank's reason (a layout may fail several pairs at once).
    std::string why;
    for (int r = 0; r < size_; ++r) {
      std::string reason;
      if (records[r].why[0] != '\0') reason = "rank " + std::to_string(r) + ": " + records[r].why;
      if (reason.empty() && verdicts[r].why[0] != '\0') reason = verdicts[r].why;
      if (!reason.empty()) why += (why.empty() ? "" : "; ") + reason;
    }
    RINGCOMM_LOG(LogLevel::Warn, kLogCuda,
                 "CUDA IPC is unavailable (%s); all-reduces of device memory go through "
                 "pinned host memory from now on, on every rank (RINGCOMM_CUDA_PATH=staged "
                 "skips the attempt)",
                 why.empty() ? "no reason given" : why.c_str());
  }
  return false;
}

void IpcAllreduce::copySlices(DeviceState& s, PerDevice& d, void* output, size_t count,
                              size_t elementBytes, const PeerMappings& mapped) {
  auto* out = static_cast<uint8_t*>(output);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) {
      check(cudaStreamWaitEvent(s.compute, mapped.events[peer * kIpcEvents + kReduced], 0),
            "cudaStreamWaitEvent (peer's slice reduced)");
    }
    const Slice slice = ipcSlice(count, elementBytes, size_, peer);
    if (slice.count == 0) continue;
    const uint8_t* reduced = peer == rank_ ? static_cast<const uint8_t*>(d.scratch)
                                           : mapped.scratch[peer];
    check(cudaMemcpyAsync(out + slice.begin * elementBytes, reduced, slice.count * elementBytes,
                          cudaMemcpyDeviceToDevice, s.compute),
          "cudaMemcpyAsync (a rank's reduced slice)");
  }
}

PeerAccess IpcAllreduce::peerAccess(int device, const uint8_t (&uuid)[16]) {
  uint8_t mine[16] = {};
  deviceUuid(device, mine);
  if (std::memcmp(mine, uuid, sizeof(mine)) == 0) return PeerAccess::Yes;
  // The peer's GPU among those this process sees (its ordinal here, whatever it is there).
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return PeerAccess::Unknown;
  for (int other = 0; other < count; ++other) {
    uint8_t theirs[16] = {};
    deviceUuid(other, theirs);
    if (std::memcmp(theirs, uuid, sizeof(theirs)) != 0) continue;
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, device, other) != cudaSuccess) return PeerAccess::Unknown;
    return can ? PeerAccess::Yes : PeerAccess::No;
  }
  return PeerAccess::Unknown;  // not visible here: mapping its memory is the test
}

void IpcAllreduce::warnIfSharingWithoutMps(const std::vector<RankDevice>& records) const {
  const std::vector<int> sharing = ranksSharingDevice(records, rank_);
  // Said once, by the lowest of the ranks on this device, when they are in more than one process
  // (ranks of one process share its context: nothing time-slices) and one of them sees no MPS.
  if (sharing.front() != rank_ ||
      std::all_of(sharing.begin(), sharing.end(),
                  [&](int r) { return sameProcess(records[r], records[rank_]); })) {
    return;
  }
  if (std::all_of(sharing.begin(), sharing.end(), [&](int r) { return records[r].mps != 0; })) {
    return;
  }
  const char* consequence = stagesTimeSliced_ ? "so all-reduces go through host memory instead"
                                              : "RINGCOMM_CUDA_PATH=ipc keeps them on IPC";
  RINGCOMM_LOG(LogLevel::Warn, kLogCuda,
               "ranks %s share CUDA device %s, and the CUDA MPS daemon is not running (nothing "
               "answers at %s/control): the GPU time-slices between their processes, and every "
               "collective on device memory waits for context switches (1-2 ms per all-reduce or "
               "more; %s). Start it before the job with `nvidia-cuda-mps-control -d`, or give "
               "each rank a GPU of its own.",
               rankList(sharing).c_str(), uuidText(records[rank_].uuid).c_str(),
               mpsPipeDirectory_.c_str(), consequence);
}

}  // namespace ringcomm::device
