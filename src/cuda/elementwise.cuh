// How every kernel in src/cuda walks its arrays: one grid-stride kernel template that gives each
// thread 16-byte vectors where it can and single elements where it must, and the host side that
// checks arguments, plans the split and launches on the caller's stream.
//
// An "Elements" type describes one kernel: the arrays it touches (arrays(): each named, so that
// the launch checks them all and says which one is bad) and what happens to one element
// (scalar(i)) and to kVector elements starting at i (vector(i), whose loads and stores are 16-byte
// aligned). 16-byte accesses (LDG.128 / STG.128) move the most bytes per instruction; with them a
// memory-bound kernel needs fewer instructions in flight to keep HBM busy.
//
// The split: an element offset `head` (below kVector) after which every array is 16-byte
// aligned, then whole vectors, then a scalar tail. Arrays whose misalignments disagree (a buffer
// at + 1 element next to one at + 0) have no such offset; then every element goes the scalar way,
// which is slower but correct.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "ringcomm/errors.h"
#include "ringcomm/types.h"

namespace ringcomm::cuda::detail {

constexpr size_t kVectorBytes = 16;

// 256 threads a block, and at most 8 blocks per SM at once (2048 threads, the most an SM holds on
// sm_80 and sm_90): enough threads in flight to cover memory latency, and a grid that a
// grid-stride loop can sweep any count with. Textbook values for streaming kernels, not tuned
// here (no GPU was at hand when this was written).
constexpr int kThreadsPerBlock = 256;
constexpr int kBlocksPerSm = 8;

// One array a kernel reads or writes: its name in error messages (the parameter's), where it
// starts, and its element size.
struct ArrayRef {
  const char* name;
  const void* address;
  size_t elementBytes;
};

struct Split {
  size_t head = 0;     // scalar elements before the first vector
  size_t vectors = 0;  // whole vectors after them; the rest is a scalar tail
};

// The smallest head after which every array is 16-byte aligned, or no vectors at all.
// kVector * elementBytes is a multiple of 16 for every array: once aligned, every vector is.
template <size_t N>
Split splitForVectors(const std::array<ArrayRef, N>& arrays, size_t count, size_t kVector) {
  for (size_t head = 0; head < kVector && head < count; ++head) {
    bool aligned = true;
    for (const ArrayRef& array : arrays) {
      const uintptr_t at = reinterpret_cast<uintptr_t>(array.address) + head * array.elementBytes;
      aligned = aligned && at % kVectorBytes == 0;
    }
    if (aligned) return Split{head, (count - head) / kVector};
  }
  return Split{};
}

// 16-byte aligned vector loads and stores of N elements (N * sizeof(T), a multiple of 16 bytes).
template <typename T, int N>
__device__ __forceinline__ void loadVector(const T* at, T (&values)[N]) {
  static_assert(N * sizeof(T) % kVectorBytes == 0, "whole 16-byte vectors only");
  constexpr int kPerLoad = static_cast<int>(kVectorBytes / sizeof(T));
#pragma unroll
  for (int k = 0; k < N / kPerLoad; ++k) {
    const uint4 raw = reinterpret_cast<const uint4*>(at)[k];
    memcpy(values + k * kPerLoad, &raw, kVectorBytes);
  }
}

template <typename T, int N>
__device__ __forceinline__ void storeVector(T* at, const T (&values)[N]) {
  static_assert(N * sizeof(T) % kVectorBytes == 0, "whole 16-byte vectors only");
  constexpr int kPerLoad = static_cast<int>(kVectorBytes / sizeof(T));
#pragma unroll
  for (int k = 0; k < N / kPerLoad; ++k) {
    uint4 raw;
    memcpy(&raw, values + k * kPerLoad, kVectorBytes);
    reinterpret_cast<uint4*>(at)[k] = raw;
  }
}

// The vectors first (most of the work, in order across the grid so that neighbouring threads touch
// neighbouring memory), then head and tail elements, which fit in the first threads.
template <typename Elements>
__global__ void __launch_bounds__(kThreadsPerBlock)
    elementwiseKernel(Elements elements, size_t count, Split split) {
  constexpr size_t kVector = Elements::kVector;
  const size_t thread = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t threads = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t v = thread; v < split.vectors; v += threads) {
    elements.vector(split.head + v * kVector);
  }
  const size_t tailStart = split.head + split.vectors * kVector;
  const size_t scalars = count - split.vectors * kVector;
  for (size_t s = thread; s < scalars; s += threads) {
    elements.scalar(s < split.head ? s : tailStart + (s - split.head));
  }
}

// --- Host side. ---

// What a launch is called in error messages, e.g. "reduce<float16, sum>". Pieces of static text,
// put together only when there is an error to report.
struct KernelName {
  const char* function;
  const char* type;
  const char* op = nullptr;

  std::string str() const {
    return std::string(function) + "<" + type + (op != nullptr ? std::string(", ") + op : "") + ">";
  }
};

[[noreturn]] inline void throwCudaError(const std::string& what, cudaError_t status) {
  throw Error(what + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

// Turns a launch's status into an Error naming the kernel. The launch's own status, not
// cudaGetLastError's: that one may hold an earlier call's error and blame this kernel for it.
inline void checkLaunch(const KernelName& kernel, cudaError_t status) {
  if (status == cudaSuccess) return;
  // The runtime also recorded the error as the thread's last one; it is reported here, so clear
  // it (a sticky error, from a kernel that faulted earlier, stays with the context regardless).
  (void)cudaGetLastError();
  throwCudaError("ringcomm::cuda: launching kernel " + kernel.str() + " failed", status);
}

// A Compression as messages name it (the names of src/common/types.cc, which the kernels do not
// link).
inline std::string compressionName(Compression compression) {
  switch (compression) {
    case Compression::None: return "none";
    case Compression::Float16: return "float16";
    case Compression::BFloat16: return "bfloat16";
    case Compression::Int8: return "int8";
    case Compression::Float8: return "fp8";
  }
  return "value " + std::to_string(static_cast<int>(compression));
}

// Arguments are checked before anything is enqueued. A misaligned access would fault on the GPU
// and poison the whole CUDA context, so it is refused here.
inline void checkArray(const KernelName& kernel, const ArrayRef& array) {
  if (array.address == nullptr) {
    throw InvalidArgument("ringcomm::cuda::" + std::string(kernel.function) + ": " + array.name +
                          " is null");
  }
  if (reinterpret_cast<uintptr_t>(array.address) % array.elementBytes != 0) {
    throw InvalidArgument("ringcomm::cuda::" + std::string(kernel.function) + ": " + array.name +
                          " is not aligned to its " + std::to_string(array.elementBytes) +
                          "-byte elements (" + kernel.type + ")");
  }
}

// Every array of a launch, in the order its arrays() lists them: the first bad one is reported.
template <size_t N>
void checkArrays(const KernelName& kernel, const std::array<ArrayRef, N>& arrays) {
  for (const ArrayRef& array : arrays) checkArray(kernel, array);
}

// Enough blocks for the work, at most what the current device holds at once. Both queries are
// cheap (no device round trip); the device is the caller's current one, as for the launch.
inline unsigned blocksFor(const KernelName& kernel, size_t work) {
  int device = 0;
  int multiprocessors = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) {
    status = cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device);
  }
  if (status != cudaSuccess) {
    throwCudaError("ringcomm::cuda: sizing kernel " + kernel.str() + " for the device", status);
  }
  const size_t wanted = (work + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const size_t resident = static_cast<size_t>(multiprocessors) * kBlocksPerSm;
  const size_t blocks = wanted < resident ? wanted : resident;
  return static_cast<unsigned>(blocks > 0 ? blocks : 1);
}

// Checks the arrays, then enqueues elementwiseKernel<Elements> over `count` elements (count > 0)
// on `stream`.
template <typename Elements>
void launchElementwise(const KernelName& kernel, Elements elements, size_t count,
                       cudaStream_t stream) {
  const auto arrays = elements.arrays();
  checkArrays(kernel, arrays);
  Split split = splitForVectors(arrays, count, Elements::kVector);
  const size_t scalars = count - split.vectors * Elements::kVector;
  const unsigned blocks = blocksFor(kernel, split.vectors > scalars ? split.vectors : scalars);
  void* arguments[] = {&elements, &count, &split};
  checkLaunch(kernel, cudaLaunchKernel(reinterpret_cast<const void*>(&elementwiseKernel<Elements>),
                                       dim3(blocks), dim3(kThreadsPerBlock), arguments, 0, stream));
}

}  // namespace ringcomm::cuda::detail
