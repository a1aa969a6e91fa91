// The fp16/bf16 wire codec on device memory (kernels.h): float32 values narrowed for the wire and
// widened on arrival, with the scaling and the accumulation that surround them on the CPU path
// fused in, so that each step reads and writes its arrays once.
//
// One vector is 8 elements: 16 bytes of wire, 32 bytes (two 16-byte accesses) of float32.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/element_ops.cuh"
#include "cuda/elementwise.cuh"
#include "cuda/kernels.h"
#include "ringcomm/errors.h"

namespace ringcomm::cuda {
namespace {

using detail::ArrayRef;
using detail::KernelName;
using detail::Scale;
using detail::x86Add;

constexpr size_t kWireVector = detail::kVectorBytes / sizeof(uint16_t);

// wire[i] = narrow(source[i] * factor)
template <typename Format>
struct EncodeElements {
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
    detail::loadVector(source + i, values);
#pragma unroll
    for (size_t k = 0; k < kVector; ++k) encoded[k] = one(values[k]);
    detail::storeVector(wire + i, encoded);
  }
};

// destination[i] = widen(wire[i]) * factor
template <typename Format>
struct DecodeElements {
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
    detail::loadVector(wire + i, encoded);
#pragma unroll
    for (size_t k = 0; k < kVector; ++k) values[k] = one(encoded[k]);
    detail::storeVector(destination + i, values);
  }
};

// accumulator[i] += widen(wire[i]); with kEncode also wire[i] = narrow(accumulator[i]), where
// the wire written may be the wire read.
template <typename Format, bool kEncode>
struct AccumulateElements {
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
    detail::loadVector(received + i, encoded);
    detail::loadVector(accumulator + i, sums);
#pragma unroll
    for (size_t k = 0; k < kVector; ++k) {
      sums[k] = x86Add(sums[k], Format::widen(encoded[k]));
      if constexpr (kEncode) encoded[k] = Format::narrow(sums[k]);
    }
    detail::storeVector(accumulator + i, sums);
    if constexpr (kEncode) detail::storeVector(wire + i, encoded);
  }
};

// wire[i] = narrow(values[i]); values[i] = widen(wire[i])
template <typename Format>
struct RoundToWireElements {
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
    detail::loadVector(values + i, rounded);
#pragma unroll
    for (size_t k = 0; k < kVector; ++k) {
      encoded[k] = Format::narrow(rounded[k]);
      rounded[k] = Format::widen(encoded[k]);
    }
    detail::storeVector(wire + i, encoded);
    detail::storeVector(values + i, rounded);
  }
};

// Calls launch(Format{}) for the wire format; throws for none, the 8-bit codecs, unknown values.
template <typename Launch>
void withFormat(const char* function, Compression compression, Launch&& launch) {
  switch (compression) {
    case Compression::Float16: return launch(detail::Float16Element{});
    case Compression::BFloat16: return launch(detail::BFloat16Element{});
    case Compression::Int8:
    case Compression::Float8:  // the 8-bit block codecs: cuda::block8 (block8_kernels.cu)
    case Compression::None: break;
  }
  const bool eightBits = compression == Compression::Int8 || compression == Compression::Float8;
  const char* hint =
      eightBits ? " (its kernels are ringcomm::cuda::block8::encode and the rest)" : "";
  throw InvalidArgument(std::string("ringcomm::cuda::") + function +
                        ": needs compression float16 or bfloat16, got " +
                        detail::compressionName(compression) + hint);
}

}  // namespace

void encode(const float* source, uint16_t* wire, size_t count, Compression compression,
            double factor, cudaStream_t stream) {
  if (count == 0) return;
  withFormat("encode", compression, [&](auto format) {
    using Format = decltype(format);
    const KernelName kernel{"encode", Format::kName};
    detail::launchElementwise(kernel, EncodeElements<Format>{source, wire, Scale(factor)}, count,
                              stream);
  });
}

void decode(const uint16_t* wire, float* destination, size_t count, Compression compression,
            double factor, cudaStream_t stream) {
  if (count == 0) return;
  withFormat("decode", compression, [&](auto format) {
    using Format = decltype(format);
    const KernelName kernel{"decode", Format::kName};
    detail::launchElementwise(kernel, DecodeElements<Format>{wire, destination, Scale(factor)},
                              count, stream);
  });
}

void decodeAccumulate(const uint16_t* wire, float* accumulator, size_t count,
                      Compression compression, cudaStream_t stream) {
  if (count == 0) return;
  withFormat("decodeAccumulate", compression, [&](auto format) {
    using Format = decltype(format);
    const KernelName kernel{"decodeAccumulate", Format::kName};
    detail::launchElementwise(kernel, AccumulateElements<Format, false>{wire, accumulator, nullptr},
                              count, stream);
  });
}

void decodeAccumulateEncode(const uint16_t* received, float* accumulator, uint16_t* wire,
                            size_t count, Compression compression, cudaStream_t stream) {
  if (count == 0) return;
  withFormat("decodeAccumulateEncode", compression, [&](auto format) {
    using Format = decltype(format);
    const KernelName kernel{"decodeAccumulateEncode", Format::kName};
    detail::launchElementwise(kernel, AccumulateElements<Format, true>{received, accumulator, wire},
                              count, stream);
  });
}

void roundToWire(float* values, uint16_t* wire, size_t count, Compression compression,
                 cudaStream_t stream) {
  if (count == 0) return;
  withFormat("roundToWire", compression, [&](auto format) {
    using Format = decltype(format);
    const KernelName kernel{"roundToWire", Format::kName};
    detail::launchElementwise(kernel, RoundToWireElements<Format>{values, wire}, count, stream);
  });
}

}  // namespace ringcomm::cuda
