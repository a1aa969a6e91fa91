// The device path of a CUDA build (device_path.h): finds device buffers and records where the
// caller's stream has them ready (prepare), then hands a collective to whole or pipelined staging
// through pinned host memory (staging.h) or to the same-host IPC all-reduce (ipc.h).
#include <cuda_runtime_api.h>

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

#include "ringcomm/config.h"
#include "ringcomm/errors.h"
#include "device/device_path.h"
#include "device/device_state.h"
#include "device/ipc.h"
#include "device/staging.h"

// cmake/cuda.cmake defines it from CMAKE_CUDA_ARCHITECTURES; a compile that does not (a syntax
// check with another compiler) reports none.
#ifndef RINGCOMM_CUDA_ARCHITECTURES
#define RINGCOMM_CUDA_ARCHITECTURES ""
#endif

namespace ringcomm {

bool builtWithCuda() { return true; }

namespace device {
namespace {

class CudaPath : public DevicePath {
 public:
  CudaPath(int rank, int size, const Config& config)
      : chunkBytes_(config.cudaChunkBytes),
        mpsPipeDirectory_(config.mpsPipeDirectory),
        stageWhenTimeSliced_(config.cudaPath != ringcomm::CudaPath::Ipc),
        ipc_(rank, size, mpsPipeDirectory_, stageWhenTimeSliced_) {}

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
    stageWhole(static_cast<const CudaTicket&>(ticket), op, regions, body);
  }

  void pipelined(const Ticket& ticket, const Operation& op, const void* input, void* output,
                 size_t count, size_t elementBytes, bool copyIn, bool copyOut,
                 const ChunkStep& step) override {
    stagePipelined(static_cast<const CudaTicket&>(ticket), op, input, output, count, elementBytes,
                   copyIn, copyOut, step);
  }

  std::unique_ptr<Message> message(const TicketPtr& ticket, const Operation& op, void* buffer,
                                   size_t bytes, bool isSend, bool linkTakesDevice) override {
    return stageMessage(std::static_pointer_cast<const CudaTicket>(ticket), op, buffer, bytes,
                        isSend, linkTakesDevice);
  }

  bool ipcAllreduce(const Ticket& ticket, const Operation& op, const Peers& peers,
                    const void* input, void* output, size_t count, DataType type,
                    ReduceOp reduceOp) override {
    return ipc_.run(static_cast<const CudaTicket&>(ticket), op, peers, input, output, count, type,
                    reduceOp);
  }

  bool ipcAllreduceWithinHost(const Ticket& ticket, const Operation& op, const Peers& hostPeers,
                              int hostRank, int hostSize, const void* input, void* output,
                              size_t count, DataType type, ReduceOp reduceOp,
                              const SliceStep& betweenHalves) override {
    if (!hostIpc_) {
      hostIpc_ = std::make_unique<IpcAllreduce>(hostRank, hostSize, mpsPipeDirectory_,
                                                stageWhenTimeSliced_);
    }
    return hostIpc_->run(static_cast<const CudaTicket&>(ticket), op, hostPeers, input, output,
                         count, type, reduceOp, &betweenHalves);
  }

 private:
  DeviceState& stateFor(int device) {
    std::lock_guard<std::mutex> lock(statesMutex_);
    auto& state = states_[device];
    if (!state) state = std::make_unique<DeviceState>(device, chunkBytes_);
    return *state;
  }

  const size_t chunkBytes_;
  const std::string mpsPipeDirectory_;
  const bool stageWhenTimeSliced_;
  std::mutex statesMutex_;
  std::map<int, std::unique_ptr<DeviceState>> states_;
  // After states_: destroyed first, while the streams they drain still exist. hostIpc_: the
  // ranks of this host when the communicator spans hosts (made at its first all-reduce).
  IpcAllreduce ipc_;
  std::unique_ptr<IpcAllreduce> hostIpc_;
};

}  // namespace

std::unique_ptr<DevicePath> createDevicePath(int rank, int size, const Config& config) {
  return std::make_unique<CudaPath>(rank, size, config);
}

CudaBuild describeBuild() {
  CudaBuild build;
  build.cuda = true;
  // cmake/cuda.cmake passes the architectures the kernels were compiled for.
  build.architectures = RINGCOMM_CUDA_ARCHITECTURES;
  if (cudaRuntimeGetVersion(&build.runtimeVersion) != cudaSuccess) build.runtimeVersion = 0;
  if (cudaDriverGetVersion(&build.driverVersion) != cudaSuccess) build.driverVersion = 0;
  return build;
}

}  // namespace device
}  // namespace ringcomm
