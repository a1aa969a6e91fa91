#include "ringcomm/types.h"

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

const char* toString(DataType type) {
  switch (type) {
    case DataType::Int8: return "int8";
    case DataType::Uint8: return "uint8";
    case DataType::Int16: return "int16";
    case DataType::Int32: return "int32";
    case DataType::Int64: return "int64";
    case DataType::Float16: return "float16";
    case DataType::BFloat16: return "bfloat16";
    case DataType::Float32: return "float32";
    case DataType::Float64: return "float64";
    case DataType::Bool: return "bool";
  }
  return "unknown";
}

const char* toString(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Adasum: return "adasum";
  }
  return "unknown";
}

const char* toString(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::Auto: return "auto";
    case Algorithm::Ring: return "ring";
    case Algorithm::Tree: return "tree";
    case Algorithm::Direct: return "direct";
    case Algorithm::Hierarchical: return "hierarchical";
  }
  return "unknown";
}

const char* toString(TransportKind kind) {
  switch (kind) {
    case TransportKind::Auto: return "auto";
    case TransportKind::Tcp: return "tcp";
    case TransportKind::Shm: return "shm";
    case TransportKind::Ucx: return "ucx";
  }
  return "unknown";
}

const char* toString(Compression compression) {
  switch (compression) {
    case Compression::None: return "none";
    case Compression::Float16: return "fp16";
    case Compression::BFloat16: return "bf16";
    case Compression::Int8: return "int8";
    case Compression::Float8: return "fp8";
  }
  return "unknown";
}

const char* toString(CudaPath path) {
  switch (path) {
    case CudaPath::Auto: return "auto";
    case CudaPath::Staged: return "staged";
    case CudaPath::Ipc: return "ipc";
  }
  return "unknown";
}

CudaPath parseCudaPath(const std::string& name) {
  for (CudaPath p : {CudaPath::Auto, CudaPath::Staged, CudaPath::Ipc}) {
    if (name == toString(p)) return p;
  }
  throw InvalidArgument("RINGCOMM_CUDA_PATH must be one of auto, staged, ipc; got '" + name + "'");
}

Compression parseCompression(const std::string& name) {
  for (Compression c : {Compression::None, Compression::Float16, Compression::BFloat16,
                        Compression::Int8, Compression::Float8}) {
    if (name == toString(c)) return c;
  }
  throw InvalidArgument("compression must be one of none, fp16, bf16, int8, fp8; got '" + name +
                        "'");
}

Algorithm parseAlgorithm(const std::string& name) {
  for (Algorithm a : {Algorithm::Auto, Algorithm::Ring, Algorithm::Tree, Algorithm::Direct,
                      Algorithm::Hierarchical}) {
    if (name == toString(a)) return a;
  }
  throw InvalidArgument("algorithm must be one of auto, ring, tree, direct, hierarchical; got '" +
                        name + "'");
}

TransportKind parseTransportKind(const std::string& name) {
  for (TransportKind k :
       {TransportKind::Auto, TransportKind::Tcp, TransportKind::Shm, TransportKind::Ucx}) {
    if (name == toString(k)) return k;
  }
  throw InvalidArgument("transport must be one of auto, tcp, shm, ucx; got '" + name + "'");
}

}  // namespace ringcomm
