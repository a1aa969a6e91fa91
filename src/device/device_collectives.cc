#include "device/device_collectives.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/collectives.h"
#include "algorithms/ring.h"
#include "common/log.h"
#include "common/trace.h"
#include "reduce/reduce.h"
#include "ringcomm/errors.h"
#include "device/ipc_plan.h"

namespace ringcomm {
namespace {

// Below this size an all-reduce of device buffers is staged even when CUDA IPC could carry it:
// the IPC schedule's two host rounds and cross-process event waits cost more than copying a
// small message through host memory. A first guess; on an H100 with MPS an IPC all-reduce of
// 1 MiB at 4 ranks took 155 us, and no size below 1 MiB was timed on both paths there
// (bench/RESULTS.md, "CUDA"). RINGCOMM_CUDA_PATH=ipc forces IPC at every size.
constexpr size_t kIpcMinBytes = 256 * 1024;

// Ranks on several hosts, the same number on each, more than one: the IPC all-reduce within each
// host and its slices across hosts line up (local rank i of every host holds the same slice).
bool evenlySpread(const algorithms::HostLayout& layout) {
  if (layout.hosts.size() < 2) return false;
  const size_t local = layout.hosts.front().size();
  if (local < 2 || local > static_cast<size_t>(device::kMaxIpcRanks)) return false;
  return std::all_of(layout.hosts.begin(), layout.hosts.end(),
                     [local](const std::vector<int>& host) { return host.size() == local; });
}

// How the IPC all-reduce talks to the ranks of `ctx`: through the host schedules.
device::Peers peersOver(const algorithms::Context& ctx, const std::function<void()>& barrier) {
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
  return peers;
}

}  // namespace

DeviceCollectives::DeviceCollectives(int rank, int size, const Config& config,
                                     algorithms::HostLayout layout)
    : rank_(rank),
      size_(size),
      config_(config),
      layout_(std::move(layout)),
      everyRankOnThisHost_(layout_.hosts.size() == 1),
      evenHosts_(evenlySpread(layout_)),
      path_(device::createDevicePath(rank, size, config)) {}

device::TicketPtr DeviceCollectives::prepare(const CommonOptions& options,
                                             std::initializer_list<const void*> addresses,
                                             const char* collective) {
  if (!options.deviceMemory) return nullptr;
  return path_->prepare(addresses, options.stream, collective);
}

std::unique_ptr<device::Message> DeviceCollectives::message(const device::TicketPtr& ticket,
                                                           const algorithms::Context& ctx,
                                                           int peer, void* buffer, size_t bytes,
                                                           bool isSend) {
  if (!ticket || bytes == 0) return nullptr;
  const bool direct =
      ctx.transport.takesDeviceMemory(peer) && config_.cudaPath != CudaPath::Staged;
  if (log::enabled(LogLevel::Info, kLogCuda)) {
    const char* how = direct ? "goes to the network as device memory (its link takes it)"
                      : ctx.transport.takesDeviceMemory(peer)
                          ? "is staged through pinned host memory (RINGCOMM_CUDA_PATH=staged)"
                          : "is staged through pinned host memory (its link takes host memory)";
    // Once per way and direction at INFO, every time at TRACE.
    if (firstTime(std::string(isSend ? "send " : "receive ") + how)) {
      RINGCOMM_LOG(log::enabled(LogLevel::Trace, kLogCuda) ? LogLevel::Trace : LogLevel::Info,
                   kLogCuda, "a %s of %zu B of device memory %s rank %d %s",
                   isSend ? "send" : "receive", bytes, isSend ? "to" : "from", peer, how);
    }
  }
  return path_->message(ticket, ctx.op, buffer, bytes, isSend, direct);
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

const char* DeviceCollectives::whyNotIpc(const AllreduceOptions& o) const {
  if (size_ == 1) return "one rank";
  if (everyRankOnThisHost_ && size_ > device::kMaxIpcRanks) {
    return "more ranks than the IPC all-reduce takes";
  }
  if (!everyRankOnThisHost_ && !evenHosts_) {
    return "hosts with one rank, or with different numbers of ranks";
  }
  if (o.compression != Compression::None) return "compression needs the host path";
  if (o.prescale != 1.0 || o.postscale != 1.0) return "scaling needs the host path";
  if (config_.cudaPath == CudaPath::Staged) return "RINGCOMM_CUDA_PATH=staged";
  if (config_.cudaPath == CudaPath::Auto && o.count * elementSize(o.type) < kIpcMinBytes) {
    return "below the IPC threshold";
  }
  return nullptr;
}

MemoryPath DeviceCollectives::allreducePath(const AllreduceOptions& o,
                                            const device::Ticket& ticket) const {
  // An empty all-reduce moves nothing: it takes the host path whatever its (maybe null)
  // pointers are, so that ranks agree on the path.
  const bool bothOnDevice = o.count > 0 && ticket.onDevice(o.input) && ticket.onDevice(o.output);
  // Adasum's coefficients come from the whole vector: chunks would each get their own, so it is
  // staged whole and runs its host schedule (src/algorithms/adasum.h).
  if (!bothOnDevice || o.op == ReduceOp::Adasum) return MemoryPath::Host;
  const char* whyNot = whyNotIpc(o);
  const MemoryPath path = whyNot != nullptr      ? MemoryPath::DeviceChunked
                          : everyRankOnThisHost_ ? MemoryPath::DeviceIpc
                                                 : MemoryPath::DeviceIpcAcrossHosts;
  if (log::enabled(LogLevel::Info, kLogCuda)) {
    const char* why = whyNot != nullptr                   ? whyNot
                      : config_.cudaPath == CudaPath::Ipc ? "RINGCOMM_CUDA_PATH=ipc"
                                                          : "at or above the IPC threshold";
    logPath(path == MemoryPath::DeviceIpc ? "IPC (peers read each other's device memory)"
            : path == MemoryPath::DeviceIpcAcrossHosts
                ? "IPC within each host, each rank's reduced slice staged across hosts"
                : "staged through pinned host memory in chunks",
            why, o.count * elementSize(o.type));
  }
  return path;
}

bool DeviceCollectives::firstTime(const std::string& reason) const {
  if (log::enabled(LogLevel::Trace, kLogCuda)) return true;  // every time at TRACE
  std::lock_guard<std::mutex> lock(loggedMutex_);
  return logged_.insert(reason).second;
}

void DeviceCollectives::logPath(const char* path, const char* why, size_t bytes) const {
  if (!firstTime(why)) return;  // once per reason at INFO
  const bool everyCall = log::enabled(LogLevel::Trace, kLogCuda);
  RINGCOMM_LOG(everyCall ? LogLevel::Trace : LogLevel::Info, kLogCuda,
               "allreduce of %zu B of device memory: %s (%s; IPC from %zu B, "
               "RINGCOMM_CUDA_PATH=%s)",
               bytes, path, why, kIpcMinBytes, toString(config_.cudaPath));
}

void DeviceCollectives::allreduce(const device::TicketPtr& ticket, const algorithms::Context& ctx,
                                  const AllreduceOptions& o, MemoryPath path,
                                  const HostAllreduce& hostAllreduce,
                                  const std::function<void()>& barrier) {
  if (path == MemoryPath::DeviceIpcAcrossHosts) {
    allreduceAcrossHosts(ticket, ctx, o);
    return;
  }
  if (path == MemoryPath::DeviceIpc) {
    if (path_->ipcAllreduce(*ticket, ctx.op, peersOver(ctx, barrier), o.input, o.output, o.count,
                            o.type, o.op)) {
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

void DeviceCollectives::allreduceAcrossHosts(const device::TicketPtr& ticket,
                                             const algorithms::Context& ctx,
                                             const AllreduceOptions& o) {
  const std::vector<int>& local = layout_.hosts[layout_.host];
  std::vector<int> acrossMembers;  // this rank's counterparts: local rank i of every host
  for (const std::vector<int>& host : layout_.hosts)
    acrossMembers.push_back(host[layout_.localRank]);
  const algorithms::Context within = ctx.subgroup(local);
  const algorithms::Context across = ctx.subgroup(acrossMembers);
  const size_t elementBytes = elementSize(o.type);
  // An average is a sum until the end, where it divides by every rank of every host.
  const ReduceOp partial = o.op == ReduceOp::Avg ? ReduceOp::Sum : o.op;
  auto reduceAcross = [&](void* chunk, size_t count) {
    algorithms::ringAllreduce(across, chunk, chunk, count, o.type, partial);
    reduce::finishAverage(chunk, count, o.type, o.op, size_);
  };
  const device::SliceStep stagedAcross = [&](void* slice, size_t, size_t count) {
    path_->pipelined(
        *ticket, ctx.op, slice, slice, count, elementBytes, true, true,
        [&](void* chunk, size_t, size_t chunkCount) { reduceAcross(chunk, chunkCount); });
  };
  if (path_->ipcAllreduceWithinHost(
          *ticket, ctx.op, peersOver(within, [&] { algorithms::barrier(within); }), within.rank,
          within.size, o.input, o.output, o.count, o.type, partial, stagedAcross)) {
    return;
  }
  // IPC is unavailable on this host (every rank of it says so alike), maybe not on the others:
  // the same messages across hosts, the host's part in host memory. The sum within the host on
  // every rank, this rank's slice across hosts in the chunks the staging cuts, then every slice
  // gathered within the host.
  const size_t bytes = o.count * elementBytes;
  stageWhole(ticket, ctx, {{o.input, bytes, true, false}, {o.output, bytes, false, true}},
             [&](const std::vector<void*>& host) {
               auto* out = static_cast<uint8_t*>(host[1]);
               algorithms::ringAllreduce(within, host[0], out, o.count, o.type, partial);
               const device::Slice mine =
                   device::ipcSlice(o.count, elementBytes, within.size, within.rank);
               const size_t chunk = std::max<size_t>(1, config_.cudaChunkBytes / elementBytes);
               for (size_t done = 0; done < mine.count; done += chunk) {
                 reduceAcross(out + (mine.begin + done) * elementBytes,
                              std::min(chunk, mine.count - done));
               }
               const size_t sliceBytes =
                   device::ipcSlice(o.count, elementBytes, within.size, 0).count * elementBytes;
               std::vector<uint8_t> slices(sliceBytes * within.size);
               std::memcpy(slices.data() + sliceBytes * within.rank,
                           out + mine.begin * elementBytes, mine.count * elementBytes);
               AllgatherOptions gather;
               gather.input = slices.data() + sliceBytes * within.rank;
               gather.output = slices.data();
               gather.count = sliceBytes;
               gather.type = DataType::Uint8;
               algorithms::allgather(within, gather);
               for (int r = 0; r < within.size; ++r) {
                 const device::Slice theirs =
                     device::ipcSlice(o.count, elementBytes, within.size, r);
                 std::memcpy(out + theirs.begin * elementBytes, slices.data() + sliceBytes * r,
                             theirs.count * elementBytes);
               }
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
