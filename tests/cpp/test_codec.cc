// The wire codec: F16C and portable float16 paths agree bit for bit (ranks on different machines
// must produce the same bits), bfloat16 rounds to nearest even, accumulation is in float32.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "check.h"
#include "codec/codec.h"
#include "codec/codec_f16c.h"
#include "reduce/reduce.h"

using namespace ringcomm;

namespace {

std::vector<float> samples(size_t n) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t b = bits(rng);
    std::memcpy(&values[i], &b, 4);  // every bit pattern: NaNs, infinities, subnormals
  }
  return values;
}

}  // namespace

TEST(float16EncodeMatchesReferenceConversion) {
  const std::vector<float> values = samples(100003);
  std::vector<uint16_t> wire(values.size());
  codec::encode(values.data(), wire.data(), values.size(), Compression::Float16);
  for (size_t i = 0; i < values.size(); ++i) CHECK_EQ(wire[i], reduce::floatToHalf(values[i]));
}

TEST(float16DecodeAndAccumulateMatchReference) {
  std::vector<uint16_t> wire(65536);
  for (size_t i = 0; i < wire.size(); ++i) wire[i] = static_cast<uint16_t>(i);
  std::vector<float> decoded(wire.size()), sums(wire.size(), 1.0f);
  codec::decode(wire.data(), decoded.data(), wire.size(), Compression::Float16);
  codec::decodeAccumulate(wire.data(), sums.data(), wire.size(), Compression::Float16);
  for (size_t i = 0; i < wire.size(); ++i) {
    const float expected = reduce::halfToFloat(wire[i]);
    CHECK(std::memcmp(&decoded[i], &expected, 4) == 0 || (std::isnan(decoded[i]) && std::isnan(expected)));
    const float sum = 1.0f + expected;
    CHECK(std::memcmp(&sums[i], &sum, 4) == 0 || (std::isnan(sums[i]) && std::isnan(sum)));
  }
}

TEST(f16cPathAgreesWithPortablePath) {
  if (!codec::f16c::available()) return;
  const std::vector<float> values = samples(4099);  // not a multiple of 8: the scalar tail too
  std::vector<uint16_t> fast(values.size());
  codec::f16c::encode(values.data(), fast.data(), values.size());
  for (size_t i = 0; i < values.size(); ++i) CHECK_EQ(fast[i], reduce::floatToHalf(values[i]));
}

TEST(bfloat16RoundTripsThroughTheWire) {
  const std::vector<float> values = samples(10007);
  std::vector<uint16_t> wire(values.size());
  codec::encode(values.data(), wire.data(), values.size(), Compression::BFloat16);
  for (size_t i = 0; i < values.size(); ++i) CHECK_EQ(wire[i], reduce::floatToBfloat16(values[i]));
}

TEST(scaleMultipliesInTheBuffersPrecision) {
  std::vector<float> f{1.0f, -2.0f, 3.0f};
  codec::scale(f.data(), f.size(), DataType::Float32, 0.5);
  CHECK_EQ(f[1], -1.0f);
  std::vector<double> d{1.0, 3.0};
  codec::scale(d.data(), d.size(), DataType::Float64, 1.0 / 3.0);
  CHECK_EQ(d[1], 3.0 * (1.0 / 3.0));
}
