// The float16 and bfloat16 wire's steps on device memory (kernels.h, codec_kernels.cu): float32
// values narrowed for the wire and widened on arrival, with the scaling and the accumulation that
// surround them on the CPU path fused in, so that each step reads and writes its arrays once.
// Element-wise: elementwise.cuh's kernel, an element per thread.
//
// One vector is 8 elements: 16 bytes of wire, 32 bytes (two 16-byte accesses) of float32.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "cuda/element_ops.cuh"
#include "cuda/elementwise.cuh"

namespace ringcomm::cuda::detail {

// The steps of one 16-bit format (Float16Element or BFloat16Element), and how they launch: a wire
// family, as BlockWire (block8_steps.cuh) is for the 8-bit codecs.
template <typename Format>
struct ElementWire {
  using Wire = uint16_t;
  static constexpr size_t kWireVector = kVectorBytes / sizeof(Wire);

  KernelName kernel;  // e.g. encode<float16>

  explicit ElementWire(const char* function) : kernel{function, Format::kName} {}

  // wire[i] = narrow(source[i] * factor)
  struct Encode {
    static constexpr size_t kVector = kWireVector;
    const float* source;
    uint16_t* wire;
    Scale scale;

    std::array<ArrayRef, 2> arrays() const { return {{{"source", source, 4}, {"wire", wire, 2}}}; }

    __device__ uint16_t one(float value) const { return Format::narrow(scale.apply(value)); }
    __device__ void scalar(size_t i) const { wire[i] = one(source[i]); }
    __device__ void vector(size_t i) const {
      float values[kVector];
      uint16_t encoded[kVector];
      loadVector(source + i, values);
#pragma unroll
      for (size_t k = 0; k < kVector; ++k) encoded[k] = one(values[k]);
      storeVector(wire + i, encoded);
    }
  };

  // destination[i] = widen(wire[i]) * factor
  struct Decode {
    static constexpr size_t kVector = kWireVector;
    const uint16_t* wire;
    float* destination;
    Scale scale;

    std::array<ArrayRef, 2> arrays() const {
      return {{{"wire", wire, 2}, {"destination", destination, 4}}};
    }

    __device__ float one(uint16_t value) const { return scale.apply(Format::widen(value)); }
    __device__ void scalar(size_t i) const { destination[i] = one(wire[i]); }
    __device__ void vector(size_t i) const {
      uint16_t encoded[kVector];
      float values[kVector];
      loadVector(wire + i, encoded);
#pragma unroll
      for (size_t k = 0; k < kVector; ++k) values[k] = one(encoded[k]);
      storeVector(destination + i, values);
    }
  };

  // accumulator[i] += widen(received[i]); with kEncode also wire[i] = narrow(accumulator[i]),
  // where the wire written may be the wire read.
  template <bool kEncode>
  struct Accumulate {
    static constexpr size_t kVector = kWireVector;
    const uint16_t* received;
    float* accumulator;
    uint16_t* wire;  // null unless kEncode

    std::array<ArrayRef, 3> arrays() const {
      // Without kEncode the wire is not touched: received stands in for it in the alignment plan.
      // decodeAccumulate calls the array it reads the wire, decodeAccumulateEncode received.
      return {{{kEncode ? "received" : "wire", received, 2},
               {"accumulator", accumulator, 4},
               {"wire", kEncode ? wire : received, 2}}};
    }

    __device__ void scalar(size_t i) const {
      const float sum = x86Add(accumulator[i], Format::widen(received[i]));
      accumulator[i] = sum;
      if constexpr (kEncode) wire[i] = Format::narrow(sum);
    }
    __device__ void vector(size_t i) const {
      uint16_t encoded[kVector];
      float sums[kVector];
      loadVector(received + i, encoded);
      loadVector(accumulator + i, sums);
#pragma unroll
      for (size_t k = 0; k < kVector; ++k) {
        sums[k] = x86Add(sums[k], Format::widen(encoded[k]));
        if constexpr (kEncode) encoded[k] = Format::narrow(sums[k]);
      }
      storeVector(accumulator + i, sums);
      if constexpr (kEncode) storeVector(wire + i, encoded);
    }
  };

  // wire[i] = narrow(values[i]); values[i] = widen(wire[i])
  struct RoundToWire {
    static constexpr size_t kVector = kWireVector;
    float* values;
    uint16_t* wire;

    std::array<ArrayRef, 2> arrays() const { return {{{"values", values, 4}, {"wire", wire, 2}}}; }

    __device__ void scalar(size_t i) const {
      const uint16_t encoded = Format::narrow(values[i]);
      wire[i] = encoded;
      values[i] = Format::widen(encoded);
    }
    __device__ void vector(size_t i) const {
      float rounded[kVector];
      uint16_t encoded[kVector];
      loadVector(values + i, rounded);
#pragma unroll
      for (size_t k = 0; k < kVector; ++k) {
        encoded[k] = Format::narrow(rounded[k]);
        rounded[k] = Format::widen(encoded[k]);
      }
      storeVector(wire + i, encoded);
      storeVector(values + i, rounded);
    }
  };

  // Checks the step's arrays and enqueues it over `count` elements (count > 0).
  template <typename Steps>
  void launch(const Steps& steps, size_t count, cudaStream_t stream) const {
    launchElementwise(kernel, steps, count, stream);
  }
};

}  // namespace ringcomm::cuda::detail
