#include "tensors.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ringcomm::c10d_backend {
namespace {

std::optional<DataType> coreType(at::ScalarType type) {
  switch (type) {
    case at::kChar: return DataType::Int8;
    case at::kByte: return DataType::Uint8;
    case at::kBool: return DataType::Bool;
    case at::kShort: return DataType::Int16;
    case at::kInt: return DataType::Int32;
    case at::kLong: return DataType::Int64;
    case at::kHalf: return DataType::Float16;
    case at::kBFloat16: return DataType::BFloat16;
    case at::kFloat: return DataType::Float32;
    case at::kDouble: return DataType::Float64;
    default: return std::nullopt;
  }
}

const char* opName(::c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case ::c10d::ReduceOp::SUM: return "SUM";
    case ::c10d::ReduceOp::AVG: return "AVG";
    case ::c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case ::c10d::ReduceOp::MIN: return "MIN";
    case ::c10d::ReduceOp::MAX: return "MAX";
    case ::c10d::ReduceOp::BAND: return "BAND";
    case ::c10d::ReduceOp::BOR: return "BOR";
    case ::c10d::ReduceOp::BXOR: return "BXOR";
    case ::c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

}  // namespace

Reduction reductionFor(const at::Tensor& tensor, const ::c10d::ReduceOp& op,
                       const char* operation) {
  const auto kind = op.op_;
  std::optional<ReduceOp> core;
  switch (kind) {
    case ::c10d::ReduceOp::SUM: core = ReduceOp::Sum; break;
    case ::c10d::ReduceOp::AVG: core = ReduceOp::Avg; break;
    case ::c10d::ReduceOp::PRODUCT: core = ReduceOp::Prod; break;
    case ::c10d::ReduceOp::MIN: core = ReduceOp::Min; break;
    case ::c10d::ReduceOp::MAX: core = ReduceOp::Max; break;
    default: break;
  }
  TORCH_CHECK_VALUE(core.has_value(), "ringcomm ", operation, ": ReduceOp.", opName(kind),
                    " is not supported (SUM, AVG, PRODUCT, MIN and MAX are)");
  const at::ScalarType type = tensor.scalar_type();
  if (type == at::kBool) {
    // The core's bool is logical: SUM and MAX are or, PRODUCT and MIN and (gloo's results; NCCL
    // runs SUM as MAX of bytes). AVG is refused, as NCCL does.
    TORCH_CHECK_VALUE(*core != ReduceOp::Avg, "ringcomm ", operation,
                      ": ReduceOp.AVG of a bool tensor is not defined");
    return Reduction{DataType::Bool, *core};
  }
  if (at::isComplexType(type)) {
    TORCH_CHECK_VALUE(*core == ReduceOp::Sum || *core == ReduceOp::Avg, "ringcomm ", operation,
                      ": ReduceOp.", opName(kind), " of a complex tensor is not defined");
    const auto real = coreType(c10::toRealValueType(type));
    TORCH_CHECK_TYPE(real.has_value(), "ringcomm ", operation, ": dtype ", type,
                     " is not supported");
    return Reduction{*real, *core, true};
  }
  const auto element = coreType(type);
  TORCH_CHECK_TYPE(element.has_value(), "ringcomm ", operation, ": dtype ", type,
                   " is not supported for reductions (int8, uint8, int16, int32, int64, "
                   "float16, bfloat16, float32, float64, bool and complex are)");
  return Reduction{*element, *core};
}

Buffer reducible(const at::Tensor& tensor, const Reduction& reduction) {
  const size_t count = static_cast<size_t>(tensor.numel()) * (reduction.viewAsReal ? 2 : 1);
  return Buffer{tensor.data_ptr(), count, reduction.type};
}

Buffer movable(const at::Tensor& tensor) {
  if (auto type = coreType(tensor.scalar_type())) {
    return Buffer{tensor.data_ptr(), static_cast<size_t>(tensor.numel()), *type};
  }
  return Buffer{tensor.data_ptr(), static_cast<size_t>(tensor.nbytes()), DataType::Uint8};
}

size_t coreUnitsPerElement(const at::Tensor& tensor) {
  return coreType(tensor.scalar_type()) ? 1 : static_cast<size_t>(tensor.element_size());
}

void requireDense(const at::Tensor& tensor, const char* operation, const char* argument) {
  TORCH_CHECK_VALUE(tensor.defined(), "ringcomm ", operation, ": ", argument, " is undefined");
  TORCH_CHECK_VALUE(tensor.device().is_cpu() || tensor.device().is_cuda(), "ringcomm ", operation,
                    ": ", argument, " is on ", tensor.device(),
                    "; this backend handles CPU and CUDA tensors (pair it with another backend "
                    "for the device, e.g. backend=\"cpu:ringcomm,xpu:xccl\")");
  TORCH_CHECK_VALUE(tensor.layout() == at::kStrided, "ringcomm ", operation, ": ", argument,
                    " has layout ", tensor.layout(), "; only dense (strided) tensors are supported");
}

void requireDense(const std::vector<at::Tensor>& tensors, const char* operation,
                  const char* argument) {
  for (const auto& tensor : tensors) requireDense(tensor, operation, argument);
}

std::vector<c10::Device> DeviceContext::devices() const {
  if (!stream) return {};
  return {stream->device()};
}

DeviceContext deviceContextOf(const std::vector<at::Tensor>& inputs,
                              const std::vector<at::Tensor>& outputs, const char* operation) {
  std::optional<c10::Device> device;
  for (const auto* list : {&inputs, &outputs}) {
    for (const auto& tensor : *list) {
      if (!tensor.defined() || !tensor.is_cuda()) continue;
      TORCH_CHECK_VALUE(!device || *device == tensor.device(), "ringcomm ", operation,
                        ": tensors on ", *device, " and ", tensor.device(),
                        "; one operation's CUDA tensors must share a device");
      device = tensor.device();
    }
  }
  DeviceContext context;
  if (device) {
    context.stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(*device);
  }
  return context;
}

void requireCount(const std::vector<at::Tensor>& tensors, size_t expected, const char* operation,
                  const char* argument) {
  TORCH_CHECK_VALUE(tensors.size() == expected, "ringcomm ", operation, ": ", argument,
                    " must hold ", expected, " tensor(s); got ", tensors.size());
}

void requireDensePair(const at::Tensor& output, const at::Tensor& input, const char* operation) {
  requireDense(input, operation, "input");
  requireDense(output, operation, "output");
  requireOutputDtype(output, input, operation);
}

void requireOutputDtype(const at::Tensor& output, const at::Tensor& input, const char* operation) {
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(), "ringcomm ", operation,
                   ": output dtype ", output.scalar_type(), " differs from input dtype ",
                   input.scalar_type());
}

void requireWorldSizeTimes(const at::Tensor& whole, const char* wholeName, const at::Tensor& part,
                           const char* partName, int64_t size, const char* operation) {
  TORCH_CHECK_VALUE(whole.numel() == size * part.numel(), "ringcomm ", operation, ": ", wholeName,
                    " must hold world size (", size, ") x ", partName, " elements (", part.numel(),
                    "); got ", whole.numel());
}

void requireSameShape(const std::vector<at::Tensor>& tensors, const at::Tensor& like,
                      const char* operation, const char* argument) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    TORCH_CHECK_TYPE(tensors[i].scalar_type() == like.scalar_type(), "ringcomm ", operation, ": ",
                     argument, "[", i, "] has dtype ", tensors[i].scalar_type(), "; expected ",
                     like.scalar_type());
    TORCH_CHECK_VALUE(tensors[i].numel() == like.numel(), "ringcomm ", operation, ": ", argument,
                      "[", i, "] has ", tensors[i].numel(), " elements; expected ", like.numel());
  }
}

void requireOneList(const std::vector<std::vector<at::Tensor>>& lists, const char* who,
                    const char* side, const char* operation) {
  TORCH_CHECK_VALUE(lists.size() == 1, "ringcomm ", operation, ": ", who, " one ", side,
                    " list; got ", lists.size());
}

void requireRankList(const std::vector<at::Tensor>& list, const at::Tensor& like, int64_t size,
                     const char* side, const char* operation) {
  requireDense(list, operation, side);
  requireCount(list, static_cast<size_t>(size), operation, (std::string(side) + " list").c_str());
  requireSameShape(list, like, operation, side);
}

std::vector<at::Tensor> rootList(const std::vector<at::Tensor>& tensors, const char* side,
                                 const std::vector<std::vector<at::Tensor>>& lists,
                                 const char* listSide, int64_t rank, int64_t root, int64_t size,
                                 const char* operation) {
  requireCount(tensors, 1, operation, (std::string(side) + " tensors").c_str());
  requireDense(tensors, operation, side);
  if (rank != root) {
    TORCH_CHECK_VALUE(lists.empty() || lists[0].empty(), "ringcomm ", operation,
                      ": only the root (rank ", root, ") takes an ", listSide, " list");
    return {};
  }
  requireOneList(lists, "the root needs", listSide, operation);
  requireRankList(lists[0], tensors[0], size, listSide, operation);
  return lists[0];
}

void requireCoalescedPair(const at::Tensor& input, const at::Tensor& output, Whole whole,
                          size_t index, int64_t size, const char* operation) {
  requireDense(input, operation, "input");
  requireDense(output, operation, "output");
  const bool outputWhole = whole == Whole::Output;
  const at::Tensor& wholeTensor = outputWhole ? output : input;
  const at::Tensor& part = outputWhole ? input : output;
  TORCH_CHECK_VALUE(wholeTensor.numel() == size * part.numel() &&
                        output.scalar_type() == input.scalar_type(),
                    "ringcomm ", operation, ": ", outputWhole ? "output " : "input ", index,
                    " must hold world size x ", outputWhole ? "input " : "output ", index,
                    " elements of its dtype");
}

at::Tensor Staging::inOut(const at::Tensor& tensor) {
  if (tensor.is_contiguous()) return tensor;
  at::Tensor staging = tensor.contiguous();
  pairs_.emplace_back(tensor, staging);
  return staging;
}

void Staging::copyBack() const {
  for (const auto& [original, staging] : pairs_) original.copy_(staging);
}

at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return at::empty({0});
  std::vector<at::Tensor> rows;
  rows.reserve(tensors.size());
  for (const auto& tensor : tensors) rows.push_back(tensor.reshape({-1}));
  return at::cat(rows);
}

void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (const auto& tensor : tensors) {
    const int64_t n = tensor.numel();
    tensor.copy_(flat.narrow(0, offset, n).view(tensor.sizes()));
    offset += n;
  }
}

}  // namespace ringcomm::c10d_backend
