// Python arrays -> (address, element count, DataType): the buffer protocol first (NumPy,
// bytearray, array.array, memoryview: ~100 ns), then DLPack (torch, CuPy on the host, ...).
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>

#include "ringcomm/types.h"

namespace ringcomm::bindings {

struct ArrayView {
  void* data = nullptr;
  size_t count = 0;
  DataType type = DataType::Float32;
};

// Throws TypeError / ValueError naming `name` ("x", "out") when obj is not a contiguous host array
// of a supported type, or is read-only while `writable` is asked for.
ArrayView viewArray(pybind11::handle obj, const char* name, bool writable);

}  // namespace ringcomm::bindings
