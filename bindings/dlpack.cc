#include "dlpack.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace ringcomm::bindings {
namespace {

// The layout of dlpack.h (v0.8 and v1.x; DLTensor is identical in both).
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned*);
  uint64_t flags;
  DLTensor dl_tensor;
};
constexpr uint64_t kReadOnlyFlag = 1;

}  // namespace

DlpackView readDlpack(const pybind11::capsule& capsule) {
  const char* name = capsule.name();
  const DLTensor* tensor = nullptr;
  DlpackView view;
  if (name != nullptr && std::strcmp(name, "dltensor") == 0) {
    tensor = &static_cast<DLManagedTensor*>(capsule.get_pointer())->dl_tensor;
  } else if (name != nullptr && std::strcmp(name, "dltensor_versioned") == 0) {
    auto* versioned = static_cast<DLManagedTensorVersioned*>(capsule.get_pointer());
    tensor = &versioned->dl_tensor;
    view.readOnly = (versioned->flags & kReadOnlyFlag) != 0;
  } else {
    throw pybind11::type_error("expected a DLPack capsule ('dltensor'); got one named '" +
                               std::string(name ? name : "") + "' (already consumed?)");
  }
  view.data = reinterpret_cast<uintptr_t>(tensor->data) + tensor->byte_offset;
  view.deviceType = tensor->device.device_type;
  view.deviceId = tensor->device.device_id;
  view.code = tensor->dtype.code;
  view.bits = tensor->dtype.bits;
  view.lanes = tensor->dtype.lanes;
  for (int i = 0; i < tensor->ndim; ++i) {
    view.shape.push_back(tensor->shape[i]);
    if (tensor->strides != nullptr) view.strides.push_back(tensor->strides[i]);
  }
  return view;
}

}  // namespace ringcomm::bindings
