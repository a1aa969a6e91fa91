// The 8-bit block codec kernels (src/cuda/block8_steps.cuh, through cuda::encode and the rest)
// against the CPU codec (src/codec/codec_block8.cc, compiled into this test) doing the same steps
// the CPU ring does: the same bytes on the wire, the same float32 bits out.
//
// Each function runs for int8 and fp8 on counts around the block size (0, 1, 31, 32, 33, 65), a
// prime (1009) and a large prime (1000003), with float32 arrays and wires at several offsets (the
// wire needs no alignment), and scale factors exact (0.25) and not (1/3). Each block of values is
// of one kind: normally distributed at a random magnitude, or holding a NaN or an infinity, all
// zeros, all subnormal, tiny (the int8 scale's inverse overflows), huge, rounding ties, or random
// bits with specials mixed in. Wires to decode are the CPU's encoding of such values, or random
// bytes (any scale: NaN with a payload, infinity, subnormal; fp8's NaN codes). Outputs are
// poisoned and guarded.
//
// NaN: where both operands of a product or a sum are NaN, the CPU's result depends on the operand
// order its compiler chose (kernels.h); there either operand's NaN, made quiet, passes. That
// happens for an accumulator NaN meeting a NaN value, and for fp8's NaN codes in a NaN-scale block
// (which no encoder writes).
//
// The "host" tests put the kernels' per-block code (block8_ops.cuh, compiled for the host, with
// the warp's maximum a loop) through the same comparisons, which needs no GPU. The names start
// with "codec" (after "host") so that tests/gpu/run.sh's compute-sanitizer step, which runs the
// tests matching "codec", covers these kernels' byte-wise wire accesses too.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "check.h"
#include "codec/codec.h"
#include "codec/codec_block8.h"
#include "cuda/block8_ops.cuh"
#include "cuda/kernels.h"
#include "reference.h"
#include "support.h"

using namespace ringcomm;
using namespace ringcomm::cudatest;

namespace ops = ringcomm::cuda::detail::block8;

namespace {

constexpr size_t kBlock = codec::block8::kBlock;

enum class Backend { Device, Host };

// Offsets of the float32 array (in elements), the wire and a second wire (in bytes).
struct Placement {
  size_t values;
  size_t wire;
  size_t wire2;
};

std::vector<Placement> placementsFor(size_t count) {
  if (count > 100000) return {{0, 0, 0}, {3, 1, 2}};
  return {{0, 0, 0}, {1, 1, 3}, {2, 3, 0}, {3, 2, 1}, {0, 5, 7}};
}

double randomFactor(Rng& rng) {
  const double factors[] = {1.0, 1.0, 0.25, 1.0 / 3.0, 3.0};
  return factors[rng.below(sizeof factors / sizeof factors[0])];
}

// --- Inputs: a block of values at a time. ---

enum class BlockKind {
  Normal,      // normally distributed, times a random power of two
  WithNan,     // ... with one NaN (any sign, payload, quiet or signalling)
  WithInf,     // ... with one infinity
  Zeros,       // +0 and -0
  Subnormal,   // subnormals and zeros only
  Tiny,        // normal, but so small that 1 / (largest / 127) overflows
  Huge,        // near the largest float (times 3, some overflow to infinity)
  Int8Ties,    // +-127 and halves: x / scale lands exactly between two codes
  Fp8Ties,     // four significant bits: halfway between e4m3's neighbours, or exact
  RandomBits,  // ordinary values over a wide range, with specials mixed in
  kCount,
};

float randomNormal(std::mt19937_64& engine) {
  return std::normal_distribution<float>(0.0f, 1.0f)(engine);
}

float withSign(Rng& rng, float magnitude) {
  return rng.oneIn(2) ? -magnitude : magnitude;
}

void fillBlock(Rng& rng, std::mt19937_64& engine, BlockKind kind, float* out, size_t n) {
  const float magnitude = std::ldexp(1.0f, static_cast<int>(rng.below(41)) - 20);
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case BlockKind::Zeros: out[i] = withSign(rng, 0.0f); break;
      case BlockKind::Subnormal:
        out[i] = rng.oneIn(4) ? 0.0f : model::floatOf(rng.below(1u << 23) + 1);
        out[i] = withSign(rng, out[i]);
        break;
      case BlockKind::Tiny: out[i] = rng.oneIn(4) ? 0.0f : randomNormal(engine) * 0x1p-124f; break;
      case BlockKind::Huge:
        out[i] = withSign(rng, model::floatOf(0x7F7FFFFFu - rng.below(1u << 22)));
        break;
      case BlockKind::Int8Ties:
        out[i] = static_cast<float>(static_cast<int>(rng.below(253)) - 126) + 0.5f;
        break;
      case BlockKind::Fp8Ties:
        out[i] = withSign(rng, std::ldexp(1.0f + static_cast<float>(rng.below(16)) / 16.0f,
                                          static_cast<int>(rng.below(24)) - 14));
        break;
      case BlockKind::RandomBits:
        out[i] = rng.oneIn(model::kSpecialOneIn) ? model::randomSpecialFloat(rng)
                                                  : model::randomOrdinaryFloat(rng, 60);
        break;
      default: out[i] = randomNormal(engine) * magnitude; break;
    }
  }
  if (n == 0) return;
  const size_t at = rng.below(static_cast<uint32_t>(n));
  if (kind == BlockKind::WithNan) {
    const uint32_t sign = rng.oneIn(2) ? 0x80000000u : 0u;
    const uint32_t nan = rng.oneIn(2) ? 0x7FC00000u | rng.below(1u << 22)   // quiet
                                      : 0x7F800001u | rng.below(1u << 22);  // signalling
    out[at] = model::floatOf(sign | nan);
  } else if (kind == BlockKind::WithInf) {
    out[at] = withSign(rng, INFINITY);
  } else if (kind == BlockKind::Int8Ties) {
    out[at] = withSign(rng, 127.0f);  // scale 1, inverse 1: the halves stay halves
  }
}

std::vector<float> randomValues(Rng& rng, size_t count) {
  std::mt19937_64 engine(rng.next());
  std::vector<float> values(count);
  for (size_t first = 0; first < count; first += kBlock) {
    // Mostly normal blocks, every kind often enough that a large count holds them all.
    const BlockKind kind = rng.oneIn(2) ? BlockKind::Normal
                                        : static_cast<BlockKind>(
                                              rng.below(static_cast<uint32_t>(BlockKind::kCount)));
    fillBlock(rng, engine, kind, values.data() + first, std::min(kBlock, count - first));
  }
  return values;
}

// A wire to decode: the CPU's encoding of random values, or random bytes.
std::vector<uint8_t> randomWire(Rng& rng, size_t count, Compression compression) {
  std::vector<uint8_t> wire(codec::wireBytes(count, compression));
  if (rng.oneIn(2)) {
    codec::encode(randomValues(rng, count).data(), wire.data(), count, compression);
  } else {
    for (uint8_t& byte : wire) byte = static_cast<uint8_t>(rng.next());
  }
  return wire;
}

// --- The wire's layout. ---

template <typename Codec>
size_t scaleAt(size_t i) {
  return (i / kBlock) * (Codec::kScaleBytes + kBlock);
}

template <typename Codec>
size_t codeAt(size_t i) {
  return scaleAt<Codec>(i) + Codec::kScaleBytes + i % kBlock;
}

template <typename Codec>
uint32_t scaleWordAt(const std::vector<uint8_t>& wire, size_t i) {
  uint32_t word = 0;
  for (size_t k = 0; k < Codec::kScaleBytes; ++k) {
    word |= uint32_t{wire[scaleAt<Codec>(i) + k]} << (8 * k);
  }
  return word;
}

// --- The kernels' arithmetic on the host: block8_ops.cuh, a block at a time. ---

template <typename Codec>
void hostEncode(const std::vector<float>& values, std::vector<uint8_t>& wire) {
  for (size_t first = 0; first < values.size(); first += kBlock) {
    const size_t n = std::min(kBlock, values.size() - first);
    uint32_t largest = 0;
    bool holdsNonFinite = false;
    for (size_t i = 0; i < n; ++i) {
      largest = std::max(largest, ops::finiteMagnitudeBits(values[first + i]));
      holdsNonFinite = holdsNonFinite || ops::isNonFinite(ops::magnitudeBits(values[first + i]));
    }
    const typename Codec::Encoder encoder(largest, holdsNonFinite);
    for (size_t k = 0; k < Codec::kScaleBytes; ++k) {
      wire[scaleAt<Codec>(first) + k] = static_cast<uint8_t>(encoder.scaleWord() >> (8 * k));
    }
    for (size_t i = 0; i < n; ++i) wire[codeAt<Codec>(first + i)] = encoder.code(values[first + i]);
  }
}

template <typename Codec>
float hostDecoded(const std::vector<uint8_t>& wire, size_t i) {
  return typename Codec::Decoder(scaleWordAt<Codec>(wire, i)).value(wire[codeAt<Codec>(i)]);
}

// --- Cases. ---

struct Case {
  Compression compression = Compression::None;
  Placement at{};
  std::vector<float> values;  // encode's source; the accumulator; roundToWire's values
  std::vector<uint8_t> wire;  // what decode and the accumulations read
  double factor = 1.0;
  std::string label;

  size_t count() const { return values.size(); }
};

template <typename Codec>
std::string valueInputs(const Case& c, size_t i) {
  return "value=" + hexBits(c.values[i]) + " block " + std::to_string(i / kBlock) +
         ": scale " + hexBits(scaleWordAt<Codec>(c.wire, i)) + " code " +
         hexBits(c.wire[codeAt<Codec>(i)]);
}

// For a byte of an encoded wire: its block and the values the block was encoded from.
std::function<std::string(size_t)> wireInputs(const std::vector<float>& values, size_t scaleBytes) {
  return [&values, scaleBytes](size_t byte) {
    const size_t block = byte / (scaleBytes + kBlock);
    const size_t first = block * kBlock;
    std::string text = "byte " + std::to_string(byte % (scaleBytes + kBlock)) + " of block " +
                       std::to_string(block) + ", encoded from";
    for (size_t i = first; i < std::min(values.size(), first + 4); ++i) {
      text += " " + hexBits(values[i]);
    }
    return text + " ...";
  };
}

float quiet(float value) {
  return model::floatOf(bitsOf(value) | 0x00400000u);
}

// The NaNs the CPU may give for value i decoded, when both the code's value and the scale are
// NaN (fp8 only): either one, made quiet. Empty otherwise: then the result is unambiguous.
template <typename Codec>
std::vector<float> ambiguousDecodedNans(const Case& c, size_t i) {
  if constexpr (std::is_same_v<Codec, ops::Fp8Codec>) {
    const float code = ops::fromE4m3(c.wire[codeAt<Codec>(i)]);
    const float scale = ops::fp8Scale(static_cast<uint8_t>(scaleWordAt<Codec>(c.wire, i)));
    if (std::isnan(code) && std::isnan(scale)) return {quiet(code), quiet(scale)};
  }
  return {};
}

bool isAmong(float value, const std::vector<float>& candidates) {
  for (float candidate : candidates) {
    if (sameBits(value, candidate)) return true;
  }
  return false;
}

template <typename Codec>
void checkEncode(Failures& failures, Backend backend, const Case& c) {
  const std::string what = "encode, factor " + std::to_string(c.factor) + ", " + c.label;
  // The CPU ring: codec::scale over the buffer, then codec::encode.
  std::vector<float> scaled = c.values;
  codec::scale(scaled.data(), scaled.size(), DataType::Float32, c.factor);
  std::vector<uint8_t> cpu(codec::wireBytes(c.count(), c.compression));
  codec::encode(scaled.data(), cpu.data(), c.count(), c.compression);

  std::vector<uint8_t> got(cpu.size());
  if (backend == Backend::Host) {
    const cuda::detail::Scale scale(c.factor);
    std::vector<float> hostScaled(c.count());
    for (size_t i = 0; i < c.count(); ++i) hostScaled[i] = scale.apply(c.values[i]);
    hostEncode<Codec>(hostScaled, got);
  } else {
    Stream stream;
    GuardedArray<float> source(c.count(), c.at.values, stream);
    GuardedArray<uint8_t> wire(cpu.size(), c.at.wire, stream);
    source.upload(c.values);
    wire.poison();
    cuda::encode(source.device(), wire.device(), c.count(), c.compression, c.factor, stream.get());
    stream.sync();
    got = wire.download(failures, what);
    expectSameBits(failures, what + ": source changed", source.download(failures, what), c.values,
                   [&](size_t i) { return hexBits(c.values[i]); });
  }
  expectSameBits(failures, what, got, cpu, wireInputs(scaled, Codec::kScaleBytes));
}

template <typename Codec>
void checkDecode(Failures& failures, Backend backend, const Case& c) {
  const std::string what = "decode, factor " + std::to_string(c.factor) + ", " + c.label;
  auto inputsAt = [&](size_t i) { return valueInputs<Codec>(c, i); };
  // The CPU ring: codec::decode as segments land, codec::scale by the postscale at the end.
  std::vector<float> cpu(c.count());
  codec::decode(c.wire.data(), cpu.data(), c.count(), c.compression);
  codec::scale(cpu.data(), cpu.size(), DataType::Float32, c.factor);

  std::vector<float> got(c.count());
  if (backend == Backend::Host) {
    const cuda::detail::Scale scale(c.factor);
    for (size_t i = 0; i < c.count(); ++i) got[i] = scale.apply(hostDecoded<Codec>(c.wire, i));
  } else {
    Stream stream;
    GuardedArray<uint8_t> wire(c.wire.size(), c.at.wire, stream);
    GuardedArray<float> destination(c.count(), c.at.values, stream);
    wire.upload(c.wire);
    destination.poison();
    cuda::decode(wire.device(), destination.device(), c.count(), c.compression, c.factor,
                 stream.get());
    stream.sync();
    got = destination.download(failures, what);
  }
  expectSameBits<float>(failures, what, got, cpu, inputsAt, [&](size_t i, float g, float) {
    return isAmong(g, ambiguousDecodedNans<Codec>(c, i));
  });
}

// decodeAccumulate, and decodeAccumulateEncode with the output wire separate or the input wire.
enum class Accumulate { Only, EncodeSeparate, EncodeInPlace };

template <typename Codec>
void checkAccumulate(Failures& failures, Backend backend, const Case& c, Accumulate form) {
  const char* names[] = {"decodeAccumulate", "decodeAccumulateEncode",
                         "decodeAccumulateEncode (wire = received)"};
  const std::string what = std::string(names[static_cast<int>(form)]) + ", " + c.label;
  auto inputsAt = [&](size_t i) { return valueInputs<Codec>(c, i); };
  // The CPU ring: codec::decodeAccumulate into the working buffer, then codec::encode to send.
  std::vector<float> cpuDecoded(c.count());
  codec::decode(c.wire.data(), cpuDecoded.data(), c.count(), c.compression);
  std::vector<float> cpuSums = c.values;
  codec::decodeAccumulate(c.wire.data(), cpuSums.data(), c.count(), c.compression);
  std::vector<uint8_t> cpuWire(c.wire.size());
  codec::encode(cpuSums.data(), cpuWire.data(), c.count(), c.compression);

  // Both operands NaN: either one's NaN, quiet. A decoded value that is itself ambiguous may be
  // either of its NaNs, whatever the accumulator holds.
  auto sumAcceptable = [&](size_t i, float got, float) {
    std::vector<float> candidates = ambiguousDecodedNans<Codec>(c, i);
    if (std::isnan(cpuDecoded[i])) candidates.push_back(quiet(cpuDecoded[i]));
    if (candidates.empty()) return false;
    if (std::isnan(c.values[i])) candidates.push_back(quiet(c.values[i]));
    return isAmong(got, candidates);
  };

  std::vector<float> sums(c.count());
  std::vector<uint8_t> wireOut(c.wire.size());
  const bool encodes = form != Accumulate::Only;
  if (backend == Backend::Host) {
    for (size_t i = 0; i < c.count(); ++i) {
      sums[i] = cuda::detail::x86Add(c.values[i], hostDecoded<Codec>(c.wire, i));
    }
    hostEncode<Codec>(sums, wireOut);
  } else {
    Stream stream;
    GuardedArray<uint8_t> received(c.wire.size(), c.at.wire, stream);
    GuardedArray<float> accumulator(c.count(), c.at.values, stream);
    GuardedArray<uint8_t> separate(c.wire.size(), c.at.wire2, stream);
    received.upload(c.wire);
    accumulator.upload(c.values);
    separate.poison();
    GuardedArray<uint8_t>& output = form == Accumulate::EncodeInPlace ? received : separate;
    if (encodes) {
      cuda::decodeAccumulateEncode(received.device(), accumulator.device(), output.device(),
                                   c.count(), c.compression, stream.get());
    } else {
      cuda::decodeAccumulate(received.device(), accumulator.device(), c.count(), c.compression,
                             stream.get());
    }
    stream.sync();
    sums = accumulator.download(failures, what);
    if (encodes) wireOut = output.download(failures, what);
    if (form != Accumulate::EncodeInPlace) {
      expectSameBits(failures, what + ": received changed", received.download(failures, what),
                     c.wire, [](size_t byte) { return "byte " + std::to_string(byte); });
    }
    if (!encodes) separate.download(failures, what + ": untouched wire");  // guards only
  }
  expectSameBits<float>(failures, what + " (accumulator)", sums, cpuSums, inputsAt, sumAcceptable);
  // A NaN's code does not depend on which NaN: the wire is the CPU's exactly.
  if (encodes || backend == Backend::Host) {
    expectSameBits(failures, what + " (wire)", wireOut, cpuWire,
                   wireInputs(cpuSums, Codec::kScaleBytes));
  }
}

template <typename Codec>
void checkRoundToWire(Failures& failures, Backend backend, const Case& c) {
  const std::string what = "roundToWire, " + c.label;
  // The CPU ring: codec::encode, then codec::decode of what was encoded.
  std::vector<uint8_t> cpuWire(c.wire.size());
  std::vector<float> cpuValues(c.count());
  codec::encode(c.values.data(), cpuWire.data(), c.count(), c.compression);
  codec::decode(cpuWire.data(), cpuValues.data(), c.count(), c.compression);

  std::vector<uint8_t> wireOut(c.wire.size());
  std::vector<float> values(c.count());
  if (backend == Backend::Host) {
    hostEncode<Codec>(c.values, wireOut);
    for (size_t i = 0; i < c.count(); ++i) values[i] = hostDecoded<Codec>(wireOut, i);
  } else {
    Stream stream;
    GuardedArray<float> deviceValues(c.count(), c.at.values, stream);
    GuardedArray<uint8_t> wire(c.wire.size(), c.at.wire, stream);
    deviceValues.upload(c.values);
    wire.poison();
    cuda::roundToWire(deviceValues.device(), wire.device(), c.count(), c.compression, stream.get());
    stream.sync();
    values = deviceValues.download(failures, what);
    wireOut = wire.download(failures, what);
  }
  expectSameBits(failures, what + " (wire)", wireOut, cpuWire,
                 wireInputs(c.values, Codec::kScaleBytes));
  expectSameBits<float>(failures, what + " (values)", values, cpuValues,
                        [&](size_t i) { return "value=" + hexBits(c.values[i]); });
}

// The counts: empty, one, a block less one, a block, a block and one, two blocks and one, a prime,
// a large prime (31251 blocks, the last of 3 values).
const std::vector<size_t>& block8Counts() {
  static const std::vector<size_t> counts = {0, 1, 31, 32, 33, 65, 1009, 1000003};
  return counts;
}

template <typename Codec>
void checkCodec(Compression compression, Backend backend) {
  Rng rng = rngFor(200 + static_cast<uint64_t>(compression) * 2 + (backend == Backend::Host));
  Failures failures;
  for (size_t count : block8Counts()) {
    const std::vector<Placement> placements =
        backend == Backend::Device ? placementsFor(count) : std::vector<Placement>{{0, 0, 0}};
    for (const Placement& at : placements) {
      Case c;
      c.compression = compression;
      c.at = at;
      c.values = randomValues(rng, count);
      c.wire = randomWire(rng, count, compression);
      c.factor = randomFactor(rng);
      c.label = std::string(Codec::kName) + " count " + std::to_string(count) +
                " offsets (values " + std::to_string(at.values) + ", wire " +
                std::to_string(at.wire) + ", wire2 " + std::to_string(at.wire2) + ")";
      checkEncode<Codec>(failures, backend, c);
      checkDecode<Codec>(failures, backend, c);
      checkAccumulate<Codec>(failures, backend, c, Accumulate::Only);
      checkAccumulate<Codec>(failures, backend, c, Accumulate::EncodeSeparate);
      checkAccumulate<Codec>(failures, backend, c, Accumulate::EncodeInPlace);
      checkRoundToWire<Codec>(failures, backend, c);
    }
  }
  failures.throwIfAny();
}

}  // namespace

TEST(codecInt8) {
  checkCodec<ops::Int8Codec>(Compression::Int8, Backend::Device);
}
TEST(codecFp8) {
  checkCodec<ops::Fp8Codec>(Compression::Float8, Backend::Device);
}
TEST(hostCodecInt8) {
  checkCodec<ops::Int8Codec>(Compression::Int8, Backend::Host);
}
TEST(hostCodecFp8) {
  checkCodec<ops::Fp8Codec>(Compression::Float8, Backend::Host);
}

// The kernels' e4m3 conversions against the CPU's, for every code and for every float32's top 16
// bits (sign, exponent and the mantissa bits that decide the rounding) with the low 16 bits at
// the rounding boundaries and at random: a million inputs, where all 2^32 took 30 s of CI's two
// cores for the same findings.
TEST(hostE4m3MatchesTheCpuForEveryInput) {
  std::atomic<uint64_t> differing{0};
  std::atomic<uint32_t> example{0};
  std::vector<uint32_t> lows = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFE, 0xFFFF};
  std::mt19937 rng(13);
  while (lows.size() < 16) lows.push_back(rng() & 0xFFFFu);
  parallelFor(uint64_t{1} << 16, [&](uint64_t begin, uint64_t end) {
    for (uint64_t high = begin; high < end; ++high) {
      for (uint32_t low : lows) {
        const uint32_t bits = static_cast<uint32_t>(high << 16) | low;
        const float value = model::floatOf(bits);
        if (ops::toE4m3(value) != codec::block8::toE4m3(value) && differing.fetch_add(1) == 0) {
          example = bits;
        }
      }
    }
  });
  Failures failures;
  if (differing > 0) {
    failures.add("toE4m3: " + std::to_string(differing.load()) + " inputs differ, e.g. " +
                 hexBits(model::floatOf(example.load())));
  }
  for (uint32_t code = 0; code < 256; ++code) {
    const uint8_t c = static_cast<uint8_t>(code);
    if (!sameBits(ops::fromE4m3(c), codec::block8::fromE4m3(c))) {
      failures.add("fromE4m3(" + hexBits(c) + "): " + hexBits(ops::fromE4m3(c)) + ", the CPU's " +
                   hexBits(codec::block8::fromE4m3(c)));
    }
  }
  failures.throwIfAny();
}
