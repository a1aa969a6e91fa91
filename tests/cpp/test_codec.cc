// The wire codec: F16C and portable float16 paths agree bit for bit (ranks on different machines
// must produce the same bits), bfloat16 rounds to nearest even, accumulation is in float32.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "check.h"
#include "codec/codec.h"
#include "codec/codec_block8.h"
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

namespace {

std::vector<float> normal(size_t n, float scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> values(0.0f, scale);
  std::vector<float> out(n);
  for (float& v : out) v = values(rng);
  return out;
}

// Encodes and decodes `values` as one run; returns the decoded values.
std::vector<float> roundTrip(const std::vector<float>& values, Compression compression) {
  std::vector<uint8_t> wire(codec::wireBytes(values.size(), compression));
  codec::encode(values.data(), wire.data(), values.size(), compression);
  std::vector<float> decoded(values.size());
  codec::decode(wire.data(), decoded.data(), values.size(), compression);
  return decoded;
}

}  // namespace

TEST(e4m3ConversionMatchesItsDefinition) {
  using codec::block8::fromE4m3;
  using codec::block8::toE4m3;
  CHECK_EQ(fromE4m3(0x7E), 448.0f);
  CHECK_EQ(fromE4m3(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  CHECK_EQ(fromE4m3(0x08), std::ldexp(1.0f, -6));  // the smallest normal
  CHECK(std::isnan(fromE4m3(0x7F)) && std::isnan(fromE4m3(0xFF)));
  CHECK_EQ(toE4m3(1000.0f), 0x7E);  // saturates
  CHECK_EQ(toE4m3(-1000.0f), 0xFE);
  // Every finite code converts back to itself, and values between two codes round to nearest
  // even.
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    const float value = fromE4m3(static_cast<uint8_t>(code));
    CHECK_EQ(toE4m3(value), code);
  }
  CHECK_EQ(toE4m3(1.0625f), toE4m3(1.0f));    // halfway between 1 and 1.125: to the even 1
  CHECK_EQ(toE4m3(1.1875f), toE4m3(1.25f));   // halfway between 1.125 and 1.25: to the even 1.25
}

TEST(blockCodecsKeepEveryRunOnItsOwnAndRoundTripExactly) {
  for (Compression compression : {Compression::Int8, Compression::Float8}) {
    // Sizes around the block of 32, so that the last block is short or whole.
    for (size_t n : {size_t(0), size_t(1), size_t(31), size_t(32), size_t(33), size_t(1009)}) {
      const std::vector<float> values = normal(n, 3.0f, 7);
      CHECK(codec::wireBytes(n, compression) <= n * codec::wireStride(compression));
      const std::vector<float> once = roundTrip(values, compression);
      // What decoded is what encodes again to the same values: the owner of a block keeps the
      // values everyone decodes.
      const std::vector<float> twice = roundTrip(once, compression);
      for (size_t i = 0; i < n; ++i) CHECK_EQ(once[i], twice[i]);
    }
  }
}

TEST(blockCodecsErrorIsBoundedByTheirPrecision) {
  const std::vector<float> values = normal(100003, 1.0f, 11);
  for (auto [compression, bound] :
       {std::pair{Compression::Int8, 0.01}, std::pair{Compression::Float8, 0.05}}) {
    const std::vector<float> decoded = roundTrip(values, compression);
    double error = 0.0, norm = 0.0;
    for (size_t i = 0; i < values.size(); ++i) {
      error += (decoded[i] - values[i]) * double(decoded[i] - values[i]);
      norm += double(values[i]) * values[i];
    }
    CHECK(std::sqrt(error / norm) < bound);
  }
  // Zeros stay zeros; an infinity spoils only itself (test_codec_nonfinite.cc has the rest).
  std::vector<float> special(64, 0.0f);
  special[40] = INFINITY;
  for (Compression compression : {Compression::Int8, Compression::Float8}) {
    const std::vector<float> decoded = roundTrip(special, compression);
    for (size_t i = 0; i < 64; ++i) {
      if (i != 40) CHECK_EQ(decoded[i], 0.0f);
    }
    CHECK(compression == Compression::Int8 ? decoded[40] == INFINITY : std::isnan(decoded[40]));
  }
}

TEST(blockCodecsAccumulateInFloat32) {
  const std::vector<float> values = normal(97, 2.0f, 3);
  for (Compression compression : {Compression::Int8, Compression::Float8}) {
    std::vector<uint8_t> wire(codec::wireBytes(values.size(), compression));
    codec::encode(values.data(), wire.data(), values.size(), compression);
    std::vector<float> decoded(values.size());
    codec::decode(wire.data(), decoded.data(), values.size(), compression);
    std::vector<float> sums(values.size(), 0.5f);
    codec::decodeAccumulate(wire.data(), sums.data(), values.size(), compression);
    for (size_t i = 0; i < values.size(); ++i) CHECK_EQ(sums[i], 0.5f + decoded[i]);
  }
}

namespace {

// Blocks of every kind the AVX2 loops must treat as the portable ones do: normal values at many
// scales, zeros, subnormals, values so small that int8's inverse scale overflows, halfway cases,
// values past e4m3's 448, NaNs and infinities.
std::vector<float> awkwardBlocks() {
  std::mt19937 rng(5);
  std::normal_distribution<float> normalValue;
  std::uniform_int_distribution<int> exponent(-140, 120);
  std::vector<float> values;
  for (int block = 0; block < 400; ++block) {
    const float scale = std::ldexp(1.0f, exponent(rng));
    for (size_t i = 0; i < codec::block8::kBlock; ++i) values.push_back(normalValue(rng) * scale);
    const size_t last = values.size() - 1;
    switch (block % 8) {
      case 0: std::fill(values.end() - 32, values.end(), 0.0f); break;
      case 1: values[last - 3] = NAN; break;
      case 2: values[last] = -INFINITY; break;
      case 3: values[last - 7] = 1e-39f; values[last] = -3e-39f; break;  // subnormals alone
      case 4: values[last - 1] = 1.0625f * scale; values[last] = 448.0f * scale; break;
      default: break;
    }
  }
  std::vector<float> everyBits = samples(64 * 32);  // every bit pattern, NaNs included
  values.insert(values.end(), everyBits.begin(), everyBits.end());
  return values;
}

bool sameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST(blockCodecsVectorLoopsMatchThePortableOnesBitForBit) {
  namespace block8 = codec::block8;
  const std::vector<float> values = awkwardBlocks();
  const size_t n = values.size() + 5;  // and a short last block, which stays portable
  std::vector<float> input = values;
  input.resize(n, 0.75f);
  using Encode = void (*)(const float*, uint8_t*, size_t);
  using Decode = void (*)(const uint8_t*, float*, size_t, bool);
  struct Codec {
    Compression compression;
    Encode encode, encodePortably;
    Decode decode, decodePortably;
  };
  for (const Codec& c : {Codec{Compression::Int8, block8::encodeInt8, block8::portable::encodeInt8,
                               block8::decodeInt8, block8::portable::decodeInt8},
                         Codec{Compression::Float8, block8::encodeFp8, block8::portable::encodeFp8,
                               block8::decodeFp8, block8::portable::decodeFp8}}) {
    std::vector<uint8_t> wire(codec::wireBytes(n, c.compression));
    std::vector<uint8_t> portableWire(wire.size());
    c.encode(input.data(), wire.data(), n);
    c.encodePortably(input.data(), portableWire.data(), n);
    CHECK(wire == portableWire);
    for (bool accumulate : {false, true}) {
      std::vector<float> decoded(n, 0.25f), portableDecoded(n, 0.25f);
      c.decode(wire.data(), decoded.data(), n, accumulate);
      c.decodePortably(wire.data(), portableDecoded.data(), n, accumulate);
      size_t different = 0;
      for (size_t i = 0; i < n; ++i) different += sameBits(decoded[i], portableDecoded[i]) ? 0 : 1;
      CHECK_EQ(different, size_t(0));
      if (!accumulate) {
        // What a block's owner keeps encodes again to what everyone else decoded (the bytes may
        // differ: a block whose values all underflowed to zero gets a zero's scale).
        std::vector<uint8_t> again(wire.size());
        c.encode(decoded.data(), again.data(), n);
        std::vector<float> twice(n);
        c.decode(again.data(), twice.data(), n, false);
        size_t changed = 0;
        for (size_t i = 0; i < n; ++i) changed += sameBits(decoded[i], twice[i]) ? 0 : 1;
        CHECK_EQ(changed, size_t(0));
      }
    }
  }
}
