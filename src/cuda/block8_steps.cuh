// The int8 and fp8 wire's steps on device memory (kernels.h, codec_kernels.cu): the 8-bit block
// codecs, with the scaling and the accumulation that surround them on the CPU path fused in.
//
// One warp per block of 32 values (kBlock, MX's block size, is the warp size): lane i holds the
// block's value i, the block's largest finite magnitude is a 5-step shuffle reduction (whether it
// holds a NaN or an infinity, one vote), and the first lanes write the scale's bytes while every
// lane writes its own code. Warps stride over the blocks of the run. The float32 accesses of a
// warp are 128 contiguous bytes, its code bytes 32; the wire is read and written a byte at a time,
// so it needs no alignment (a block is 33 or 34 bytes: the blocks of a run are not aligned anyway).
//
// What each value computes is block8_ops.cuh's, which the host tests hold to the CPU codec.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "cuda/block8_ops.cuh"
#include "cuda/element_ops.cuh"
#include "cuda/elementwise.cuh"

namespace ringcomm::cuda::detail::block8 {

constexpr unsigned kWarpSize = 32;
constexpr unsigned kFullWarp = 0xFFFFFFFFu;
static_assert(kBlock == kWarpSize, "one warp holds one block, a value per lane");
static_assert(kThreadsPerBlock % kWarpSize == 0, "thread blocks of whole warps");

// The wire's element size for checkArray: bytes, so that only its null check applies.
constexpr size_t kWireByte = 1;

// Where one lane's work is: its block's scale in the wire, its value and its code.
struct Lane {
  unsigned index;  // the lane, and the value's place in its block
  bool active;     // false past the end of a short last block: such a lane touches no memory
  size_t value;    // in the float32 arrays
  size_t scaleAt;  // the block's scale, in the wire
  size_t codeAt;   // the value's code, in the wire
};

// The largest of the warp's 32 values (every lane gets it).
__device__ __forceinline__ uint32_t warpMax(uint32_t value) {
#pragma unroll
  for (unsigned offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const uint32_t other = __shfl_xor_sync(kFullWarp, value, offset);
    value = other > value ? other : value;
  }
  return value;
}

// A block's scale word (block8_ops.cuh), its kScaleBytes bytes read one at a time.
template <typename Codec>
__device__ __forceinline__ uint32_t loadScaleWord(const uint8_t* at) {
  uint32_t word = 0;
#pragma unroll
  for (unsigned k = 0; k < Codec::kScaleBytes; ++k) word |= uint32_t{at[k]} << (8 * k);
  return word;
}

struct Encoded {
  uint32_t scaleWord;
  uint8_t code;
};

// Encodes the warp's block into the wire, every lane of the warp taking part: each lane brings its
// value (an inactive one brings nothing: magnitude 0 changes no maximum), lanes 0..kScaleBytes-1
// write the scale's bytes, each active lane its code. A NaN or an infinity stays out of the scale
// (block8_ops.cuh). Returns the scale and this lane's code.
template <typename Codec>
__device__ __forceinline__ Encoded encodeBlock(float value, const Lane& lane, uint8_t* wire) {
  const uint32_t magnitude = lane.active ? magnitudeBits(value) : 0u;
  const bool nonFinite = isNonFinite(magnitude);
  const uint32_t largest = warpMax(nonFinite ? 0u : magnitude);
  const bool holdsNonFinite = __any_sync(kFullWarp, nonFinite) != 0;
  const typename Codec::Encoder encoder(largest, holdsNonFinite);
  const Encoded encoded{encoder.scaleWord(), encoder.code(value)};
  if (lane.index < Codec::kScaleBytes) {
    wire[lane.scaleAt + lane.index] = static_cast<uint8_t>(encoded.scaleWord >> (8 * lane.index));
  }
  if (lane.active) wire[lane.codeAt] = encoded.code;
  return encoded;
}

// This lane's value of a block in the wire: the scale read, then the code.
template <typename Codec>
__device__ __forceinline__ float decodeLane(const uint8_t* wire, const Lane& lane) {
  const typename Codec::Decoder decoder(loadScaleWord<Codec>(wire + lane.scaleAt));
  return decoder.value(wire[lane.codeAt]);
}

// Each warp takes blocks warp, warp + warps, ...; the loop's bounds are the same for every lane
// of a warp, so that all 32 take part in each block's shuffles.
template <typename Codec, typename Blocks>
__global__ void __launch_bounds__(kThreadsPerBlock) block8Kernel(Blocks blocks, size_t count) {
  const size_t thread = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t warps = static_cast<size_t>(gridDim.x) * blockDim.x / kWarpSize;
  const size_t runBlocks = (count + kBlock - 1) / kBlock;
  const unsigned index = threadIdx.x % kWarpSize;
  for (size_t b = thread / kWarpSize; b < runBlocks; b += warps) {
    const size_t first = b * kBlock;
    const size_t scaleAt = b * (Codec::kScaleBytes + kBlock);
    const Lane lane{index, first + index < count, first + index, scaleAt,
                    scaleAt + Codec::kScaleBytes + index};
    blocks.block(lane);
  }
}

// Checks the arrays, then enqueues block8Kernel over the run's blocks (count > 0), a warp for each
// while the device holds them all at once.
template <typename Codec, typename Blocks>
void launchBlocks(const KernelName& kernel, Blocks blocks, size_t count, cudaStream_t stream) {
  checkArrays(kernel, blocks.arrays());
  const size_t runBlocks = (count + kBlock - 1) / kBlock;
  const unsigned grid = blocksFor(kernel, runBlocks * kWarpSize);
  void* arguments[] = {&blocks, &count};
  checkLaunch(kernel, cudaLaunchKernel(reinterpret_cast<const void*>(&block8Kernel<Codec, Blocks>),
                                       dim3(grid), dim3(kThreadsPerBlock), arguments, 0, stream));
}

// The steps of one 8-bit codec (Int8Codec or Fp8Codec), and how they launch: a wire family, as
// ElementWire (codec_elements.cuh) is for the 16-bit formats. Every lane of a warp calls a step's
// block() for the same block.
template <typename Codec>
struct BlockWire {
  using Wire = uint8_t;

  KernelName kernel;  // e.g. encode<fp8>

  explicit BlockWire(const char* function) : kernel{function, Codec::kName} {}

  // wire = encode(source[i] * factor)
  struct Encode {
    const float* source;
    uint8_t* wire;
    Scale scale;

    std::array<ArrayRef, 2> arrays() const {
      return {{{"source", source, 4}, {"wire", wire, kWireByte}}};
    }

    __device__ void block(const Lane& lane) const {
      const float value = lane.active ? scale.apply(source[lane.value]) : 0.0f;
      encodeBlock<Codec>(value, lane, wire);
    }
  };

  // destination[i] = decode(wire)[i] * factor
  struct Decode {
    const uint8_t* wire;
    float* destination;
    Scale scale;

    std::array<ArrayRef, 2> arrays() const {
      return {{{"wire", wire, kWireByte}, {"destination", destination, 4}}};
    }

    __device__ void block(const Lane& lane) const {
      if (lane.active) destination[lane.value] = scale.apply(decodeLane<Codec>(wire, lane));
    }
  };

  // accumulator[i] += decode(received)[i]; with kEncode also wire = encode(accumulator), where
  // the wire written may be the wire read.
  template <bool kEncode>
  struct Accumulate {
    const uint8_t* received;
    float* accumulator;
    uint8_t* wire;  // null unless kEncode

    // decodeAccumulate calls the array it reads the wire, decodeAccumulateEncode received;
    // without kEncode the wire is not touched, and received stands in for it.
    std::array<ArrayRef, 3> arrays() const {
      return {{{kEncode ? "received" : "wire", received, kWireByte},
               {"accumulator", accumulator, 4},
               {"wire", kEncode ? wire : received, kWireByte}}};
    }

    __device__ void block(const Lane& lane) const {
      float sum = 0.0f;
      if (lane.active) {
        // The CPU's values[i] + value: the accumulator first (it keeps its NaN when both are NaN).
        sum = x86Add(accumulator[lane.value], decodeLane<Codec>(received, lane));
        accumulator[lane.value] = sum;
      }
      if constexpr (kEncode) {
        // Every lane has read its scale and code of `received` before any lane writes `wire`.
        __syncwarp(kFullWarp);
        encodeBlock<Codec>(sum, lane, wire);
      }
    }
  };

  // wire = encode(values); values[i] = decode(wire)[i]
  struct RoundToWire {
    float* values;
    uint8_t* wire;

    std::array<ArrayRef, 2> arrays() const {
      return {{{"values", values, 4}, {"wire", wire, kWireByte}}};
    }

    __device__ void block(const Lane& lane) const {
      const float value = lane.active ? values[lane.value] : 0.0f;
      const Encoded encoded = encodeBlock<Codec>(value, lane, wire);
      if (lane.active) {
        values[lane.value] = typename Codec::Decoder(encoded.scaleWord).value(encoded.code);
      }
    }
  };

  // Checks the step's arrays and enqueues it over the run's `count` values (count > 0).
  template <typename Steps>
  void launch(const Steps& steps, size_t count, cudaStream_t stream) const {
    launchBlocks<Codec>(kernel, steps, count, stream);
  }
};
}  // namespace ringcomm::cuda::detail::block8
