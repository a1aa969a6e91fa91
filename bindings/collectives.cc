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

// A collective's x and out, decoded and of one type.
struct Operands {
  ArrayView in;
  ArrayView into;
};

// Both arrays given: x read, out written.
Operands viewOperands(py::handle x, py::handle out) {
  Operands a{viewArray(x, "x", false), viewArray(out, "out", true)};
  checkSameType(a.in, a.into);
  return a;
}

// out may be None, and the result then goes to x, which must be writable where `xWritten`; out
// holds as many elements as x.
Operands viewInPlaceOperands(py::handle x, py::handle out, bool xWritten) {
  ArrayView in = viewArray(x, "x", xWritten);
  Operands a{in, out.is_none() ? in : viewArray(out, "out", true)};
  checkSameType(a.in, a.into);
  checkCount(a.into, a.in.count, "out");
  return a;
}

// The arrays' part of a collective's options: `count` elements of x's type, from x into out.
template <typename Options>
void setArrays(Options& o, const Operands& a, size_t count) {
  o.input = a.in.data; o.output = a.into.data; o.count = count; o.type = a.in.type;
}

// The root's whole of gather (its out) and scatter (its x): None off the root, where its address
// is null; at the root `size` times the other side's elements, of its type.
enum class Whole { X, Out };
void* viewRootWhole(py::handle whole, Whole which, const ArrayView& part, int size) {
  if (whole.is_none()) return nullptr;
  const bool isOut = which == Whole::Out;
  ArrayView view = viewArray(whole, isOut ? "out" : "x", isOut);
  checkSameType(isOut ? part : view, isOut ? view : part);
  checkCount(view, part.count * size, isOut ? "out (size * len(x))" : "x (size * len(out))");
  return view.data;
}

// all_reduce, reduce_scatter and reduce.
void defineReductions(CommunicatorClass& communicator) {
  communicator
      .def("allreduce", [](Comm& c, py::handle x, py::handle out, ReduceOp op, Algorithm algorithm,
                            double timeout, bool blocking, Compression compression, double prescale,
                            double postscale, const std::string& name,
                            const std::vector<size_t>& tensorCounts) {
        Operands a = viewInPlaceOperands(x, out, out.is_none());
        AllreduceOptions o;
        setArrays(o, a, a.in.count);
        o.op = op; o.algorithm = algorithm; o.timeout = toMilliseconds(timeout);
        o.compression = compression; o.prescale = prescale; o.postscale = postscale;
        o.tensorCounts = tensorCounts;
        return launch(c, o, blocking, &Comm::allreduce, name);
      }, py::arg("x"), py::arg("out"), py::arg("op"), py::arg("algorithm"), py::arg("timeout"),
         py::arg("blocking"), py::arg("compression"), py::arg("prescale"), py::arg("postscale"),
         py::arg("name"), py::arg("tensor_counts"))
      .def("reduce_scatter", [](Comm& c, py::handle x, py::handle out, ReduceOp op, double timeout,
                                 bool blocking, const std::string& name) {
        Operands a = viewOperands(x, out);
        checkCount(a.in, a.into.count * c.size(), "x (size * len(out))");
        ReduceScatterOptions o;
        setArrays(o, a, a.into.count);
        o.op = op; o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::reduceScatter, name);
      }, py::arg("x"), py::arg("out"), py::arg("op"), py::arg("timeout"), py::arg("blocking"),
         py::arg("name"))
      .def("reduce", [](Comm& c, py::handle x, py::handle out, ReduceOp op, int root, double timeout,
                         bool blocking, const std::string& name) {
        Operands a = viewInPlaceOperands(x, out, out.is_none() && c.rank() == root);
        ReduceOptions o;
        setArrays(o, a, a.in.count);
        o.op = op; o.root = root; o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::reduce, name);
      }, py::arg("x"), py::arg("out"), py::arg("op"), py::arg("root"), py::arg("timeout"),
         py::arg("blocking"), py::arg("name"));
}

// The collectives that move data without reducing it, and barrier.
void defineDataMovement(CommunicatorClass& communicator) {
  communicator
      .def("allgather", [](Comm& c, py::handle x, py::handle out, double timeout, bool blocking, const std::string& name) {
        Operands a = viewOperands(x, out);
        checkCount(a.into, a.in.count * c.size(), "out (size * len(x))");
        AllgatherOptions o;
        setArrays(o, a, a.in.count);
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
        Operands a = viewOperands(x, out);
        checkCount(a.into, a.in.count, "out");
        if (a.in.count % c.size() != 0) {
          throw py::value_error("x holds " + std::to_string(a.in.count) +
                                " elements, which do not split evenly across " +
                                std::to_string(c.size()) + " ranks");
        }
        AlltoallOptions o;
        setArrays(o, a, a.in.count / c.size());
        o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::alltoall, name);
      }, py::arg("x"), py::arg("out"), py::arg("timeout"), py::arg("blocking"), py::arg("name"))
      .def("gather", [](Comm& c, py::handle x, py::handle out, int root, double timeout, bool blocking, const std::string& name) {
        ArrayView in = viewArray(x, "x", false);
        GatherOptions o;
        o.output = viewRootWhole(out, Whole::Out, in, c.size());
        o.input = in.data; o.count = in.count; o.type = in.type; o.root = root;
        o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::gather, name);
      }, py::arg("x"), py::arg("out"), py::arg("root"), py::arg("timeout"), py::arg("blocking"),
         py::arg("name"))
      .def("scatter", [](Comm& c, py::handle x, py::handle out, int root, double timeout, bool blocking, const std::string& name) {
        ArrayView into = viewArray(out, "out", true);
        ScatterOptions o;
        o.input = viewRootWhole(x, Whole::X, into, c.size());
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
