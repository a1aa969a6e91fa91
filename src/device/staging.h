// Device buffers through pinned host memory: the host schedules run on host copies of them.
//
// Whole: every device buffer the schedule reads is copied out of the device first, every one it
// writes is copied back after (every collective can go this way).
// Pipelined: the buffer is cut into chunks (RINGCOMM_CUDA_CHUNK_BYTES), and copying chunk i+1 out of the
// device, the host schedule on chunk i and copying chunk i-1 back in overlap (all-reduce,
// broadcast). This is the path that crosses hosts.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "device/device_state.h"

namespace ringcomm::device {

// DevicePath::staged: runs `body` on one host pointer per region.
void stageWhole(const CudaTicket& ticket, const Operation& op, const std::vector<Region>& regions,
                const std::function<void(const std::vector<void*>& host)>& body);

// DevicePath::pipelined: runs `step` on each chunk in order.
void stagePipelined(const CudaTicket& ticket, const Operation& op, const void* input, void* output,
                    size_t count, size_t elementBytes, bool copyIn, bool copyOut,
                    const ChunkStep& step);

// DevicePath::message (message_staging.cc).
std::unique_ptr<Message> stageMessage(std::shared_ptr<const CudaTicket> ticket,
                                      const Operation& op, void* buffer, size_t bytes,
                                      bool isSend, bool linkTakesDevice);

}  // namespace ringcomm::device
