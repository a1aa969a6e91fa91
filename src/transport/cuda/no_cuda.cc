// The device path of a library built without CUDA (RINGCOMM_BUILD_CUDA=OFF, the default pip
// build): collectives take host memory only, and saying otherwise is an InvalidArgument that
// tells how to get a CUDA build.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ringcomm/errors.h"
#include "transport/cuda/device_path.h"
#include "transport/cuda/queue_device.h"

namespace ringcomm {

bool builtWithCuda() { return false; }

namespace device {
namespace {

[[noreturn]] void refuse(const std::string& what) {
  throw InvalidArgument(what +
                        ": a buffer is in CUDA device memory, but ringcomm was built without "
                        "CUDA; rebuild it with pip install -Ccmake.define.RINGCOMM_BUILD_CUDA=ON "
                        "(needs nvcc), or pass host memory");
}

class NoCuda : public DevicePath {
 public:
  TicketPtr prepare(std::initializer_list<const void*>, void*, const char* collective) override {
    refuse(collective);
  }
  void staged(const Ticket&, const Operation&, const std::vector<Region>&,
              const std::function<void(const std::vector<void*>&)>&) override {
    refuse("staging");
  }
  void pipelined(const Ticket&, const Operation&, const void*, void*, size_t, size_t, bool, bool,
                 const ChunkStep&) override {
    refuse("staging");
  }
  std::unique_ptr<Message> message(const TicketPtr&, const Operation&, void*, size_t, bool,
                                   bool) override {
    refuse("send/recv");
  }
  bool ipcAllreduce(const Ticket&, const Operation&, const Peers&, const void*, void*, size_t,
                    DataType, ReduceOp) override {
    refuse("allreduce");
  }
  bool ipcAllreduceWithinHost(const Ticket&, const Operation&, const Peers&, int, int, const void*,
                              void*, size_t, DataType, ReduceOp, const SliceStep&) override {
    refuse("allreduce");
  }
};

class NoCudaQueue : public QueueDevice {
 public:
  std::shared_ptr<const ReadyMark> markReady(std::initializer_list<const void*>, void*,
                                             const std::string& what) override {
    refuse("'" + what + "'");
  }
  void* beginRun(int, const std::vector<const ReadyMark*>&) override { refuse("tensor queue"); }
  void* fusionBuffer(int, size_t) override { refuse("tensor queue"); }
  void copy(int, void*, const void*, size_t) override { refuse("tensor queue"); }
  void upload(int, void*, const void*, size_t) override { refuse("tensor queue"); }
  void download(int, void*, const void*, size_t) override { refuse("tensor queue"); }
  OrderAfter endRun(int) override { refuse("tensor queue"); }
};

}  // namespace

std::unique_ptr<QueueDevice> createQueueDevice() { return std::make_unique<NoCudaQueue>(); }

std::unique_ptr<DevicePath> createDevicePath(int, int, const Config&) {
  return std::make_unique<NoCuda>();
}

void describeBuild(BuildInfo& info) { info.cuda = false; }

}  // namespace device
}  // namespace ringcomm
