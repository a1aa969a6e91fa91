// ringcomm._core's stores: the Store interface (which Python may implement), and the store
// kinds of include/ringcomm/store.h.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "calls.h"
#include "parts.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"

namespace py = pybind11;

namespace ringcomm::bindings {
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
  // Optional in Python: without try_get_many, one get() a key (Store's default).
  std::vector<std::optional<Bytes>> tryGetMany(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds within) override {
    py::gil_scoped_acquire gil;
    py::function override = py::get_override(static_cast<const Store*>(this), "try_get_many");
    if (!override) {
      py::gil_scoped_release release;
      return Store::tryGetMany(keys, within);
    }
    std::vector<std::optional<Bytes>> values;
    try {
      for (const py::handle value : override(keys, within.count() / 1000.0)) {
        if (value.is_none()) {
          values.emplace_back();
        } else {
          const std::string text = value.cast<std::string>();
          values.emplace_back(Bytes(text.begin(), text.end()));
        }
      }
    } catch (const py::error_already_set&) {
      values.clear();  // never throws, as Store::tryGetMany: nothing found
    }
    values.resize(keys.size());
    return values;
  }
};

}  // namespace

void bindStores(py::module_& m) {
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
      }, py::arg("key"), py::arg("delta"))
      .def("try_get_many", [](Store& s, const std::vector<std::string>& keys, double within) {
        std::vector<std::optional<Bytes>> values;
        {
          py::gil_scoped_release release;
          values = s.tryGetMany(keys, toMilliseconds(within));
        }
        py::list found;
        for (const std::optional<Bytes>& value : values) {
          if (value) {
            found.append(py::bytes(reinterpret_cast<const char*>(value->data()), value->size()));
          } else {
            found.append(py::none());
          }
        }
        return found;
      }, py::arg("keys"), py::arg("within") = 1.0,
      "Each key's value, or None where it is missing or the store did not answer within "
      "`within` seconds: one round trip for a TcpStore. Never raises.");
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
}

}  // namespace ringcomm::bindings
