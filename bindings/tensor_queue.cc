#include "tensor_queue.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "ringcomm/tensor_queue.h"

namespace py = pybind11;

namespace ringcomm::bindings {
namespace {

// A request over Python arrays; the Python layer keeps them alive until the Work completes.
TensorRequest makeRequest(TensorOp op, const std::string& name, py::handle x, py::handle out,
                          const std::vector<int64_t>& shape, ReduceOp reduceOp,
                          Compression compression, double prescale, double postscale, int root) {
  TensorRequest request;
  request.op = op;
  request.name = name;
  request.shape = shape;
  request.reduceOp = reduceOp;
  request.compression = compression;
  request.prescale = prescale;
  request.postscale = postscale;
  request.root = root;
  const bool writesX = op == TensorOp::Broadcast || (op == TensorOp::Allreduce && out.is_none());
  const ArrayView input = viewArray(x, "tensor", writesX);
  const ArrayView output = out.is_none() ? input : viewArray(out, "output", true);
  CommonOptions unused;
  takeCallDevice(unused);  // viewArray notes CUDA arrays for a collective launch; this is none
  if (input.onDevice || output.onDevice) {
    throw py::type_error("'" + name + "': the tensor queue takes host memory, not CUDA memory");
  }
  request.type = input.type;
  if (input.count != request.count()) {
    throw py::value_error("'" + name + "': shape holds " + std::to_string(request.count()) +
                          " elements but the tensor " + std::to_string(input.count));
  }
  request.input = input.data;
  request.output = writesX ? input.data : nullptr;
  if (op == TensorOp::Allreduce && !out.is_none()) {
    if (output.type != input.type || output.count != input.count) {
      throw py::value_error("'" + name + "': output must match the tensor's dtype and size");
    }
    request.output = output.data;
  }
  return request;
}

}  // namespace

void bindTensorQueue(py::module_& m) {
  py::enum_<TensorOp>(m, "TensorOp")
      .value("allreduce", TensorOp::Allreduce)
      .value("allgather", TensorOp::Allgather)
      .value("broadcast", TensorOp::Broadcast);

  py::class_<TensorRequest>(m, "TensorRequest")
      .def(py::init(&makeRequest), py::arg("op"), py::arg("name"), py::arg("x"),
           py::arg("out") = py::none(), py::arg("shape"), py::arg("reduce_op") = ReduceOp::Sum,
           py::arg("compression") = Compression::None, py::arg("prescale") = 1.0,
           py::arg("postscale") = 1.0, py::arg("root") = 0)
      .def_readonly("name", &TensorRequest::name);

  py::class_<TensorWork, Work, TensorWorkPtr>(m, "TensorWork")
      .def_readonly("rows", &TensorWork::rows)
      .def_readonly("last_joined", &TensorWork::lastJoined)
      // The gathered bytes, without a copy: the array keeps the Work alive.
      .def_property_readonly("gathered", [](py::object self) {
        auto& work = self.cast<TensorWork&>();
        return py::array_t<uint8_t>({static_cast<py::ssize_t>(work.gathered.size())},
                                    {static_cast<py::ssize_t>(1)}, work.gathered.data(), self);
      });

  py::class_<TensorQueueStats>(m, "TensorQueueStats")
      .def_readonly("cycles", &TensorQueueStats::cycles)
      .def_readonly("allreduces", &TensorQueueStats::allreduces)
      .def_readonly("fused_tensors", &TensorQueueStats::fusedTensors);

  py::class_<TensorQueue, std::shared_ptr<TensorQueue>>(m, "TensorQueue")
      .def_static("create", &TensorQueue::create, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("rank", &TensorQueue::rank)
      .def_property_readonly("size", &TensorQueue::size)
      .def("submit", &TensorQueue::submit, py::call_guard<py::gil_scoped_release>())
      .def("submit_all", &TensorQueue::submitAll, py::call_guard<py::gil_scoped_release>())
      .def("join", &TensorQueue::join, py::call_guard<py::gil_scoped_release>())
      .def("stats", &TensorQueue::stats)
      .def("shutdown", &TensorQueue::shutdown, py::call_guard<py::gil_scoped_release>());
}

}  // namespace ringcomm::bindings
