#include "arrays.h"

#include <pybind11/stl.h>

#include <exception>
#include <optional>

#include <cstring>
#include <string>
#include <vector>

#include "dlpack.h"

namespace py = pybind11;

namespace ringcomm::bindings {
namespace {

// DLPack device types (dlpack.h).
constexpr int kDLCPU = 1;
constexpr int kDLCUDA = 2;
constexpr int kDLCUDAHost = 3;
constexpr int kDLCUDAManaged = 13;

struct CallDevice {
  bool device = false;
  bool streamSet = false;
  uintptr_t stream = 0;
};
thread_local CallDevice callDevice;

// The first CUDA array of a call without stream= brings its library's current stream.
void noteDeviceArray(py::handle obj) {
  if (!callDevice.device && !callDevice.streamSet) {
    callDevice.stream =
        py::module_::import("ringcomm._devices").attr("current_stream")(obj).cast<uintptr_t>();
  }
  callDevice.device = true;
}

constexpr const char* kSupported =
    "int8, uint8, int16, int32, int64, float16, bfloat16, float32, float64, bool";

// The buffer protocol's struct-module format for one element: an optional byte-order prefix,
// then a type character whose size is given by itemsize.
bool typeFromFormat(const char* format, Py_ssize_t itemsize, DataType* type) {
  if (format == nullptr) format = "B";
  if (*format == '<' || *format == '=' || *format == '@') ++format;
  if (format[0] == '\0' || format[1] != '\0') return false;
  switch (format[0]) {
    case 'b': *type = DataType::Int8; return true;
    case 'B': *type = DataType::Uint8; return true;
    case '?': *type = DataType::Bool; return itemsize == 1;
    case 'h': *type = DataType::Int16; return itemsize == 2;
    case 'e': *type = DataType::Float16; return true;
    case 'f': *type = DataType::Float32; return true;
    case 'd': *type = DataType::Float64; return true;
    case 'i': case 'l': case 'q':
      if (itemsize == 4) { *type = DataType::Int32; return true; }
      if (itemsize == 8) { *type = DataType::Int64; return true; }
      return false;
    default: return false;
  }
}

std::string describeType(py::handle obj) {
  if (py::hasattr(obj, "dtype")) return py::str(obj.attr("dtype"));
  return py::str(py::type::of(obj).attr("__name__"));
}

// Whether an array's own dtype says bool ("bool" in NumPy, CuPy and JAX, "torch.bool"). Asked only
// of a DLPack export that says uint8: producers from before DLPack 0.8 had no kDLBool and exported
// bools as 8-bit unsigned integers (torch did), which would otherwise be summed as bytes.
bool declaresBool(py::handle obj) {
  if (!py::hasattr(obj, "dtype")) return false;
  const std::string dtype = py::str(obj.attr("dtype"));
  return dtype == "bool" || dtype == "torch.bool";
}

[[noreturn]] void unsupportedType(py::handle obj, const char* name) {
  throw py::type_error(std::string(name) + " has dtype " + describeType(obj) +
                       "; ringcomm supports " + kSupported);
}

// Why a buffer request failed, in the caller's words: retry with fewer demands to find out. When
// none of ours fits, the exporter's own reason (CuPy's "Accessing a CuPy ndarray on CPU is not
// allowed", say), never a guess about the dtype.
[[noreturn]] void explainBufferFailure(py::handle obj, const char* name, bool writable) {
  py::error_already_set refusal;  // fetches and clears the exporter's exception
  Py_buffer probe;
  if (PyObject_GetBuffer(obj.ptr(), &probe, PyBUF_RECORDS_RO) == 0) {
    const bool contiguous = PyBuffer_IsContiguous(&probe, 'C');
    const bool readOnly = probe.readonly;
    DataType type;
    const bool known = typeFromFormat(probe.format, probe.itemsize, &type);
    PyBuffer_Release(&probe);
    if (!contiguous) {
      throw py::value_error(std::string(name) +
                            " must be C-contiguous; pass np.ascontiguousarray(...) or .contiguous()");
    }
    if (writable && readOnly) {
      throw py::value_error(std::string(name) + " is read-only, but this collective writes into it");
    }
    if (!known) unsupportedType(obj, name);
  } else {
    PyErr_Clear();
  }
  throw py::type_error(std::string(name) + " (" + describeType(obj) +
                       ") could not be read through the buffer protocol: " + refusal.what());
}

// The DLPack device type an object declares through __dlpack_device__, if it has one.
std::optional<int> declaredDlpackDevice(py::handle obj) {
  if (!py::hasattr(obj, "__dlpack_device__")) return std::nullopt;
  py::tuple device = obj.attr("__dlpack_device__")();
  return device[0].cast<int>();
}

// Whether an object says its memory is not plain host memory. Such an object goes through DLPack or
// __cuda_array_interface__ even when it also offers the buffer protocol: CuPy 14 arrays do (for
// unified-memory systems) and refuse the request for device memory, and report their length in
// elements rather than bytes.
bool declaresDeviceMemory(py::handle obj) {
  if (py::hasattr(obj, "__cuda_array_interface__")) return true;
  const std::optional<int> device = declaredDlpackDevice(obj);
  return device && *device != kDLCPU;
}

// NumPy's ndarray, looked up once: its exact instances are host memory and take the buffer
// protocol straight away (the small-message path, where every attribute lookup shows).
bool isPlainNumpyArray(py::handle obj) {
  static PyTypeObject* ndarray = [] () -> PyTypeObject* {
    try {
      py::object type = py::module_::import("numpy").attr("ndarray");
      return reinterpret_cast<PyTypeObject*>(type.release().ptr());  // kept for the process
    } catch (const py::error_already_set&) {
      return nullptr;  // no NumPy: nothing is a NumPy array
    }
  }();
  return ndarray != nullptr && Py_TYPE(obj.ptr()) == ndarray;
}

// __dlpack__ with DLPack 1.x's versioned capsule where the producer speaks it (it carries the
// read-only flag), else the unversioned one. stream=-1 for device memory: the producer must not
// synchronise anything for us; the collective orders itself after the caller's stream
// (CommonOptions::stream).
py::capsule exportDlpack(py::handle source, bool onDevice) {
  py::object exporter = source.attr("__dlpack__");
  py::object capsule;
  try {
    capsule = onDevice ? exporter(py::arg("stream") = -1, py::arg("max_version") = py::make_tuple(1, 0))
                       : exporter(py::arg("max_version") = py::make_tuple(1, 0));
  } catch (const py::error_already_set& error) {
    // A producer from before DLPack 1.0 takes no max_version.
    if (!error.matches(PyExc_TypeError)) throw;
    capsule = onDevice ? exporter(py::arg("stream") = -1) : exporter();
  }
  return py::capsule(capsule);
}

ArrayView fromDlpack(py::handle obj, const char* name, bool writable) {
  py::object source = py::reinterpret_borrow<py::object>(obj);
  // torch refuses to export a tensor that requires grad; its detached view shares the memory.
  if (py::hasattr(source, "requires_grad") && source.attr("requires_grad").cast<bool>()) {
    source = source.attr("detach")();
  }
  bool onDevice = false;
  if (py::hasattr(source, "__dlpack_device__")) {
    py::tuple device = source.attr("__dlpack_device__")();
    const int deviceType = device[0].cast<int>();
    onDevice = deviceType == kDLCUDA || deviceType == kDLCUDAManaged;
    if (deviceType != kDLCPU && deviceType != kDLCUDAHost && !onDevice) {
      throw py::type_error(std::string(name) + " is in memory of DLPack device type " +
                           std::to_string(deviceType) +
                           "; ringcomm collectives take host memory and CUDA device memory");
    }
  }
  py::capsule capsule = exportDlpack(source, onDevice);
  DlpackView view = readDlpack(capsule);
  DataType type;
  switch ((view.code << 8) | view.bits) {
    case (0 << 8) | 8: type = DataType::Int8; break;
    case (1 << 8) | 8: type = declaresBool(obj) ? DataType::Bool : DataType::Uint8; break;
    case (6 << 8) | 8: type = DataType::Bool; break;  // kDLBool, one byte per element
    case (0 << 8) | 16: type = DataType::Int16; break;
    case (0 << 8) | 32: type = DataType::Int32; break;
    case (0 << 8) | 64: type = DataType::Int64; break;
    case (2 << 8) | 16: type = DataType::Float16; break;
    case (4 << 8) | 16: type = DataType::BFloat16; break;
    case (2 << 8) | 32: type = DataType::Float32; break;
    case (2 << 8) | 64: type = DataType::Float64; break;
    default: unsupportedType(obj, name);
  }
  if (view.lanes != 1) {
    throw py::type_error(std::string(name) + " has " + std::to_string(view.lanes) +
                         "-lane vector elements; ringcomm supports scalar " + kSupported);
  }
  size_t count = 1;
  for (int64_t extent : view.shape) count *= static_cast<size_t>(extent);
  if (count > 0 && !view.strides.empty()) {
    int64_t expected = 1;
    for (size_t i = view.shape.size(); i-- > 0;) {
      if (view.shape[i] != 1 && view.strides[i] != expected) {
        throw py::value_error(std::string(name) + " must be contiguous; call .contiguous() first");
      }
      expected *= view.shape[i];
    }
  }
  if (writable && view.readOnly) {
    throw py::value_error(std::string(name) + " is read-only, but this collective writes into it");
  }
  // The capsule goes out of scope here; the caller holds `obj`, which owns the memory.
  if (onDevice) noteDeviceArray(obj);
  return ArrayView{reinterpret_cast<void*>(view.data), count, type, onDevice};
}

// __cuda_array_interface__ (version 2 or 3): a dict with data = (pointer, read-only), shape,
// typestr, strides (None when C-contiguous).
ArrayView fromCudaArrayInterface(py::handle obj, const char* name, bool writable) {
  py::dict interface = obj.attr("__cuda_array_interface__");
  py::tuple data = interface["data"];
  const auto pointer = data[0].cast<uintptr_t>();
  const bool readOnly = data[1].cast<bool>();
  const std::string typestr = interface["typestr"].cast<std::string>();
  DataType type;
  size_t itemsize = 0;
  // The byte order character is '<' or '|' for every type ringcomm has on a little-endian GPU.
  if (!typestr.empty() && typestr[0] == '>') {
    throw py::type_error(std::string(name) + " is big-endian (" + typestr + "); ringcomm supports " +
                         kSupported);
  }
  const std::string kind = typestr.size() == 3 ? typestr.substr(1) : typestr;
  if (kind == "i1") { type = DataType::Int8; itemsize = 1; }
  else if (kind == "u1") { type = DataType::Uint8; itemsize = 1; }
  else if (kind == "b1") { type = DataType::Bool; itemsize = 1; }
  else if (kind == "i2") { type = DataType::Int16; itemsize = 2; }
  else if (kind == "i4") { type = DataType::Int32; itemsize = 4; }
  else if (kind == "i8") { type = DataType::Int64; itemsize = 8; }
  else if (kind == "f2") { type = DataType::Float16; itemsize = 2; }
  else if (kind == "f4") { type = DataType::Float32; itemsize = 4; }
  else if (kind == "f8") { type = DataType::Float64; itemsize = 8; }
  else {
    throw py::type_error(std::string(name) + " has typestr " + typestr + "; ringcomm supports " +
                         kSupported);
  }
  size_t count = 1;
  std::vector<size_t> shape;
  for (py::handle extent : py::tuple(interface["shape"])) {
    shape.push_back(extent.cast<size_t>());
    count *= shape.back();
  }
  if (interface.contains("strides") && !interface["strides"].is_none() && count > 0) {
    py::tuple strides = interface["strides"];
    size_t expected = itemsize;
    for (size_t i = shape.size(); i-- > 0;) {
      if (shape[i] != 1 && strides[i].cast<size_t>() != expected) {
        throw py::value_error(std::string(name) + " must be C-contiguous; make a contiguous copy");
      }
      expected *= shape[i];
    }
  }
  if (writable && readOnly) {
    throw py::value_error(std::string(name) + " is read-only, but this collective writes into it");
  }
  noteDeviceArray(obj);
  return ArrayView{reinterpret_cast<void*>(pointer), count, type, true};
}

}  // namespace

ArrayView viewArray(py::handle obj, const char* name, bool writable) {
  if (PyObject_CheckBuffer(obj.ptr()) && (isPlainNumpyArray(obj) || !declaresDeviceMemory(obj))) {
    Py_buffer buffer;
    const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &buffer, flags) != 0) explainBufferFailure(obj, name, writable);
    DataType type;
    const bool known = typeFromFormat(buffer.format, buffer.itemsize, &type);
    ArrayView view{buffer.buf, static_cast<size_t>(buffer.len / (buffer.itemsize ? buffer.itemsize : 1)), type};
    PyBuffer_Release(&buffer);
    if (!known) unsupportedType(obj, name);
    return view;
  }
  if (py::hasattr(obj, "__dlpack__")) return fromDlpack(obj, name, writable);
  if (py::hasattr(obj, "__cuda_array_interface__")) {
    return fromCudaArrayInterface(obj, name, writable);
  }
  throw py::type_error(std::string(name) +
                       " must be an array (NumPy, torch, CuPy, anything with __dlpack__, "
                       "__cuda_array_interface__ or the buffer protocol); got " +
                       std::string(py::str(py::type::of(obj).attr("__name__"))));
}

void takeCallDevice(CommonOptions& options) {
  options.deviceMemory = callDevice.device;
  options.stream = reinterpret_cast<void*>(callDevice.stream);
  callDevice = CallDevice{};
}

void startCall(std::optional<uintptr_t> stream) {
  callDevice = CallDevice{};
  if (stream) {
    callDevice.stream = *stream;
    callDevice.streamSet = true;
  }
}

void bindCallDevice(py::module_& m) {
  // Every collective's Python side calls this first, so nothing a failed call noted (a Python
  // error raised before it launched) carries over to this one.
  m.def("_set_call_stream", &startCall, py::arg("stream"),
      "Starts a collective's call on this thread: its cudaStream_t as an int, or None for the "
      "array library's current stream (private).");
  m.def("built_with_cuda", &builtWithCuda,
        "Whether this ringcomm was built with CUDA (RINGCOMM_BUILD_CUDA=ON).");
  // Registered last, so it runs first for every exception a binding raises: forget what the
  // failed call noted, then let the other translators convert the exception.
  py::register_exception_translator([](std::exception_ptr pointer) {
    callDevice = CallDevice{};
    if (pointer) std::rethrow_exception(pointer);
  });
}

}  // namespace ringcomm::bindings
