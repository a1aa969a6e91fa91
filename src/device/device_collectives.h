// What a communicator does differently when a collective's buffers are CUDA device memory: find
// them on the caller's thread (prepare), and run the collective's host schedule on staged host
// copies of them, or take the all-reduce over CUDA IPC. The schedules themselves never see device
// memory; this is where the communicator meets the device path (device_path.h).
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/hierarchical.h"
#include "common/tags.h"
#include "ringcomm/config.h"
#include "ringcomm/options.h"
#include "device/device_path.h"

namespace ringcomm {

class DeviceCollectives {
 public:
  // layout: where the ranks are (the IPC all-reduce needs a process per rank on one host, or
  // across hosts as many on each).
  DeviceCollectives(int rank, int size, const Config& config, algorithms::HostLayout layout);

  // On the caller's thread: null unless the caller said buffers may be on a device (the bindings
  // set options.deviceMemory) and one of `addresses` is.
  device::TicketPtr prepare(const CommonOptions& options,
                            std::initializer_list<const void*> addresses, const char* collective);

  // A send's or receive's buffer as the transport takes it, in the engine's turn: null for host
  // memory (no ticket, or nothing to move); else the device buffer itself where `peer`'s link
  // takes device memory (UCX built with CUDA) and RINGCOMM_CUDA_PATH is not staged, or a pinned
  // host copy (DevicePath::message).
  std::unique_ptr<device::Message> message(const device::TicketPtr& ticket,
                                            const algorithms::Context& ctx, int peer,
                                            void* buffer, size_t bytes, bool isSend);

  // Runs `body` on host copies of the device regions, or straight on the caller's buffers when
  // there is no ticket.
  void stageWhole(const device::TicketPtr& ticket, const algorithms::Context& ctx,
                  const std::vector<device::Region>& regions,
                  const std::function<void(const std::vector<void*>&)>& body);

  // One of a collective's two buffers, as its body stages it: its bytes on this rank, and
  // whether this rank gives one (a reduce's or gather's output and a scatter's input are the
  // root's only).
  struct Buffer {
    size_t bytes = 0;
    bool present = true;
  };
  // The body of a collective with an input and an output, either of which may be device memory
  // (every collective but the all-reduce and the broadcast, which have paths of their own): the
  // buffers are looked at now, on the caller's thread, and staged whole through host memory
  // around `run(ctx, the options with host buffers)` when the body runs.
  template <typename Options, typename Run>
  auto staged(const Options& o, const char* collective, Buffer in, Buffer out, Run run) {
    return [this, o, in, out, run, ticket = prepare(o, {o.input, o.output}, collective)](
               const algorithms::Context& ctx) {
      const std::vector<device::Region> regions{
          {in.present ? o.input : nullptr, in.bytes, in.present, false},
          {out.present ? o.output : nullptr, out.bytes, false, out.present}};
      stageWhole(ticket, ctx, regions, [&](const std::vector<void*>& host) {
        Options part = o;
        if (in.present) part.input = host[0];
        if (out.present) part.output = host[1];
        run(ctx, part);
      });
    };
  }

  // How an all-reduce of these buffers travels. Every rank picks the same path from the same
  // facts (the configuration, the size, whether all ranks share this host); the path is part of
  // the message variant, so a rank with host buffers meeting one with device buffers in a chunked
  // or IPC all-reduce is a MismatchError, not garbage.
  MemoryPath allreducePath(const AllreduceOptions& options, const device::Ticket& ticket) const;

  // The all-reduce of device buffers on `path`; hostAllreduce(ctx, options) runs the host
  // schedule on host buffers.
  using HostAllreduce = std::function<void(const AllreduceOptions&)>;
  void allreduce(const device::TicketPtr& ticket, const algorithms::Context& ctx,
                 const AllreduceOptions& options, MemoryPath path,
                 const HostAllreduce& hostAllreduce, const std::function<void()>& barrier);

  // A broadcast of a device buffer: in pipelined chunks, out of the root's device, through the
  // host schedule, into every other rank's device.
  void broadcast(const device::Ticket& ticket, const algorithms::Context& ctx,
                 const BroadcastOptions& options);

 private:
  // Whether a reason for a path is logged now: its first time at INFO, every time at TRACE.
  bool firstTime(const std::string& reason) const;
  // Logs the path an all-reduce of device memory takes and why (once per reason at INFO).
  void logPath(const char* path, const char* why, size_t bytes) const;
  // Why the IPC all-reduce cannot take these options here, or null if it can.
  const char* whyNotIpc(const AllreduceOptions& options) const;
  // MemoryPath::DeviceIpcAcrossHosts: each host reduces through CUDA IPC, and each of its ranks
  // staged its reduced slice across hosts; or, on a host where IPC is unavailable, the same
  // messages across hosts from host memory.
  void allreduceAcrossHosts(const device::TicketPtr& ticket, const algorithms::Context& ctx,
                            const AllreduceOptions& options);

  int rank_;
  int size_;
  Config config_;
  algorithms::HostLayout layout_;
  bool everyRankOnThisHost_;
  // Ranks on several hosts, as many on each, and more than one on each: the layout of the IPC
  // all-reduce across hosts.
  bool evenHosts_;
  std::unique_ptr<device::DevicePath> path_;  // needs no CUDA until used
  mutable std::mutex loggedMutex_;
  mutable std::set<std::string> logged_;  // the reasons logged so far
};

}  // namespace ringcomm
