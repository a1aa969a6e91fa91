// Python's global interpreter lock (GIL) around the backend's teardown.
//
// Shutting the communicator down joins the engine's threads, and those may need the GIL to finish
// the work they are completing: a torch Future runs its Python callbacks on the thread that
// completes it, and when a Work goes, dropping its tensors takes the GIL wherever a tensor has a
// Python object (TensorImpl::decref_pyobject). A thread that joins them holding the GIL waits
// forever. Python holds it when it drops the last reference to a backend: pybind11 destroys the
// holder inside tp_dealloc, and ours is a plain intrusive_ptr (torch's own backends have a holder
// that releases the GIL first). The engine threads cannot do without the GIL, so the teardown
// lets it go.
#pragma once

#include <Python.h>

namespace ringcomm::c10d_backend {

// Releases the GIL for its lifetime if this thread holds it; does nothing otherwise (an engine
// thread, a C++ caller, an interpreter that is not running: not yet, or finalizing, when Python
// ends any other thread that asks for the GIL).
class GilReleased {
 public:
  GilReleased() : saved_(holdsGil() ? PyEval_SaveThread() : nullptr) {}
  ~GilReleased() {
    if (saved_ != nullptr) PyEval_RestoreThread(saved_);
  }
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

 private:
  // PyGILState_Check() says true where there is no interpreter: ask whether there is one first.
  static bool holdsGil() { return Py_IsInitialized() && PyGILState_Check(); }

  PyThreadState* saved_;
};

}  // namespace ringcomm::c10d_backend
