#include "ringcomm/types.h"

#include "common/data_type_names.h"
#include "common/enum_names.h"
#include "ringcomm/errors.h"

namespace ringcomm {

size_t elementSize(DataType type) {
  switch (type) {
    case DataType::Int8:
    case DataType::Uint8:
    case DataType::Bool:
      return 1;
    case DataType::Int16:
    case DataType::Float16:
    case DataType::BFloat16:
      return 2;
    case DataType::Int32:
    case DataType::Float32:
      return 4;
    case DataType::Int64:
    case DataType::Float64:
      return 8;
  }
  throw InvalidArgument("unknown DataType");
}

namespace {

// Each enum's names, in the order the parsers' errors list them (common/enum_names.h); DataType's
// are in common/data_type_names.h.
constexpr EnumName<ReduceOp> kReduceOpNames[] = {
    {ReduceOp::Sum, "sum"}, {ReduceOp::Avg, "avg"},   {ReduceOp::Min, "min"},
    {ReduceOp::Max, "max"}, {ReduceOp::Prod, "prod"}, {ReduceOp::Adasum, "adasum"},
};
constexpr EnumName<Algorithm> kAlgorithmNames[] = {
    {Algorithm::Auto, "auto"},     {Algorithm::Ring, "ring"},
    {Algorithm::Tree, "tree"},     {Algorithm::Direct, "direct"},
    {Algorithm::Hierarchical, "hierarchical"},
};
constexpr EnumName<TransportKind> kTransportKindNames[] = {
    {TransportKind::Auto, "auto"}, {TransportKind::Tcp, "tcp"},
    {TransportKind::Shm, "shm"},   {TransportKind::Ucx, "ucx"},
};
constexpr EnumName<Compression> kCompressionNames[] = {
    {Compression::None, "none"}, {Compression::Float16, "fp16"}, {Compression::BFloat16, "bf16"},
    {Compression::Int8, "int8"}, {Compression::Float8, "fp8"},
};
constexpr EnumName<CudaPath> kCudaPathNames[] = {
    {CudaPath::Auto, "auto"}, {CudaPath::Staged, "staged"}, {CudaPath::Ipc, "ipc"},
};

}  // namespace

const char* toString(DataType type) {
  return nameIn(kDataTypeNames, type);
}

const char* toString(ReduceOp op) {
  return nameIn(kReduceOpNames, op);
}

const char* toString(Algorithm algorithm) {
  return nameIn(kAlgorithmNames, algorithm);
}

const char* toString(TransportKind kind) {
  return nameIn(kTransportKindNames, kind);
}

const char* toString(Compression compression) {
  return nameIn(kCompressionNames, compression);
}

const char* toString(CudaPath path) {
  return nameIn(kCudaPathNames, path);
}

CudaPath parseCudaPath(const std::string& name) {
  return parseIn(kCudaPathNames, name, "RINGCOMM_CUDA_PATH");
}

Compression parseCompression(const std::string& name) {
  return parseIn(kCompressionNames, name, "compression");
}

Algorithm parseAlgorithm(const std::string& name) {
  return parseIn(kAlgorithmNames, name, "algorithm");
}

TransportKind parseTransportKind(const std::string& name) {
  return parseIn(kTransportKindNames, name, "transport");
}

}  // namespace ringcomm
