// Reading a DLPack capsule (the `__dlpack__()` protocol of torch, NumPy, CuPy...) into a plain
// description of the memory it names. Only the stable C ABI of dlpack.h is needed, declared here.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

namespace ringcomm::bindings {

struct DlpackView {
  uintptr_t data = 0;              // first element (data + byte_offset)
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;    // in elements; empty = C-contiguous
  int deviceType = 1;              // kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, ...
  int deviceId = 0;
  int code = 0;                    // kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4,
                                   // kDLBool = 6
  int bits = 0;
  int lanes = 1;
  bool readOnly = false;
};

// Reads a "dltensor" or "dltensor_versioned" capsule without consuming it: the producer's tensor
// stays alive as long as the capsule does.
DlpackView readDlpack(const pybind11::capsule& capsule);

}  // namespace ringcomm::bindings
