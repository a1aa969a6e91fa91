#include "codec/codec.h"

#include "codec/codec_f16c.h"
#include "reduce/half.h"

namespace ringcomm::codec {
namespace {

using reduce::detail::bfloat16BitsToFloat;
using reduce::detail::floatToBfloat16Bits;
using reduce::detail::floatToHalfBits;
using reduce::detail::halfBitsToFloat;

// The conversions are branch-free integer arithmetic (reduce/half.h), so these loops vectorise;
// target_clones adds an AVX2 build chosen at load time. Both give the same bits.
#if defined(__x86_64__) && defined(__GNUC__)
#define RINGCOMM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define RINGCOMM_CLONES
#endif

RINGCOMM_CLONES void encodeHalf(const float* __restrict in, uint16_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = floatToHalfBits(in[i]);
}
RINGCOMM_CLONES void encodeBfloat(const float* __restrict in, uint16_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = floatToBfloat16Bits(in[i]);
}
RINGCOMM_CLONES void decodeHalf(const uint16_t* __restrict in, float* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = halfBitsToFloat(in[i]);
}
RINGCOMM_CLONES void decodeBfloat(const uint16_t* __restrict in, float* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bfloat16BitsToFloat(in[i]);
}
RINGCOMM_CLONES void accumulateHalf(const uint16_t* __restrict in, float* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] += halfBitsToFloat(in[i]);
}
RINGCOMM_CLONES void accumulateBfloat(const uint16_t* __restrict in, float* __restrict out,
                                      size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] += bfloat16BitsToFloat(in[i]);
}

}  // namespace

void encode(const float* source, uint16_t* wire, size_t count, Compression compression) {
  if (compression == Compression::Float16) {
    f16c::available() ? f16c::encode(source, wire, count) : encodeHalf(source, wire, count);
  } else {
    encodeBfloat(source, wire, count);
  }
}

void decode(const uint16_t* wire, float* destination, size_t count, Compression compression) {
  if (compression == Compression::Float16) {
    f16c::available() ? f16c::decode(wire, destination, count) : decodeHalf(wire, destination, count);
  } else {
    decodeBfloat(wire, destination, count);
  }
}

void decodeAccumulate(const uint16_t* wire, float* destination, size_t count,
                      Compression compression) {
  if (compression == Compression::Float16) {
    f16c::available() ? f16c::accumulate(wire, destination, count)
                      : accumulateHalf(wire, destination, count);
  } else {
    accumulateBfloat(wire, destination, count);
  }
}

void scale(void* buffer, size_t count, DataType type, double factor) {
  if (factor == 1.0) return;
  if (type == DataType::Float32) {
    float* values = static_cast<float*>(buffer);
    const float f = static_cast<float>(factor);
    for (size_t i = 0; i < count; ++i) values[i] *= f;
  } else {
    double* values = static_cast<double*>(buffer);
    for (size_t i = 0; i < count; ++i) values[i] *= factor;
  }
}

}  // namespace ringcomm::codec
