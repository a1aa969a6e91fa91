// The Python face of the backend: one constructor, bound as a subclass of torch's Backend so that
// torch.distributed can hold it in a ProcessGroup.
#include <pybind11/chrono.h>
#include <torch/python.h>

#include <chrono>
#include <string>

#include "backend.h"

namespace {

using ringcomm::c10d_backend::RingcommBackend;

c10::intrusive_ptr<RingcommBackend> createBackend(const c10::intrusive_ptr<::c10d::Store>& store,
                                                  int rank, int size,
                                                  std::chrono::milliseconds timeout,
                                                  const std::string& secret) {
  return c10::make_intrusive<RingcommBackend>(store, rank, size, timeout, secret);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ringcomm's torch.distributed backend (compiled against this torch by ringcomm.c10d)";
  py::class_<RingcommBackend, ::c10d::Backend, c10::intrusive_ptr<RingcommBackend>>(
      m, "RingcommBackend")
      .def(py::init([](const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, const py::bytes& secret) {
             std::string key = secret;
             py::gil_scoped_release release;
             return createBackend(store, rank, size, timeout, key);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("secret"))
      .def("transport_to",
           [](const RingcommBackend& backend, int peer) {
             return backend.communicator().transportTo(peer);
           })
      .def_property_readonly("local_size", [](const RingcommBackend& backend) {
        return backend.communicator().localSize();
      });
}
