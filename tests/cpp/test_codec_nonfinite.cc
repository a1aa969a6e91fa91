// The 8-bit codecs keep a NaN or an infinity to its own value (src/codec/codec_block8.h): every
// other value of its block and of the run decodes finite, as it would without it; int8 keeps an
// infinity's sign, fp8 (e4m3 has no infinity) makes it NaN; a partial sum that overflows at a hop
// stays confined the same way; and error feedback carries no non-finite residual to later steps.
// (Before, one infinity made its whole block of 32 NaN: a whole chunk of a small all-reduce.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "check.h"
#include "codec/codec.h"
#include "codec/codec_block8.h"

using namespace ringcomm;

namespace nonfinite_test {

constexpr size_t kValuesPerBlock = codec::block8::kBlock;
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> normalValues(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> value(0.0f, 3.0f);
  std::vector<float> out(n);
  for (float& v : out) v = value(rng);
  return out;
}

std::vector<float> encodedAndDecoded(const std::vector<float>& values, Compression compression) {
  std::vector<uint8_t> wire(codec::wireBytes(values.size(), compression));
  codec::encode(values.data(), wire.data(), values.size(), compression);
  std::vector<float> decoded(values.size());
  codec::decode(wire.data(), decoded.data(), values.size(), compression);
  return decoded;
}

bool identicalBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// What a non-finite value decodes as: int8 keeps it (any NaN comes back as NaN), fp8 makes NaN.
bool decodesAsItShould(float decoded, float original, Compression compression) {
  if (compression == Compression::Float8 || std::isnan(original)) return std::isnan(decoded);
  return decoded == original;
}

// A signalling NaN with a payload and its sign bit set: any NaN is a NaN to the codecs.
float oddNan() {
  const uint32_t bits = 0xFF800123u;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace nonfinite_test

using namespace nonfinite_test;

TEST(blockCodecsKeepANonFiniteValueToItself) {
  for (Compression compression : {Compression::Int8, Compression::Float8}) {
    for (size_t n : {size_t(1), size_t(31), size_t(32), size_t(33), size_t(100), size_t(1009)}) {
      for (float special : {kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), oddNan()}) {
        for (size_t at : {size_t(0), n / 2, n - 1, std::min(n - 1, kValuesPerBlock)}) {
          std::vector<float> values = normalValues(n, static_cast<unsigned>(n + at));
          values[at] = 0.0f;
          // Without the special value: what every other value should decode as (but the
          // neighbours of an int8 special, whose scale is the largest / 126, not / 127).
          const std::vector<float> clean = encodedAndDecoded(values, compression);
          const size_t first = at / kValuesPerBlock * kValuesPerBlock;
          float largest = 0.0f;
          for (size_t i = first; i < std::min(n, first + kValuesPerBlock); ++i) {
            largest = std::max(largest, std::fabs(values[i]));
          }
          values[at] = special;
          const std::vector<float> decoded = encodedAndDecoded(values, compression);
          CHECK(decodesAsItShould(decoded[at], special, compression));
          for (size_t i = 0; i < n; ++i) {
            if (i == at) continue;
            const bool neighbour = i / kValuesPerBlock == at / kValuesPerBlock;
            if (compression == Compression::Int8 && neighbour) {
              // Half a step of the scale largest / 126, a bfloat16 rounded up by at most 2^-8.
              CHECK(std::fabs(decoded[i] - values[i]) <= largest / 250.0f);
            } else {
              CHECK(identicalBits(decoded[i], clean[i]));
            }
          }
          // What decoded encodes again to the same values: the owner of a block keeps the values
          // everyone else decodes.
          const std::vector<float> again = encodedAndDecoded(decoded, compression);
          for (size_t i = 0; i < n; ++i) CHECK(identicalBits(again[i], decoded[i]));
        }
      }
    }
  }
}

TEST(blockCodecsKeepEveryKindOfNonFiniteValueInOneBlock) {
  // Infinities of both signs, NaNs, zeros and one finite value in one block, and a block of
  // non-finite values only.
  std::vector<float> values(64, 0.0f);
  values[1] = kInf;
  values[2] = -kInf;
  values[3] = std::numeric_limits<float>::quiet_NaN();
  values[4] = 5.0f;
  for (size_t i = 32; i < 64; ++i) values[i] = i % 2 ? kInf : -kInf;
  for (Compression compression : {Compression::Int8, Compression::Float8}) {
    const std::vector<float> decoded = encodedAndDecoded(values, compression);
    for (size_t i = 0; i < 64; ++i) {
      if (std::isfinite(values[i])) {
        // Zeros exactly, 5 within e4m3's half step (int8's is finer).
        CHECK(std::fabs(decoded[i] - values[i]) <= std::fabs(values[i]) / 16.0f);
      } else {
        CHECK(decodesAsItShould(decoded[i], values[i], compression));
      }
    }
  }
}

TEST(blockCodecsConfineAPartialSumThatOverflows) {
  // One hop of the ring: a rank decodes what arrives onto its own values and encodes the sum to
  // send on. Two values near float32's largest overflow to infinity; only that value is lost.
  for (Compression compression : {Compression::Int8, Compression::Float8}) {
    std::vector<float> arriving = normalValues(100, 1), mine = normalValues(100, 2);
    arriving[40] = 3e38f;
    mine[40] = 3e38f;
    std::vector<uint8_t> wire(codec::wireBytes(100, compression));
    codec::encode(arriving.data(), wire.data(), 100, compression);
    codec::decodeAccumulate(wire.data(), mine.data(), 100, compression);
    CHECK_EQ(mine[40], kInf);
    const std::vector<float> sent = encodedAndDecoded(mine, compression);
    for (size_t i = 0; i < 100; ++i) {
      CHECK(i == 40 ? decodesAsItShould(sent[i], kInf, compression) : std::isfinite(sent[i]));
    }
  }
}

TEST(blockCodecsVectorLoopsTreatNonFiniteValuesAsThePortableOnes) {
  // The AVX2 loops (where the CPU has them) against the portable ones, the same bytes and bits:
  // encoding blocks with each kind of non-finite value in each lane, with two of them, and of
  // nothing else; decoding those, and random bytes (int8 scales with the mark and without).
  namespace block8 = codec::block8;
  const float specials[] = {kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), oddNan()};
  std::vector<float> values = normalValues(4 * kValuesPerBlock * kValuesPerBlock + 64, 8);
  for (size_t b = 0; b < 4 * kValuesPerBlock; ++b) {
    values[b * kValuesPerBlock + b % kValuesPerBlock] = specials[b / kValuesPerBlock];
    if (b % 3 == 0) values[b * kValuesPerBlock + (b * 7) % kValuesPerBlock] = specials[b % 4];
  }
  const size_t n = values.size();
  for (size_t i = n - 64; i < n; ++i) values[i] = specials[i % 4];  // two blocks, nothing finite
  std::mt19937 rng(9);
  using Encode = void (*)(const float*, uint8_t*, size_t);
  using Decode = void (*)(const uint8_t*, float*, size_t, bool);
  struct Loops {
    Compression compression;
    Encode encode, encodePortably;
    Decode decode, decodePortably;
  };
  for (const Loops& c :
       {Loops{Compression::Int8, block8::encodeInt8, block8::portable::encodeInt8,
              block8::decodeInt8, block8::portable::decodeInt8},
        Loops{Compression::Float8, block8::encodeFp8, block8::portable::encodeFp8,
              block8::decodeFp8, block8::portable::decodeFp8}}) {
    std::vector<uint8_t> wire(codec::wireBytes(n, c.compression)), portableWire(wire.size());
    c.encode(values.data(), wire.data(), n);
    c.encodePortably(values.data(), portableWire.data(), n);
    CHECK(wire == portableWire);
    std::vector<uint8_t> randomWire(wire.size());
    for (uint8_t& byte : randomWire) byte = static_cast<uint8_t>(rng());
    for (const std::vector<uint8_t>* source : {&wire, &randomWire}) {
      for (bool accumulate : {false, true}) {
        std::vector<float> vector(n, 0.5f), portable(n, 0.5f);
        c.decode(source->data(), vector.data(), n, accumulate);
        c.decodePortably(source->data(), portable.data(), n, accumulate);
        for (size_t i = 0; i < n; ++i) CHECK(identicalBits(vector[i], portable[i]));
      }
    }
  }
}

TEST(errorFeedbackCarriesNoNonFiniteResidual) {
  // A step whose gradient holds an infinity sends it on (torch's GradScaler finds it and skips the
  // step) and keeps a residual of 0 there, so that the next step's gradient is finite again.
  for (Compression compression : {Compression::Int8, Compression::Float8, Compression::Float16}) {
    std::vector<float> values = normalValues(3000, 4), residual(3000, 0.0f);
    values[1234] = kInf;
    values[2000] = 1e30f;  // fp16 rounds it to an infinity: the residual would be -infinity
    feedBackError(values.data(), residual.data(), values.size(), compression);
    CHECK(!std::isfinite(values[1234]));
    for (size_t i = 0; i < residual.size(); ++i) CHECK(std::isfinite(residual[i]));
    CHECK_EQ(residual[1234], 0.0f);
    values = normalValues(3000, 5);
    feedBackError(values.data(), residual.data(), values.size(), compression);
    for (size_t i = 0; i < values.size(); ++i) CHECK(std::isfinite(values[i]));
  }
}
