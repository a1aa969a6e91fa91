#include "core/device_collectives.h"

#include <cstddef>
#include <mutex>
#include <string>

#include "algorithms/collectives.h"
#include "common/log.h"
#include "common/trace.h"
#include "ringcomm/errors.h"

namespace ringcomm {
namespace {

// Below this size an all-reduce of device buffers is staged even when CUDA IPC could carry it:
// the IPC schedule's two host rounds and cross-process event waits cost more than copying a
// small message through host memory. A first guess; on an H100 with MPS an IPC all-reduce of
// 1 MiB at 4 ranks took 155 us, and no size below 1 MiB was timed on both paths there
// (bench/RESULTS.md, "CUDA"). RINGCOMM_CUDA_PATH=ipc forces IPC at every size.
constexpr size_t kIpcMinBytes = 256 * 1024;

}  // namespace

DeviceCollectives::DeviceCollectives(int rank, int size, const Config& config,
                                     bool everyRankOnThisHost)
    : rank_(rank), size_(size), config_(config), everyRankOnThisHost_(everyRankOnThisHost),
      path_(device::createDevicePath(rank, size, config)) {}

device::TicketPtr DeviceCollectives::prepare(const CommonOptions& options,
                                             std::initializer_list<const void*> addresses,
                                             const char* collective) {
  if (!options.deviceMemory) return nullptr;
  return path_->prepare(addresses, options.stream, collective);
}

void DeviceCollectives::refusePointToPoint(const CommonOptions& options, const void* buffer,
                                           const char* what) {
  if (prepare(options, {buffer}, what)) {
    throw InvalidArgument(std::string(what) +
                          ": send/recv of device memory is not supported yet; copy the buffer "
                          "to host memory first");
  }
}

void DeviceCollectives::stageWhole(const device::TicketPtr& ticket, const algorithms::Context& ctx,
                                   const std::vector<device::Region>& regions,
                                   const std::function<void(const std::vector<void*>&)>& body) {
  if (!ticket) {
    std::vector<void*> host;
    for (const device::Region& region : regions) host.push_back(const_cast<void*>(region.address));
    body(host);
    return;
  }
  path_->staged(*ticket, ctx.op, regions, body);
}

MemoryPath DeviceCollectives::allreducePath(const AllreduceOptions& o,
                                            const device::Ticket& ticket) const {
  // An empty all-reduce moves nothing: it takes the host path whatever its (maybe null)
  // pointers are, so that ranks agree on the path.
  const bool bothOnDevice = o.count > 0 && ticket.onDevice(o.input) && ticket.onDevice(o.output);
  // Adasum's coefficients come from the whole vector: chunks would each get their own, so it is
  // staged whole and runs its host schedule (src/algorithms/adasum.h).
  if (!bothOnDevice || o.op == ReduceOp::Adasum) return MemoryPath::Host;
  const bool ipcPossible = size_ > 1 && size_ <= device::kMaxIpcRanks && everyRankOnThisHost_ &&
                           o.compression == Compression::None && o.prescale == 1.0 &&
                           o.postscale == 1.0;
  const bool ipcWanted =
      config_.cudaPath == CudaPath::Ipc ||
      (config_.cudaPath == CudaPath::Auto && o.count * elementSize(o.type) >= kIpcMinBytes);
  const MemoryPath path =
      ipcPossible && ipcWanted ? MemoryPath::DeviceIpc : MemoryPath::DeviceChunked;
  if (log::enabled(LogLevel::Info, kLogCuda)) {
    const char* why = path == MemoryPath::DeviceIpc
                          ? (config_.cudaPath == CudaPath::Ipc ? "RINGCOMM_CUDA_PATH=ipc"
                                                               : "at or above the IPC threshold")
                      : size_ == 1              ? "one rank"
                      : size_ > device::kMaxIpcRanks ? "more ranks than the IPC all-reduce takes"
                      : !everyRankOnThisHost_   ? "ranks on other hosts"
                      : o.compression != Compression::None ? "compression needs the host path"
                      : o.prescale != 1.0 || o.postscale != 1.0 ? "scaling needs the host path"
                      : config_.cudaPath == CudaPath::Staged    ? "RINGCOMM_CUDA_PATH=staged"
                                                                : "below the IPC threshold";
    logPath(path == MemoryPath::DeviceIpc ? "IPC (peers read each other's device memory)"
                                          : "staged through pinned host memory in chunks",
            why, o.count * elementSize(o.type));
  }
  return path;
}

void DeviceCollectives::logPath(const char* path, const char* why, size_t bytes) const {
  const bool everyCall = log::enabled(LogLevel::Trace, kLogCuda);
  {
    std::lock_guard<std::mutex> lock(loggedMutex_);
    if (!logged_.insert(why).second && !everyCall) return;  // once per reason at INFO
  }
  RINGCOMM_LOG(everyCall ? LogLevel::Trace : LogLevel::Info, kLogCuda,
               "allreduce of %zu B of device memory: %s (%s; IPC from %zu B, "
               "RINGCOMM_CUDA_PATH=%s)",
               bytes, path, why, kIpcMinBytes, toString(config_.cudaPath));
}

void DeviceCollectives::allreduce(const device::TicketPtr& ticket, const algorithms::Context& ctx,
                                  const AllreduceOptions& o, MemoryPath path,
                                  const HostAllreduce& hostAllreduce,
                                  const std::function<void()>& barrier) {
  if (path == MemoryPath::DeviceIpc) {
    device::Peers peers;
    peers.allgather = [&ctx](const void* mine, void* all, size_t bytes) {
      AllgatherOptions exchange;
      exchange.input = mine;
      exchange.output = all;
      exchange.count = bytes;
      exchange.type = DataType::Uint8;
      algorithms::allgather(ctx, exchange);
    };
    peers.barrier = barrier;
    if (path_->ipcAllreduce(*ticket, ctx.op, peers, o.input, o.output, o.count, o.type, o.op)) {
      return;
    }
    // Every rank stages this one instead: some rank cannot map its peers' buffers, or ranks
    // share a GPU without MPS (ipc.h).
  }
  if (path != MemoryPath::Host) {
    path_->pipelined(*ticket, ctx.op, o.input, o.output, o.count, elementSize(o.type), true, true,
                     [&](void* chunk, size_t, size_t count) {
                       AllreduceOptions part = o;
                       part.input = part.output = chunk;
                       part.count = count;
                       hostAllreduce(part);
                     });
    return;
  }
  // One buffer on the device, the other in host memory: stage the whole of it.
  const size_t bytes = o.count * elementSize(o.type);
  stageWhole(ticket, ctx, {{o.input, bytes, true, false}, {o.output, bytes, false, true}},
             [&](const std::vector<void*>& host) {
               AllreduceOptions part = o;
               part.input = host[0];
               part.output = host[1];
               hostAllreduce(part);
             });
}

void DeviceCollectives::broadcast(const device::Ticket& ticket, const algorithms::Context& ctx,
                                  const BroadcastOptions& o) {
  const bool root = rank_ == o.root;
  path_->pipelined(ticket, ctx.op, o.buffer, o.buffer, o.count, elementSize(o.type), root, !root,
                   [&](void* chunk, size_t, size_t count) {
                     BroadcastOptions part = o;
                     part.buffer = chunk;
                     part.count = count;
                     algorithms::broadcast(ctx, part);
                   });
}

}  // namespace ringcomm
