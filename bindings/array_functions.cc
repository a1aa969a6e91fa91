// ringcomm._core's functions on arrays: the wire format's rounding and error feedback (for the
// compression hooks), the view the Python layer takes of an array, shared buffers, DLPack.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "arrays.h"
#include "dlpack.h"
#include "parts.h"
#include "ringcomm/shared_memory.h"
#include "ringcomm/types.h"

namespace py = pybind11;

namespace ringcomm::bindings {

void bindArrayFunctions(py::module_& m) {
  m.def("round_to_wire", [](py::handle x, Compression compression) {
    ArrayView view = viewArray(x, "x", /*writable=*/true);
    if (view.type != DataType::Float32 || view.onDevice) {
      throw py::value_error(std::string("round_to_wire: x must be float32 in host memory; got ") +
                            toString(view.type) + (view.onDevice ? " on a device" : ""));
    }
    py::gil_scoped_release release;
    roundToWire(static_cast<float*>(view.data), view.count, compression);
  }, py::arg("x"), py::arg("compression"),
     "Rounds a float32 array in place to what the wire format carries, as one run.");

  m.def("feed_back_error", [](py::handle x, py::handle residual, Compression compression) {
    ArrayView values = viewArray(x, "x", /*writable=*/true);
    ArrayView error = viewArray(residual, "residual", /*writable=*/true);
    if (values.type != DataType::Float32 || values.onDevice || error.type != DataType::Float32 ||
        error.onDevice || error.count != values.count) {
      throw py::value_error(
          std::string("feed_back_error: x and residual must be float32 arrays in host memory of "
                      "one size; got ") +
          toString(values.type) + " x " + std::to_string(values.count) + " and " +
          toString(error.type) + " x " + std::to_string(error.count));
    }
    py::gil_scoped_release release;
    feedBackError(static_cast<float*>(values.data), static_cast<float*>(error.data),
                  values.count, compression);
  }, py::arg("x"), py::arg("residual"), py::arg("compression"),
     "Error feedback in one pass: x += residual, x rounded to the wire format (as one run), "
     "residual = what the rounding took away.");

  m.def("view_array", [](py::handle obj, const char* name, bool writable) {
    ArrayView view = viewArray(obj, name, writable);
    return py::make_tuple(reinterpret_cast<uintptr_t>(view.data), view.count, view.type);
  }, py::arg("obj"), py::arg("name") = "x", py::arg("writable") = false);

  // ringcomm.empty(): bytes that local peers can map (include/ringcomm/shared_memory.h), freed
  // when the last array viewing them goes.
  m.def("shared_buffer", [](size_t bytes) {
    void* address = allocateSharedMemory(bytes);
    py::capsule owner(address, [](void* p) { freeSharedMemory(p); });
    return py::array_t<uint8_t>({static_cast<py::ssize_t>(bytes)}, {py::ssize_t{1}},
                                static_cast<uint8_t*>(address), owner);
  }, py::arg("bytes"));

  m.def("read_dlpack", [](const py::capsule& capsule) {
    DlpackView v = readDlpack(capsule);
    return py::dict(py::arg("data") = v.data, py::arg("shape") = v.shape, py::arg("strides") = v.strides,
                    py::arg("device_type") = v.deviceType, py::arg("device_id") = v.deviceId,
                    py::arg("code") = v.code, py::arg("bits") = v.bits, py::arg("lanes") = v.lanes,
                    py::arg("read_only") = v.readOnly);
  });
}

}  // namespace ringcomm::bindings
