#include "device/device_state.h"

#include <cuda.h>

#include <cstring>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <system_error>
#include <thread>

#include "common/failure.h"
#include "common/log.h"
#include "ringcomm/errors.h"
#include "ringcomm/shared_memory.h"

namespace ringcomm::device {
namespace {

// Polls of an event that only yield the core before the wait sleeps between polls.
constexpr int kYieldPolls = 64;
constexpr std::chrono::microseconds kPollSleep{20};
// Pinned copies of sends and receives kept for the next ones (DeviceState::giveMessageCopy).
constexpr size_t kKeptMessageCopies = 8;

}  // namespace

void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  throw Error(std::string("ringcomm: ") + call + " failed: " + cudaGetErrorName(status) + " (" +
              cudaGetErrorString(status) + ")");
}

void* driverEntryPoint(const char* name) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t status =
      cudaGetDriverEntryPointByVersion(name, &function, 12000, cudaEnableDefault, &found);
#else
  const cudaError_t status = cudaGetDriverEntryPoint(name, &function, cudaEnableDefault, &found);
#endif
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return function;
}

void deviceUuid(int device, uint8_t (&uuid)[16]) {
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties");
  static_assert(sizeof(properties.uuid) == sizeof(uuid), "cudaUUID_t is 16 bytes");
  std::memcpy(uuid, &properties.uuid, sizeof(uuid));
}

namespace {

// Whether `device`'s primary context exists (cuDevicePrimaryCtxGetState); true when the driver
// cannot say, so that the device is put back as before.
bool hasContext(int device) {
  using GetDevice = CUresult (*)(CUdevice*, int);
  using GetState = CUresult (*)(CUdevice, unsigned int*, int*);
  static const auto getDevice = reinterpret_cast<GetDevice>(driverEntryPoint("cuDeviceGet"));
  static const auto getState =
      reinterpret_cast<GetState>(driverEntryPoint("cuDevicePrimaryCtxGetState"));
  if (getDevice == nullptr || getState == nullptr) return true;
  CUdevice handle = 0;
  unsigned int flags = 0;
  int active = 0;
  if (getDevice(&handle, device) != CUDA_SUCCESS) return true;
  return getState(handle, &flags, &active) != CUDA_SUCCESS || active != 0;
}

}  // namespace

DeviceGuard::DeviceGuard(int device) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
}

DeviceGuard::DeviceGuard(int previous, RestoreOnly) : previous_(previous) {}

DeviceGuard::~DeviceGuard() {
  int now = previous_;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_ && hasContext(previous_)) {
    cudaSetDevice(previous_);
  }
}

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

cudaEvent_t newEvent(unsigned flags) {
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, flags), "cudaEventCreateWithFlags");
  return event;
}

Pinned::~Pinned() {
  cudaError_t ignored = cudaSuccess;
  release(&ignored);
}

void Pinned::release(cudaError_t* status) {
  if (data_ == nullptr) return;
  if (shared_) {
    *status = cudaHostUnregister(data_);
    freeSharedMemory(data_);
  } else {
    *status = cudaFreeHost(data_);
  }
  data_ = nullptr;
  bytes_ = 0;
}

uint8_t* Pinned::reserve(size_t bytes) {
  if (bytes <= bytes_) return data_;
  cudaError_t freed = cudaSuccess;
  release(&freed);
  check(freed, shared_ ? "cudaHostUnregister" : "cudaFreeHost");
  void* fresh = nullptr;
  try {
    fresh = allocateSharedMemory(bytes);
    const cudaError_t registered = cudaHostRegister(fresh, bytes, cudaHostRegisterPortable);
    if (registered == cudaSuccess) {
      data_ = static_cast<uint8_t*>(fresh);
      bytes_ = bytes;
      shared_ = true;
      return data_;
    }
    cudaGetLastError();  // reported here, not by the next call
    freeSharedMemory(fresh);
    RINGCOMM_LOG(LogLevel::Info, kLogCuda,
                 "staging in cudaHostAlloc's memory: cudaHostRegister of shared memory failed "
                 "(%s)", cudaGetErrorName(registered));
  } catch (const std::system_error& error) {
    // A sandbox that forbids memfd_create.
    RINGCOMM_LOG(LogLevel::Info, kLogCuda, "staging in cudaHostAlloc's memory: %s",
                 error.what());
  }
  check(cudaHostAlloc(&fresh, bytes, cudaHostAllocPortable), "cudaHostAlloc");
  data_ = static_cast<uint8_t*>(fresh);
  bytes_ = bytes;
  shared_ = false;
  return data_;
}

DeviceState::DeviceState(int id, size_t chunk) : device(id), chunkBytes(chunk) {
  DeviceGuard guard(device);
  check(cudaStreamCreateWithFlags(&copyOut, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cudaStreamCreateWithFlags(&copyIn, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  done = newEvent();
  arenaCopiedOut = newEvent();
  arenaCopiedIn = newEvent();
}

DeviceState::~DeviceState() {
  // Errors are ignored here: at process exit the CUDA runtime may be unloading already. The
  // thread's current device is put back (shutdown() may run on a user's thread).
  int previous = device;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) return;
  const DeviceGuard restore(previous, DeviceGuard::kRestoreOnly);
  // Copies may still read the pinned memory freed below: wait for this rank's own streams
  // (never the whole device).
  for (cudaStream_t stream : {copyOut, copyIn, compute}) {
    if (stream != nullptr) cudaStreamSynchronize(stream);
  }
  for (Slot& slot : slots) {
    if (slot.copiedOut != nullptr) cudaEventDestroy(slot.copiedOut);
    if (slot.copiedIn != nullptr) cudaEventDestroy(slot.copiedIn);
  }
  for (cudaEvent_t event : freeEvents_) cudaEventDestroy(event);
  for (cudaEvent_t event : {done, arenaCopiedOut, arenaCopiedIn}) {
    if (event != nullptr) cudaEventDestroy(event);
  }
  for (cudaStream_t stream : {copyOut, copyIn, compute}) {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
}

cudaEvent_t DeviceState::takeEvent() {
  std::lock_guard<std::mutex> lock(eventsMutex_);
  if (freeEvents_.empty()) return newEvent();
  cudaEvent_t event = freeEvents_.back();
  freeEvents_.pop_back();
  return event;
}

void DeviceState::giveEvent(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(eventsMutex_);
  freeEvents_.push_back(event);
}

std::unique_ptr<Pinned> DeviceState::takeMessageCopy(size_t bytes) {
  std::unique_ptr<Pinned> copy;
  {
    std::lock_guard<std::mutex> lock(messageCopiesMutex_);
    // The smallest that holds `bytes`, or else the largest (grown below): pinning is slow.
    auto best = freeMessageCopies_.end();
    auto largest = freeMessageCopies_.end();
    for (auto it = freeMessageCopies_.begin(); it != freeMessageCopies_.end(); ++it) {
      const size_t capacity = (*it)->capacity();
      if (capacity >= bytes && (best == freeMessageCopies_.end() || capacity < (*best)->capacity())) {
        best = it;
      }
      if (largest == freeMessageCopies_.end() || capacity > (*largest)->capacity()) largest = it;
    }
    if (best == freeMessageCopies_.end()) best = largest;
    if (best != freeMessageCopies_.end()) {
      copy = std::move(*best);
      freeMessageCopies_.erase(best);
    }
  }
  if (!copy) copy = std::make_unique<Pinned>();
  copy->reserve(std::max<size_t>(bytes, 1));
  return copy;
}

void DeviceState::giveMessageCopy(std::unique_ptr<Pinned> copy) {
  std::lock_guard<std::mutex> lock(messageCopiesMutex_);
  // As many as were in flight at once, up to a few: the rest are freed.
  if (freeMessageCopies_.size() < kKeptMessageCopies) freeMessageCopies_.push_back(std::move(copy));
}

void DeviceState::ensureSlots() {
  if (slotsReady) return;
  for (Slot& slot : slots) {
    slot.memory.reserve(chunkBytes);
    slot.copiedOut = newEvent();
    slot.copiedIn = newEvent();
  }
  slotsReady = true;
}

CudaTicket::CudaTicket(DeviceState& state, cudaStream_t stream, cudaEvent_t ready,
                       std::vector<const void*> deviceAddresses)
    : state_(state), stream_(stream), ready_(ready), deviceAddresses_(std::move(deviceAddresses)) {}

CudaTicket::~CudaTicket() { state_.giveEvent(ready_); }

bool CudaTicket::onDevice(const void* address) const {
  return address != nullptr &&
         std::find(deviceAddresses_.begin(), deviceAddresses_.end(), address) !=
             deviceAddresses_.end();
}

void startAfterCaller(const CudaTicket& ticket, cudaStream_t stream) {
  check(cudaStreamWaitEvent(stream, ticket.ready(), 0), "cudaStreamWaitEvent");
  check(cudaStreamWaitEvent(stream, ticket.state().done, 0), "cudaStreamWaitEvent");
}

void finish(const CudaTicket& ticket, cudaStream_t last) {
  DeviceState& s = ticket.state();
  check(cudaEventRecord(s.done, last), "cudaEventRecord");
  check(cudaStreamWaitEvent(ticket.stream(), s.done, 0),
        "cudaStreamWaitEvent on the caller's stream");
}

}  // namespace ringcomm::device
