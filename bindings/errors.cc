// The exception types of ringcomm._core and the one place C++ errors become them.
#include <pybind11/pybind11.h>

#include <exception>
#include <string>

#include "parts.h"
#include "ringcomm/errors.h"

namespace py = pybind11;

namespace ringcomm::bindings {
namespace {

PyObject* makeException(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string qualified = std::string("ringcomm.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(type));
  return type;
}

// A type with two bases: the base of its kind in ringcomm, and the built-in one Python code
// already catches (TimeoutError, ConnectionError, ValueError).
PyObject* makeException(py::module_& m, const char* name, PyObject* base, PyObject* builtin,
                        const char* doc) {
  PyObject* bases = PyTuple_Pack(2, base, builtin);
  PyObject* type = makeException(m, name, bases, doc);
  Py_DECREF(bases);
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

void bindErrors(py::module_& m) {
  PyObject* baseError = makeException(m, "RingcommError", PyExc_RuntimeError,
                                      "Base class of ringcomm's errors.");
  PyObject* peerError = makeException(m, "PeerError", baseError,
                                      "A collective failed because of a peer; see .peer, .rank, .operation, .elapsed.");
  PyObject* timeoutError = makeException(m, "TimeoutError", peerError, PyExc_TimeoutError,
                                         "A deadline passed while waiting for the peer named in the message.");
  PyObject* transportError = makeException(m, "TransportError", peerError, PyExc_ConnectionError,
                                           "A peer died, aborted or closed its connection.");
  PyObject* mismatchError = makeException(m, "MismatchError", peerError,
                                          "Ranks called different collectives, or with different sizes or types.");
  // Also a ValueError, as Python's operations on a closed file are.
  PyObject* closedError = makeException(m, "CommunicatorClosed", baseError, PyExc_ValueError,
                                        "The communicator was shut down or poisoned by an earlier failure.");

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
}

}  // namespace ringcomm::bindings
