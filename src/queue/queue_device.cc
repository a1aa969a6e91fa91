// The tensor queue's CUDA side (queue_device.h), in a CUDA build.
#include "queue/queue_device.h"

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ringcomm/errors.h"
#include "device/device_state.h"

namespace ringcomm::queue {
namespace {

// The device layer's CUDA helpers (device/device_state.h).
using device::check;
using device::DeviceGuard;
using device::newEvent;

// An event that lives as long as whoever may still wait for it: a mark until its run began, an
// OrderAfter until every Work that holds it is gone. Destroying an event that a stream still
// waits for is allowed: CUDA releases it once the wait is done.
class Event {
 public:
  explicit Event(int device) : device_(device) {
    DeviceGuard guard(device);
    event_ = newEvent();
  }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }
  int device() const { return device_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

class CudaReadyMark : public ReadyMark {
 public:
  explicit CudaReadyMark(int device) : event_(device) {}
  int device() const override { return event_.device(); }
  cudaEvent_t event() const { return event_.get(); }

 private:
  Event event_;
};

// The device of a device pointer, or -1 for memory CUDA does not know (host memory) and for
// pinned or managed memory, which the queue's host path handles.
int deviceOf(const void* address) {
  cudaPointerAttributes attributes{};
  const cudaError_t looked = cudaPointerGetAttributes(&attributes, address);
  if (looked == cudaErrorInvalidValue) {
    cudaGetLastError();
    return -1;
  }
  check(looked, "cudaPointerGetAttributes");
  return attributes.type == cudaMemoryTypeDevice ? attributes.device : -1;
}

class CudaQueueDevice : public QueueDevice {
 public:
  ~CudaQueueDevice() override {
    // The queue's thread has stopped; copies may still read the fusion buffers.
    for (auto& [device, state] : devices_) {
      DeviceGuard guard(device);
      cudaStreamSynchronize(state.stream);
      if (state.fusion != nullptr) cudaFree(state.fusion);
      cudaStreamDestroy(state.stream);
    }
  }

  std::shared_ptr<const ReadyMark> markReady(std::initializer_list<const void*> addresses,
                                             void* stream, const std::string& what) override {
    if (static_cast<cudaStream_t>(stream) == cudaStreamPerThread) {
      throw InvalidArgument("'" + what +
                            "': the per-thread default stream (handle 2) is not supported; make "
                            "a stream current");
    }
    int device = -1;
    for (const void* address : addresses) {
      if (address == nullptr) continue;
      const int found = deviceOf(address);
      if (found < 0 || (device >= 0 && found != device)) {
        throw InvalidArgument("'" + what +
                              "': its tensors must all be in device memory of one CUDA device");
      }
      device = found;
    }
    if (device < 0) throw InvalidArgument("'" + what + "': no tensor in CUDA device memory");
    auto mark = std::make_shared<CudaReadyMark>(device);
    DeviceGuard guard(device);
    check(cudaEventRecord(mark->event(), static_cast<cudaStream_t>(stream)),
          "cudaEventRecord on the caller's stream (is it on the tensor's device?)");
    return mark;
  }

  void* beginRun(int device, const std::vector<const ReadyMark*>& marks) override {
    PerDevice& state = stateFor(device);
    DeviceGuard guard(device);
    for (const ReadyMark* mark : marks) {
      check(cudaStreamWaitEvent(state.stream, static_cast<const CudaReadyMark*>(mark)->event(), 0),
            "cudaStreamWaitEvent (a tensor's ready event)");
    }
    return state.stream;
  }

  void* fusionBuffer(int device, size_t bytes) override {
    PerDevice& state = stateFor(device);
    if (bytes <= state.fusionBytes) return state.fusion;
    DeviceGuard guard(device);
    if (state.fusion != nullptr) {
      // Earlier runs' copies may still use the old buffer: the queue's stream drains first.
      check(cudaStreamSynchronize(state.stream), "cudaStreamSynchronize");
      check(cudaFree(state.fusion), "cudaFree");
      state.fusion = nullptr;
      state.fusionBytes = 0;
    }
    check(cudaMalloc(&state.fusion, bytes), "cudaMalloc (the tensor queue's fusion buffer)");
    state.fusionBytes = bytes;
    return state.fusion;
  }

  void copy(int device, void* to, const void* from, size_t bytes) override {
    if (bytes == 0) return;
    PerDevice& state = stateFor(device);
    DeviceGuard guard(device);
    check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, state.stream),
          "cudaMemcpyAsync (tensor queue fusion)");
  }

  void upload(int device, void* to, const void* from, size_t bytes) override {
    // From pageable memory, cudaMemcpyAsync copies the source out before it returns.
    copy(device, to, from, bytes);
  }

  void download(int device, void* to, const void* from, size_t bytes) override {
    PerDevice& state = stateFor(device);
    DeviceGuard guard(device);
    if (bytes > 0) {
      check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, state.stream),
            "cudaMemcpyAsync (a tensor queue result to host memory)");
    }
    check(cudaStreamSynchronize(state.stream), "cudaStreamSynchronize (the tensor queue's stream)");
  }

  OrderAfter endRun(int device) override {
    PerDevice& state = stateFor(device);
    auto done = std::make_shared<Event>(device);
    DeviceGuard guard(device);
    check(cudaEventRecord(done->get(), state.stream), "cudaEventRecord");
    return [done](void* stream) {
      DeviceGuard guard(done->device());
      check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done->get(), 0),
            "cudaStreamWaitEvent on the caller's stream (the tensor queue's results)");
    };
  }

 private:
  struct PerDevice {
    cudaStream_t stream = nullptr;
    void* fusion = nullptr;
    size_t fusionBytes = 0;
  };

  // The queue's thread only (beginRun and after).
  PerDevice& stateFor(int device) {
    auto found = devices_.find(device);
    if (found != devices_.end()) return found->second;
    PerDevice state;
    DeviceGuard guard(device);
    check(cudaStreamCreateWithFlags(&state.stream, cudaStreamNonBlocking),
          "cudaStreamCreateWithFlags");
    return devices_.emplace(device, state).first->second;
  }

  std::map<int, PerDevice> devices_;
};

}  // namespace

std::unique_ptr<QueueDevice> createQueueDevice() { return std::make_unique<CudaQueueDevice>(); }

}  // namespace ringcomm::queue
