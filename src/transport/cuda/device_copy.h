// A copy into device memory for code that includes no CUDA header: a network that handed over a
// small message in host memory for a receive into a device buffer (ucx_network.cc).
#pragma once

#include <cstddef>

namespace ringcomm::device {

// Copies `bytes` from host memory into device memory and returns once they are there. Built
// without CUDA it throws InvalidArgument (no device buffer gets this far there).
void copyToDevice(void* device, const void* host, size_t bytes);

}  // namespace ringcomm::device
