// memcpy and memmove for lengths that may be zero. An empty buffer's pointer may be null (an empty
// std::vector's data(), a zero-sized array from Python), and passing null to memcpy or memmove is
// undefined behaviour even for zero bytes (UBSan reports it: tests/test_sanitizers.py).
#pragma once

#include <cstddef>
#include <cstring>

namespace ringcomm {

inline void copyBytes(void* to, const void* from, size_t bytes) {
  if (bytes > 0) std::memcpy(to, from, bytes);
}

inline void moveBytes(void* to, const void* from, size_t bytes) {
  if (bytes > 0) std::memmove(to, from, bytes);
}

}  // namespace ringcomm
