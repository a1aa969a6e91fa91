// Element types, reduction operators and algorithm/transport choices shared by the whole API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ringcomm/export.h"

namespace ringcomm {

// The numeric values travel in messages (collective tags, the tensor queue's announcements), so
// new types are appended, never inserted.
enum class DataType : uint8_t {
  Int8,
  Uint8,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  Int16,
  // One byte per element, 0 is false and anything else true (results are 0 or 1). Reduced
  // logically, as torch.distributed's gloo backend does (gloo::sum<bool> is a + b stored in a
  // bool): Sum and Max are logical or, Prod and Min logical and. Avg is not defined.
  Bool,
};

enum class ReduceOp : uint8_t {
  Sum,
  Avg,  // sum, then divide by the world size (integer types: truncating division; not for Bool)
  Min,
  Max,
  Prod,
  // Adaptive summation (Maleki et al., "Scaling Distributed Training with Adaptive Summation",
  // MLSys 2021), as Horovod's op=hvd.Adasum computes it: pairs of vectors a, b combine into
  // (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b, up a binary tree over the ranks
  // (src/algorithms/adasum.h). A sum for orthogonal vectors, an average for parallel ones. Not
  // element-wise, so all-reduce only, floating-point types only, and a power-of-two rank count.
  Adasum,
};

// Which schedule an all-reduce uses. Auto asks the cost model (src/tuning).
enum class Algorithm : uint8_t {
  Auto,
  Ring,    // chunked, pipelined reduce-scatter + all-gather around a ring
  Tree,    // recursive halving + recursive doubling (Rabenseifner), any rank count
  Direct,  // shared memory only: each rank reduces its slice straight from every peer's staging
  // Across hosts: reduce within each host, move each host's share across the network once (every
  // local rank a slice, over its own connection), share within the host (hierarchical.h).
  Hierarchical,
};

// The wire format of a compressed all-reduce of float32 (src/codec): values travel narrow, partial
// sums are accumulated in float32 at every hop.
//   Float16, BFloat16: each value as a 16-bit float.
//   Int8:   per block of 32 values, a bfloat16 scale (the block's largest magnitude / 127) and 32
//           int8 values.
//   Float8: per block of 32 values, a power-of-two scale (an 8-bit exponent) and 32 e4m3 floats,
//           as the OCP MX format mxfp8.
enum class Compression : uint8_t { None, Float16, BFloat16, Int8, Float8 };

// Which transport carries point-to-point traffic. Auto: shared memory within a host, TCP between.
enum class TransportKind : uint8_t { Auto, Tcp, Shm, Ucx };

// How an all-reduce of device buffers travels (the other collectives always stage).
//   Staged: chunks copied to pinned host memory, the host schedule, copied back, pipelined.
//   Ipc:    every rank on one host: each reduces its slice straight from its peers' device
//           buffers (CUDA IPC), then copies the others' slices; no host round trip.
//   Auto:   Ipc when every rank is on this host and the message is large, else Staged.
// Sends and receives of device buffers go to a network that takes device memory (UCX with CUDA)
// as they are, except under Staged; elsewhere they are staged whole.
enum class CudaPath : uint8_t { Auto, Staged, Ipc };

// Whether this library was built with CUDA (RINGCOMM_BUILD_CUDA=ON): only then do collectives
// take device memory.
RINGCOMM_API bool builtWithCuda();

RINGCOMM_API size_t elementSize(DataType type);
RINGCOMM_API const char* toString(DataType type);
RINGCOMM_API const char* toString(ReduceOp op);
RINGCOMM_API const char* toString(Algorithm algorithm);
RINGCOMM_API const char* toString(TransportKind kind);
RINGCOMM_API const char* toString(Compression compression);
RINGCOMM_API const char* toString(CudaPath path);

// Rounds `count` float32 values in place to what `compression` carries on the wire, as one run
// (src/codec): what they lose when sent alone. Error feedback keeps the difference and adds it to
// the next step's values (ringcomm.torch's DistributedOptimizer). None leaves them as they are.
RINGCOMM_API void roundToWire(float* values, size_t count, Compression compression);

// Error feedback in one pass over memory: values += residual; then values are rounded as by
// roundToWire and residual becomes what the rounding took away. The same float32 operations, in
// the same order, as doing those steps one after another; except that where what the rounding
// took away is not finite (a NaN or an infinity among the values) the residual becomes 0, so that
// one step's overflow does not make every later step's values non-finite.
RINGCOMM_API void feedBackError(float* values, float* residual, size_t count,
                                Compression compression);

// Parsers used by the configuration and bindings; they throw InvalidArgument naming the value.
RINGCOMM_API Algorithm parseAlgorithm(const std::string& name);
RINGCOMM_API TransportKind parseTransportKind(const std::string& name);
RINGCOMM_API Compression parseCompression(const std::string& name);
RINGCOMM_API CudaPath parseCudaPath(const std::string& name);

}  // namespace ringcomm
