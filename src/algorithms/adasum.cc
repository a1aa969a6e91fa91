// Adasum's schedule and element kernels; adasum.h defines the vocabulary and the rounding.
#include "algorithms/adasum.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/bytes.h"
#include "reduce/half.h"
#include "ringcomm/errors.h"

namespace ringcomm::plan {

bool isPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

std::vector<AdasumLevel> planAdasum(int rank, int size, size_t count) {
  std::vector<AdasumLevel> levels;
  Block range{0, count};
  for (int distance = 1; distance < size; distance <<= 1) {
    AdasumLevel level;
    level.distance = distance;
    level.peer = rank ^ distance;
    level.left = (rank & distance) == 0;
    // Horovod's split: the left rank keeps the first range / 2 elements (rounded down).
    const Block first{range.offset, range.count >> 1};
    const Block second{range.offset + first.count, range.count - first.count};
    level.keep = level.left ? first : second;
    level.give = level.left ? second : first;
    levels.push_back(level);
    range = level.keep;
  }
  return levels;
}

std::vector<size_t> tensorCountsIn(const std::vector<size_t>& counts, const Block& block) {
  std::vector<size_t> inside(counts.size(), 0);
  const size_t end = block.offset + block.count;
  size_t start = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const size_t tensorEnd = start + counts[i];
    const size_t from = start > block.offset ? start : block.offset;
    const size_t to = tensorEnd < end ? tensorEnd : end;
    if (to > from) inside[i] = to - from;
    start = tensorEnd;
  }
  return inside;
}

}  // namespace ringcomm::plan

namespace ringcomm::algorithms {
namespace adasum {
namespace {

using reduce::detail::bfloat16BitsToFloat;
using reduce::detail::floatToBfloat16Bits;
using reduce::detail::floatToHalfBits;
using reduce::detail::halfBitsToFloat;

// Each type's element as the float the kernels compute with, and back.
struct Half {
  using Stored = uint16_t;
  static float widen(uint16_t v) { return halfBitsToFloat(v); }
  static uint16_t narrow(float v) { return floatToHalfBits(v); }
};
struct BFloat16 {
  using Stored = uint16_t;
  static float widen(uint16_t v) { return bfloat16BitsToFloat(v); }
  static uint16_t narrow(float v) { return floatToBfloat16Bits(v); }
};

// Three independent float64 sums, each in element order: the compiler may not reorder them
// (no -ffast-math), so every build gives the same bits, and tests can reproduce them.
template <typename T, typename Widen>
DotAndNorms sums(const T* a, const T* b, size_t count, Widen widen) {
  DotAndNorms result;
  for (size_t i = 0; i < count; ++i) {
    const double x = widen(a[i]);
    const double y = widen(b[i]);
    result.dot += x * y;
    result.aNormSq += x * x;
    result.bNormSq += y * y;
  }
  return result;
}

template <typename T>
void combineWide(T* a, const T* b, size_t count, double ca, double cb) {
  for (size_t i = 0; i < count; ++i) {
    a[i] = static_cast<T>(ca * static_cast<double>(a[i]) + cb * static_cast<double>(b[i]));
  }
}

template <typename Format>
void combineNarrow(uint16_t* a, const uint16_t* b, size_t count, double ca, double cb) {
  const float fa = static_cast<float>(ca);
  const float fb = static_cast<float>(cb);
  for (size_t i = 0; i < count; ++i) {
    const float scaledA = fa * Format::widen(a[i]);
    const float scaledB = fb * Format::widen(b[i]);
    a[i] = Format::narrow(scaledA + scaledB);
  }
}

[[noreturn]] void refuseType(DataType type) {
  throw InvalidArgument(std::string("allreduce: op adasum needs floating-point data (float16, "
                                    "bfloat16, float32, float64); got ") +
                        toString(type));
}

}  // namespace

DotAndNorms dotAndNorms(const void* a, const void* b, size_t count, DataType type) {
  switch (type) {
    case DataType::Float16:
      return sums(static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), count,
                  Half::widen);
    case DataType::BFloat16:
      return sums(static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), count,
                  BFloat16::widen);
    case DataType::Float32:
      return sums(static_cast<const float*>(a), static_cast<const float*>(b), count,
                  [](float v) { return static_cast<double>(v); });
    case DataType::Float64:
      return sums(static_cast<const double*>(a), static_cast<const double*>(b), count,
                  [](double v) { return v; });
    default: refuseType(type);
  }
}

double coefficient(double dot, double normSq) {
  // Below sqrt(DBL_MIN) the division could overflow or lose everything: Horovod keeps the
  // vector as it is, which also makes a vector of zeros (a joined rank's) neutral.
  static const double kSmallest = std::sqrt(DBL_MIN);
  return normSq >= kSmallest ? 1.0 - dot / normSq * 0.5 : 1.0;
}

void combine(void* a, const void* b, size_t count, DataType type, double ca, double cb) {
  switch (type) {
    case DataType::Float16:
      return combineNarrow<Half>(static_cast<uint16_t*>(a), static_cast<const uint16_t*>(b),
                                 count, ca, cb);
    case DataType::BFloat16:
      return combineNarrow<BFloat16>(static_cast<uint16_t*>(a), static_cast<const uint16_t*>(b),
                                     count, ca, cb);
    case DataType::Float32:
      return combineWide(static_cast<float*>(a), static_cast<const float*>(b), count, ca, cb);
    case DataType::Float64:
      return combineWide(static_cast<double*>(a), static_cast<const double*>(b), count, ca, cb);
    default: refuseType(type);
  }
}

}  // namespace adasum

namespace {

// Sums `sums` (three float64 per tensor) over the group of 2 * distance ranks this rank belongs
// to at a level, by recursive doubling: afterwards every rank of the group holds the same bits.
void sumOverGroup(const Context& ctx, std::vector<double>& sums, std::vector<double>& theirs,
                  int distance) {
  const size_t bytes = sums.size() * sizeof(double);
  theirs.resize(sums.size());
  for (int partnerDistance = 1; partnerDistance <= distance; partnerDistance <<= 1) {
    const int partner = ctx.rank ^ partnerDistance;
    auto send = ctx.send(partner, sums.data(), bytes);
    auto recv = ctx.recv(partner, theirs.data(), bytes);
    ctx.wait(recv);
    ctx.wait(send);  // sums is about to change
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += theirs[i];
  }
}

}  // namespace

void adasumAllreduce(const Context& ctx, const void* input, void* output, size_t count,
                     DataType type, const std::vector<size_t>& tensorCounts) {
  if (!plan::isPowerOfTwo(ctx.size)) {
    throw InvalidArgument("allreduce: op adasum needs a power-of-two number of ranks; this "
                          "communicator has " + std::to_string(ctx.size));
  }
  const size_t element = elementSize(type);
  const size_t bytes = count * element;
  if (input != output) copyBytes(output, input, bytes);
  if (ctx.size == 1 || count == 0) return;

  uint8_t* out = static_cast<uint8_t*>(output);
  auto at = [&](const plan::Block& block) { return out + block.offset * element; };
  const std::vector<size_t> tensors = tensorCounts.empty() ? std::vector<size_t>{count}
                                                           : tensorCounts;
  const std::vector<plan::AdasumLevel> levels = plan::planAdasum(ctx.rank, ctx.size, count);
  // The peer's copy of the half kept: the first level's is the largest.
  uint8_t* received = ctx.scratch.get(ScratchBuffer::Received, std::max<size_t>(levels.front().keep.count * element, 1));
  std::vector<double> sums(3 * tensors.size());
  std::vector<double> theirs;

  for (const plan::AdasumLevel& level : levels) {
    ctx.send(level.peer, at(level.give), level.give.count * element);
    auto request =
        ctx.recv(level.peer, received, level.keep.count * element);
    ctx.wait(request);

    // This rank's part of each tensor's dot product and norms, as (dot, |left|^2, |right|^2).
    const std::vector<size_t> here = plan::tensorCountsIn(tensors, level.keep);
    size_t offset = 0;
    for (size_t i = 0; i < here.size(); ++i) {
      const adasum::DotAndNorms part =
          adasum::dotAndNorms(at(level.keep) + offset, received + offset, here[i], type);
      sums[3 * i] = part.dot;
      sums[3 * i + 1] = level.left ? part.aNormSq : part.bNormSq;
      sums[3 * i + 2] = level.left ? part.bNormSq : part.aNormSq;
      offset += here[i] * element;
    }
    sumOverGroup(ctx, sums, theirs, level.distance);

    offset = 0;
    for (size_t i = 0; i < here.size(); ++i) {
      const double dot = sums[3 * i];
      const double leftCoefficient = adasum::coefficient(dot, sums[3 * i + 1]);
      const double rightCoefficient = adasum::coefficient(dot, sums[3 * i + 2]);
      adasum::combine(at(level.keep) + offset, received + offset, here[i], type,
                      level.left ? leftCoefficient : rightCoefficient,
                      level.left ? rightCoefficient : leftCoefficient);
      offset += here[i] * element;
    }
  }
  // The halving sends read ranges the doubling receives overwrite: let them drain first.
  ctx.waitAll();

  for (auto level = levels.rbegin(); level != levels.rend(); ++level) {
    ctx.send(level->peer, at(level->keep), level->keep.count * element);
    ctx.recv(level->peer, at(level->give), level->give.count * element);
    ctx.waitAll();
  }
}

}  // namespace ringcomm::algorithms
