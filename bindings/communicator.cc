// ringcomm._core.Work, and the Communicator's life: made, duplicated, split, shrunk and grown,
// what it knows of its ranks, aborted and shut down (its collectives: collectives.cc).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "calls.h"
#include "parts.h"
#include "ringcomm/communicator.h"
#include "ringcomm/options.h"
#include "ringcomm/store.h"
#include "ringcomm/work.h"

namespace py = pybind11;

namespace ringcomm::bindings {

void bindCommunicator(py::module_& m) {
  py::class_<Work, WorkPtr>(m, "Work")
      .def("is_completed", &Work::isCompleted)
      .def("wait", [](Work& w, double timeout) { w.wait(toMilliseconds(timeout)); },
           py::arg("timeout") = 0.0, py::call_guard<py::gil_scoped_release>());

  using Comm = Communicator;
  CommunicatorClass communicator(m, "Communicator");
  communicator
      .def_static("create", [](std::shared_ptr<Store> store, int rank, int size, const Config& config) {
        py::gil_scoped_release release;
        return heldByPython(Comm::create(std::move(store), rank, size, config));
      }, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("config"))
      // Meets under `scope` of the store, not under the process's count of communicators: for
      // groups of some ranks only (ringcomm.torch's process sets), whose other processes create
      // nothing for them.
      .def_static("create_in_scope", [](std::shared_ptr<Store> store, const std::string& scope,
                                        int rank, int size, const Config& config) {
        py::gil_scoped_release release;
        return heldByPython(Comm::createInScope(std::move(store), scope, rank, size, config));
      }, py::arg("store"), py::arg("scope"), py::arg("rank"), py::arg("size"), py::arg("config"))
      .def("duplicate", [](Comm& c) {
        py::gil_scoped_release release;
        return heldByPython(c.duplicate());
      })
      .def("shrink", [](Comm& c, const std::vector<int>& exclude, double timeout) {
        py::gil_scoped_release release;
        return heldByPython(c.shrink(exclude, toMilliseconds(timeout)));
      }, py::arg("exclude"), py::arg("timeout") = 0.0)
      .def("survivors", [](Comm& c, double timeout) {
        py::gil_scoped_release release;
        return c.survivors(toMilliseconds(timeout));
      }, py::arg("timeout") = 0.0)
      .def("split", [](Comm& c, int color, int key) {
        py::gil_scoped_release release;
        return heldByPython(c.split(color, key));
      }, py::arg("color"), py::arg("key"))
      .def("grow", [](Comm& c, int expect, double timeout) {
        GrowOptions options;
        options.expect = expect;
        options.timeout = toMilliseconds(timeout);
        py::gil_scoped_release release;
        return heldByPython(c.grow(options));
      }, py::arg("expect") = 0, py::arg("timeout") = 0.0)
      .def_static("join", [](const std::vector<std::string>& addresses,
                             std::optional<std::shared_ptr<Store>> board,
                             const std::string& door_key, const Config& config, double timeout) {
        JoinOptions options;
        options.addresses = addresses;
        options.board = board.value_or(nullptr);
        options.doorKey = door_key;
        options.timeout = toMilliseconds(timeout);
        py::gil_scoped_release release;
        return heldByPython(Comm::join(options, config));
      }, py::arg("addresses"), py::arg("board"), py::arg("door_key"), py::arg("config"),
         py::arg("timeout") = 0.0)
      .def_property_readonly("address", &Comm::address)
      .def_property_readonly("former_ranks", &Comm::formerRanks)
      .def("publish_door", &Comm::publishDoor, py::arg("board"), py::arg("key"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("rank", &Comm::rank)
      .def_property_readonly("size", &Comm::size)
      .def_property_readonly("local_rank", &Comm::localRank)
      .def_property_readonly("local_size", &Comm::localSize)
      .def_property_readonly("host_index", &Comm::hostIndex)
      .def_property_readonly("host_count", &Comm::hostCount)
      .def_property_readonly("config", &Comm::config)
      .def("transport_to", &Comm::transportTo, py::arg("peer"))
      .def("choose_allreduce_algorithm", &Comm::chooseAllreduceAlgorithm,
           py::arg("bytes"));
  bindCollectives(communicator);
  communicator
      .def("abort", &Comm::abort, py::arg("reason") = "abort() called",
           py::call_guard<py::gil_scoped_release>())
      .def("shutdown", &Comm::shutdown, py::call_guard<py::gil_scoped_release>());
}

}  // namespace ringcomm::bindings
