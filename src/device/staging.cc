#include "device/staging.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/trace.h"

namespace ringcomm::device {

void stageWhole(const CudaTicket& t, const Operation& op, const std::vector<Region>& regions,
                const std::function<void(const std::vector<void*>& host)>& body) {
  DeviceState& s = t.state();
  DeviceGuard guard(s.device);
  startAfterCaller(t, s.copyOut);
  startAfterCaller(t, s.copyIn);

  // Device regions grouped into disjoint ranges (an in-place collective names one buffer
  // twice, or one inside another), each given a place in the arena.
  struct Group {
    uintptr_t begin;
    uintptr_t end;
    bool read = false;
    bool written = false;
    size_t coveredByWrites = 0;  // bytes of the largest written region (see below)
    size_t offset = 0;
  };
  std::vector<size_t> order;
  for (size_t i = 0; i < regions.size(); ++i) {
    if (regions[i].bytes > 0 && t.onDevice(regions[i].address)) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return regions[a].address < regions[b].address;
  });
  std::vector<Group> groups;
  std::vector<size_t> groupOf(regions.size(), SIZE_MAX);
  for (size_t i : order) {
    const auto begin = reinterpret_cast<uintptr_t>(regions[i].address);
    const uintptr_t end = begin + regions[i].bytes;
    if (groups.empty() || begin >= groups.back().end) groups.push_back(Group{begin, end});
    Group& group = groups.back();
    group.end = std::max(group.end, end);
    group.read = group.read || regions[i].read;
    if (regions[i].written) {
      group.written = true;
      group.coveredByWrites = std::max(group.coveredByWrites, regions[i].bytes);
    }
    groupOf[i] = groups.size() - 1;
  }
  size_t arenaBytes = 0;
  for (Group& group : groups) {
    // A group the schedule writes only in part is copied in first, so that copying it back
    // leaves the caller's other bytes as they were.
    if (group.written && group.coveredByWrites < group.end - group.begin) group.read = true;
    group.offset = arenaBytes;
    arenaBytes += (group.end - group.begin + kSliceAlignBytes - 1) / kSliceAlignBytes *
                  kSliceAlignBytes;
  }

  // The previous collective's copies back out of the arena must be done before it is reused.
  std::optional<trace::Span> staging;  // ends before the schedule runs on the host copies
  staging.emplace(trace::Phase::Stage, "device to host");
  waitFor(s.arenaCopiedIn, op, "the previous staging copy to the device");
  uint8_t* arena = s.arena.reserve(std::max<size_t>(arenaBytes, 1));
  bool copied = false;
  for (const Group& group : groups) {
    if (!group.read) continue;
    check(cudaMemcpyAsync(arena + group.offset, reinterpret_cast<const void*>(group.begin),
                          group.end - group.begin, cudaMemcpyDeviceToHost, s.copyOut),
          "cudaMemcpyAsync (device to host)");
    copied = true;
  }
  if (copied) {
    check(cudaEventRecord(s.arenaCopiedOut, s.copyOut), "cudaEventRecord");
    waitFor(s.arenaCopiedOut, op, "copying device buffers to host memory");
  }
  if (staging->active()) staging->event().bytes = arenaBytes;
  staging.reset();

  std::vector<void*> host(regions.size(), nullptr);
  for (size_t i = 0; i < regions.size(); ++i) {
    if (groupOf[i] == SIZE_MAX) {
      host[i] = const_cast<void*>(regions[i].address);
    } else {
      const Group& group = groups[groupOf[i]];
      host[i] = arena + group.offset +
                (reinterpret_cast<uintptr_t>(regions[i].address) - group.begin);
    }
  }
  body(host);

  for (const Group& group : groups) {
    if (!group.written) continue;
    check(cudaMemcpyAsync(reinterpret_cast<void*>(group.begin), arena + group.offset,
                          group.end - group.begin, cudaMemcpyHostToDevice, s.copyIn),
          "cudaMemcpyAsync (host to device)");
  }
  check(cudaEventRecord(s.arenaCopiedIn, s.copyIn), "cudaEventRecord");
  finish(t, s.copyIn);
}

void stagePipelined(const CudaTicket& t, const Operation& op, const void* input, void* output,
                    size_t count, size_t elementBytes, bool copyIn, bool copyOut,
                    const ChunkStep& step) {
  DeviceState& s = t.state();
  DeviceGuard guard(s.device);
  s.ensureSlots();
  startAfterCaller(t, s.copyOut);
  startAfterCaller(t, s.copyIn);
  const size_t chunkCount = std::max<size_t>(1, s.chunkBytes / elementBytes);
  const size_t chunks = (count + chunkCount - 1) / chunkCount;
  const auto* in = static_cast<const uint8_t*>(input);
  auto* out = static_cast<uint8_t*>(output);
  auto elementsOf = [&](size_t chunk) {
    return std::min(chunkCount, count - chunk * chunkCount);
  };
  auto copyChunkOut = [&](size_t chunk) {
    Slot& slot = s.slots[chunk % kSlots];
    // Not before the slot's previous chunk has gone back to the device.
    check(cudaStreamWaitEvent(s.copyOut, slot.copiedIn, 0), "cudaStreamWaitEvent");
    check(cudaMemcpyAsync(slot.memory.data(), in + chunk * chunkCount * elementBytes,
                          elementsOf(chunk) * elementBytes, cudaMemcpyDeviceToHost, s.copyOut),
          "cudaMemcpyAsync (device to host)");
    check(cudaEventRecord(slot.copiedOut, s.copyOut), "cudaEventRecord");
  };
  if (copyIn) {
    for (size_t chunk = 0; chunk < chunks && chunk < static_cast<size_t>(kSlots); ++chunk) {
      copyChunkOut(chunk);
    }
  }
  for (size_t chunk = 0; chunk < chunks; ++chunk) {
    Slot& slot = s.slots[chunk % kSlots];
    {
      trace::Span staging(trace::Phase::Stage, copyIn ? "chunk device to host" : "free slot");
      if (copyIn) {
        waitFor(slot.copiedOut, op, "copying a chunk to host memory");
      } else {
        waitFor(slot.copiedIn, op, "copying a chunk to the device");  // the slot is free
      }
    }
    step(slot.memory.data(), chunk * chunkCount, elementsOf(chunk));
    if (copyOut) {
      check(cudaMemcpyAsync(out + chunk * chunkCount * elementBytes, slot.memory.data(),
                            elementsOf(chunk) * elementBytes, cudaMemcpyHostToDevice, s.copyIn),
            "cudaMemcpyAsync (host to device)");
      check(cudaEventRecord(slot.copiedIn, s.copyIn), "cudaEventRecord");
    }
    if (copyIn && chunk + kSlots < chunks) copyChunkOut(chunk + kSlots);
  }
  finish(t, s.copyIn);
}

}  // namespace ringcomm::device
