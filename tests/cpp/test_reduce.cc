// Tests of the reduction kernels (src/reduce). Every result is checked against a reference
// computed here a different way: integers in 64-bit modular arithmetic, floats in double, rounded
// to float16/bfloat16 by this file's own rounding (double arithmetic and nearest-neighbour
// comparisons, not the library's bit tricks). The vector variant is also compared with the
// portable one bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "check.h"
#include "common/cpu_features.h"
#include "reduce/dispatch.h"
#include "reduce/reduce.h"
#include "ringcomm/errors.h"

using namespace ringcomm;
using namespace ringcomm::reduce;

namespace {

// The counts of the matrix: empty, single, shorter than a vector, a vector and a remainder, and a
// prime above a quarter of a million (crosses many blocks and groups, and ends mid-vector).
// Under the sanitizers (RINGCOMM_UNIT_TESTS_QUICK, tests/test_sanitizers.py), where each element
// costs ten times as much, a smaller one that still spans many blocks of every kernel.
const std::vector<size_t>& countsToCheck() {
  static const std::vector<size_t> counts{
      0, 1, 7, 17, std::getenv("RINGCOMM_UNIT_TESTS_QUICK") ? size_t{65539} : size_t{262147}};
  return counts;
}
constexpr size_t kLargestSmallCount = 17;
// Pointers are tested aligned and one element off.
const size_t kOffsets[] = {0, 1};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max,
                         ReduceOp::Prod};
const char* const kOpNames[] = {"Sum", "Avg", "Min", "Max", "Prod"};

const char* opName(ReduceOp op) { return kOpNames[static_cast<int>(op)]; }

// splitmix64: a deterministic generator, so a failure reproduces.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1p-53;
  }
};

// Switches the kernels to the portable variant for a scope, and back even if a CHECK throws.
class PortableScope {
 public:
  explicit PortableScope(bool portable) { forcePortableKernels(portable); }
  ~PortableScope() { forcePortableKernels(false); }
};

uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// --- Reference conversions, written from the format definitions. ---

double refHalfToDouble(uint16_t half) {
  const int exponent = (half >> 10) & 0x1F;
  const int mantissa = half & 0x3FF;
  const double sign = (half & 0x8000) != 0 ? -1.0 : 1.0;
  if (exponent == 0x1F) {
    return mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                         : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

double refBfloat16ToDouble(uint16_t value) {
  return static_cast<double>(floatOf(uint32_t{value} << 16));
}

// Nearest of the codes lo and lo + 1 (their magnitudes given), ties to the even code.
uint16_t nearestEven(double magnitude, uint16_t lo, double loValue, double hiValue) {
  const double below = magnitude - loValue;
  const double above = hiValue - magnitude;
  if (below < above) return lo;
  if (above < below) return static_cast<uint16_t>(lo + 1);
  return (lo & 1) == 0 ? lo : static_cast<uint16_t>(lo + 1);
}

// Rounds a non-NaN float to binary16 in double arithmetic: count the value in units of the
// binary16 ulp at its exponent (exact: a power-of-two scaling), round that count to the nearest
// integer, ties to even (nearbyint in the default rounding mode), and encode count and exponent.
uint16_t refFloatToHalf(float value) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const double magnitude = std::fabs(static_cast<double>(value));
  if (magnitude >= 65520.0) return sign | 0x7C00;  // 65504 plus half an ulp and above
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = f * 2^exponent, f in [0.5, 1)
  // The binary16 exponent; below 2^-14 the subnormals share the ulp of 2^-14.
  const int halfExponent = std::max(exponent - 1, -14);
  const int units = static_cast<int>(std::nearbyint(std::ldexp(magnitude, 10 - halfExponent)));
  if (units < 1024) return sign | static_cast<uint16_t>(units);  // subnormal or zero
  // units is in [1024, 2048]; 2048 carries into the next exponent by itself.
  return sign | static_cast<uint16_t>(((halfExponent + 15) << 10) + units - 1024);
}

// Rounds a non-NaN float to bfloat16: the two neighbours are the truncation and the next code.
uint16_t refFloatToBfloat16(float value) {
  const uint16_t truncated = static_cast<uint16_t>(bitsOf(value) >> 16);
  const uint16_t sign = truncated & 0x8000;
  const uint16_t lo = truncated & 0x7FFF;
  if (lo == 0x7F80) return truncated;  // infinity
  auto valueOf = [](uint16_t code) {
    return code == 0x7F80 ? std::ldexp(1.0, 128) : refBfloat16ToDouble(code);
  };
  const double magnitude = std::fabs(static_cast<double>(value));
  return sign | nearestEven(magnitude, lo, valueOf(lo), valueOf(static_cast<uint16_t>(lo + 1)));
}

// --- One description per data type: storage, reference arithmetic, value generation. ---

double refApply(ReduceOp op, double a, double b) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return a + b;
    case ReduceOp::Prod: return a * b;
    case ReduceOp::Min: return std::isnan(a) || std::isnan(b) ? nan : (a < b ? a : b);
    case ReduceOp::Max: return std::isnan(a) || std::isnan(b) ? nan : (a > b ? a : b);
    case ReduceOp::Adasum: break;  // not element-wise
  }
  return nan;
}

template <typename T, DataType kTypeValue>
struct IntTraits {
  using Storage = T;
  static constexpr DataType kType = kTypeValue;
  static constexpr bool kFloat = false;

  static T random(Rng& rng, size_t) { return static_cast<T>(rng.next()); }
  // Sums and products modulo 2^64, truncated: the wrap-around the kernels must produce.
  static T apply(ReduceOp op, T a, T b) {
    const uint64_t ua = static_cast<uint64_t>(static_cast<int64_t>(a));
    const uint64_t ub = static_cast<uint64_t>(static_cast<int64_t>(b));
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: return static_cast<T>(ua + ub);
      case ReduceOp::Prod: return static_cast<T>(ua * ub);
      case ReduceOp::Min: return a < b ? a : b;
      case ReduceOp::Max: return a > b ? a : b;
      case ReduceOp::Adasum: break;  // not element-wise
    }
    return 0;
  }
  static T fold(ReduceOp op, const std::vector<T>& values) {
    T acc = values[0];
    for (size_t k = 1; k < values.size(); ++k) acc = apply(op, acc, values[k]);
    return acc;
  }
  static T divide(T value, int divisor) {
    return static_cast<T>(static_cast<int64_t>(value) / divisor);  // C++ truncates toward zero
  }
  static double toDouble(T value) { return static_cast<double>(value); }
};

// bool: bytes, reduced logically. Mostly 0 and 1, and now and then another non-zero byte (memory
// can hold one, and it must count as true); results are 0 or 1 (one source is copied as it is).
struct BoolTraits {
  using Storage = uint8_t;
  static constexpr DataType kType = DataType::Bool;
  static constexpr bool kFloat = false;

  static uint8_t random(Rng& rng, size_t) {
    const uint64_t bits = rng.next();
    if ((bits & 0xF) == 0) return static_cast<uint8_t>(bits >> 8) | 2;  // 2..255, never 0 or 1
    return static_cast<uint8_t>((bits >> 4) & 1);
  }
  // Sum and Max: or; Prod and Min: and. Avg reduces as Sum (finishAverage refuses it).
  static uint8_t apply(ReduceOp op, uint8_t a, uint8_t b) {
    const bool either = a != 0 || b != 0;
    const bool both = a != 0 && b != 0;
    return (op == ReduceOp::Prod || op == ReduceOp::Min) ? both : either;
  }
  static uint8_t fold(ReduceOp op, const std::vector<uint8_t>& values) {
    uint8_t acc = values[0];
    for (size_t k = 1; k < values.size(); ++k) acc = apply(op, acc, values[k]);
    return acc;
  }
};

// Special values at fixed positions (NaN, infinities, signed zeros), `regular()` elsewhere.
constexpr size_t kSpecialPeriod = 101;
// Sources shift their positions by this much each (so the first ones land on regular values).
constexpr size_t kSpecialShift = 3;

template <typename Make, typename Regular>
auto specialOr(size_t index, Make make, Regular regular) {
  switch (index % kSpecialPeriod) {
    case 7: return make(std::numeric_limits<float>::quiet_NaN());
    case 13: return make(std::numeric_limits<float>::infinity());
    case 29: return make(-std::numeric_limits<float>::infinity());
    case 41: return make(-0.0f);
    case 53: return make(0.0f);
    default: return regular();
  }
}

template <typename T, DataType kTypeValue>
struct NativeFloatTraits {
  using Storage = T;
  static constexpr DataType kType = kTypeValue;
  static constexpr bool kFloat = true;

  static T random(Rng& rng, size_t index) {
    if (index % kSpecialPeriod == 67) return std::numeric_limits<T>::denorm_min() * 3;
    // Moderate values, so that products of eight stay finite.
    return specialOr(index, [](float v) { return static_cast<T>(v); },
                     [&] { return static_cast<T>(rng.uniform(-4.0, 4.0)); });
  }
  // Rounding the exact double result of one + or * of two floats to float is a single correct
  // rounding (double has more than 2 * 24 + 2 bits), so this is exactly what float32 computes.
  static T fold(ReduceOp op, const std::vector<T>& values) {
    T acc = values[0];
    for (size_t k = 1; k < values.size(); ++k) acc = static_cast<T>(refApply(op, acc, values[k]));
    return acc;
  }
  static T divide(T value, int divisor) {
    return static_cast<T>(value / static_cast<double>(divisor));  // one rounding, as above
  }
  static double toDouble(T value) { return static_cast<double>(value); }
};

// float16 / bfloat16: accumulate in float32, round once at the end.
template <DataType kTypeValue>
struct Widened16Traits {
  using Storage = uint16_t;
  static constexpr DataType kType = kTypeValue;
  static constexpr bool kFloat = true;
  static constexpr bool kHalf = kTypeValue == DataType::Float16;

  static double toDouble(uint16_t value) {
    return kHalf ? halfValueTable()[value] : refBfloat16ToDouble(value);
  }
  // refHalfToDouble of every code, looked up: the reference folds run over millions of elements.
  static const std::vector<double>& halfValueTable() {
    static const std::vector<double> table = [] {
      std::vector<double> values(0x10000);
      for (uint32_t code = 0; code < 0x10000; ++code) {
        values[code] = refHalfToDouble(static_cast<uint16_t>(code));
      }
      return values;
    }();
    return table;
  }
  static uint16_t round(float value) {
    if (std::isnan(value)) return kHalf ? 0x7E00 : 0x7FC0;
    return kHalf ? refFloatToHalf(value) : refFloatToBfloat16(value);
  }
  // Moderate values straight from bits (rounding each through the reference would be slow):
  // random sign and mantissa, exponents from 1/8 to 4. Products of eight can overflow float16,
  // which tests rounding to infinity.
  static uint16_t random(Rng& rng, size_t index) {
    if (index % kSpecialPeriod == 67) return 0x0003;  // a subnormal in both formats
    return specialOr(index, round, [&] {
      const uint64_t bits = rng.next();
      const int mantissaBits = kHalf ? 10 : 7;
      const int exponentBias = kHalf ? 15 : 127;
      const uint32_t exponent = static_cast<uint32_t>(exponentBias - 3 + (bits >> 32) % 5);
      const uint32_t mantissa = static_cast<uint32_t>(bits) & ((1u << mantissaBits) - 1);
      const uint32_t sign = (bits >> 40) & 1;
      return static_cast<uint16_t>(sign << 15 | exponent << mantissaBits | mantissa);
    });
  }
  static uint16_t fold(ReduceOp op, const std::vector<uint16_t>& values) {
    float acc = static_cast<float>(toDouble(values[0]));
    for (size_t k = 1; k < values.size(); ++k) {
      acc = static_cast<float>(refApply(op, acc, toDouble(values[k])));
    }
    return round(acc);
  }
  static uint16_t divide(uint16_t value, int divisor) {
    return round(static_cast<float>(toDouble(value) / divisor));
  }
};

using Int8Traits = IntTraits<int8_t, DataType::Int8>;
using Uint8Traits = IntTraits<uint8_t, DataType::Uint8>;
using Int16Traits = IntTraits<int16_t, DataType::Int16>;
using Int32Traits = IntTraits<int32_t, DataType::Int32>;
using Int64Traits = IntTraits<int64_t, DataType::Int64>;
using Float16Traits = Widened16Traits<DataType::Float16>;
using BFloat16Traits = Widened16Traits<DataType::BFloat16>;
using Float32Traits = NativeFloatTraits<float, DataType::Float32>;
using Float64Traits = NativeFloatTraits<double, DataType::Float64>;

// Equal values; both NaN counts as equal (nanResultsAreCanonical checks which NaN), and
// Min/Max may return either zero when comparing -0 with +0.
template <typename Traits>
bool sameValue(ReduceOp op, typename Traits::Storage got, typename Traits::Storage want) {
  if constexpr (!Traits::kFloat) {
    return got == want;
  } else {
    const double g = Traits::toDouble(got);
    const double w = Traits::toDouble(want);
    if (std::isnan(g) || std::isnan(w)) return std::isnan(g) && std::isnan(w);
    if (g != w) return false;
    const bool eitherZeroOk = op == ReduceOp::Min || op == ReduceOp::Max;
    return eitherZeroOk || std::signbit(g) == std::signbit(w);
  }
}

// How a case calls the kernels.
enum class Call { ReduceInto, ReduceMany, ReduceManyInPlace };
const char* const kCallNames[] = {"reduceInto", "reduceMany", "reduceMany(dst = srcs[0])"};

// The most sources a case uses: two passes of the fused loops plus one (4 + 3 + 1).
constexpr int kMaxSources = 8;

// Random sources and a random initial dst, generated once per (count, offset) and shared by all
// the cases on them. Each has one guard element after the range, and `offset` before it.
template <typename Traits>
struct Inputs {
  using T = typename Traits::Storage;
  size_t count;
  size_t offset;
  std::vector<std::vector<T>> sources;
  std::vector<T> dst;

  Inputs(size_t countValue, size_t offsetValue) : count(countValue), offset(offsetValue) {
    Rng rng{count * 131 + offset};
    const size_t size = offset + count + 1;
    sources.assign(kMaxSources, std::vector<T>(size));
    for (int k = 0; k < kMaxSources; ++k) {
      // Shifted per source, so that special values meet regular ones (and each other) at
      // different positions and in both operand orders.
      const size_t shift = static_cast<size_t>(k) * kSpecialShift;
      for (size_t i = 0; i < size; ++i) sources[k][i] = Traits::random(rng, i + shift);
    }
    dst.resize(size);
    for (size_t i = 0; i < size; ++i) dst[i] = Traits::random(rng, i + 1);
  }
};

// The reference result of reducing the first n sources, element by element.
template <typename Traits>
std::vector<typename Traits::Storage> referenceResult(const Inputs<Traits>& in, ReduceOp op,
                                                      int n) {
  using T = typename Traits::Storage;
  std::vector<T> result(in.count);
  std::vector<T> operands(n);
  for (size_t i = 0; i < in.count; ++i) {
    for (int k = 0; k < n; ++k) operands[k] = in.sources[k][in.offset + i];
    result[i] = Traits::fold(op, operands);
  }
  return result;
}

// Runs one case; returns "" when every element matches `want` and nothing outside
// [offset, offset + count) was written, else what went wrong.
template <typename Traits>
std::string runCase(const Inputs<Traits>& in, ReduceOp op, int n, Call call,
                    const std::vector<typename Traits::Storage>& want) {
  using T = typename Traits::Storage;
  std::vector<T> dst = call == Call::ReduceMany ? in.dst : in.sources[0];
  const std::vector<T> dstBefore = dst;
  std::vector<const void*> pointers;
  for (int k = 0; k < n; ++k) pointers.push_back(in.sources[k].data() + in.offset);
  if (call != Call::ReduceMany) pointers[0] = dst.data() + in.offset;

  if (call == Call::ReduceInto) {
    reduceInto(dst.data() + in.offset, pointers[1], in.count, Traits::kType, op);
  } else {
    reduceMany(dst.data() + in.offset, pointers.data(), n, in.count, Traits::kType, op);
  }

  for (size_t i = 0; i < dst.size(); ++i) {
    const bool inRange = i >= in.offset && i < in.offset + in.count;
    const T expected = inRange ? want[i - in.offset] : dstBefore[i];
    const bool ok = inRange ? sameValue<Traits>(op, dst[i], expected)
                            : std::memcmp(&dst[i], &expected, sizeof(T)) == 0;
    if (!ok) {
      std::ostringstream out;
      out << "dtype " << static_cast<int>(Traits::kType) << " " << opName(op) << " "
          << kCallNames[static_cast<int>(call)] << " n=" << n << " count=" << in.count
          << " offset=" << in.offset << " kernels=" << activeKernelName() << ": element " << i
          << (inRange ? "" : " (outside the range)") << " got " << +dst[i] << " want "
          << +expected;
      return out.str();
    }
  }
  return "";
}

// Every way of reducing the first n sources, on both kernel variants, against one reference.
template <typename Traits>
void checkAllCalls(const Inputs<Traits>& in, ReduceOp op, int n) {
  const auto want = referenceResult(in, op, n);
  for (bool portable : {false, true}) {
    PortableScope scope(portable);
    if (n == 2) CHECK_EQ(runCase(in, op, n, Call::ReduceInto, want), "");
    CHECK_EQ(runCase(in, op, n, Call::ReduceMany, want), "");
    if (n >= 2) CHECK_EQ(runCase(in, op, n, Call::ReduceManyInPlace, want), "");
  }
}

template <typename Traits>
void checkReduceMatrix() {
  for (size_t count : countsToCheck()) {
    for (size_t offset : kOffsets) {
      const Inputs<Traits> inputs(count, offset);
      for (ReduceOp op : kOps) {
        if (count > kLargestSmallCount) {
          // Slow to check, so only source counts that between them run every fused loop across
          // many blocks: 2, 3 (one pass), 6 (4 + 2, in place 3 + 2), 8 (4 + 3 + 1).
          for (int n : {2, 3, 6, kMaxSources}) checkAllCalls(inputs, op, n);
        } else {
          for (int n = 1; n <= kMaxSources; ++n) checkAllCalls(inputs, op, n);
        }
      }
    }
  }
}

template <typename Traits>
void checkFinishAverage() {
  using T = typename Traits::Storage;
  for (bool portable : {false, true}) {
    PortableScope scope(portable);
    for (size_t count : countsToCheck()) {
      for (int divisor : {1, 3, 7, 200}) {
        Rng rng{count + static_cast<uint64_t>(divisor)};
        std::vector<T> buf(count + 2);
        for (size_t i = 0; i < buf.size(); ++i) buf[i] = Traits::random(rng, i);
        const std::vector<T> before = buf;

        // Only Avg divides.
        finishAverage(buf.data() + 1, count, Traits::kType, ReduceOp::Sum, divisor);
        CHECK(std::memcmp(buf.data(), before.data(), buf.size() * sizeof(T)) == 0);

        finishAverage(buf.data() + 1, count, Traits::kType, ReduceOp::Avg, divisor);
        for (size_t i = 0; i < buf.size(); ++i) {
          const bool inRange = i >= 1 && i < count + 1;
          const T want = inRange ? Traits::divide(before[i], divisor) : before[i];
          if (!sameValue<Traits>(ReduceOp::Avg, buf[i], want)) {
            std::ostringstream out;
            out << "finishAverage dtype " << static_cast<int>(Traits::kType) << " divisor "
                << divisor << " element " << i << " of " << count << " got " << +buf[i]
                << " want " << +want << " kernels=" << activeKernelName();
            CHECK_EQ(out.str(), "");
          }
        }
      }
    }
  }
}

// Fills a buffer with random bits: for the float types, every class of value (NaNs with payloads,
// subnormals, infinities) shows up.
void fillRandomBits(std::vector<unsigned char>& bytes, Rng& rng) {
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(rng.next());
}

size_t sizeOf(DataType type) {
  switch (type) {
    case DataType::Int8:
    case DataType::Uint8:
    case DataType::Bool: return 1;
    case DataType::Int16:
    case DataType::Float16:
    case DataType::BFloat16: return 2;
    case DataType::Int32:
    case DataType::Float32: return 4;
    case DataType::Int64:
    case DataType::Float64: return 8;
  }
  return 0;
}

const DataType kTypes[] = {DataType::Int8,    DataType::Uint8,    DataType::Int16,
                           DataType::Int32,   DataType::Int64,    DataType::Float16,
                           DataType::BFloat16, DataType::Float32, DataType::Float64,
                           DataType::Bool};

}  // namespace

// --- Conversions. ---

TEST(halfToFloatMatchesDefinitionForEveryCode) {
  for (uint32_t code = 0; code <= 0xFFFF; ++code) {
    const uint16_t half = static_cast<uint16_t>(code);
    const float got = halfToFloat(half);
    const double want = refHalfToDouble(half);
    if (std::isnan(want)) {
      // Quiet, same sign, payload in the top mantissa bits (what F16C does).
      const uint32_t expected = (uint32_t{half} & 0x8000) << 16 | 0x7FC00000u |
                                (uint32_t{half} & 0x3FF) << 13;
      CHECK_EQ(bitsOf(got), expected);
    } else {
      CHECK_EQ(static_cast<double>(got), want);
      CHECK_EQ(std::signbit(got), std::signbit(want));
    }
  }
}

TEST(halfRoundTripsEveryCode) {
  for (uint32_t code = 0; code <= 0xFFFF; ++code) {
    const uint16_t half = static_cast<uint16_t>(code);
    const bool isNan = (half & 0x7C00) == 0x7C00 && (half & 0x3FF) != 0;
    // A NaN comes back quiet; everything else comes back unchanged.
    CHECK_EQ(floatToHalf(halfToFloat(half)), isNan ? (half | 0x200) : half);
  }
}

TEST(floatToHalfRoundsToNearestEven) {
  CHECK_EQ(floatToHalf(1.0f + 0x1p-11f), 0x3C00);        // tie, even neighbour is 1.0
  CHECK_EQ(floatToHalf(1.0f + 3 * 0x1p-11f), 0x3C02);    // tie, even neighbour is above
  CHECK_EQ(floatToHalf(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);  // just above the tie
  CHECK_EQ(floatToHalf(0x1p-24f), 0x0001);               // smallest subnormal
  CHECK_EQ(floatToHalf(0x1p-25f), 0x0000);               // subnormal tie to zero
  CHECK_EQ(floatToHalf(-0x1p-25f), 0x8000);
  CHECK_EQ(floatToHalf(0x1p-25f * 1.0000001f), 0x0001);  // just above that tie
  CHECK_EQ(floatToHalf(3 * 0x1p-25f), 0x0002);           // subnormal tie up to even
  CHECK_EQ(floatToHalf(1023 * 0x1p-24f), 0x03FF);        // largest subnormal
  CHECK_EQ(floatToHalf(1023.5f * 0x1p-24f), 0x0400);     // rounds into the smallest normal
  CHECK_EQ(floatToHalf(0x1p-14f), 0x0400);
  CHECK_EQ(floatToHalf(65504.0f), 0x7BFF);               // largest finite
  CHECK_EQ(floatToHalf(65519.99f), 0x7BFF);
  CHECK_EQ(floatToHalf(65520.0f), 0x7C00);               // tie between 65504 and 2^16: infinity
  CHECK_EQ(floatToHalf(1e30f), 0x7C00);
  CHECK_EQ(floatToHalf(-std::numeric_limits<float>::infinity()), 0xFC00);
  CHECK_EQ(floatToHalf(-0.0f), 0x8000);
  CHECK_EQ(floatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  CHECK_EQ(floatToHalf(floatOf(0x7F800001u)), 0x7E00);   // signalling NaN comes out quiet
  CHECK_EQ(floatToHalf(floatOf(0xFFC00000u)), 0xFE00);   // sign kept
  CHECK_EQ(floatToHalf(floatOf(0x7FFFE000u)), 0x7FFF);   // payload's top bits kept
}

TEST(floatToHalfMatchesReferenceAtEveryBoundary) {
  // Every midpoint between neighbouring finite halves, and the floats either side of it.
  for (uint16_t code = 0; code < 0x7BFF; ++code) {
    const double mid = (refHalfToDouble(code) + refHalfToDouble(code + 1)) / 2;
    const float midpoint = static_cast<float>(mid);  // 12 significant bits: exact
    for (float probe : {std::nextafter(midpoint, 0.0f), midpoint,
                        std::nextafter(midpoint, 1e9f)}) {
      CHECK_EQ(floatToHalf(probe), refFloatToHalf(probe));
      CHECK_EQ(floatToHalf(-probe), refFloatToHalf(-probe));
    }
  }
  // And a spread of bit patterns over the whole float range.
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 40009) {
    const float value = floatOf(static_cast<uint32_t>(bits));
    if (std::isnan(value)) continue;
    CHECK_EQ(floatToHalf(value), refFloatToHalf(value));
  }
}

TEST(bfloat16ConversionsAndRounding) {
  for (uint32_t code = 0; code <= 0xFFFF; ++code) {
    const uint16_t value = static_cast<uint16_t>(code);
    CHECK_EQ(bitsOf(bfloat16ToFloat(value)), uint32_t{value} << 16);
    const bool isNan = (value & 0x7F80) == 0x7F80 && (value & 0x7F) != 0;
    CHECK_EQ(floatToBfloat16(bfloat16ToFloat(value)), isNan ? (value | 0x40) : value);
  }
  CHECK_EQ(floatToBfloat16(1.0f + 0x1p-8f), 0x3F80);      // tie, even neighbour is 1.0
  CHECK_EQ(floatToBfloat16(1.0f + 3 * 0x1p-8f), 0x3F82);  // tie, even neighbour is above
  CHECK_EQ(floatToBfloat16(floatOf(0x7F7F8000u)), 0x7F80);  // max + half an ulp: infinity
  CHECK_EQ(floatToBfloat16(floatOf(0x7F7F7FFFu)), 0x7F7F);
  CHECK_EQ(floatToBfloat16(floatOf(0x7F800001u)), 0x7FC0);  // NaN with low payload stays NaN
  CHECK_EQ(floatToBfloat16(floatOf(0xFF800001u)), 0xFFC0);
  CHECK_EQ(floatToBfloat16(floatOf(0x00018000u)), 0x0002);  // subnormal tie up to even
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 40009) {
    const float value = floatOf(static_cast<uint32_t>(bits));
    if (std::isnan(value)) continue;
    CHECK_EQ(floatToBfloat16(value), refFloatToBfloat16(value));
  }
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hardwareFloatToHalf(float value) {
  return static_cast<uint16_t>(_cvtss_sh(value, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) static float hardwareHalfToFloat(uint16_t value) {
  return _cvtsh_ss(value);
}

TEST(softwareHalfMatchesF16c) {
  if (!__builtin_cpu_supports("avx") || !cpu::hasF16c()) return;
  for (uint32_t code = 0; code <= 0xFFFF; ++code) {
    const uint16_t half = static_cast<uint16_t>(code);
    CHECK_EQ(bitsOf(halfToFloat(half)), bitsOf(hardwareHalfToFloat(half)));
  }
  // A dense spread of float bit patterns, NaNs included (the exhaustive 2^32 sweep was run once).
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 4099) {
    const float value = floatOf(static_cast<uint32_t>(bits));
    CHECK_EQ(floatToHalf(value), hardwareFloatToHalf(value));
  }
}
#endif

// --- Reductions against the reference, every dtype x op x count x offset, both variants. ---

TEST(reduceInt8) { checkReduceMatrix<Int8Traits>(); }
TEST(reduceUint8) { checkReduceMatrix<Uint8Traits>(); }
TEST(reduceInt16) { checkReduceMatrix<Int16Traits>(); }
TEST(reduceInt32) { checkReduceMatrix<Int32Traits>(); }
TEST(reduceInt64) { checkReduceMatrix<Int64Traits>(); }
TEST(reduceFloat16) { checkReduceMatrix<Float16Traits>(); }
TEST(reduceBFloat16) { checkReduceMatrix<BFloat16Traits>(); }
TEST(reduceFloat32) { checkReduceMatrix<Float32Traits>(); }
TEST(reduceFloat64) { checkReduceMatrix<Float64Traits>(); }
TEST(reduceBool) { checkReduceMatrix<BoolTraits>(); }

TEST(finishAverageInt8) { checkFinishAverage<Int8Traits>(); }
TEST(finishAverageUint8) { checkFinishAverage<Uint8Traits>(); }
TEST(finishAverageInt16) { checkFinishAverage<Int16Traits>(); }
TEST(finishAverageInt32) { checkFinishAverage<Int32Traits>(); }
TEST(finishAverageInt64) { checkFinishAverage<Int64Traits>(); }
TEST(finishAverageFloat16) { checkFinishAverage<Float16Traits>(); }
TEST(finishAverageBFloat16) { checkFinishAverage<BFloat16Traits>(); }
TEST(finishAverageFloat32) { checkFinishAverage<Float32Traits>(); }
TEST(finishAverageFloat64) { checkFinishAverage<Float64Traits>(); }

// --- Semantics spelled out on single elements. ---

TEST(integerSumAndProdWrapAround) {
  int8_t i8[2] = {127, -128};
  const int8_t one8[2] = {1, -1};
  reduceInto(i8, one8, 2, DataType::Int8, ReduceOp::Sum);
  CHECK_EQ(+i8[0], -128);
  CHECK_EQ(+i8[1], 127);

  uint8_t u8 = 255;
  const uint8_t two8 = 2;
  reduceInto(&u8, &two8, 1, DataType::Uint8, ReduceOp::Prod);
  CHECK_EQ(+u8, 254);

  int16_t i16[2] = {32767, -32768};
  const int16_t one16[2] = {1, -1};
  reduceInto(i16, one16, 2, DataType::Int16, ReduceOp::Sum);
  CHECK_EQ(i16[0], -32768);
  CHECK_EQ(i16[1], 32767);
  // -1 * -1 and -32768 * -1: as unsigned 16-bit values 65535 * 65535 and 32768 * 65535, which
  // overflow int (where C++ promotes uint16_t): the kernels must multiply in unsigned int.
  int16_t p16[3] = {-1, -32768, 300};
  const int16_t m16[3] = {-1, -1, 300};
  reduceInto(p16, m16, 3, DataType::Int16, ReduceOp::Prod);
  CHECK_EQ(p16[0], 1);
  CHECK_EQ(p16[1], -32768);
  CHECK_EQ(p16[2], static_cast<int16_t>(90000 - 65536));

  int32_t i32 = std::numeric_limits<int32_t>::max();
  const int32_t one32 = 1;
  reduceInto(&i32, &one32, 1, DataType::Int32, ReduceOp::Sum);
  CHECK_EQ(i32, std::numeric_limits<int32_t>::min());

  int64_t i64 = int64_t{1} << 62;
  const int64_t four = 4;
  reduceInto(&i64, &four, 1, DataType::Int64, ReduceOp::Prod);
  CHECK_EQ(i64, 0);
}

TEST(boolIsLogicalAndResultsAreZeroOrOne) {
  // Every op on every pair of (false, true, a non-canonical true), in both kernel variants.
  const uint8_t a[9] = {0, 0, 0, 1, 1, 1, 7, 7, 7};
  const uint8_t b[9] = {0, 1, 7, 0, 1, 7, 0, 1, 7};
  const uint8_t either[9] = {0, 1, 1, 1, 1, 1, 1, 1, 1};
  const uint8_t both[9] = {0, 0, 0, 0, 1, 1, 0, 1, 1};
  for (bool portable : {false, true}) {
    PortableScope scope(portable);
    for (ReduceOp op : kOps) {
      uint8_t out[9];
      std::memcpy(out, a, sizeof out);
      reduceInto(out, b, 9, DataType::Bool, op);
      const bool isAnd = op == ReduceOp::Prod || op == ReduceOp::Min;
      CHECK(std::memcmp(out, isAnd ? both : either, sizeof out) == 0);
    }
  }
  // 32 trues summed (through several fused passes): 1, not 32.
  std::vector<uint8_t> ones(32, 1);
  std::vector<const void*> srcs(32, ones.data());
  uint8_t sum = 0;
  reduceMany(&sum, srcs.data(), 32, 1, DataType::Bool, ReduceOp::Sum);
  CHECK_EQ(+sum, 1);
}

TEST(averageOfBoolIsRefused) {
  uint8_t flags[2] = {1, 0};
  bool threw = false;
  try {
    finishAverage(flags, 2, DataType::Bool, ReduceOp::Avg, 2);
  } catch (const InvalidArgument& error) {
    threw = std::string(error.what()).find("bool") != std::string::npos;
  }
  CHECK(threw);
  finishAverage(flags, 2, DataType::Bool, ReduceOp::Sum, 2);  // not Avg: nothing happens
  CHECK(flags[0] == 1 && flags[1] == 0);
}

TEST(minMaxPropagateNanFromEitherSide) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (bool portable : {false, true}) {
    PortableScope scope(portable);
    for (ReduceOp op : {ReduceOp::Min, ReduceOp::Max}) {
      float f32[2] = {nan, 1.0f};
      const float other32[2] = {1.0f, nan};
      reduceInto(f32, other32, 2, DataType::Float32, op);
      CHECK(std::isnan(f32[0]) && std::isnan(f32[1]));

      double f64[2] = {nan, 1.0};
      const double other64[2] = {1.0, nan};
      reduceInto(f64, other64, 2, DataType::Float64, op);
      CHECK(std::isnan(f64[0]) && std::isnan(f64[1]));

      uint16_t h[2] = {0x7E00, 0x3C00};
      const uint16_t otherH[2] = {0x3C00, 0x7E00};
      reduceInto(h, otherH, 2, DataType::Float16, op);
      CHECK(std::isnan(halfToFloat(h[0])) && std::isnan(halfToFloat(h[1])));

      uint16_t b[2] = {0x7FC0, 0x3F80};
      const uint16_t otherB[2] = {0x3F80, 0x7FC0};
      reduceInto(b, otherB, 2, DataType::BFloat16, op);
      CHECK(std::isnan(bfloat16ToFloat(b[0])) && std::isnan(bfloat16ToFloat(b[1])));
    }
  }
}

TEST(nanResultsAreCanonical) {
  // Whatever the payloads and signs, and in either operand order, a NaN result has one bit
  // pattern: otherwise NaN + NaN would depend on how the compiler ordered the operands.
  for (bool portable : {false, true}) {
    PortableScope scope(portable);
    for (ReduceOp op : kOps) {
      uint32_t f32[3] = {0x7F800001u, 0xFFC99999u, 0x3F800000u};
      const uint32_t other32[3] = {0xFFC99999u, 0x7F800001u, 0xFFC12345u};
      reduceInto(f32, other32, 3, DataType::Float32, op);
      for (uint32_t bits : f32) CHECK_EQ(bits, 0x7FC00000u);

      uint64_t f64[2] = {0xFFF8000000000123ull, 0x3FF0000000000000ull};
      const uint64_t other64[2] = {0x7FF0000000000001ull, 0xFFF8000000000456ull};
      reduceInto(f64, other64, 2, DataType::Float64, op);
      for (uint64_t bits : f64) CHECK_EQ(bits, 0x7FF8000000000000ull);

      uint16_t h[2] = {0x7C01, 0x3C00};
      const uint16_t otherH[2] = {0xFE55, 0xFE55};
      reduceInto(h, otherH, 2, DataType::Float16, op);
      for (uint16_t bits : h) CHECK_EQ(bits, 0x7E00);

      uint16_t b[2] = {0x7F81, 0x3F80};
      const uint16_t otherB[2] = {0xFFD5, 0xFFD5};
      reduceInto(b, otherB, 2, DataType::BFloat16, op);
      for (uint16_t bits : b) CHECK_EQ(bits, 0x7FC0);
    }
  }
}

TEST(halfReduceManyRoundsOnceAtTheEnd) {
  // 2048 + 1 + 1: rounding after each step would lose both ones (2049 is a tie that rounds to
  // 2048); accumulating in float32 keeps them and gives 2050 exactly.
  const uint16_t a = floatToHalf(2048.0f);
  const uint16_t one = floatToHalf(1.0f);
  const void* srcs[3] = {&a, &one, &one};
  uint16_t out = 0;
  reduceMany(&out, srcs, 3, 1, DataType::Float16, ReduceOp::Sum);
  CHECK_EQ(halfToFloat(out), 2050.0f);

  uint16_t stepwise = a;
  reduceInto(&stepwise, &one, 1, DataType::Float16, ReduceOp::Sum);
  reduceInto(&stepwise, &one, 1, DataType::Float16, ReduceOp::Sum);
  CHECK_EQ(halfToFloat(stepwise), 2048.0f);
}

TEST(badArgumentsThrow) {
  float value = 1.0f;
  const void* srcs[1] = {&value};
  bool threw = false;
  try {
    reduceMany(&value, srcs, 0, 1, DataType::Float32, ReduceOp::Sum);
  } catch (const InvalidArgument&) {
    threw = true;
  }
  CHECK(threw);

  threw = false;
  try {
    finishAverage(&value, 1, DataType::Float32, ReduceOp::Avg, 0);
  } catch (const InvalidArgument&) {
    threw = true;
  }
  CHECK(threw);
  finishAverage(&value, 1, DataType::Float32, ReduceOp::Sum, 0);  // not Avg: nothing to check

  threw = false;
  try {
    reduceInto(&value, &value, 1, static_cast<DataType>(99), ReduceOp::Sum);
  } catch (const InvalidArgument&) {
    threw = true;
  }
  CHECK(threw);
}

// --- The vector variant gives the portable variant's bits, on random bit patterns. ---

TEST(vectorAndPortableKernelsAgreeBitwise) {
  constexpr size_t kCount = 100003;
  Rng rng{2024};
  for (DataType type : kTypes) {
    const size_t bytes = (kCount + 1) * sizeOf(type);
    const size_t offset = sizeOf(type);  // one element in
    std::vector<std::vector<unsigned char>> sources(kMaxSources,
                                                    std::vector<unsigned char>(bytes));
    for (auto& source : sources) fillRandomBits(source, rng);
    std::vector<const void*> pointers;
    for (auto& source : sources) pointers.push_back(source.data() + offset);

    // Every entry point on the same inputs, the outputs appended into one buffer.
    auto runAll = [&](ReduceOp op) {
      std::vector<unsigned char> out = sources[0];
      reduceInto(out.data() + offset, pointers[1], kCount, type, op);

      std::vector<unsigned char> many(bytes);
      reduceMany(many.data() + offset, pointers.data(), kMaxSources, kCount, type, op);
      out.insert(out.end(), many.begin(), many.end());

      std::vector<unsigned char> inPlace = sources[0];
      std::vector<const void*> inPlacePointers = pointers;
      inPlacePointers[0] = inPlace.data() + offset;
      reduceMany(inPlace.data() + offset, inPlacePointers.data(), 6, kCount, type, op);
      out.insert(out.end(), inPlace.begin(), inPlace.end());

      std::vector<unsigned char> average = sources[2];  // random bits, NaN payloads included
      if (type != DataType::Bool) finishAverage(average.data() + offset, kCount, type, op, 3);
      out.insert(out.end(), average.begin(), average.end());
      return out;
    };

    for (ReduceOp op : kOps) {
      std::vector<unsigned char> vector;
      std::vector<unsigned char> portable;
      vector = runAll(op);
      {
        PortableScope scope(true);
        portable = runAll(op);
      }
      if (vector != portable) {
        CHECK_EQ("dtype " + std::to_string(static_cast<int>(type)) + " " + opName(op) +
                     ": vector and portable results differ",
                 "");
      }
    }
  }
  // Says which variant was compared; on a CPU without AVX2 both runs were portable.
  std::cout << "  (vector variant compared: " << activeKernelName() << ")\n";
}
