// ringcomm._core.Config: the configuration, read from the environment in one place
// (src/common/config.cc) and adjusted from Python.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "parts.h"
#include "ringcomm/config.h"

namespace py = pybind11;

namespace ringcomm::bindings {

void bindConfig(py::module_& m) {
  py::class_<Config>(m, "Config")
      .def_static("from_environment", &Config::fromEnvironment)
      .def("__copy__", [](const Config& c) { return Config(c); })
      .def_property("timeout",
                    [](const Config& c) { return c.timeout.count() / 1000.0; },
                    [](Config& c, double seconds) {
                      c.timeout = timeoutFromSeconds(seconds, "timeout", false);
                    })
      .def_property(
          "secret", [](const Config& c) { return py::bytes(c.secret); },
          [](Config& c, const py::bytes& secret) { c.secret = secret; })
      .def_readwrite("transport", &Config::transport)
      .def_readwrite("algorithm", &Config::algorithm)
      .def_readwrite("socket_interface", &Config::socketInterface)
      .def_readwrite("listen_address", &Config::listenAddress)
      .def_readwrite("host_id", &Config::hostId)
      .def_readwrite("spin_count", &Config::spinCount)
      .def_readwrite("segment_bytes", &Config::segmentBytes)
      .def_readwrite("shm_slot_bytes", &Config::shmSlotBytes)
      .def_readwrite("shm_ring_bytes", &Config::shmRingBytes)
      .def_readwrite("socket_buffer_bytes", &Config::socketBufferBytes)
      .def_property("cycle_time",
                    [](const Config& c) { return c.cycleTime.count() / 1e6; },
                    [](Config& c, double seconds) {
                      c.cycleTime = std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
                    })
      .def_readwrite("fusion_threshold_bytes", &Config::fusionThresholdBytes)
      .def_property("link_latency",
                    [](const Config& c) { return c.linkLatency.count() / 1e6; },
                    [](Config& c, double seconds) {
                      c.linkLatency = std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
                    })
      .def_readwrite("link_bandwidth", &Config::linkBandwidth)
      .def_readwrite("log_level", &Config::logLevel)
      .def_readwrite("log_subsystems", &Config::logSubsystems)
      .def_readwrite("log_file", &Config::logFile)
      .def_readwrite("trace_file", &Config::traceFile)
      .def_readwrite("trace_max_events", &Config::traceMaxEvents)
      .def_readwrite("horovod_timeline", &Config::horovodTimeline)
      .def_readwrite("horovod_timeline_mark_cycles", &Config::horovodTimelineMarkCycles)
      .def_readonly("mps_pipe_directory", &Config::mpsPipeDirectory)
      .def_readwrite("shm_allreduce_rules", &Config::shmAllreduceRules)
      .def_readwrite("tcp_allreduce_rules", &Config::tcpAllreduceRules)
      .def_readwrite("tuning_directory", &Config::tuningDirectory)
      .def_static("describe_environment", [] {
        py::list variables;
        for (const ConfigVariable& v : Config::describeEnvironment()) {
          variables.append(py::dict(py::arg("name") = v.name, py::arg("value") = v.value,
                                    py::arg("source") = v.source, py::arg("error") = v.error,
                                    py::arg("meaning") = v.meaning,
                                    py::arg("default") = v.defaultValue));
        }
        return variables;
      });
}

}  // namespace ringcomm::bindings
