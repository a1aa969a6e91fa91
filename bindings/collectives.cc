// The Communicator's collectives and its sends and receives: arrays decoded and checked, the
// options filled, the call launched with the GIL released (calls.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <string>
#include <vector>

#include "arrays.h"
#include "calls.h"
#include "parts.h"
#include "ringcomm/communicator.h"
#include "ringcomm/options.h"

namespace py = pybind11;

namespace ringcomm::bindings {
namespace {

using Comm = Communicator;

// Arrays arrive as Python objects and are decoded here (arrays.h); the Python layer keeps them
// alive until the Work completes. `out` may be None where the collective allows in place.

// all_reduce, reduce_scatter and reduce.
void defineReductions(CommunicatorClass& communicator) {
  communicator
      .def("allreduce", [](Comm& c, py::handle x, py::handle out, ReduceOp op, Algorithm algorithm,
                            double timeout, bool blocking, Compression compression, double prescale,
                            double postscale, const std::string& name,
                            const std::vector<size_t>& tensorCounts) {
        ArrayView in = viewArray(x, "x", out.is_none());
        ArrayView into = out.is_none() ? in : viewArray(out, "out", true);
        checkSameType(in, into);
        checkCount(into, in.count, "out");
        AllreduceOptions o;
        o.input = in.data; o.output = into.data; o.count = in.count; o.type = in.type;
        o.op = op; o.algorithm = algorithm; o.timeout = toMilliseconds(timeout);
        o.compression = compression; o.prescale = prescale; o.postscale = postscale;
        o.tensorCounts = tensorCounts;
        return launch(c, o, blocking, &Comm::allreduce, name);
      }, py::arg("x"), py::arg("out"), py::arg("op"), py::arg("algorithm"), py::arg("timeout"),
         py::arg("blocking"), py::arg("compression"), py::arg("prescale"), py::arg("postscale"),
         py::arg("name"), py::arg("tensor_counts"))
      .def("reduce_scatter", [](Comm& c, py::handle x, py::handle out, ReduceOp op, double timeout,
                                 bool blocking, const std::string& name) {
        ArrayView in = viewArray(x, "x", false);
        ArrayView into = viewArray(out, "out", true);
        checkSameType(in, into);
        checkCount(in, into.count * c.size(), "x (size * len(out))");
        ReduceScatterOptions o;
        o.input = in.data; o.output = into.data; o.count = into.count; o.type = in.type;
        o.op = op; o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::reduceScatter, name);
      }, py::arg("x"), py::arg("out"), py::arg("op"), py::arg("timeout"), py::arg("blocking"),
         py::arg("name"))
      .def("reduce", [](Comm& c, py::handle x, py::handle out, ReduceOp op, int root, double timeout,
                         bool blocking, const std::string& name) {
        const bool inPlaceRoot = out.is_none() && c.rank() == root;
        ArrayView in = viewArray(x, "x", inPlaceRoot);
        ArrayView into = out.is_none() ? in : viewArray(out, "out", true);
        checkSameType(in, into);
        checkCount(into, in.count, "out");
        ReduceOptions o;
        o.input = in.data; o.output = into.data; o.count = in.count; o.type = in.type;
        o.op = op; o.root = root; o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::reduce, name);
      }, py::arg("x"), py::arg("out"), py::arg("op"), py::arg("root"), py::arg("timeout"),
         py::arg("blocking"), py::arg("name"));
}

// The collectives that move data without reducing it, and barrier.
void defineDataMovement(CommunicatorClass& communicator) {
  communicator
      .def("allgather", [](Comm& c, py::handle x, py::handle out, double timeout, bool blocking, const std::string& name) {
        ArrayView in = viewArray(x, "x", false);
        ArrayView into = viewArray(out, "out", true);
        checkSameType(in, into);
        checkCount(into, in.count * c.size(), "out (size * len(x))");
        AllgatherOptions o;
        o.input = in.data; o.output = into.data; o.count = in.count; o.type = in.type;
        o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::allgather, name);
      }, py::arg("x"), py::arg("out"), py::arg("timeout"), py::arg("blocking"), py::arg("name"))
      .def("broadcast", [](Comm& c, py::handle x, int root, double timeout, bool blocking, const std::string& name) {
        ArrayView buffer = viewArray(x, "x", true);
        BroadcastOptions o;
        o.buffer = buffer.data; o.count = buffer.count; o.type = buffer.type; o.root = root;
        o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::broadcast, name);
      }, py::arg("x"), py::arg("root"), py::arg("timeout"), py::arg("blocking"), py::arg("name"))
      .def("alltoall", [](Comm& c, py::handle x, py::handle out, double timeout, bool blocking, const std::string& name) {
        ArrayView in = viewArray(x, "x", false);
        ArrayView into = viewArray(out, "out", true);
        checkSameType(in, into);
        checkCount(into, in.count, "out");
        if (in.count % c.size() != 0) {
          throw py::value_error("x holds " + std::to_string(in.count) +
                                " elements, which do not split evenly across " +
                                std::to_string(c.size()) + " ranks");
        }
        AlltoallOptions o;
        o.input = in.data; o.output = into.data; o.count = in.count / c.size(); o.type = in.type;
        o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::alltoall, name);
      }, py::arg("x"), py::arg("out"), py::arg("timeout"), py::arg("blocking"), py::arg("name"))
      .def("gather", [](Comm& c, py::handle x, py::handle out, int root, double timeout, bool blocking, const std::string& name) {
        ArrayView in = viewArray(x, "x", false);
        GatherOptions o;
        if (!out.is_none()) {
          ArrayView into = viewArray(out, "out", true);
          checkSameType(in, into);
          checkCount(into, in.count * c.size(), "out (size * len(x))");
          o.output = into.data;
        }
        o.input = in.data; o.count = in.count; o.type = in.type; o.root = root;
        o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::gather, name);
      }, py::arg("x"), py::arg("out"), py::arg("root"), py::arg("timeout"), py::arg("blocking"),
         py::arg("name"))
      .def("scatter", [](Comm& c, py::handle x, py::handle out, int root, double timeout, bool blocking, const std::string& name) {
        ArrayView into = viewArray(out, "out", true);
        ScatterOptions o;
        if (!x.is_none()) {
          ArrayView in = viewArray(x, "x", false);
          checkSameType(in, into);
          checkCount(in, into.count * c.size(), "x (size * len(out))");
          o.input = in.data;
        }
        o.output = into.data; o.count = into.count; o.type = into.type; o.root = root;
        o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::scatter, name);
      }, py::arg("x"), py::arg("out"), py::arg("root"), py::arg("timeout"), py::arg("blocking"),
         py::arg("name"))
      .def("barrier", [](Comm& c, double timeout, bool blocking, const std::string& name) {
        BarrierOptions o;
        o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::barrier, name);
      }, py::arg("timeout"), py::arg("blocking"), py::arg("name"));
}

void definePointToPoint(CommunicatorClass& communicator) {
  communicator
      .def("send", [](Comm& c, py::handle x, int peer, int tag, double timeout, bool blocking, const std::string& name) {
        ArrayView buffer = viewArray(x, "x", false);
        SendOptions o;
        o.buffer = buffer.data; o.bytes = buffer.count * elementSize(buffer.type); o.peer = peer;
        o.tag = tag; o.type = buffer.type; o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::send, name);
      }, py::arg("x"), py::arg("peer"), py::arg("tag"), py::arg("timeout"), py::arg("blocking"),
         py::arg("name"))
      .def("recv", [](Comm& c, py::handle x, int peer, int tag, double timeout, bool blocking, const std::string& name) {
        ArrayView buffer = viewArray(x, "x", true);
        RecvOptions o;
        o.buffer = buffer.data; o.bytes = buffer.count * elementSize(buffer.type); o.peer = peer;
        o.tag = tag; o.type = buffer.type; o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::recv, name);
      }, py::arg("x"), py::arg("peer"), py::arg("tag"), py::arg("timeout"), py::arg("blocking"),
         py::arg("name"));
}

}  // namespace

void bindCollectives(CommunicatorClass& communicator) {
  defineReductions(communicator);
  defineDataMovement(communicator);
  definePointToPoint(communicator);
}

}  // namespace ringcomm::bindings
