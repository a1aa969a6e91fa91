// The parts of ringcomm._core, each registered by a function of its own file; module.cc calls
// them in the order below (types before the signatures that name them).
#pragma once

// Every part sees the same type casters (pybind11 asks that each translation unit include the
// same ones): durations, and the standard containers.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "calls.h"

namespace ringcomm::bindings {

// errors.cc: the exception types (ringcomm.RingcommError...), and C++ errors turned into them.
void bindErrors(pybind11::module_& m);
// enums.cc: LogLevel, DataType, ReduceOp, Algorithm, Compression, TransportKind, their parsers.
void bindEnums(pybind11::module_& m);
// config.cc: Config, the configuration read from the environment.
void bindConfig(pybind11::module_& m);
// observability.cc: the log, the Horovod timeline, and what this build is.
void bindObservability(pybind11::module_& m);
// stores.cc: Store (Python may implement it), HashStore, FileStore, PrefixStore, TcpStore,
// TcpStoreServer.
void bindStores(pybind11::module_& m);
// communicator.cc: Work, and the Communicator's life and membership; its collectives come from
// collectives.cc.
void bindCommunicator(pybind11::module_& m);
void bindCollectives(CommunicatorClass& communicator);
// array_functions.cc: functions on arrays: the wire format's rounding, error feedback, the views
// the Python layer asks for, shared buffers.
void bindArrayFunctions(pybind11::module_& m);

}  // namespace ringcomm::bindings
