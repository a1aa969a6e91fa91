#include "codec/codec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "codec/codec_block8.h"
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

size_t wireBytes(size_t count, Compression compression) {
  const size_t blocks = (count + block8::kBlock - 1) / block8::kBlock;
  switch (compression) {
    case Compression::None: return count * sizeof(float);
    case Compression::Float16:
    case Compression::BFloat16: return count * 2;
    case Compression::Int8: return count + blocks * block8::kInt8ScaleBytes;
    case Compression::Float8: return count + blocks * block8::kFp8ScaleBytes;
  }
  return count * sizeof(float);
}

size_t wireStride(Compression compression) {
  switch (compression) {
    case Compression::None: return sizeof(float);
    case Compression::Float16:
    case Compression::BFloat16: return 2;
    // A run of n values has at most n blocks: n + n x scale bytes.
    case Compression::Int8: return 1 + block8::kInt8ScaleBytes;
    case Compression::Float8: return 1 + block8::kFp8ScaleBytes;
  }
  return sizeof(float);
}

void encode(const float* source, void* wire, size_t count, Compression compression) {
  uint16_t* narrow = static_cast<uint16_t*>(wire);
  switch (compression) {
    case Compression::Float16:
      f16c::available() ? f16c::encode(source, narrow, count) : encodeHalf(source, narrow, count);
      return;
    case Compression::BFloat16: encodeBfloat(source, narrow, count); return;
    case Compression::Int8: block8::encodeInt8(source, static_cast<uint8_t*>(wire), count); return;
    case Compression::Float8: block8::encodeFp8(source, static_cast<uint8_t*>(wire), count); return;
    case Compression::None: break;
  }
  throw InvalidArgument("codec: nothing to encode without compression");
}

namespace {

// destination = widen(wire), or destination += widen(wire) with `accumulate`.
void decodeRun(const void* wire, float* destination, size_t count, Compression compression,
               bool accumulate) {
  const uint16_t* narrow = static_cast<const uint16_t*>(wire);
  const uint8_t* bytes = static_cast<const uint8_t*>(wire);
  switch (compression) {
    case Compression::Float16:
      if (f16c::available()) {
        accumulate ? f16c::accumulate(narrow, destination, count)
                   : f16c::decode(narrow, destination, count);
      } else {
        accumulate ? accumulateHalf(narrow, destination, count)
                   : decodeHalf(narrow, destination, count);
      }
      return;
    case Compression::BFloat16:
      accumulate ? accumulateBfloat(narrow, destination, count)
                 : decodeBfloat(narrow, destination, count);
      return;
    case Compression::Int8: block8::decodeInt8(bytes, destination, count, accumulate); return;
    case Compression::Float8: block8::decodeFp8(bytes, destination, count, accumulate); return;
    case Compression::None: break;
  }
  throw InvalidArgument("codec: nothing to decode without compression");
}

}  // namespace

void decode(const void* wire, float* destination, size_t count, Compression compression) {
  decodeRun(wire, destination, count, compression, /*accumulate=*/false);
}

void decodeAccumulate(const void* wire, float* destination, size_t count,
                      Compression compression) {
  decodeRun(wire, destination, count, compression, /*accumulate=*/true);
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

namespace ringcomm {

void roundToWire(float* values, size_t count, Compression compression) {
  if (compression == Compression::None || count == 0) return;
  std::vector<uint8_t> wire(codec::wireBytes(count, compression));
  codec::encode(values, wire.data(), count, compression);
  codec::decode(wire.data(), values, count, compression);
}

void feedBackError(float* values, float* residual, size_t count, Compression compression) {
  // Pieces that stay in the cache, each a whole number of the 8-bit codecs' blocks, so that they
  // are rounded as one run is.
  constexpr size_t kPiece = 64 * codec::block8::kBlock;
  std::vector<uint8_t> wire(codec::wireBytes(kPiece, compression));
  std::vector<float> rounded(kPiece);
  for (size_t start = 0; start < count; start += kPiece) {
    const size_t n = std::min(kPiece, count - start);
    float* v = values + start;
    float* r = residual + start;
    for (size_t i = 0; i < n; ++i) v[i] += r[i];
    if (compression == Compression::None) {
      std::fill(r, r + n, 0.0f);
      continue;
    }
    codec::encode(v, wire.data(), n, compression);
    codec::decode(wire.data(), rounded.data(), n, compression);
    for (size_t i = 0; i < n; ++i) {
      // A value that is (or rounds to) NaN or an infinity has no rounding error to carry: kept,
      // a non-finite residual would make this value non-finite at every later step, and torch's
      // GradScaler would skip them all. The value itself goes on non-finite, to be found.
      const float lost = v[i] - rounded[i];
      r[i] = std::fabs(lost) <= std::numeric_limits<float>::max() ? lost : 0.0f;
      v[i] = rounded[i];
    }
  }
}

}  // namespace ringcomm
