// What the parts of the CUDA device path share (staging.cc, ipc.cc, cuda_path.cc): CUDA error
// checks, waits on events by an operation's deadline, pinned host memory, and the streams and
// events kept per device.
//
// Vocabulary:
//   caller's stream  the cudaStream_t the caller passed; its "ready" event (CudaTicket) is
//                    recorded at submission, and it is made to wait for "done" when the
//                    collective ends.
//   copy-out stream  device -> pinned host copies; copy-in stream: pinned host -> device copies;
//   compute stream   the IPC all-reduce's kernels and peer copies. All three are this
//                    communicator's own (non-blocking: they never wait for the legacy stream).
//   done             the event of a collective's last device write on this device: the caller's
//                    stream waits for it, and the next collective starts after it.
//
// Every host-side wait is for one event, polled against the operation's deadline (waitFor).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/deadline.h"
#include "device/device_path.h"
#include "device/ipc_plan.h"

namespace ringcomm::device {

// Chunks in flight: one being copied out, one in the host collective, one being copied in, and
// one spare so that a copy out never waits for the host.
constexpr int kSlots = 4;
// (kSliceAlignBytes, where buffers are cut into slices and staging places regions: ipc_plan.h.)

// Throws Error("ringcomm: <call> failed: <name> (<description>)") unless status is cudaSuccess.
void check(cudaError_t status, const char* call);

// A function of the CUDA driver API, found at run time (the library does not link libcuda);
// nullptr when the driver has none by that name.
void* driverEntryPoint(const char* name);

// The UUID of `device` (an ordinal of this process), as cudaDeviceProp::uuid.
void deviceUuid(int device, uint8_t (&uuid)[16]);

// Makes `device` current on this thread for a scope, and puts the caller's back (a collective
// run on the caller's thread must not change its current device). Not where the caller's device
// has no context yet: since CUDA 12 setting a device creates its context, and a thread that never
// chose one reports device 0 (ringcomm's engine thread), so "putting it back" would open a
// context of about 0.5 GiB on GPU 0 in every rank whose GPU is another (as PyTorch avoids).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  // Only puts `previous` back at the end of the scope (the device was set by hand).
  static constexpr struct RestoreOnly {
  } kRestoreOnly{};
  DeviceGuard(int previous, RestoreOnly);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// Waits until the work before `event` on its stream has run, by the operation's deadline.
void waitFor(cudaEvent_t event, const Operation& op, const char* what);

cudaEvent_t newEvent(unsigned flags = cudaEventDisableTiming);

// Pinned host memory, grown on demand. Where the kernel and the driver allow it, it is memory
// the ranks of a host can map (ringcomm::allocateSharedMemory) pinned with cudaHostRegister, so
// that a host collective run on staged chunks takes the single-copy path between local ranks,
// loads and stores instead of the kernel's copies (src/transport/shm/shared_buffers.h); else
// cudaHostAlloc's.
class Pinned {
 public:
  Pinned() = default;
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  ~Pinned();
  // The caller makes sure no copy still uses the old memory.
  uint8_t* reserve(size_t bytes);
  uint8_t* data() const { return data_; }
  size_t capacity() const { return bytes_; }

 private:
  // Frees the memory; `status` receives the first CUDA error (the destructor ignores it).
  void release(cudaError_t* status);

  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
  bool shared_ = false;  // allocateSharedMemory's and registered, else cudaHostAlloc's
};

// One pinned chunk of the staging pipeline, and when its copies finished.
struct Slot {
  Pinned memory;
  cudaEvent_t copiedOut = nullptr;  // the chunk is in host memory
  cudaEvent_t copiedIn = nullptr;   // the chunk went back to the device: the slot is free
};

// The streams, events and pinned memory of one device, for this communicator.
struct DeviceState {
  int device = 0;
  cudaStream_t copyOut = nullptr;
  cudaStream_t copyIn = nullptr;
  cudaStream_t compute = nullptr;
  cudaEvent_t done = nullptr;
  // Pipeline unit of chunked staging (RINGCOMM_CUDA_CHUNK_BYTES, Config::cudaChunkBytes says why
  // 16 MiB). Measured on an H200 with 4 ranks on the GPU, host-link share of the pinned copy rate
  // at 64 MiB / 1 GiB: 1 MiB chunks 0.16 / 0.16, 4 MiB 0.13 / 0.16, 16 MiB 0.41 / 0.57.
  size_t chunkBytes = 0;
  Slot slots[kSlots];
  bool slotsReady = false;
  Pinned arena;  // whole-buffer staging, grown to the largest collective
  cudaEvent_t arenaCopiedOut = nullptr;
  cudaEvent_t arenaCopiedIn = nullptr;

  DeviceState(int id, size_t chunkBytes);
  ~DeviceState();
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;

  // "ready" events for tickets; prepare() runs on callers' threads, hence the lock.
  cudaEvent_t takeEvent();
  void giveEvent(cudaEvent_t event);

  void ensureSlots();

  // Pinned host copies of sends and receives (message_staging.cc): several may be in flight
  // beside a collective's staging, so each takes one of its own and gives it back after.
  std::unique_ptr<Pinned> takeMessageCopy(size_t bytes);
  void giveMessageCopy(std::unique_ptr<Pinned> copy);

 private:
  std::mutex eventsMutex_;
  std::vector<cudaEvent_t> freeEvents_;
  std::mutex messageCopiesMutex_;
  std::vector<std::unique_ptr<Pinned>> freeMessageCopies_;
};

// What prepare() captured on the caller's thread: the device state, the caller's stream, the
// event recorded there, and which of the collective's addresses are device memory.
class CudaTicket : public Ticket {
 public:
  CudaTicket(DeviceState& state, cudaStream_t stream, cudaEvent_t ready,
             std::vector<const void*> deviceAddresses);
  ~CudaTicket() override;

  bool onDevice(const void* address) const override;
  DeviceState& state() const { return state_; }
  cudaStream_t stream() const { return stream_; }
  cudaEvent_t ready() const { return ready_; }

 private:
  DeviceState& state_;
  cudaStream_t stream_;
  cudaEvent_t ready_;
  std::vector<const void*> deviceAddresses_;
};

// `stream` starts after the caller's work that produced the buffers (and that may still read the
// outputs), and after the previous collective's last device write (`done`): the caller's stream
// waits for that one only later, so an asynchronous collective on the same buffers could overtake
// it otherwise.
void startAfterCaller(const CudaTicket& ticket, cudaStream_t stream);

// The caller's stream goes on after `last`'s work so far: the collective's last device write.
void finish(const CudaTicket& ticket, cudaStream_t last);

}  // namespace ringcomm::device
