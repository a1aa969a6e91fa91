// Python arrays -> (address, element count, DataType): the buffer protocol for host memory
// (NumPy, bytearray, array.array, memoryview: ~100 ns), then DLPack (torch, CuPy, on the host or
// a CUDA device), then __cuda_array_interface__ (CUDA arrays without DLPack, e.g. Numba's). An
// object that declares device memory never goes through the buffer protocol.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "ringcomm/options.h"
#include "ringcomm/types.h"

namespace ringcomm::bindings {

struct ArrayView {
  void* data = nullptr;
  size_t count = 0;
  DataType type = DataType::Float32;
  bool onDevice = false;  // CUDA device (or managed) memory
};

// Throws TypeError / ValueError naming `name` ("x", "out") when obj is not a contiguous array of
// a supported type, or is read-only while `writable` is asked for. A CUDA array is noted for the
// collective this thread is about to launch (takeCallDevice).
ArrayView viewArray(pybind11::handle obj, const char* name, bool writable);

// The CUDA facts of the collective being launched on this thread, gathered while its arguments
// are decoded, so that the collectives' bindings need no argument of their own for them:
// viewArray notes CUDA arrays, Python sets the stream (_core._set_call_stream, from the
// Communicator's stream= or the array library's current stream), and launch() moves both into
// the options, clearing them. A call that fails before launching clears them too (an exception
// translator), so nothing carries over to the next call.
void takeCallDevice(CommonOptions& options);
// Starts a call on this thread: forgets what an earlier one noted; `stream` as stream= gives it
// (none: the array library's current stream).
void startCall(std::optional<uintptr_t> stream);
// _set_call_stream and the clearing translator; call last in the module's init.
void bindCallDevice(pybind11::module_& m);

}  // namespace ringcomm::bindings
