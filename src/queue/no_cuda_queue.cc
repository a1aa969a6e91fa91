// The tensor queue's device side in a library built without CUDA (RINGCOMM_BUILD_CUDA=OFF): a
// CUDA tensor submitted to the queue is refused as the device path refuses any device buffer
// (device/no_cuda.cc), saying how to get a CUDA build.
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "queue/queue_device.h"
#include "device/device_path.h"

namespace ringcomm::queue {
namespace {

using device::refuseDeviceMemory;

class NoCudaQueue : public QueueDevice {
 public:
  std::shared_ptr<const ReadyMark> markReady(std::initializer_list<const void*>, void*,
                                             const std::string& what) override {
    refuseDeviceMemory("'" + what + "'");
  }
  void* beginRun(int, const std::vector<const ReadyMark*>&) override {
    refuseDeviceMemory("tensor queue");
  }
  void* fusionBuffer(int, size_t) override { refuseDeviceMemory("tensor queue"); }
  void copy(int, void*, const void*, size_t) override { refuseDeviceMemory("tensor queue"); }
  void upload(int, void*, const void*, size_t) override { refuseDeviceMemory("tensor queue"); }
  void download(int, void*, const void*, size_t) override { refuseDeviceMemory("tensor queue"); }
  OrderAfter endRun(int) override { refuseDeviceMemory("tensor queue"); }
};

}  // namespace

std::unique_ptr<QueueDevice> createQueueDevice() { return std::make_unique<NoCudaQueue>(); }

}  // namespace ringcomm::queue
