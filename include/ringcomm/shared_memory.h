// Memory that the ranks on one host can map (ringcomm.empty): all-reduces of buffers allocated
// here on every local rank read and write each other's with loads and stores instead of the
// kernel's copies (src/transport/shm/shared_buffers.h).
#pragma once

#include <cstddef>

#include "ringcomm/export.h"

namespace ringcomm {

// `bytes` (at least one) of page-aligned, zeroed memory in a memfd; throws std::bad_alloc when
// `bytes` exceeds the machine's memory and swap, std::system_error when the kernel refuses.
// freeSharedMemory() returns it; any other address is ignored.
RINGCOMM_API void* allocateSharedMemory(size_t bytes);
RINGCOMM_API void freeSharedMemory(void* address);

}  // namespace ringcomm
