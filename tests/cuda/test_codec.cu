// The 16-bit wire codec kernels (src/cuda/codec_elements.cuh, through cuda::encode and the rest)
// against the CPU codec (src/codec, compiled into this test) doing the same steps the CPU ring
// does, bit for bit; and against the float64 model of reference.h wherever the result is a number.
//
// Each function runs for both formats on every count of matrixCounts(), with float32 and wire
// arrays at misalignments 0..7 elements, alike (vectors after a scalar head) and mixed (element by
// element), and with scale factors exact (0.25) and not (1/3). Outputs are poisoned and guarded.
//
// NaN: where both operands of the accumulation are NaN, the CPU's result depends on the operand
// order its compiler chose (kernels.h); there either operand's payload, made quiet, passes.
//
// The "host" tests put the kernels' per-element code (compiled for the host) through the same
// comparisons, which needs no GPU.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "check.h"
#include "codec/codec.h"
#include "cuda/element_ops.cuh"
#include "cuda/kernels.h"
#include "reference.h"
#include "support.h"

using namespace ringcomm;
using namespace ringcomm::cudatest;

namespace detail = ringcomm::cuda::detail;

namespace {

enum class Backend { Device, Host };

// Element offsets of the float32 array, the wire array, and a second wire array.
struct Placement {
  size_t values;
  size_t wire;
  size_t wire2;
};

std::vector<Placement> placementsFor(size_t count) {
  if (count > 100000) return {{0, 0, 0}, {3, 3, 3}, {1, 2, 0}};
  std::vector<Placement> placements;
  for (size_t k = 0; k < 8; ++k) placements.push_back({k, k, k});
  placements.push_back({0, 1, 2});  // no common alignment: element by element
  placements.push_back({3, 7, 7});  // aligned together after one element (3 = 7 mod 4)
  placements.push_back({1, 0, 6});
  return placements;
}

// Pre- and post-scaling factors: none, exact, inexact (a rounding per element), large.
double randomFactor(Rng& rng) {
  const double factors[] = {1.0, 0.25, 1.0 / 3.0, 1.0 / 7.0, 3.0};
  return factors[rng.below(sizeof factors / sizeof factors[0])];
}

template <typename Format>
constexpr bool kIsHalf = std::is_same_v<Format, detail::Float16Element>;

template <typename Format>
bool isNan16(uint16_t code) {
  return kIsHalf<Format> ? (code & 0x7FFF) > 0x7C00 : (code & 0x7FFF) > 0x7F80;
}

template <typename Format>
double modelWiden(uint16_t code) {
  return kIsHalf<Format> ? model::codeValues<model::halfToDouble>()[code]
                         : model::bfloat16ToDouble(code);
}

template <typename Format>
uint16_t modelNarrow(float value) {
  return kIsHalf<Format> ? model::roundToHalf(value) : model::roundToBfloat16(value);
}

// The model's checks: each result equal to the number the model computes, or NaN where it says
// NaN (the model does not know x86's NaN payloads; the comparison with the CPU covers those).
template <typename T>
void expectModel(Failures& failures, const std::string& what, const std::vector<T>& got,
                 const std::function<T(size_t)>& expected, const std::function<bool(T)>& isNan,
                 const std::function<std::string(size_t)>& inputsAt) {
  std::vector<T> want(got.size());
  for (size_t i = 0; i < got.size(); ++i) want[i] = expected(i);
  expectSameBits<T>(failures, "model vs CPU codec, " + what, got, want, inputsAt,
                    [&](size_t, T g, T w) { return isNan(g) && isNan(w); });
}

bool isNanFloat(float value) {
  return std::isnan(value);
}

// x86's quiet version of a NaN (its result for a NaN operand).
float quiet(float value) {
  return model::floatOf(bitsOf(value) | 0x00400000u);
}

// The inputs of one case, and the device arrays for them.
struct Case {
  Compression compression = Compression::None;
  Placement at{};
  std::vector<float> values;  // encode's source; the accumulator; roundToWire's values
  std::vector<uint16_t> wire;
  double factor = 1.0;
  std::string label;

  size_t count() const { return values.size(); }
  std::string inputsAt(size_t i) const {
    return "value=" + std::to_string(values[i]) + "=" + hexBits(values[i]) +
           " wire=" + hexBits(wire[i]);
  }
};

template <typename Format>
void checkEncode(Failures& failures, Backend backend, const Case& c) {
  const std::string what = "encode, factor " + std::to_string(c.factor) + ", " + c.label;
  auto inputsAt = [&](size_t i) { return c.inputsAt(i); };
  // The CPU ring: codec::scale over the buffer, then codec::encode.
  std::vector<float> scaled = c.values;
  codec::scale(scaled.data(), scaled.size(), DataType::Float32, c.factor);
  std::vector<uint16_t> cpu(c.count());
  codec::encode(scaled.data(), cpu.data(), c.count(), c.compression);
  const float factor = static_cast<float>(c.factor);
  expectModel<uint16_t>(
      failures, what, cpu,
      [&](size_t i) {
        const double product = c.factor == 1.0 ? c.values[i] : double(c.values[i]) * factor;
        const float rounded = static_cast<float>(product);
        return std::isnan(rounded) ? uint16_t{0x7FFF} : modelNarrow<Format>(rounded);
      },
      isNan16<Format>, inputsAt);

  std::vector<uint16_t> got(c.count());
  if (backend == Backend::Host) {
    const detail::Scale scale(c.factor);
    for (size_t i = 0; i < c.count(); ++i) got[i] = Format::narrow(scale.apply(c.values[i]));
  } else {
    Stream stream;
    GuardedArray<float> source(c.count(), c.at.values, stream);
    GuardedArray<uint16_t> wire(c.count(), c.at.wire, stream);
    source.upload(c.values);
    wire.poison();
    cuda::encode(source.device(), wire.device(), c.count(), c.compression, c.factor, stream.get());
    stream.sync();
    got = wire.download(failures, what);
    expectSameBits(failures, what + ": source changed", source.download(failures, what), c.values,
                   inputsAt);
  }
  expectSameBits(failures, what, got, cpu, inputsAt);
}

template <typename Format>
void checkDecode(Failures& failures, Backend backend, const Case& c) {
  const std::string what = "decode, factor " + std::to_string(c.factor) + ", " + c.label;
  auto inputsAt = [&](size_t i) { return c.inputsAt(i); };
  // The CPU ring: codec::decode as segments land, codec::scale by the postscale at the end.
  std::vector<float> cpu(c.count());
  codec::decode(c.wire.data(), cpu.data(), c.count(), c.compression);
  codec::scale(cpu.data(), cpu.size(), DataType::Float32, c.factor);
  const float factor = static_cast<float>(c.factor);
  expectModel<float>(
      failures, what, cpu,
      [&](size_t i) { return static_cast<float>(modelWiden<Format>(c.wire[i]) * factor); },
      isNanFloat, inputsAt);

  std::vector<float> got(c.count());
  if (backend == Backend::Host) {
    const detail::Scale scale(c.factor);
    for (size_t i = 0; i < c.count(); ++i) got[i] = scale.apply(Format::widen(c.wire[i]));
  } else {
    Stream stream;
    GuardedArray<uint16_t> wire(c.count(), c.at.wire, stream);
    GuardedArray<float> destination(c.count(), c.at.values, stream);
    wire.upload(c.wire);
    destination.poison();
    cuda::decode(wire.device(), destination.device(), c.count(), c.compression, c.factor,
                 stream.get());
    stream.sync();
    got = destination.download(failures, what);
  }
  expectSameBits(failures, what, got, cpu, inputsAt);
}

// decodeAccumulate, and decodeAccumulateEncode with the output wire separate or the input wire.
enum class Accumulate { Only, EncodeSeparate, EncodeInPlace };

template <typename Format>
void checkAccumulate(Failures& failures, Backend backend, const Case& c, Accumulate form) {
  const char* names[] = {"decodeAccumulate", "decodeAccumulateEncode",
                         "decodeAccumulateEncode (wire = received)"};
  const std::string what = std::string(names[static_cast<int>(form)]) + ", " + c.label;
  auto inputsAt = [&](size_t i) { return c.inputsAt(i); };
  // The CPU ring: codec::decodeAccumulate into the working buffer, then codec::encode to send.
  std::vector<float> cpuSums = c.values;
  codec::decodeAccumulate(c.wire.data(), cpuSums.data(), c.count(), c.compression);
  std::vector<uint16_t> cpuWire(c.count());
  codec::encode(cpuSums.data(), cpuWire.data(), c.count(), c.compression);
  expectModel<float>(
      failures, what, cpuSums,
      [&](size_t i) {
        return static_cast<float>(double(c.values[i]) + modelWiden<Format>(c.wire[i]));
      },
      isNanFloat, inputsAt);

  // Both operands NaN: either one's payload, quiet (kernels.h).
  auto bothNan = [&](size_t i) {
    return std::isnan(c.values[i]) && std::isnan(Format::widen(c.wire[i]));
  };
  auto sumAcceptable = [&](size_t i, float got, float) {
    return bothNan(i) &&
           (sameBits(got, quiet(c.values[i])) || sameBits(got, quiet(Format::widen(c.wire[i]))));
  };
  auto wireAcceptable = [&](size_t i, uint16_t got, uint16_t) {
    return bothNan(i) && (got == Format::narrow(quiet(c.values[i])) ||
                          got == Format::narrow(quiet(Format::widen(c.wire[i]))));
  };

  std::vector<float> sums(c.count());
  std::vector<uint16_t> wireOut(c.count());
  const bool encodes = form != Accumulate::Only;
  if (backend == Backend::Host) {
    for (size_t i = 0; i < c.count(); ++i) {
      sums[i] = detail::x86Add(c.values[i], Format::widen(c.wire[i]));
      wireOut[i] = Format::narrow(sums[i]);
    }
  } else {
    Stream stream;
    GuardedArray<uint16_t> received(c.count(), c.at.wire, stream);
    GuardedArray<float> accumulator(c.count(), c.at.values, stream);
    GuardedArray<uint16_t> separate(c.count(), c.at.wire2, stream);
    received.upload(c.wire);
    accumulator.upload(c.values);
    separate.poison();
    GuardedArray<uint16_t>& output = form == Accumulate::EncodeInPlace ? received : separate;
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
                     c.wire, inputsAt);
    }
    if (!encodes) {
      // The wire array it was not asked to write stays poisoned, checked by the guards below.
      separate.download(failures, what + ": untouched wire");
    }
  }
  expectSameBits<float>(failures, what + " (accumulator)", sums, cpuSums, inputsAt, sumAcceptable);
  if (encodes || backend == Backend::Host) {
    expectSameBits<uint16_t>(failures, what + " (wire)", wireOut, cpuWire, inputsAt,
                             wireAcceptable);
  }
}

template <typename Format>
void checkRoundToWire(Failures& failures, Backend backend, const Case& c) {
  const std::string what = "roundToWire, " + c.label;
  auto inputsAt = [&](size_t i) { return c.inputsAt(i); };
  // The CPU ring: codec::encode, then codec::decode of what was encoded.
  std::vector<uint16_t> cpuWire(c.count());
  std::vector<float> cpuValues(c.count());
  codec::encode(c.values.data(), cpuWire.data(), c.count(), c.compression);
  codec::decode(cpuWire.data(), cpuValues.data(), c.count(), c.compression);

  std::vector<uint16_t> wireOut(c.count());
  std::vector<float> values(c.count());
  if (backend == Backend::Host) {
    for (size_t i = 0; i < c.count(); ++i) {
      wireOut[i] = Format::narrow(c.values[i]);
      values[i] = Format::widen(wireOut[i]);
    }
  } else {
    Stream stream;
    GuardedArray<float> deviceValues(c.count(), c.at.values, stream);
    GuardedArray<uint16_t> wire(c.count(), c.at.wire, stream);
    deviceValues.upload(c.values);
    wire.poison();
    cuda::roundToWire(deviceValues.device(), wire.device(), c.count(), c.compression, stream.get());
    stream.sync();
    values = deviceValues.download(failures, what);
    wireOut = wire.download(failures, what);
  }
  expectSameBits(failures, what + " (wire)", wireOut, cpuWire, inputsAt);
  expectSameBits(failures, what + " (values)", values, cpuValues, inputsAt);
}

template <typename Format>
void checkCodec(Compression compression, Backend backend) {
  Rng rng = rngFor(100 + static_cast<uint64_t>(compression) * 2 + (backend == Backend::Host));
  Failures failures;
  for (size_t count : matrixCounts()) {
    const std::vector<Placement> placements =
        backend == Backend::Device ? placementsFor(count) : std::vector<Placement>{{0, 0, 0}};
    for (const Placement& at : placements) {
      Case c;
      c.compression = compression;
      c.at = at;
      c.values.resize(count);
      c.wire.resize(count);
      c.factor = randomFactor(rng);
      std::vector<float> unused(count);
      model::Float32Model::fill(rng, c.values, unused);
      for (uint16_t& code : c.wire) code = model::random16(rng, kIsHalf<Format>);
      c.label = std::string(Format::kName) + " count " + std::to_string(count) +
                " offsets (values " + std::to_string(at.values) + ", wire " +
                std::to_string(at.wire) + ", wire2 " + std::to_string(at.wire2) + ")";
      checkEncode<Format>(failures, backend, c);
      checkDecode<Format>(failures, backend, c);
      checkAccumulate<Format>(failures, backend, c, Accumulate::Only);
      checkAccumulate<Format>(failures, backend, c, Accumulate::EncodeSeparate);
      checkAccumulate<Format>(failures, backend, c, Accumulate::EncodeInPlace);
      checkRoundToWire<Format>(failures, backend, c);
    }
  }
  failures.throwIfAny();
}

}  // namespace

TEST(codecFloat16) {
  checkCodec<detail::Float16Element>(Compression::Float16, Backend::Device);
}
TEST(codecBFloat16) {
  checkCodec<detail::BFloat16Element>(Compression::BFloat16, Backend::Device);
}
TEST(hostCodecFloat16) {
  checkCodec<detail::Float16Element>(Compression::Float16, Backend::Host);
}
TEST(hostCodecBFloat16) {
  checkCodec<detail::BFloat16Element>(Compression::BFloat16, Backend::Host);
}
