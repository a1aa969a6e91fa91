// The device path of a library built without CUDA (RINGCOMM_BUILD_CUDA=OFF, the default pip
// build): collectives take host memory only, and saying otherwise is an InvalidArgument that
// tells how to get a CUDA build.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ringcomm/errors.h"
#include "device/device_path.h"

namespace ringcomm {

bool builtWithCuda() { return false; }

namespace device {

void refuseDeviceMemory(const std::string& what) {
  throw InvalidArgument(what +
                        ": a buffer is in CUDA device memory, but ringcomm was built without "
                        "CUDA; rebuild it with pip install -Ccmake.define.RINGCOMM_BUILD_CUDA=ON "
                        "(needs nvcc), or pass host memory");
}

namespace {

class NoCuda : public DevicePath {
 public:
  TicketPtr prepare(std::initializer_list<const void*>, void*, const char* collective) override {
    refuseDeviceMemory(collective);
  }
  void staged(const Ticket&, const Operation&, const std::vector<Region>&,
              const std::function<void(const std::vector<void*>&)>&) override {
    refuseDeviceMemory("staging");
  }
  void pipelined(const Ticket&, const Operation&, const void*, void*, size_t, size_t, bool, bool,
                 const ChunkStep&) override {
    refuseDeviceMemory("staging");
  }
  std::unique_ptr<Message> message(const TicketPtr&, const Operation&, void*, size_t, bool,
                                   bool) override {
    refuseDeviceMemory("send/recv");
  }
  bool ipcAllreduce(const Ticket&, const Operation&, const Peers&, const void*, void*, size_t,
                    DataType, ReduceOp) override {
    refuseDeviceMemory("allreduce");
  }
  bool ipcAllreduceWithinHost(const Ticket&, const Operation&, const Peers&, int, int, const void*,
                              void*, size_t, DataType, ReduceOp, const SliceStep&) override {
    refuseDeviceMemory("allreduce");
  }
};

}  // namespace

std::unique_ptr<DevicePath> createDevicePath(int, int, const Config&) {
  return std::make_unique<NoCuda>();
}

CudaBuild describeBuild() { return CudaBuild{}; }

}  // namespace device
}  // namespace ringcomm
