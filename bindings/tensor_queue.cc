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
                          Compression compression, double prescale, double postscale, int root,
                          const std::vector<int64_t>& splits) {
  TensorRequest request;
  request.op = op;
  request.name = name;
  request.shape = shape;
  request.reduceOp = reduceOp;
  request.compression = compression;
  request.prescale = prescale;
  request.postscale = postscale;
  request.root = root;
  request.splits = splits;
  startCall(std::nullopt);  // CUDA tensors come with their library's current stream
  const bool writesX = op == TensorOp::Broadcast || (op == TensorOp::Allreduce && out.is_none());
  const ArrayView input = viewArray(x, "tensor", writesX);
  const ArrayView output = out.is_none() ? input : viewArray(out, "output", true);
  CommonOptions call;
  takeCallDevice(call);
  if (input.onDevice != output.onDevice) {
    throw py::value_error("'" + name + "': the tensor and its output must both be in CUDA memory "
                          "or both in host memory");
  }
  request.deviceMemory = call.deviceMemory;
  request.stream = call.stream;
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
      .value("broadcast", TensorOp::Broadcast)
      .value("reducescatter", TensorOp::Reducescatter)
      .value("alltoall", TensorOp::Alltoall);

  py::class_<TensorRequest>(m, "TensorRequest")
      .def(py::init(&makeRequest), py::arg("op"), py::arg("name"), py::arg("x"), py::kw_only(),
           py::arg("out") = py::none(), py::arg("shape"), py::arg("reduce_op") = ReduceOp::Sum,
           py::arg("compression") = Compression::None, py::arg("prescale") = 1.0,
           py::arg("postscale") = 1.0, py::arg("root") = 0,
           py::arg("splits") = std::vector<int64_t>{})
      .def_readonly("name", &TensorRequest::name);

  py::class_<TensorWork, Work, TensorWorkPtr>(m, "TensorWork")
      .def_readonly("rows", &TensorWork::rows)
      .def_readonly("last_joined", &TensorWork::lastJoined)
      .def(
          "order_on",
          [](const TensorWork& work, uintptr_t stream) {
            if (work.orderResultsOn) work.orderResultsOn(reinterpret_cast<void*>(stream));
          },
          py::arg("stream"),
          "Makes a cudaStream_t (an int) wait until a device request's results are written; "
          "nothing for host requests. Call after wait().")
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

  py::enum_<JoinPolicy>(m, "JoinPolicy")
      .value("zeros", JoinPolicy::Zeros)
      .value("contributors", JoinPolicy::Contributors);
  m.def("parse_join_policy", &parseJoinPolicy, py::arg("text"));

  py::class_<TensorQueue, std::shared_ptr<TensorQueue>>(m, "TensorQueue")
      .def_static("create", &TensorQueue::create, py::arg("comm"),
                  py::arg("join_policy") = JoinPolicy::Zeros,
                  py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("rank", &TensorQueue::rank)
      .def_property_readonly("size", &TensorQueue::size)
      .def("submit", &TensorQueue::submit, py::arg("request"),
           py::call_guard<py::gil_scoped_release>())
      .def("submit_all", &TensorQueue::submitAll, py::arg("requests"),
           py::call_guard<py::gil_scoped_release>())
      .def("join", &TensorQueue::join, py::arg("device") = -1,
           py::call_guard<py::gil_scoped_release>())
      .def("stats", &TensorQueue::stats)
      .def("shutdown", &TensorQueue::shutdown, py::call_guard<py::gil_scoped_release>());
}

}  // namespace ringcomm::bindings
