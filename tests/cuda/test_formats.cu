// The kernels' float16 / bfloat16 conversions (src/cuda/float_formats.cuh) against the CPU's
// (src/reduce/half.h) for every input: all 2^32 float32 bit patterns narrowed, all 2^16 codes
// widened. Once on the host, where the same source compiles and no GPU is needed, and once on the
// device through the public encode / decode.
//
// Also on the host: the x86 NaN rules the codec kernels imitate, against this CPU's own
// arithmetic; the reference model's rounding against half.h; the vector split.
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "check.h"
#include "cuda/element_ops.cuh"
#include "cuda/elementwise.cuh"
#include "cuda/kernels.h"
#include "reduce/half.h"
#include "reference.h"
#include "support.h"

using namespace ringcomm;
using namespace ringcomm::cudatest;

namespace detail = ringcomm::cuda::detail;
namespace cpu = ringcomm::reduce::detail;

namespace {

constexpr uint64_t kAllFloats = uint64_t{1} << 32;
constexpr uint32_t kAllCodes = 1u << 16;

// Counts disagreements over all 2^32 float bit patterns, in parallel; keeps the first one seen.
struct Disagreements {
  std::atomic<uint64_t> count{0};
  std::atomic<uint32_t> example{0};

  void add(uint32_t bits) {
    if (count.fetch_add(1) == 0) example = bits;
  }
  void check(Failures& failures, const std::string& what) const {
    if (count == 0) return;
    failures.add(what + ": " + std::to_string(count.load()) + " inputs differ, e.g. " +
                 hexBits(model::floatOf(example.load())));
  }
};

// Writes bits = first + i for i < n: every float32 bit pattern of a chunk, made on the device.
__global__ void fillWithBitPatterns(uint32_t* out, uint32_t first, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = first + static_cast<uint32_t>(i);
  }
}

}  // namespace

TEST(hostConversionsMatchTheCpuForEveryInput) {
  Disagreements half;
  Disagreements bfloat;
  parallelFor(kAllFloats, [&](uint64_t begin, uint64_t end) {
    for (uint64_t bits = begin; bits < end; ++bits) {
      const float value = model::floatOf(static_cast<uint32_t>(bits));
      if (detail::floatToHalfBits(value) != cpu::floatToHalfBits(value)) half.add(bits);
      if (detail::floatToBfloat16Bits(value) != cpu::floatToBfloat16Bits(value)) bfloat.add(bits);
    }
  });
  Failures failures;
  half.check(failures, "floatToHalfBits");
  bfloat.check(failures, "floatToBfloat16Bits");
  for (uint32_t code = 0; code < kAllCodes; ++code) {
    const uint16_t c = static_cast<uint16_t>(code);
    if (!sameBits(detail::halfBitsToFloat(c), cpu::halfBitsToFloat(c))) {
      failures.add("halfBitsToFloat(" + hexBits(c) + ")");
    }
    if (!sameBits(detail::bfloat16BitsToFloat(c), cpu::bfloat16BitsToFloat(c))) {
      failures.add("bfloat16BitsToFloat(" + hexBits(c) + ")");
    }
  }
  failures.throwIfAny();
}

// The same on the device, through encode and decode (scale factor 1), chunk by chunk.
TEST(conversionsMatchTheCpuForEveryInput) {
  constexpr uint64_t kChunk = uint64_t{1} << 26;
  Stream stream;
  GuardedArray<float> floats(kChunk, 0, stream);
  GuardedArray<uint16_t> half(kChunk, 0, stream);
  GuardedArray<uint16_t> bfloat(kChunk, 0, stream);
  Disagreements halfDisagreements;
  Disagreements bfloatDisagreements;
  Failures failures;
  for (uint64_t first = 0; first < kAllFloats; first += kChunk) {
    fillWithBitPatterns<<<1024, 256, 0, stream.get()>>>(
        reinterpret_cast<uint32_t*>(floats.device()), static_cast<uint32_t>(first), kChunk);
    CUDA_CHECK(cudaGetLastError());
    cuda::encode(floats.device(), half.device(), kChunk, Compression::Float16, 1.0, stream.get());
    cuda::encode(floats.device(), bfloat.device(), kChunk, Compression::BFloat16, 1.0,
                 stream.get());
    stream.sync();
    const std::vector<uint16_t> halves = half.download(failures, "float16 chunk");
    const std::vector<uint16_t> bfloats = bfloat.download(failures, "bfloat16 chunk");
    parallelFor(kChunk, [&](uint64_t begin, uint64_t end) {
      for (uint64_t i = begin; i < end; ++i) {
        const uint32_t bits = static_cast<uint32_t>(first + i);
        const float value = model::floatOf(bits);
        if (halves[i] != cpu::floatToHalfBits(value)) halfDisagreements.add(bits);
        if (bfloats[i] != cpu::floatToBfloat16Bits(value)) bfloatDisagreements.add(bits);
      }
    });
  }
  halfDisagreements.check(failures, "encode float16");
  bfloatDisagreements.check(failures, "encode bfloat16");

  std::vector<uint16_t> codes(kAllCodes);
  for (uint32_t code = 0; code < kAllCodes; ++code) codes[code] = static_cast<uint16_t>(code);
  GuardedArray<uint16_t> wire(kAllCodes, 0, stream);
  GuardedArray<float> widened(kAllCodes, 0, stream);
  wire.upload(codes);
  for (Compression compression : {Compression::Float16, Compression::BFloat16}) {
    const bool isHalf = compression == Compression::Float16;
    widened.poison();
    cuda::decode(wire.device(), widened.device(), kAllCodes, compression, 1.0, stream.get());
    stream.sync();
    const std::vector<float> got = widened.download(failures, "decode");
    std::vector<float> want(kAllCodes);
    for (uint32_t code = 0; code < kAllCodes; ++code) {
      const uint16_t c = static_cast<uint16_t>(code);
      want[code] = isHalf ? cpu::halfBitsToFloat(c) : cpu::bfloat16BitsToFloat(c);
    }
    expectSameBits(failures, isHalf ? "decode float16" : "decode bfloat16", got, want,
                   [](size_t i) { return "code " + hexBits(static_cast<uint16_t>(i)); });
  }
  failures.throwIfAny();
}

#if defined(__x86_64__)
// x86Add / x86Multiply against this CPU's addss / mulss on every pair of special values. When
// both are NaN, x86 returns the first operand's; which operand the compiler puts first is not
// fixed, so there either is accepted (as the codec tests do).
TEST(hostX86NanRulesMatchThisCpu) {
  const uint32_t specials[] = {
      0x00000000u, 0x80000000u, 0x3F800000u, 0xBF800000u, 0x00000001u, 0x807FFFFFu,
      0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u,
      0x7FC12345u, 0xFFFFFFFFu, 0x7F800001u, 0xFF812345u, 0x7FBFFFFFu,
  };
  Failures failures;
  for (uint32_t x : specials) {
    for (uint32_t y : specials) {
      const float a = model::floatOf(x);
      const float b = model::floatOf(y);
      // volatile: computed by the CPU at run time, not folded by the compiler.
      volatile float va = a;
      volatile float vb = b;
      const float sum = va + vb;
      const float product = va * vb;
      const bool bothNan = std::isnan(a) && std::isnan(b);
      auto agrees = [&](float mine, float cpuResult) {
        if (sameBits(mine, cpuResult)) return true;
        return bothNan && (sameBits(mine, model::floatOf(x | 0x00400000u)) ||
                           sameBits(mine, model::floatOf(y | 0x00400000u)));
      };
      if (!agrees(detail::x86Add(a, b), sum)) {
        failures.add("x86Add(" + hexBits(a) + ", " + hexBits(b) +
                     ") = " + hexBits(detail::x86Add(a, b)) + ", this CPU says " + hexBits(sum));
      }
      if (!agrees(detail::x86Multiply(a, b), product)) {
        failures.add("x86Multiply(" + hexBits(a) + ", " + hexBits(b) + ") = " +
                     hexBits(detail::x86Multiply(a, b)) + ", this CPU says " + hexBits(product));
      }
    }
  }
  failures.throwIfAny();
}
#endif

// The model's rounding (nearest by search over the codes) against half.h's (bit arithmetic),
// for random floats of every exponent: the model is only worth comparing with if it is right.
TEST(hostModelRoundingMatchesTheCpu) {
  Rng rng = rngFor(200);
  Failures failures;
  for (int i = 0; i < 1000000; ++i) {
    const float value = model::floatOf(static_cast<uint32_t>(rng.next()));
    if (std::isnan(value)) continue;
    if (model::roundToHalf(value) != cpu::floatToHalfBits(value)) {
      failures.add("roundToHalf(" + hexBits(value) + ")");
    }
    if (model::roundToBfloat16(value) != cpu::floatToBfloat16Bits(value)) {
      failures.add("roundToBfloat16(" + hexBits(value) + ")");
    }
  }
  failures.throwIfAny();
}

// The alignment plan: a head that aligns every array, or no vectors at all.
TEST(hostVectorSplit) {
  alignas(16) static float floats[64];
  alignas(16) static uint16_t halves[64];
  using detail::ArrayRef;
  using detail::splitForVectors;
  const std::array<ArrayRef, 2> aligned{{{"floats", floats, 4}, {"halves", halves, 2}}};
  CHECK_EQ(splitForVectors(aligned, 20, 8).head, size_t{0});
  CHECK_EQ(splitForVectors(aligned, 20, 8).vectors, size_t{2});
  // Both one element in: 7 more elements reach 16-byte alignment of the halves (and floats + 8).
  const std::array<ArrayRef, 2> shifted{{{"floats", floats + 1, 4}, {"halves", halves + 1, 2}}};
  CHECK_EQ(splitForVectors(shifted, 40, 8).head, size_t{7});
  CHECK_EQ(splitForVectors(shifted, 40, 8).vectors, size_t{4});
  // Shorter than the head: all scalar.
  CHECK_EQ(splitForVectors(shifted, 5, 8).vectors, size_t{0});
  // floats + 1 needs a head of 3 (mod 4), halves + 2 a head of 6 (mod 8): no common head.
  const std::array<ArrayRef, 2> mixed{{{"floats", floats + 1, 4}, {"halves", halves + 2, 2}}};
  CHECK_EQ(splitForVectors(mixed, 64, 8).vectors, size_t{0});
  CHECK_EQ(splitForVectors(mixed, 64, 8).head, size_t{0});
  // floats + 3 and halves + 7: a head of 1 aligns both.
  const std::array<ArrayRef, 2> together{{{"floats", floats + 3, 4}, {"halves", halves + 7, 2}}};
  CHECK_EQ(splitForVectors(together, 64, 8).head, size_t{1});
  CHECK_EQ(splitForVectors(together, 64, 8).vectors, size_t{7});
}
