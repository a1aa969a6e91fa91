// The device path of a CUDA build (device_path.h): staging through pinned host memory, whole or
// in pipelined chunks, and the same-host all-reduce over CUDA IPC.
//
// Vocabulary:
//   caller's stream  the cudaStream_t the caller passed; its "ready" event (Ticket) is recorded
//                    at submission, and it is made to wait for "done" when the collective ends.
//   copy-out stream  device -> pinned host copies; copy-in stream: pinned host -> device copies;
//   compute stream   the IPC all-reduce's kernels and peer copies. All three are this
//                    communicator's own (non-blocking: they never wait for the legacy stream).
//   slot             one pinned chunk of the pipeline (kSlots of kChunkBytes each); its two
//                    events say when its copy out finished and when its copy in finished.
//   arena            the pinned buffer of whole-buffer staging, grown to the largest collective.
//
// Every host-side wait is for one event, polled against the operation's deadline (waitFor).
//
// Written without a GPU at hand: this compiles (CI builds it with nvcc's host compiler), but
// none of it has run on a device yet. The constants below are first guesses, not measurements.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/failure.h"
#include "cuda/kernels.h"
#include "ringcomm/errors.h"
#include "transport/cuda/device_path.h"

namespace ringcomm {

bool builtWithCuda() { return true; }

namespace device {
namespace {

// Pipeline unit: large enough that a chunk's host collective (tens of microseconds of fixed
// cost) is small against its copies (~0.2 ms each way at 20 GB/s), small enough that a 25 MiB
// DDP bucket is several chunks deep. Not measured (no GPU when this was written).
constexpr size_t kChunkBytes = 4u << 20;
// Chunks in flight: one being copied out, one in the host collective, one being copied in, and
// one spare so that a copy out never waits for the host.
constexpr int kSlots = 4;
// The IPC all-reduce cuts the buffer into one slice per rank at multiples of this many bytes
// (every element size divides it, and the kernels' 16-byte vectors stay aligned).
constexpr size_t kSliceAlignBytes = 256;
// Peer buffers kept mapped per communicator; beyond this the mappings are closed and reopened
// as needed (a mapping keeps the peer's allocation alive after the peer frees it).
constexpr size_t kMaxOpenPeerBuffers = 512;
// Polls of an event that only yield the core before the wait sleeps between polls.
constexpr int kYieldPolls = 64;
constexpr std::chrono::microseconds kPollSleep{20};

void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  throw Error(std::string("ringcomm: ") + call + " failed: " + cudaGetErrorName(status) + " (" +
              cudaGetErrorString(status) + ")");
}

// Makes `device` current on this thread for a scope, and puts the caller's back (a collective
// run on the caller's thread must not change its current device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// Waits until the work before `event` on its stream has run, by the operation's deadline.
void waitFor(cudaEvent_t event, const Operation& op, const char* what) {
  for (int polls = 0;; ++polls) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) check(status, "cudaEventQuery");
    if (op.expired()) {
      raisePeerFailure<TimeoutError>(op, -1, std::string("timed out waiting for the GPU (") +
                                                 what + ")");
    }
    if (polls < kYieldPolls) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(kPollSleep);
    }
  }
}

cudaEvent_t newEvent(unsigned flags = cudaEventDisableTiming) {
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, flags), "cudaEventCreateWithFlags");
  return event;
}

// Pinned host memory, grown on demand.
class Pinned {
 public:
  Pinned() = default;
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  ~Pinned() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  // The caller makes sure no copy still uses the old memory.
  uint8_t* reserve(size_t bytes) {
    if (bytes <= bytes_) return data_;
    if (data_ != nullptr) check(cudaFreeHost(data_), "cudaFreeHost");
    data_ = nullptr;
    bytes_ = 0;
    void* fresh = nullptr;
    check(cudaHostAlloc(&fresh, bytes, cudaHostAllocPortable), "cudaHostAlloc");
    data_ = static_cast<uint8_t*>(fresh);
    bytes_ = bytes;
    return data_;
  }
  uint8_t* data() const { return data_; }

 private:
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

struct Slot {
  Pinned memory;
  cudaEvent_t copiedOut = nullptr;  // the chunk is in host memory
  cudaEvent_t copiedIn = nullptr;   // the chunk went back to the device: the slot is free
};

// What one rank tells the others at the start of an IPC all-reduce.
struct IpcRecord {
  int64_t pid = 0;
  int32_t device = -1;
  int32_t ok = 0;  // 0: this rank cannot export its buffers (see `why`)
  cudaIpcMemHandle_t input{};
  uint64_t inputOffset = 0;
  cudaIpcMemHandle_t output{};
  uint64_t outputOffset = 0;
  cudaIpcEventHandle_t events[3]{};
  char why[160] = {};
};

enum IpcPhase { kInputReady = 0, kReduced = 1, kGathered = 2 };

// Everything kept per device: streams, events, pinned memory, peers' mapped buffers.
struct DeviceState {
  int device = 0;
  cudaStream_t copyOut = nullptr;
  cudaStream_t copyIn = nullptr;
  cudaStream_t compute = nullptr;
  cudaEvent_t done = nullptr;  // the collective's last device write; the caller's stream waits
  Slot slots[kSlots];
  bool slotsReady = false;
  Pinned arena;
  cudaEvent_t arenaCopiedOut = nullptr;
  cudaEvent_t arenaCopiedIn = nullptr;

  std::mutex eventsMutex;  // prepare() runs on callers' threads
  std::vector<cudaEvent_t> freeEvents;

  // IPC: this rank's three interprocess events and what it has opened of its peers'.
  cudaEvent_t ipcEvents[3] = {nullptr, nullptr, nullptr};
  cudaIpcEventHandle_t ipcEventHandles[3]{};
  std::map<std::string, void*> openBuffers;        // (peer, handle) -> mapped allocation base
  std::map<std::string, cudaEvent_t> openEvents;   // (peer, handle) -> opened event

  explicit DeviceState(int id) : device(id) {
    DeviceGuard guard(device);
    check(cudaStreamCreateWithFlags(&copyOut, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaStreamCreateWithFlags(&copyIn, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    done = newEvent();
    arenaCopiedOut = newEvent();
    arenaCopiedIn = newEvent();
  }

  ~DeviceState() {
    // Errors are ignored here: at process exit the CUDA runtime may be unloading already. The
    // thread's current device is put back (shutdown() may run on a user's thread).
    int previous = device;
    if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) return;
    struct Restore {
      int device;
      ~Restore() { cudaSetDevice(device); }
    } restore{previous};
    // Copies may still read the pinned memory freed below: wait for this rank's own streams
    // (never the whole device).
    for (cudaStream_t stream : {copyOut, copyIn, compute}) {
      if (stream != nullptr) cudaStreamSynchronize(stream);
    }
    for (auto& [key, base] : openBuffers) cudaIpcCloseMemHandle(base);
    for (auto& [key, event] : openEvents) cudaEventDestroy(event);
    for (cudaEvent_t event : ipcEvents) {
      if (event != nullptr) cudaEventDestroy(event);
    }
    for (Slot& slot : slots) {
      if (slot.copiedOut != nullptr) cudaEventDestroy(slot.copiedOut);
      if (slot.copiedIn != nullptr) cudaEventDestroy(slot.copiedIn);
    }
    for (cudaEvent_t event : freeEvents) cudaEventDestroy(event);
    for (cudaEvent_t event : {done, arenaCopiedOut, arenaCopiedIn}) {
      if (event != nullptr) cudaEventDestroy(event);
    }
    for (cudaStream_t stream : {copyOut, copyIn, compute}) {
      if (stream != nullptr) cudaStreamDestroy(stream);
    }
  }

  cudaEvent_t takeEvent() {
    std::lock_guard<std::mutex> lock(eventsMutex);
    if (freeEvents.empty()) return newEvent();
    cudaEvent_t event = freeEvents.back();
    freeEvents.pop_back();
    return event;
  }
  void giveEvent(cudaEvent_t event) {
    std::lock_guard<std::mutex> lock(eventsMutex);
    freeEvents.push_back(event);
  }

  void ensureSlots() {
    if (slotsReady) return;
    for (Slot& slot : slots) {
      slot.memory.reserve(kChunkBytes);
      slot.copiedOut = newEvent();
      slot.copiedIn = newEvent();
    }
    slotsReady = true;
  }

  void ensureIpcEvents() {
    if (ipcEvents[0] != nullptr) return;
    for (int i = 0; i < 3; ++i) {
      ipcEvents[i] = newEvent(cudaEventDisableTiming | cudaEventInterprocess);
      check(cudaIpcGetEventHandle(&ipcEventHandles[i], ipcEvents[i]), "cudaIpcGetEventHandle");
    }
  }
};

class CudaTicket : public Ticket {
 public:
  CudaTicket(DeviceState& state, cudaStream_t stream, cudaEvent_t ready,
             std::vector<const void*> deviceAddresses)
      : state_(state), stream_(stream), ready_(ready), deviceAddresses_(std::move(deviceAddresses)) {}
  ~CudaTicket() override { state_.giveEvent(ready_); }

  bool onDevice(const void* address) const override {
    return address != nullptr && std::find(deviceAddresses_.begin(), deviceAddresses_.end(),
                                           address) != deviceAddresses_.end();
  }
  DeviceState& state() const { return state_; }
  cudaStream_t stream() const { return stream_; }
  cudaEvent_t ready() const { return ready_; }

 private:
  DeviceState& state_;
  cudaStream_t stream_;
  cudaEvent_t ready_;
  std::vector<const void*> deviceAddresses_;
};

// The start of the allocation that holds `address`, through the driver's cuMemGetAddressRange
// (found at run time, so the library does not link libcuda).
uintptr_t allocationBase(const void* address) {
  using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static GetAddressRange getRange = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    check(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &function, 12000,
                                           cudaEnableDefault, &found),
          "cudaGetDriverEntryPointByVersion(cuMemGetAddressRange)");
#else
    check(cudaGetDriverEntryPoint("cuMemGetAddressRange", &function, cudaEnableDefault, &found),
          "cudaGetDriverEntryPoint(cuMemGetAddressRange)");
#endif
    if (found != cudaDriverEntryPointSuccess || function == nullptr) {
      throw Error("ringcomm: the CUDA driver has no cuMemGetAddressRange");
    }
    return reinterpret_cast<GetAddressRange>(function);
  }();
  CUdeviceptr base = 0;
  size_t bytes = 0;
  const CUresult result = getRange(&base, &bytes, reinterpret_cast<CUdeviceptr>(address));
  if (result != CUDA_SUCCESS) {
    throw Error("ringcomm: cuMemGetAddressRange failed with CUresult " + std::to_string(result));
  }
  return static_cast<uintptr_t>(base);
}

template <typename Handle>
std::string cacheKey(int peer, const Handle& handle) {
  std::string key(reinterpret_cast<const char*>(&peer), sizeof(peer));
  key.append(reinterpret_cast<const char*>(&handle), sizeof(handle));
  return key;
}

void copyWhy(IpcRecord& record, const std::string& why) {
  std::strncpy(record.why, why.c_str(), sizeof(record.why) - 1);
}

class CudaPath : public DevicePath {
 public:
  CudaPath(int rank, int size) : rank_(rank), size_(size) {}

  TicketPtr prepare(std::initializer_list<const void*> addresses, void* stream,
                    const char* collective) override {
    if (static_cast<cudaStream_t>(stream) == cudaStreamPerThread) {
      // The collective finishes on the engine's thread, where this handle names another stream.
      throw InvalidArgument(std::string(collective) +
                            ": the per-thread default stream (handle 2) is not supported; pass "
                            "an explicit stream");
    }
    std::vector<const void*> onDevice;
    bool managed = false;
    int device = -1;
    for (const void* address : addresses) {
      if (address == nullptr) continue;
      cudaPointerAttributes attributes{};
      const cudaError_t looked = cudaPointerGetAttributes(&attributes, address);
      if (looked == cudaErrorInvalidValue) {
        cudaGetLastError();  // memory CUDA does not know: host memory; clear the error it left
        continue;
      }
      check(looked, "cudaPointerGetAttributes");  // anything else is a real CUDA error
      // Managed memory is host-accessible, and the host schedules use it directly, but only
      // once the caller's stream has finished with it (without concurrent managed access, a
      // host touch while a kernel runs faults).
      if (attributes.type == cudaMemoryTypeManaged) managed = true;
      // Pinned memory is host memory.
      if (attributes.type != cudaMemoryTypeDevice) continue;
      if (device >= 0 && attributes.device != device) {
        throw InvalidArgument(std::string(collective) + ": buffers on CUDA devices " +
                              std::to_string(device) + " and " + std::to_string(attributes.device) +
                              "; one collective's device buffers must share a device");
      }
      device = attributes.device;
      onDevice.push_back(address);
    }
    if (onDevice.empty()) {
      if (managed) {
        check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
              "cudaStreamSynchronize (the caller's stream, before the host uses managed memory)");
      }
      return nullptr;
    }
    DeviceState& state = stateFor(device);
    DeviceGuard guard(device);
    cudaEvent_t ready = state.takeEvent();
    const cudaError_t recorded = cudaEventRecord(ready, static_cast<cudaStream_t>(stream));
    if (recorded != cudaSuccess) {
      state.giveEvent(ready);
      check(recorded, "cudaEventRecord on the caller's stream (is it on the buffers' device?)");
    }
    return std::make_shared<CudaTicket>(state, static_cast<cudaStream_t>(stream), ready,
                                        std::move(onDevice));
  }

  void staged(const Ticket& ticket, const Operation& op, const std::vector<Region>& regions,
              const std::function<void(const std::vector<void*>& host)>& body) override {
    const auto& t = static_cast<const CudaTicket&>(ticket);
    DeviceState& s = t.state();
    DeviceGuard guard(s.device);
    begin(t);

    // Device regions grouped into disjoint ranges (an in-place collective names one buffer
    // twice, or one inside another), each given a place in the arena.
    struct Group {
      uintptr_t begin;
      uintptr_t end;
      bool read = false;
      bool written = false;
      size_t coveredByWrites = 0;  // bytes of the largest written region (see below)
      size_t offset = 0;
    };
    std::vector<size_t> order;
    for (size_t i = 0; i < regions.size(); ++i) {
      if (regions[i].bytes > 0 && t.onDevice(regions[i].address)) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return regions[a].address < regions[b].address;
    });
    std::vector<Group> groups;
    std::vector<size_t> groupOf(regions.size(), SIZE_MAX);
    for (size_t i : order) {
      const auto begin = reinterpret_cast<uintptr_t>(regions[i].address);
      const uintptr_t end = begin + regions[i].bytes;
      if (groups.empty() || begin >= groups.back().end) groups.push_back(Group{begin, end});
      Group& group = groups.back();
      group.end = std::max(group.end, end);
      group.read = group.read || regions[i].read;
      if (regions[i].written) {
        group.written = true;
        group.coveredByWrites = std::max(group.coveredByWrites, regions[i].bytes);
      }
      groupOf[i] = groups.size() - 1;
    }
    size_t arenaBytes = 0;
    for (Group& group : groups) {
      // A group the schedule writes only in part is copied in first, so that copying it back
      // leaves the caller's other bytes as they were.
      if (group.written && group.coveredByWrites < group.end - group.begin) group.read = true;
      group.offset = arenaBytes;
      arenaBytes += (group.end - group.begin + kSliceAlignBytes - 1) / kSliceAlignBytes *
                    kSliceAlignBytes;
    }

    // The previous collective's copies back out of the arena must be done before it is reused.
    waitFor(s.arenaCopiedIn, op, "the previous staging copy to the device");
    uint8_t* arena = s.arena.reserve(std::max<size_t>(arenaBytes, 1));
    bool copied = false;
    for (const Group& group : groups) {
      if (!group.read) continue;
      check(cudaMemcpyAsync(arena + group.offset, reinterpret_cast<const void*>(group.begin),
                            group.end - group.begin, cudaMemcpyDeviceToHost, s.copyOut),
            "cudaMemcpyAsync (device to host)");
      copied = true;
    }
    if (copied) {
      check(cudaEventRecord(s.arenaCopiedOut, s.copyOut), "cudaEventRecord");
      waitFor(s.arenaCopiedOut, op, "copying device buffers to host memory");
    }

    std::vector<void*> host(regions.size(), nullptr);
    for (size_t i = 0; i < regions.size(); ++i) {
      if (groupOf[i] == SIZE_MAX) {
        host[i] = const_cast<void*>(regions[i].address);
      } else {
        const Group& group = groups[groupOf[i]];
        host[i] = arena + group.offset +
                  (reinterpret_cast<uintptr_t>(regions[i].address) - group.begin);
      }
    }
    body(host);

    for (const Group& group : groups) {
      if (!group.written) continue;
      check(cudaMemcpyAsync(reinterpret_cast<void*>(group.begin), arena + group.offset,
                            group.end - group.begin, cudaMemcpyHostToDevice, s.copyIn),
            "cudaMemcpyAsync (host to device)");
    }
    check(cudaEventRecord(s.arenaCopiedIn, s.copyIn), "cudaEventRecord");
    finish(t, s.copyIn);
  }

  void pipelined(const Ticket& ticket, const Operation& op, const void* input, void* output,
                 size_t count, size_t elementBytes, bool copyIn, bool copyOut,
                 const ChunkStep& step) override {
    const auto& t = static_cast<const CudaTicket&>(ticket);
    DeviceState& s = t.state();
    DeviceGuard guard(s.device);
    s.ensureSlots();
    begin(t);
    const size_t chunkCount = std::max<size_t>(1, kChunkBytes / elementBytes);
    const size_t chunks = (count + chunkCount - 1) / chunkCount;
    const auto* in = static_cast<const uint8_t*>(input);
    auto* out = static_cast<uint8_t*>(output);
    auto elementsOf = [&](size_t chunk) {
      return std::min(chunkCount, count - chunk * chunkCount);
    };
    auto copyChunkOut = [&](size_t chunk) {
      Slot& slot = s.slots[chunk % kSlots];
      // Not before the slot's previous chunk has gone back to the device.
      check(cudaStreamWaitEvent(s.copyOut, slot.copiedIn, 0), "cudaStreamWaitEvent");
      check(cudaMemcpyAsync(slot.memory.data(), in + chunk * chunkCount * elementBytes,
                            elementsOf(chunk) * elementBytes, cudaMemcpyDeviceToHost, s.copyOut),
            "cudaMemcpyAsync (device to host)");
      check(cudaEventRecord(slot.copiedOut, s.copyOut), "cudaEventRecord");
    };
    if (copyIn) {
      for (size_t chunk = 0; chunk < chunks && chunk < static_cast<size_t>(kSlots); ++chunk) {
        copyChunkOut(chunk);
      }
    }
    for (size_t chunk = 0; chunk < chunks; ++chunk) {
      Slot& slot = s.slots[chunk % kSlots];
      if (copyIn) {
        waitFor(slot.copiedOut, op, "copying a chunk to host memory");
      } else {
        waitFor(slot.copiedIn, op, "copying a chunk to the device");  // the slot is free
      }
      step(slot.memory.data(), chunk * chunkCount, elementsOf(chunk));
      if (copyOut) {
        check(cudaMemcpyAsync(out + chunk * chunkCount * elementBytes, slot.memory.data(),
                              elementsOf(chunk) * elementBytes, cudaMemcpyHostToDevice, s.copyIn),
              "cudaMemcpyAsync (host to device)");
        check(cudaEventRecord(slot.copiedIn, s.copyIn), "cudaEventRecord");
      }
      if (copyIn && chunk + kSlots < chunks) copyChunkOut(chunk + kSlots);
    }
    finish(t, s.copyIn);
  }

  bool ipcAllreduce(const Ticket& ticket, const Operation& /*op: nothing here waits on the host*/,
                    const Peers& peers,
                    const void* input, void* output, size_t count, DataType type,
                    ReduceOp reduceOp) override {
    const auto& t = static_cast<const CudaTicket&>(ticket);
    DeviceState& s = t.state();
    DeviceGuard guard(s.device);
    // Round 1: every rank's buffers and events. A rank that cannot export them says so, and
    // every rank falls back to staging together.
    IpcRecord mine;
    mine.pid = static_cast<int64_t>(getpid());
    mine.device = s.device;
    try {
      s.ensureIpcEvents();
      check(cudaStreamWaitEvent(s.compute, t.ready(), 0), "cudaStreamWaitEvent");
      check(cudaStreamWaitEvent(s.compute, s.done, 0), "cudaStreamWaitEvent");  // see begin()
      // Recorded before the handles go out: a peer that has them may wait on this event.
      check(cudaEventRecord(s.ipcEvents[kInputReady], s.compute), "cudaEventRecord");
      std::memcpy(mine.events, s.ipcEventHandles, sizeof(mine.events));
      exportBuffer(input, &mine.input, &mine.inputOffset);
      exportBuffer(output, &mine.output, &mine.outputOffset);
      mine.ok = 1;
    } catch (const Error& error) {
      cudaGetLastError();
      copyWhy(mine, error.what());
    }
    std::vector<IpcRecord> records(size_);
    peers.allgather(&mine, records.data(), sizeof(IpcRecord));

    // Map every peer's buffers (cached), then round 2: does every rank have them all?
    std::vector<const uint8_t*> peerInput(size_, nullptr);
    std::vector<const uint8_t*> peerOutput(size_, nullptr);
    std::vector<cudaEvent_t> peerEvents(static_cast<size_t>(size_) * 3, nullptr);
    uint8_t ok = 1;
    makeRoomForMappings(s, 2 * static_cast<size_t>(size_));
    for (int peer = 0; peer < size_ && ok; ++peer) {
      if (peer == rank_) continue;
      const IpcRecord& record = records[peer];
      if (!record.ok || record.pid == mine.pid) {
        ok = 0;
        break;
      }
      try {
        peerInput[peer] = openBuffer(s, peer, record.input) + record.inputOffset;
        peerOutput[peer] = openBuffer(s, peer, record.output) + record.outputOffset;
        for (int phase = 0; phase < 3; ++phase) {
          peerEvents[peer * 3 + phase] = openEvent(s, peer, record.events[phase]);
        }
      } catch (const Error&) {
        cudaGetLastError();
        ok = 0;
      }
    }
    std::vector<uint8_t> everyone(size_, 0);
    peers.allgather(&ok, everyone.data(), 1);
    for (uint8_t flag : everyone) {
      if (!flag) return false;  // nothing was written: the caller stages instead
    }

    // Phase 1: this rank's slice, reduced from every rank's input in a fixed order (its own
    // input first, then the others by rank), so the result does not depend on timing.
    const size_t elementBytes = elementSize(type);
    const size_t align = kSliceAlignBytes / elementBytes;
    const size_t perRank = ((count + size_ - 1) / size_ + align - 1) / align * align;
    auto sliceBegin = [&](int r) { return std::min(count, perRank * r); };
    auto sliceEnd = [&](int r) { return std::min(count, perRank * (r + 1)); };
    const auto* in = static_cast<const uint8_t*>(input);
    auto* out = static_cast<uint8_t*>(output);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      check(cudaStreamWaitEvent(s.compute, peerEvents[peer * 3 + kInputReady], 0),
            "cudaStreamWaitEvent (peer's input ready)");
    }
    const size_t begin = sliceBegin(rank_);
    const size_t elements = sliceEnd(rank_) - begin;
    if (elements > 0) {
      const size_t at = begin * elementBytes;
      bool first = true;
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_) continue;
        if (first) {
          cuda::reduce(out + at, in + at, peerInput[peer] + at, elements, type, reduceOp,
                       s.compute);
          first = false;
        } else {
          cuda::reduceInto(out + at, peerInput[peer] + at, elements, type, reduceOp, s.compute);
        }
      }
      cuda::finishAverage(out + at, elements, type, reduceOp, size_, s.compute);
    }
    check(cudaEventRecord(s.ipcEvents[kReduced], s.compute), "cudaEventRecord");
    peers.barrier();  // round 3: every rank's "reduced" event is recorded

    // Phase 2: the other ranks' slices, from their outputs. Waiting for rank k's "reduced" also
    // means rank k has finished reading this rank's input (which, in place, is about to be
    // overwritten).
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      check(cudaStreamWaitEvent(s.compute, peerEvents[peer * 3 + kReduced], 0),
            "cudaStreamWaitEvent (peer's slice reduced)");
      const size_t peerBegin = sliceBegin(peer);
      const size_t peerElements = sliceEnd(peer) - peerBegin;
      if (peerElements == 0) continue;
      check(cudaMemcpyAsync(out + peerBegin * elementBytes,
                            peerOutput[peer] + peerBegin * elementBytes,
                            peerElements * elementBytes, cudaMemcpyDeviceToDevice, s.compute),
            "cudaMemcpyAsync (peer's slice)");
    }
    check(cudaEventRecord(s.ipcEvents[kGathered], s.compute), "cudaEventRecord");
    peers.barrier();  // round 4: every rank's "gathered" event is recorded

    // The caller may reuse its buffers once every peer has stopped reading them.
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      check(cudaStreamWaitEvent(s.compute, peerEvents[peer * 3 + kGathered], 0),
            "cudaStreamWaitEvent (peer's gather done)");
    }
    finish(t, s.compute);
    return true;
  }

 private:
  DeviceState& stateFor(int device) {
    std::lock_guard<std::mutex> lock(statesMutex_);
    auto& state = states_[device];
    if (!state) state = std::make_unique<DeviceState>(device);
    return *state;
  }

  // The staging streams start after the caller's work that produced the buffers (and that may
  // still read the outputs).
  // Also after the previous collective's last device write (`done`): the caller's stream waits
  // for it only later, so an asynchronous collective on the same buffers could overtake it.
  static void begin(const CudaTicket& t) {
    DeviceState& s = t.state();
    for (cudaStream_t stream : {s.copyOut, s.copyIn}) {
      check(cudaStreamWaitEvent(stream, t.ready(), 0), "cudaStreamWaitEvent");
      check(cudaStreamWaitEvent(stream, s.done, 0), "cudaStreamWaitEvent");
    }
  }

  // The caller's stream goes on after `last`'s work so far: the collective's last device write.
  static void finish(const CudaTicket& t, cudaStream_t last) {
    DeviceState& s = t.state();
    check(cudaEventRecord(s.done, last), "cudaEventRecord");
    check(cudaStreamWaitEvent(t.stream(), s.done, 0), "cudaStreamWaitEvent on the caller's stream");
  }

  static void exportBuffer(const void* address, cudaIpcMemHandle_t* handle, uint64_t* offset) {
    const uintptr_t base = allocationBase(address);
    check(cudaIpcGetMemHandle(handle, reinterpret_cast<void*>(base)), "cudaIpcGetMemHandle");
    *offset = reinterpret_cast<uintptr_t>(address) - base;
  }

  // Called before a collective maps its peers' buffers (never between two of its mappings, which
  // it is about to use): closes every cached mapping when `coming` more would not fit.
  static void makeRoomForMappings(DeviceState& s, size_t coming) {
    if (s.openBuffers.size() + coming <= kMaxOpenPeerBuffers) return;
    // Kernels of earlier collectives may still read these mappings: let this rank's compute
    // stream drain first (its own stream only).
    check(cudaStreamSynchronize(s.compute), "cudaStreamSynchronize");
    for (auto& [unused, base] : s.openBuffers) cudaIpcCloseMemHandle(base);
    s.openBuffers.clear();
  }

  const uint8_t* openBuffer(DeviceState& s, int peer, const cudaIpcMemHandle_t& handle) {
    const std::string key = cacheKey(peer, handle);
    auto found = s.openBuffers.find(key);
    if (found != s.openBuffers.end()) return static_cast<const uint8_t*>(found->second);
    void* base = nullptr;
    check(cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess),
          "cudaIpcOpenMemHandle");
    s.openBuffers.emplace(key, base);
    return static_cast<const uint8_t*>(base);
  }

  cudaEvent_t openEvent(DeviceState& s, int peer, const cudaIpcEventHandle_t& handle) {
    const std::string key = cacheKey(peer, handle);
    auto found = s.openEvents.find(key);
    if (found != s.openEvents.end()) return found->second;
    cudaEvent_t event = nullptr;
    check(cudaIpcOpenEventHandle(&event, handle), "cudaIpcOpenEventHandle");
    s.openEvents.emplace(key, event);
    return event;
  }

  int rank_;
  int size_;
  std::mutex statesMutex_;
  std::map<int, std::unique_ptr<DeviceState>> states_;
};

}  // namespace

std::unique_ptr<DevicePath> createDevicePath(int rank, int size) {
  return std::make_unique<CudaPath>(rank, size);
}

}  // namespace device
}  // namespace ringcomm
