// ringcomm._core's enums (LogLevel, DataType, ReduceOp, Algorithm, Compression, TransportKind)
// and their parsers.
#include <pybind11/pybind11.h>

#include "parts.h"
#include "ringcomm/config.h"
#include "ringcomm/debug.h"
#include "ringcomm/types.h"

namespace py = pybind11;

namespace ringcomm::bindings {

void bindEnums(py::module_& m) {
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
}

}  // namespace ringcomm::bindings
