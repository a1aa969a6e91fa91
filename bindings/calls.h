// What the bindings of blocking calls share: timeouts in seconds, a collective launched with the
// GIL released, and the checks of an output array against its input.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "arrays.h"
#include "ringcomm/communicator.h"
#include "ringcomm/config.h"
#include "ringcomm/types.h"
#include "ringcomm/work.h"

namespace ringcomm::bindings {

// ringcomm._core.Communicator, as the files that give it methods see it.
using CommunicatorClass = pybind11::class_<Communicator, std::shared_ptr<Communicator>>;

// A communicator handed to Python. Python drops its last reference with the GIL held, and the
// destructor shuts the communicator down, which waits for threads that may need the GIL
// themselves: a store written in Python, called by the thread that records a failure, hung
// `ringcomm-bench init`'s survivors so (a fresh-clone CI run, 1 in many). So the reference
// Python holds lets the GIL go before it lets the communicator go.
inline std::shared_ptr<Communicator> heldByPython(std::shared_ptr<Communicator> comm) {
  if (!comm) return comm;
  Communicator* raw = comm.get();
  return std::shared_ptr<Communicator>(raw, [kept = std::move(comm)](Communicator*) mutable {
    if (PyGILState_Check()) {
      pybind11::gil_scoped_release release;
      kept.reset();
    } else {
      kept.reset();
    }
  });
}

// A timeout= argument: 0 means the default (the communicator's, or none for a wait).
inline std::chrono::milliseconds toMilliseconds(double seconds) {
  return timeoutFromSeconds(seconds, "timeout", true);
}

// Runs a collective: blocking calls run (usually on this thread) and wait with the GIL released;
// asynchronous ones return the Work at once.
template <typename Options, typename Method>
pybind11::object launch(Communicator& comm, Options options, bool blocking, Method method,
                        const std::string& name) {
  options.runInCaller = blocking;
  options.name = name;
  takeCallDevice(options);
  WorkPtr work;
  {
    pybind11::gil_scoped_release release;
    work = (comm.*method)(options);
    if (blocking) work->wait();
  }
  if (blocking) return pybind11::none();
  return pybind11::cast(work);
}

// TypeError where `out` (b) holds another type than `x` (a).
inline void checkSameType(const ArrayView& a, const ArrayView& b) {
  if (a.type != b.type) {
    throw pybind11::type_error(std::string("out has dtype ") + toString(b.type) + " but x has " +
                               toString(a.type));
  }
}

// ValueError where `view`, named `what`, does not hold `expected` elements.
inline void checkCount(const ArrayView& view, size_t expected, const char* what) {
  if (view.count != expected) {
    throw pybind11::value_error(std::string(what) + " must hold " + std::to_string(expected) +
                                " elements; it holds " + std::to_string(view.count));
  }
}

}  // namespace ringcomm::bindings
