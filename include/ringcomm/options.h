// One options struct per collective, each a plain aggregate with defaults and validate().
// Buffers are raw pointers: the caller keeps them alive until the collective's Work completes.
// A zero timeout means "the communicator's default".
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ringcomm/export.h"
#include "ringcomm/types.h"

namespace ringcomm {

// The rendezvous store (ringcomm/store.h, the bootstrap's): a JoinOptions holds one; this layer
// does not call it.
class Store;

struct CommonOptions {
  std::chrono::milliseconds timeout{0};
  // The caller will wait for the Work at once: run on its thread when the engine is idle,
  // saving two thread hand-offs (most of a small collective's latency).
  bool runInCaller = false;
  // What the caller calls the data (e.g. a gradient's parameter name): error messages quote it.
  std::string name;
  // CUDA. deviceMemory: some buffer may be in device memory; the core then asks CUDA about each
  // pointer (cudaPointerGetAttributes) and stages or maps the device ones (src/device).
  // false (the default): every buffer is host memory and the core never calls CUDA, so a process
  // that uses no GPU never creates a CUDA context. A library built without CUDA
  // (RINGCOMM_BUILD_CUDA=OFF) refuses deviceMemory with InvalidArgument.
  bool deviceMemory = false;
  // The caller's cudaStream_t for device buffers (nullptr = the legacy default stream). The
  // collective starts after the work queued on it before the call, and work the caller queues on
  // it after the Work completes runs after the collective's device writes: Work::wait() returns
  // once the device work is ordered on this stream, not once it has run (as NCCL's Work does).
  // Nothing synchronises the whole device.
  void* stream = nullptr;
};

// output may equal input (in place). count elements in each.
struct RINGCOMM_API AllreduceOptions : CommonOptions {
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;
  DataType type = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  Algorithm algorithm = Algorithm::Auto;
  // fp16/bf16 on the wire, float32 accumulation at every hop: float32 sum/avg only, ring schedule.
  Compression compression = Compression::None;
  // Multiply the input before reducing (e.g. 1/size to keep fp16 partial sums from overflowing)
  // and the result after; 1.0 = untouched. float32 and float64 only.
  double prescale = 1.0;
  double postscale = 1.0;
  // ReduceOp::Adasum only: the buffer holds several tensors back to back (a fused all-reduce),
  // each of these many elements, summing to count; each is combined with coefficients of its
  // own, as if reduced alone. Empty: one tensor of count elements.
  std::vector<size_t> tensorCounts;
  void validate() const;
};

// input holds size * count elements; rank r receives the reduced block r (count elements).
struct RINGCOMM_API ReduceScatterOptions : CommonOptions {
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;  // per rank
  DataType type = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  void validate() const;
};

// input holds count elements; output holds size * count, block r from rank r.
struct RINGCOMM_API AllgatherOptions : CommonOptions {
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;  // per rank
  DataType type = DataType::Float32;
  void validate() const;
};

struct RINGCOMM_API BroadcastOptions : CommonOptions {
  void* buffer = nullptr;
  size_t count = 0;
  DataType type = DataType::Float32;
  int root = 0;
  void validate(int size) const;
};

// output is used on the root only (may equal input).
struct RINGCOMM_API ReduceOptions : CommonOptions {
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;
  DataType type = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  void validate(int size) const;
};

// input and output each hold size * count elements; block j of rank i's input lands in block i of
// rank j's output.
struct RINGCOMM_API AlltoallOptions : CommonOptions {
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;  // per peer
  DataType type = DataType::Float32;
  void validate() const;
};

// Uneven all-to-all: rank i sends sendCounts[j] elements from input + sendOffsets[j] to rank j,
// which receives them at output + recvOffsets[i] (recvCounts[i] elements). Counts and offsets are
// in elements, one entry per rank; rank j's sendCounts[i] must equal rank i's recvCounts[j].
struct RINGCOMM_API AlltoallvOptions : CommonOptions {
  const void* input = nullptr;
  void* output = nullptr;
  std::vector<size_t> sendCounts;
  std::vector<size_t> sendOffsets;
  std::vector<size_t> recvCounts;
  std::vector<size_t> recvOffsets;
  DataType type = DataType::Float32;
  void validate(int size, int rank) const;
};

// The root's output holds size * count elements.
struct RINGCOMM_API GatherOptions : CommonOptions {
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;
  DataType type = DataType::Float32;
  int root = 0;
  void validate(int size, int rank) const;
};

// The root's input holds size * count elements.
struct RINGCOMM_API ScatterOptions : CommonOptions {
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;
  DataType type = DataType::Float32;
  int root = 0;
  void validate(int size, int rank) const;
};

struct BarrierOptions : CommonOptions {};

// Point-to-point. Messages between a pair of ranks match in the order they are posted; the tag
// is checked, not searched for (a different tag is a MismatchError).
struct RINGCOMM_API SendOptions : CommonOptions {
  const void* buffer = nullptr;
  size_t bytes = 0;
  int peer = 0;
  int tag = 0;
  // What the bytes are, when known: a receive of another element type is a MismatchError on the
  // receiving rank (instead of the bits read as the wrong type). None: bytes, unchecked.
  std::optional<DataType> type;
  void validate(int size, int rank) const;
};

// A receive from any rank: the first message with this tag from whichever rank sends one.
constexpr int kAnySource = -1;

struct RINGCOMM_API RecvOptions : CommonOptions {
  void* buffer = nullptr;
  size_t bytes = 0;
  int peer = 0;  // or kAnySource
  int tag = 0;
  std::optional<DataType> type;  // as SendOptions::type
  // Where to write the sender's rank before the Work completes (useful with kAnySource).
  int* source = nullptr;
  void validate(int size, int rank) const;
};

// Communicator::grow: the members admit the processes that asked to join (Communicator::join).
struct RINGCOMM_API GrowOptions {
  // Wait, by the timeout, until at least this many newcomers have asked (a replacement the
  // launcher started); 0: admit whoever waits now, and return at once where nobody does.
  int expect = 0;
  std::chrono::milliseconds timeout{0};
  void validate() const;
};

// Communicator::join: how a new process finds a running communicator. Any member's address
// will do; the members publish theirs where the launcher's store keeps them (publishDoor).
struct RINGCOMM_API JoinOptions {
  // Members' addresses, "host:port" (Communicator::address()), tried in order.
  std::vector<std::string> addresses;
  // Or a store and a key in it where the members keep their addresses (publishDoor): read
  // afresh whenever the addresses known fail, since the members may have changed.
  std::shared_ptr<Store> board;
  std::string doorKey;
  std::chrono::milliseconds timeout{0};  // 0: Config::timeout
  void validate() const;
};

}  // namespace ringcomm
