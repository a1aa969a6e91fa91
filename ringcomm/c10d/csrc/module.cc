// The Python face of the backend: one constructor, bound as a subclass of torch's Backend so that
// torch.distributed can hold it in a ProcessGroup.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/python.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"

namespace {

using ringcomm::c10d_backend::RingcommBackend;

using NamedRules = std::vector<std::pair<size_t, std::string>>;

// ("most bytes", "ring") pairs, as ringcomm/_tuning.py gives a tuning file's rules.
RingcommBackend::Rules parsedRules(const NamedRules& named) {
  RingcommBackend::Rules rules;
  for (const auto& [most, algorithm] : named) {
    rules.emplace_back(most, ringcomm::parseAlgorithm(algorithm));
  }
  return rules;
}

c10::intrusive_ptr<RingcommBackend> createBackend(const c10::intrusive_ptr<::c10d::Store>& store,
                                                  int rank, int size,
                                                  std::chrono::milliseconds timeout,
                                                  const std::string& secret,
                                                  const NamedRules& shmRules,
                                                  const NamedRules& tcpRules, double linkLatency,
                                                  double linkBandwidth,
                                                  const std::string& listenAddress) {
  return c10::make_intrusive<RingcommBackend>(store, rank, size, timeout, secret,
                                              parsedRules(shmRules), parsedRules(tcpRules),
                                              linkLatency, linkBandwidth, listenAddress);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ringcomm's torch.distributed backend (compiled against this torch by ringcomm.c10d)";
  py::class_<RingcommBackend, ::c10d::Backend, c10::intrusive_ptr<RingcommBackend>>(
      m, "RingcommBackend")
      .def(py::init([](const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, const py::bytes& secret,
                       const NamedRules& shmRules, const NamedRules& tcpRules, double linkLatency,
                       double linkBandwidth, const std::string& listenAddress) {
             std::string key = secret;
             py::gil_scoped_release release;
             return createBackend(store, rank, size, timeout, key, shmRules, tcpRules,
                                  linkLatency, linkBandwidth, listenAddress);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("secret"), py::arg("shm_allreduce_rules") = NamedRules{},
           py::arg("tcp_allreduce_rules") = NamedRules{}, py::arg("link_latency") = 0.0,
           py::arg("link_bandwidth") = 0.0, py::arg("listen_address") = std::string())
      .def_static(
          "meet",
          [](const std::string& host, int port, const std::string& scope, int rank, int size,
             std::chrono::milliseconds timeout, const py::bytes& secret,
             const NamedRules& shmRules, const NamedRules& tcpRules, double linkLatency,
             double linkBandwidth, const std::string& listenAddress) {
            std::string key = secret;
            RingcommBackend::Rules shm = parsedRules(shmRules), tcp = parsedRules(tcpRules);
            py::gil_scoped_release release;
            return RingcommBackend::meet(host, port, scope, rank, size, timeout, key,
                                         std::move(shm), std::move(tcp), linkLatency,
                                         linkBandwidth, listenAddress);
          },
          py::arg("host"), py::arg("port"), py::arg("scope"), py::arg("rank"), py::arg("size"),
          py::arg("timeout"), py::arg("secret"), py::arg("shm_allreduce_rules") = NamedRules{},
          py::arg("tcp_allreduce_rules") = NamedRules{}, py::arg("link_latency") = 0.0,
          py::arg("link_bandwidth") = 0.0, py::arg("listen_address") = std::string())
      .def("lost_ranks", &RingcommBackend::lostRanks, py::call_guard<py::gil_scoped_release>())
      .def("grow", &RingcommBackend::grow, py::arg("expect"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def_static(
          "join",
          [](const std::vector<std::string>& addresses, const std::string& board,
             const std::string& doorKey, std::chrono::milliseconds timeout,
             const py::bytes& secret) {
            std::string key = secret;
            py::gil_scoped_release release;
            return RingcommBackend::join(addresses, board, doorKey, timeout, key);
          },
          py::arg("addresses"), py::arg("board"), py::arg("door_key"), py::arg("timeout"),
          py::arg("secret"))
      .def(
          "publish_door",
          [](RingcommBackend& backend, const std::string& board, const std::string& doorKey,
             const py::bytes& secret) {
            std::string key = secret;
            py::gil_scoped_release release;
            backend.publishDoor(board, doorKey, key);
          },
          py::arg("board"), py::arg("door_key"), py::arg("secret"))
      .def_property_readonly("address", &RingcommBackend::address)
      // What failed first in this group, or None (RingcommBackend::getError).
      .def_property_readonly("error",
                             [](const RingcommBackend& backend) -> std::optional<std::string> {
                               std::string message = backend.errorMessage();
                               if (message.empty()) return std::nullopt;
                               return message;
                             })
      .def(
          "allreduce_compressed",
          [](RingcommBackend& backend, at::Tensor& tensor, const std::string& compression,
             bool average) {
            return backend.allreduceCompressed(tensor, ringcomm::parseCompression(compression),
                                               average);
          },
          py::arg("tensor"), py::arg("compression"), py::arg("average") = true,
          py::call_guard<py::gil_scoped_release>())
      .def("transport_to",
           [](const RingcommBackend& backend, int peer) {
             return backend.communicator().transportTo(peer);
           })
      .def_property_readonly("local_size",
                             [](const RingcommBackend& backend) {
                               return backend.communicator().localSize();
                             })
      // What algorithm="auto" runs for an all-reduce of `bytes` (as Communicator.choose_algorithm).
      .def("choose_allreduce_algorithm", [](const RingcommBackend& backend, size_t bytes) {
        return ringcomm::toString(backend.communicator().chooseAllreduceAlgorithm(bytes));
      });
}
