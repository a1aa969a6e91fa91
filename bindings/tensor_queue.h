// ringcomm._core.TensorQueue: Horovod's named, negotiated, fused collectives (tensor_queue.h).
#pragma once

#include <pybind11/pybind11.h>

namespace ringcomm::bindings {

void bindTensorQueue(pybind11::module_& m);

}  // namespace ringcomm::bindings
