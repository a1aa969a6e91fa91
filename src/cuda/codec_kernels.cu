// The wire codecs on device memory (kernels.h): one entry point per step for all four
// compressions, as the CPU codec has. withWire picks the compression's wire family, a type that
// holds the family's steps (Encode, Decode, Accumulate<kEncode>, RoundToWire) and launches them:
// ElementWire for float16 and bfloat16, an element per thread (codec_elements.cuh), BlockWire for
// int8 and fp8, a warp per block of 32 values (block8_steps.cuh). Each entry point builds its
// step and launches it; the launch checks the step's arrays.
#include <cstddef>
#include <string>

#include "cuda/block8_steps.cuh"
#include "cuda/codec_elements.cuh"
#include "cuda/element_ops.cuh"
#include "cuda/kernels.h"
#include "ringcomm/errors.h"

namespace ringcomm::cuda {
namespace {

using detail::BFloat16Element;
using detail::ElementWire;
using detail::Float16Element;
using detail::Scale;
using detail::block8::BlockWire;
using detail::block8::Fp8Codec;
using detail::block8::Int8Codec;

// Calls visit(Family(function)) for the compression's wire family, its kernels named
// function<format>; throws for Compression::None and values that are no compression.
template <typename Visit>
void withWire(const char* function, Compression compression, Visit&& visit) {
  switch (compression) {
    case Compression::Float16: return visit(ElementWire<Float16Element>(function));
    case Compression::BFloat16: return visit(ElementWire<BFloat16Element>(function));
    case Compression::Int8: return visit(BlockWire<Int8Codec>(function));
    case Compression::Float8: return visit(BlockWire<Fp8Codec>(function));
    case Compression::None: break;
  }
  throw InvalidArgument(std::string("ringcomm::cuda::") + function +
                        ": needs compression float16, bfloat16, int8 or fp8, got " +
                        detail::compressionName(compression));
}

// The caller's wire as the family's: 2-byte values for the 16-bit formats, bytes for the 8-bit.
template <typename Family>
typename Family::Wire* wireOf(void* wire) {
  return static_cast<typename Family::Wire*>(wire);
}
template <typename Family>
const typename Family::Wire* wireOf(const void* wire) {
  return static_cast<const typename Family::Wire*>(wire);
}

}  // namespace

void encode(const float* source, void* wire, size_t count, Compression compression, double factor,
            cudaStream_t stream) {
  if (count == 0) return;
  withWire("encode", compression, [&](auto family) {
    using Family = decltype(family);
    family.launch(typename Family::Encode{source, wireOf<Family>(wire), Scale(factor)}, count,
                  stream);
  });
}

void decode(const void* wire, float* destination, size_t count, Compression compression,
            double factor, cudaStream_t stream) {
  if (count == 0) return;
  withWire("decode", compression, [&](auto family) {
    using Family = decltype(family);
    family.launch(typename Family::Decode{wireOf<Family>(wire), destination, Scale(factor)}, count,
                  stream);
  });
}

void decodeAccumulate(const void* wire, float* accumulator, size_t count, Compression compression,
                      cudaStream_t stream) {
  if (count == 0) return;
  withWire("decodeAccumulate", compression, [&](auto family) {
    using Family = decltype(family);
    using Steps = typename Family::template Accumulate<false>;
    family.launch(Steps{wireOf<Family>(wire), accumulator, nullptr}, count, stream);
  });
}

void decodeAccumulateEncode(const void* received, float* accumulator, void* wire, size_t count,
                            Compression compression, cudaStream_t stream) {
  if (count == 0) return;
  withWire("decodeAccumulateEncode", compression, [&](auto family) {
    using Family = decltype(family);
    using Steps = typename Family::template Accumulate<true>;
    family.launch(Steps{wireOf<Family>(received), accumulator, wireOf<Family>(wire)}, count,
                  stream);
  });
}

void roundToWire(float* values, void* wire, size_t count, Compression compression,
                 cudaStream_t stream) {
  if (count == 0) return;
  withWire("roundToWire", compression, [&](auto family) {
    using Family = decltype(family);
    family.launch(typename Family::RoundToWire{values, wireOf<Family>(wire)}, count, stream);
  });
}

}  // namespace ringcomm::cuda
