// ringcomm._core: type conversion, the GIL released around every blocking call, and C++ errors
// turned into Python exceptions in one place (errors.cc). No logic: that lives in src/ and
// ringcomm/. One file per part of the API (parts.h), registered here in order.
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "parts.h"
#include "tensor_queue.h"

PYBIND11_MODULE(_core, m) {
  using namespace ringcomm::bindings;
  m.doc() = "ringcomm's C++ core (private: use the ringcomm package)";
  bindErrors(m);
  // Each enum before the first signature that names it, so that signatures (and the stubs made
  // from them, ringcomm/_core.pyi) name the Python type, not the C++ one.
  bindEnums(m);
  bindConfig(m);
  bindObservability(m);
  bindStores(m);
  bindCommunicator(m);
  bindTensorQueue(m);
  bindCallDevice(m);  // last of those that translate exceptions: its translator must run first
  bindArrayFunctions(m);
}
