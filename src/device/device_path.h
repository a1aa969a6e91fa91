// Device buffers in collectives: the CUDA side of a communicator, behind an interface that
// includes no CUDA header, so the rest of the core compiles (and runs) without CUDA.
//
// The schedules (src/algorithms) only ever see host memory. For a collective whose buffers are
// in device memory the communicator asks this layer to
//   - stage it whole: copy the device buffers it reads into pinned host memory, run the host
//     schedule there, copy what it wrote back (every collective);
//   - stage it in chunks: the same, cut into pipelined chunks, so that copying chunk i+1 out of
//     the device, the network on chunk i and copying chunk i-1 back in overlap (all-reduce,
//     broadcast);
//   - or, for an all-reduce with every rank on this host, skip host memory altogether: each rank
//     reduces its slice straight from its peers' device buffers (CUDA IPC), then copies the
//     slices the others reduced (ipcAllreduce);
//   - or, across hosts, do that among the ranks of each host, and stage only each rank's reduced
//     slice through host memory to the network between the two halves (ipcAllreduceWithinHost).
// A send or receive of a device buffer (message) is staged through a pinned host copy of its own,
// or goes to the network as device memory where the link takes it (UCX built with CUDA).
//
// Streams. A collective is ordered after the work the caller queued on its stream before
// submitting it (prepare() records an event there, on the caller's thread), and the caller's
// stream is made to wait for the collective's last device write before its Work completes. Only
// events are waited on, with the operation's deadline; nothing synchronises the whole device.
//
// Several ranks may share one GPU (processes on one device), and one rank may use several: the
// device is whichever the buffers are on, and resources are kept per device.
//
// Built without CUDA (RINGCOMM_BUILD_CUDA=OFF), createDevicePath() returns an implementation whose
// prepare() raises InvalidArgument saying so (no_cuda.cc).
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "ringcomm/config.h"
#include "ringcomm/types.h"

namespace ringcomm::device {

// What prepare() captured on the caller's thread; the engine hands it back to the calls below.
class Ticket {
 public:
  virtual ~Ticket() = default;
  // Whether `address` is device memory (as found by prepare()); null is not.
  virtual bool onDevice(const void* address) const = 0;
};
using TicketPtr = std::shared_ptr<const Ticket>;

// One buffer of a whole-buffer staged collective: `read` if the host schedule reads it, `written`
// if it writes it. Host buffers pass through as they are.
struct Region {
  const void* address = nullptr;
  size_t bytes = 0;
  bool read = false;
  bool written = false;
};

// The most ranks the IPC all-reduce takes: its reduction reads every rank's slice in one kernel
// (cuda::kMaxReduceSources). Larger groups stage.
constexpr int kMaxIpcRanks = 32;

// How the IPC all-reduce talks to its peers: through the host transport, in rank order.
struct Peers {
  // all = every rank's `bytes` bytes of `mine`, rank 0 first.
  std::function<void(const void* mine, void* all, size_t bytes)> allgather;
  std::function<void()> barrier;
};

// A step on a rank's reduced slice of an IPC all-reduce, between the reduction and the gather:
// `slice` is device memory holding elements [offset, offset + count) of the result, which the
// step may change in place (the network's half of an all-reduce across hosts).
using SliceStep = std::function<void(void* slice, size_t offset, size_t count)>;

// A send's or receive's device buffer as the transport takes it (DevicePath::message).
class Message {
 public:
  virtual ~Message() = default;
  // Where the transport reads the send from or writes the receive to: a pinned host copy, or
  // the device buffer itself (onDevice) for a link that takes device memory.
  virtual void* data() const = 0;
  virtual bool onDevice() const = 0;
  // Once the transport has moved the bytes: a staged receive is copied to the device, and the
  // caller's stream is ordered after that copy. Raises TimeoutError past the op's deadline.
  virtual void finish(const Operation& op) = 0;
};

// A host step of a chunked collective: run the host schedule on `count` elements at `chunk`
// (pinned host memory), which stand for elements [offset, offset + count) of the caller's buffers.
using ChunkStep = std::function<void(void* chunk, size_t offset, size_t count)>;

class DevicePath {
 public:
  virtual ~DevicePath() = default;

  // On the caller's thread, when the collective is submitted. Returns null when none of
  // `addresses` is device memory (the host path runs untouched). Otherwise records an event on
  // `stream` (the caller's cudaStream_t) marking where the buffers are ready. Throws
  // InvalidArgument for device buffers on different devices, or when built without CUDA.
  virtual TicketPtr prepare(std::initializer_list<const void*> addresses, void* stream,
                            const char* collective) = 0;

  // Whole-buffer staging around `body`, which receives one host pointer per region (the staging
  // copy of a device region, the caller's pointer for a host one; null stays null). Regions
  // that overlap must be the same buffer or one inside the other (an in-place collective).
  virtual void staged(const Ticket& ticket, const Operation& op, const std::vector<Region>& regions,
                      const std::function<void(const std::vector<void*>& host)>& body) = 0;

  // Chunked staging: `step` runs on each chunk in order. copyIn: the chunk is first copied from
  // `input` (device memory); copyOut: afterwards it is copied to `output` (device memory). The
  // cut depends on count and elementBytes only, so ranks with the same collective agree on it.
  virtual void pipelined(const Ticket& ticket, const Operation& op, const void* input, void* output,
                         size_t count, size_t elementBytes, bool copyIn, bool copyOut,
                         const ChunkStep& step) = 0;

  // For a send (isSend) or a receive of `bytes` at `buffer`, device memory that prepare() found.
  // linkTakesDevice: the buffer itself, once the caller's stream has it ready; else a pinned host
  // copy of its own (several sends and receives may be in flight), holding a send's bytes on
  // return. Whoever posts it keeps the ticket alive with the message (the message holds it).
  virtual std::unique_ptr<Message> message(const TicketPtr& ticket, const Operation& op,
                                           void* buffer, size_t bytes, bool isSend,
                                           bool linkTakesDevice) = 0;

  // The IPC all-reduce (input and output on device, every rank on this host, a process each).
  // Returns false, having changed nothing, when some rank cannot map its peers' memory (another
  // process's device without peer access, memory that cannot be exported, ranks sharing a
  // process) or when ranks share a GPU without MPS under RINGCOMM_CUDA_PATH=auto (ipc.h): every
  // rank returns the same answer, and the caller stages instead.
  virtual bool ipcAllreduce(const Ticket& ticket, const Operation& op, const Peers& peers,
                            const void* input, void* output, size_t count, DataType type,
                            ReduceOp reduceOp) = 0;

  // The same among the ranks of this host only (`hostPeers` reach them; this rank is `hostRank`
  // of `hostSize`), with `betweenHalves` run on this rank's reduced slice before the ranks gather
  // every slice: with the rest of the slice's all-reduce across hosts there, the result is the
  // whole communicator's. Returns false as ipcAllreduce does, before `betweenHalves` has run.
  virtual bool ipcAllreduceWithinHost(const Ticket& ticket, const Operation& op,
                                      const Peers& hostPeers, int hostRank, int hostSize,
                                      const void* input, void* output, size_t count, DataType type,
                                      ReduceOp reduceOp, const SliceStep& betweenHalves) = 0;
};

// rank and size of the communicator this serves; config for what the device path reads of it.
std::unique_ptr<DevicePath> createDevicePath(int rank, int size, const Config& config);

// In a build without CUDA (no_cuda.cc): refuses a device buffer met by `what` (a collective, a
// send, the tensor queue) with an InvalidArgument that says how to get a CUDA build.
[[noreturn]] void refuseDeviceMemory(const std::string& what);

// What the device path was built with, for the build report (ringcomm::buildInfo, the core's).
struct CudaBuild {
  bool cuda = false;
  // The CMAKE_CUDA_ARCHITECTURES the kernels were compiled for; empty without CUDA.
  std::string architectures;
  // cudaRuntimeGetVersion() and cudaDriverGetVersion(); 0 without CUDA or without a driver.
  int runtimeVersion = 0;
  int driverVersion = 0;
};
CudaBuild describeBuild();

}  // namespace ringcomm::device
