#include "codec/codec.h"

#include <cstdint>
#include <limits>
#include <string>

#include "codec/codec_f16c.h"
#include "reduce/half.h"
#include "ringcomm/errors.h"

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

namespace {

// Integers scale in float64 and truncate toward zero, as Horovod's CPU scaling and torch's
// (tensor.double() * factor).to(dtype) do. Beyond the type's range (undefined behaviour in both)
// the result saturates here, and NaN gives 0.
template <typename T>
void scaleIntegers(T* values, size_t count, double factor) {
  const double lowest = static_cast<double>(std::numeric_limits<T>::lowest());
  const double highest = static_cast<double>(std::numeric_limits<T>::max());
  for (size_t i = 0; i < count; ++i) {
    const double scaled = static_cast<double>(values[i]) * factor;
    if (scaled >= highest) {
      values[i] = std::numeric_limits<T>::max();
    } else if (scaled <= lowest) {
      values[i] = std::numeric_limits<T>::lowest();
    } else if (scaled == scaled) {
      values[i] = static_cast<T>(scaled);
    } else {
      values[i] = 0;
    }
  }
}

// 16-bit floats scale in float32 (the factor rounded to float32 first) and round to nearest
// even once, as Horovod's float16 scaling on the CPU and torch's multiplication of a 16-bit
// tensor by a number do.
template <typename Widen, typename Narrow>
void scaleNarrowFloats(uint16_t* values, size_t count, double factor, Widen widen, Narrow narrow) {
  const float f = static_cast<float>(factor);
  for (size_t i = 0; i < count; ++i) values[i] = narrow(widen(values[i]) * f);
}

}  // namespace

void scale(void* buffer, size_t count, DataType type, double factor) {
  if (factor == 1.0) return;
  switch (type) {
    case DataType::Float32: {
      // In float32, the factor rounded to float32, as Horovod does.
      float* values = static_cast<float*>(buffer);
      const float f = static_cast<float>(factor);
      for (size_t i = 0; i < count; ++i) values[i] *= f;
      return;
    }
    case DataType::Float64: {
      double* values = static_cast<double*>(buffer);
      for (size_t i = 0; i < count; ++i) values[i] *= factor;
      return;
    }
    case DataType::Float16:
      scaleNarrowFloats(static_cast<uint16_t*>(buffer), count, factor, halfBitsToFloat,
                        floatToHalfBits);
      return;
    case DataType::BFloat16:
      scaleNarrowFloats(static_cast<uint16_t*>(buffer), count, factor, bfloat16BitsToFloat,
                        floatToBfloat16Bits);
      return;
    case DataType::Int8: scaleIntegers(static_cast<int8_t*>(buffer), count, factor); return;
    case DataType::Uint8: scaleIntegers(static_cast<uint8_t*>(buffer), count, factor); return;
    case DataType::Int16: scaleIntegers(static_cast<int16_t*>(buffer), count, factor); return;
    case DataType::Int32: scaleIntegers(static_cast<int32_t*>(buffer), count, factor); return;
    case DataType::Int64: scaleIntegers(static_cast<int64_t*>(buffer), count, factor); return;
    case DataType::Bool: break;
  }
  throw InvalidArgument(std::string("scaling: bool data cannot be scaled; got a factor of ") +
                        std::to_string(factor));
}

}  // namespace ringcomm::codec
