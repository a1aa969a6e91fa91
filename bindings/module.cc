// ringcomm._core: type conversion, the GIL released around every blocking call, and C++ errors
// turned into Python exceptions in one place. No logic: that lives in src/ and ringcomm/.
#include <pybind11/chrono.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arrays.h"
#include "dlpack.h"
#include "tensor_queue.h"
#include "ringcomm/build_info.h"
#include "ringcomm/communicator.h"
#include "ringcomm/debug.h"
#include "ringcomm/shared_memory.h"

namespace py = pybind11;
using namespace ringcomm;

namespace {

// A store implemented in Python (for example an adapter over torch.distributed's Store).
class PythonStore : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override {
    py::gil_scoped_acquire gil;
    PYBIND11_OVERRIDE_PURE(void, Store, set, key, py::bytes(reinterpret_cast<const char*>(value.data()), value.size()));
  }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    py::gil_scoped_acquire gil;
    py::function override = py::get_override(static_cast<const Store*>(this), "get");
    if (!override) throw Error("PythonStore.get is not implemented");
    std::string value = override(key, timeout.count() / 1000.0).cast<std::string>();
    return Bytes(value.begin(), value.end());
  }
  int64_t add(const std::string& key, int64_t delta) override {
    py::gil_scoped_acquire gil;
    PYBIND11_OVERRIDE_PURE(int64_t, Store, add, key, delta);
  }
};

// A timeout= argument: 0 means the default (the communicator's, or none for a wait).
std::chrono::milliseconds toMilliseconds(double seconds) {
  return timeoutFromSeconds(seconds, "timeout", true);
}

// Runs a collective: blocking calls run (usually on this thread) and wait with the GIL released;
// asynchronous ones return the Work at once.
template <typename Options, typename Method>
py::object launch(Communicator& comm, Options options, bool blocking, Method method,
                  const std::string& name) {
  options.runInCaller = blocking;
  options.name = name;
  bindings::takeCallDevice(options);
  WorkPtr work;
  {
    py::gil_scoped_release release;
    work = (comm.*method)(options);
    if (blocking) work->wait();
  }
  if (blocking) return py::none();
  return py::cast(work);
}

PyObject* makeException(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string qualified = std::string("ringcomm.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(type));
  return type;
}

// The Python exception types, created once at import (the translator must be a plain function).
struct ExceptionTypes {
  PyObject* base;
  PyObject* peer;
  PyObject* timeout;
  PyObject* transport;
  PyObject* mismatch;
  PyObject* closed;
  PyObject* membership;
};
ExceptionTypes exceptionTypes{};

void raiseWithContext(PyObject* type, const PeerError& error) {
  py::object instance = py::reinterpret_steal<py::object>(PyObject_CallFunction(type, "s", error.what()));
  const FailureContext& context = error.context();
  instance.attr("operation") = context.operation;
  instance.attr("rank") = context.rank;
  instance.attr("peer") = context.peer >= 0 ? py::object(py::int_(context.peer)) : py::object(py::none());
  instance.attr("elapsed") = context.elapsedSeconds;
  PyErr_SetObject(type, instance.ptr());
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "ringcomm's C++ core (private: use the ringcomm package)";

  // ---- errors ------------------------------------------------------------------------------
  PyObject* baseError = makeException(m, "RingcommError", PyExc_RuntimeError,
                                      "Base class of ringcomm's errors.");
  PyObject* peerError = makeException(m, "PeerError", baseError,
                                      "A collective failed because of a peer; see .peer, .rank, .operation, .elapsed.");
  PyObject* timeoutBases = PyTuple_Pack(2, peerError, PyExc_TimeoutError);
  PyObject* timeoutError = makeException(m, "TimeoutError", timeoutBases,
                                         "A deadline passed while waiting for the peer named in the message.");
  Py_DECREF(timeoutBases);
  PyObject* connectionBases = PyTuple_Pack(2, peerError, PyExc_ConnectionError);
  PyObject* transportError = makeException(m, "TransportError", connectionBases,
                                           "A peer died, aborted or closed its connection.");
  Py_DECREF(connectionBases);
  PyObject* mismatchError = makeException(m, "MismatchError", peerError,
                                          "Ranks called different collectives, or with different sizes or types.");
  // Also a ValueError, as Python's operations on a closed file are.
  PyObject* closedBases = PyTuple_Pack(2, baseError, PyExc_ValueError);
  PyObject* closedError = makeException(m, "CommunicatorClosed", closedBases,
                                        "The communicator was shut down or poisoned by an earlier failure.");
  Py_DECREF(closedBases);

  PyObject* membershipError = makeException(
      m, "MembershipError", baseError,
      "shrink() on a side that may not go on: it lost its quorum, or the survivors left this "
      "rank out.");

  exceptionTypes = {baseError,     peerError,   timeoutError,   transportError,
                    mismatchError, closedError, membershipError};
  py::register_exception_translator([](std::exception_ptr pointer) {
    const ExceptionTypes& t = exceptionTypes;
    if (!pointer) return;
    try {
      std::rethrow_exception(pointer);
    } catch (const TimeoutError& error) {
      raiseWithContext(t.timeout, error);
    } catch (const MismatchError& error) {
      raiseWithContext(t.mismatch, error);
    } catch (const TransportError& error) {
      raiseWithContext(t.transport, error);
    } catch (const PeerError& error) {
      raiseWithContext(t.peer, error);
    } catch (const InvalidArgument& error) {
      PyErr_SetString(PyExc_ValueError, error.what());
    } catch (const CommunicatorClosed& error) {
      PyErr_SetString(t.closed, error.what());
    } catch (const MembershipError& error) {
      PyErr_SetString(t.membership, error.what());
    } catch (const Error& error) {
      PyErr_SetString(t.base, error.what());
    }
  });

  // ---- enums -------------------------------------------------------------------------------
  // Each before the first signature that names it, so that signatures (and the stubs made from
  // them, ringcomm/_core.pyi) name the Python type, not the C++ one.
  py::enum_<LogLevel>(m, "LogLevel")
      .value("NONE", LogLevel::None).value("WARN", LogLevel::Warn)
      .value("INFO", LogLevel::Info).value("TRACE", LogLevel::Trace);
  py::enum_<DataType>(m, "DataType")
      .value("int8", DataType::Int8).value("uint8", DataType::Uint8)
      .value("int16", DataType::Int16)
      .value("int32", DataType::Int32).value("int64", DataType::Int64)
      .value("float16", DataType::Float16).value("bfloat16", DataType::BFloat16)
      .value("float32", DataType::Float32).value("float64", DataType::Float64)
      .value("bool", DataType::Bool);
  py::enum_<ReduceOp>(m, "ReduceOp")
      .value("SUM", ReduceOp::Sum).value("AVG", ReduceOp::Avg).value("MIN", ReduceOp::Min)
      .value("MAX", ReduceOp::Max).value("PROD", ReduceOp::Prod)
      .value("ADASUM", ReduceOp::Adasum);
  py::enum_<Algorithm>(m, "Algorithm")
      .value("auto", Algorithm::Auto).value("ring", Algorithm::Ring)
      .value("tree", Algorithm::Tree).value("direct", Algorithm::Direct)
      .value("hierarchical", Algorithm::Hierarchical);
  py::enum_<Compression>(m, "Compression")
      .value("none", Compression::None).value("fp16", Compression::Float16)
      .value("bf16", Compression::BFloat16)
      .value("int8", Compression::Int8)
      .value("fp8", Compression::Float8);
  m.def("parse_compression", &parseCompression, py::arg("text"));
  py::enum_<TransportKind>(m, "TransportKind")
      .value("auto", TransportKind::Auto)
      .value("tcp", TransportKind::Tcp)
      .value("shm", TransportKind::Shm)
      .value("ucx", TransportKind::Ucx);
  m.def("parse_algorithm", &parseAlgorithm, py::arg("text"));
  m.def("parse_transport", &parseTransportKind, py::arg("text"));

  // ---- configuration -------------------------------------------------------------------------
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
  // ---- observability (include/ringcomm/debug.h) ------------------------------------------
  m.def("parse_log_level", &parseLogLevel, py::arg("text"));
  m.def("parse_log_subsystems", &parseLogSubsystems, py::arg("text"));
  m.def("configure_observability", &configureObservability, py::arg("config"),
        py::arg("rank") = -1);
  m.def("log_enabled", &logEnabled, py::arg("level"), py::arg("subsystem"));
  m.def("log", &logMessage, py::arg("level"), py::arg("subsystem"), py::arg("text"));
  m.def("start_horovod_timeline", &startHorovodTimeline, py::arg("path"),
        py::arg("mark_cycles") = false);
  // Rank 0 renders and writes the file: release the GIL meanwhile.
  m.def("stop_horovod_timeline", &stopHorovodTimeline, py::call_guard<py::gil_scoped_release>());
  m.def("horovod_timeline_active", &horovodTimelineActive);

  // ---- what this build is ------------------------------------------------------------------
  m.def("build_info", [] {
    BuildInfo b = buildInfo();
    return py::dict(py::arg("compiler") = b.compiler, py::arg("cuda") = b.cuda,
                    py::arg("cuda_architectures") = b.cudaArchitectures,
                    py::arg("cuda_runtime_version") = b.cudaRuntimeVersion,
                    py::arg("cuda_driver_version") = b.cudaDriverVersion,
                    py::arg("reduce_kernels") = b.reduceKernels, py::arg("half_codec") = b.halfCodec,
                    py::arg("wire_protection") = b.wireProtection, py::arg("ucx") = b.ucx);
  });
  m.def("ucx_info", [] {
    UcxInfo u = ucxInfo();
    return py::dict(py::arg("version") = u.version, py::arg("lanes") = u.lanes,
                    py::arg("why_not") = u.whyNot);
  });
  m.def("mps_running", &mpsRunning, py::arg("pipe_directory"));

  // ---- stores ------------------------------------------------------------------------------
  py::class_<Store, PythonStore, std::shared_ptr<Store>>(m, "Store")
      .def(py::init<>())
      .def("set", [](Store& s, const std::string& key, const py::bytes& value) {
        std::string text = value;
        py::gil_scoped_release release;
        s.set(key, Bytes(text.begin(), text.end()));
      }, py::arg("key"), py::arg("value"))
      .def("get", [](Store& s, const std::string& key, double timeout) {
        Bytes value;
        {
          py::gil_scoped_release release;
          value = s.get(key, toMilliseconds(timeout));
        }
        return py::bytes(reinterpret_cast<const char*>(value.data()), value.size());
      }, py::arg("key"), py::arg("timeout") = 300.0)
      .def("add", [](Store& s, const std::string& key, int64_t delta) {
        py::gil_scoped_release release;
        return s.add(key, delta);
      }, py::arg("key"), py::arg("delta"));
  py::class_<HashStore, Store, std::shared_ptr<HashStore>>(m, "HashStore").def(py::init<>());
  py::class_<FileStore, Store, std::shared_ptr<FileStore>>(m, "FileStore")
      .def(py::init<std::string>(), py::arg("directory"));
  py::class_<PrefixStore, Store, std::shared_ptr<PrefixStore>>(m, "PrefixStore")
      .def(py::init<std::string, std::shared_ptr<Store>>(), py::arg("prefix"), py::arg("store"));
  // The job's secret travels as bytes (it need not be text).
  py::class_<TcpStore, Store, std::shared_ptr<TcpStore>>(m, "TcpStore")
      .def(py::init([](const std::string& host, int port, double timeout, const py::bytes& secret) {
             std::string key = secret;
             py::gil_scoped_release release;
             return std::make_shared<TcpStore>(host, port, toMilliseconds(timeout), key);
           }),
           py::arg("host"), py::arg("port"), py::arg("timeout"), py::arg("secret"))
      .def_property_readonly("local_address", &TcpStore::localAddress);
  py::class_<TcpStoreServer, std::shared_ptr<TcpStoreServer>>(m, "TcpStoreServer")
      .def(py::init([](const std::string& host, int port, const py::bytes& secret) {
             return std::make_shared<TcpStoreServer>(host, port, std::string(secret));
           }),
           py::arg("host"), py::arg("port"), py::arg("secret"))
      .def_property_readonly("port", &TcpStoreServer::port)
      .def_property_readonly("refused_connections", &TcpStoreServer::refusedConnections)
      .def("stop", &TcpStoreServer::stop, py::call_guard<py::gil_scoped_release>());

  // ---- work --------------------------------------------------------------------------------
  py::class_<Work, WorkPtr>(m, "Work")
      .def("is_completed", &Work::isCompleted)
      .def("wait", [](Work& w, double timeout) { w.wait(toMilliseconds(timeout)); },
           py::arg("timeout") = 0.0, py::call_guard<py::gil_scoped_release>());

  // ---- communicator ------------------------------------------------------------------------
  // Arrays arrive as Python objects and are decoded here (arrays.h); the Python layer keeps them
  // alive until the Work completes. `out` may be None where the collective allows in place.
  using Comm = Communicator;
  using bindings::ArrayView;
  using bindings::viewArray;
  auto sameType = [](const ArrayView& a, const ArrayView& b) {
    if (a.type != b.type) {
      throw py::type_error(std::string("out has dtype ") + toString(b.type) + " but x has " +
                           toString(a.type));
    }
  };
  auto countIs = [](const ArrayView& view, size_t expected, const char* what) {
    if (view.count != expected) {
      throw py::value_error(std::string(what) + " must hold " + std::to_string(expected) +
                            " elements; it holds " + std::to_string(view.count));
    }
  };
  py::class_<Comm, std::shared_ptr<Comm>>(m, "Communicator")
      .def_static("create", [](std::shared_ptr<Store> store, int rank, int size, const Config& config) {
        py::gil_scoped_release release;
        return Comm::create(std::move(store), rank, size, config);
      }, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("config"))
      // Meets under `scope` of the store, not under the process's count of communicators: for
      // groups of some ranks only (ringcomm.torch's process sets), whose other processes create
      // nothing for them.
      .def_static("create_in_scope", [](std::shared_ptr<Store> store, const std::string& scope,
                                        int rank, int size, const Config& config) {
        py::gil_scoped_release release;
        return Comm::createInScope(std::move(store), scope, rank, size, config);
      }, py::arg("store"), py::arg("scope"), py::arg("rank"), py::arg("size"), py::arg("config"))
      .def("duplicate", &Comm::duplicate, py::call_guard<py::gil_scoped_release>())
      .def("shrink", [](Comm& c, const std::vector<int>& exclude, double timeout) {
        py::gil_scoped_release release;
        return c.shrink(exclude, toMilliseconds(timeout));
      }, py::arg("exclude"), py::arg("timeout") = 0.0)
      .def("survivors", [](Comm& c, double timeout) {
        py::gil_scoped_release release;
        return c.survivors(toMilliseconds(timeout));
      }, py::arg("timeout") = 0.0)
      .def("split", &Comm::split, py::arg("color"), py::arg("key"),
           py::call_guard<py::gil_scoped_release>())
      .def("grow", [](Comm& c, int expect, double timeout) {
        GrowOptions options;
        options.expect = expect;
        options.timeout = toMilliseconds(timeout);
        py::gil_scoped_release release;
        return c.grow(options);
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
        return Comm::join(options, config);
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
           py::arg("bytes"))
      .def("allreduce", [=](Comm& c, py::handle x, py::handle out, ReduceOp op, Algorithm algorithm,
                            double timeout, bool blocking, Compression compression, double prescale,
                            double postscale, const std::string& name,
                            const std::vector<size_t>& tensorCounts) {
        ArrayView in = viewArray(x, "x", out.is_none());
        ArrayView into = out.is_none() ? in : viewArray(out, "out", true);
        sameType(in, into);
        countIs(into, in.count, "out");
        AllreduceOptions o;
        o.input = in.data; o.output = into.data; o.count = in.count; o.type = in.type;
        o.op = op; o.algorithm = algorithm; o.timeout = toMilliseconds(timeout);
        o.compression = compression; o.prescale = prescale; o.postscale = postscale;
        o.tensorCounts = tensorCounts;
        return launch(c, o, blocking, &Comm::allreduce, name);
      }, py::arg("x"), py::arg("out"), py::arg("op"), py::arg("algorithm"), py::arg("timeout"),
         py::arg("blocking"), py::arg("compression"), py::arg("prescale"), py::arg("postscale"),
         py::arg("name"), py::arg("tensor_counts"))
      .def("reduce_scatter", [=](Comm& c, py::handle x, py::handle out, ReduceOp op, double timeout,
                                 bool blocking, const std::string& name) {
        ArrayView in = viewArray(x, "x", false);
        ArrayView into = viewArray(out, "out", true);
        sameType(in, into);
        countIs(in, into.count * c.size(), "x (size * len(out))");
        ReduceScatterOptions o;
        o.input = in.data; o.output = into.data; o.count = into.count; o.type = in.type;
        o.op = op; o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::reduceScatter, name);
      }, py::arg("x"), py::arg("out"), py::arg("op"), py::arg("timeout"), py::arg("blocking"),
         py::arg("name"))
      .def("allgather", [=](Comm& c, py::handle x, py::handle out, double timeout, bool blocking, const std::string& name) {
        ArrayView in = viewArray(x, "x", false);
        ArrayView into = viewArray(out, "out", true);
        sameType(in, into);
        countIs(into, in.count * c.size(), "out (size * len(x))");
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
      .def("reduce", [=](Comm& c, py::handle x, py::handle out, ReduceOp op, int root, double timeout,
                         bool blocking, const std::string& name) {
        const bool inPlaceRoot = out.is_none() && c.rank() == root;
        ArrayView in = viewArray(x, "x", inPlaceRoot);
        ArrayView into = out.is_none() ? in : viewArray(out, "out", true);
        sameType(in, into);
        countIs(into, in.count, "out");
        ReduceOptions o;
        o.input = in.data; o.output = into.data; o.count = in.count; o.type = in.type;
        o.op = op; o.root = root; o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::reduce, name);
      }, py::arg("x"), py::arg("out"), py::arg("op"), py::arg("root"), py::arg("timeout"),
         py::arg("blocking"), py::arg("name"))
      .def("alltoall", [=](Comm& c, py::handle x, py::handle out, double timeout, bool blocking, const std::string& name) {
        ArrayView in = viewArray(x, "x", false);
        ArrayView into = viewArray(out, "out", true);
        sameType(in, into);
        countIs(into, in.count, "out");
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
      .def("gather", [=](Comm& c, py::handle x, py::handle out, int root, double timeout, bool blocking, const std::string& name) {
        ArrayView in = viewArray(x, "x", false);
        GatherOptions o;
        if (!out.is_none()) {
          ArrayView into = viewArray(out, "out", true);
          sameType(in, into);
          countIs(into, in.count * c.size(), "out (size * len(x))");
          o.output = into.data;
        }
        o.input = in.data; o.count = in.count; o.type = in.type; o.root = root;
        o.timeout = toMilliseconds(timeout);
        return launch(c, o, blocking, &Comm::gather, name);
      }, py::arg("x"), py::arg("out"), py::arg("root"), py::arg("timeout"), py::arg("blocking"),
         py::arg("name"))
      .def("scatter", [=](Comm& c, py::handle x, py::handle out, int root, double timeout, bool blocking, const std::string& name) {
        ArrayView into = viewArray(out, "out", true);
        ScatterOptions o;
        if (!x.is_none()) {
          ArrayView in = viewArray(x, "x", false);
          sameType(in, into);
          countIs(in, into.count * c.size(), "x (size * len(out))");
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
      }, py::arg("timeout"), py::arg("blocking"), py::arg("name"))
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
         py::arg("name"))
      .def("abort", &Comm::abort, py::arg("reason") = "abort() called",
           py::call_guard<py::gil_scoped_release>())
      .def("shutdown", &Comm::shutdown, py::call_guard<py::gil_scoped_release>());

  bindings::bindTensorQueue(m);
  bindings::bindCallDevice(m);  // last: its exception translator must run first

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
    bindings::DlpackView v = bindings::readDlpack(capsule);
    return py::dict(py::arg("data") = v.data, py::arg("shape") = v.shape, py::arg("strides") = v.strides,
                    py::arg("device_type") = v.deviceType, py::arg("device_id") = v.deviceId,
                    py::arg("code") = v.code, py::arg("bits") = v.bits, py::arg("lanes") = v.lanes,
                    py::arg("read_only") = v.readOnly);
  });
}
