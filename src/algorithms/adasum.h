// Adasum (ReduceOp::Adasum): Horovod's adaptive summation, an all-reduce that is not element-wise.
// Two vectors a and b combine into
//
//     a' = (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b
//
// (a sum when a and b are orthogonal, their average when they are parallel), and p = 2^k ranks
// combine pairwise up a binary tree: ranks 2i and 2i+1 first, then the pairs {0,1} and {2,3}, and
// so on, the lower group's vector always the left operand a.
//
// Vocabulary:
//   level    - one round of the tree; at distance d = 1, 2, 4, ..., p/2 every rank r pairs with
//              r ^ d, and the groups of 2d ranks (those sharing r / 2d) each hold one combined
//              vector, spread over their ranks
//   range    - the elements a rank still holds at a level; it starts as the whole vector
//   keep     - the half of its range a rank keeps at a level: the left rank (r & d == 0) the
//              first half (range >> 1 elements), the right rank the rest
//   give     - the other half, which the peer keeps
//   tensors  - a fused buffer holds several tensors back to back (AllreduceOptions::tensorCounts);
//              each has its own dot product and norms, so each combines as if it were alone
//
// The schedule is Horovod's vector halving, distance doubling (VHDD): at each level a rank sends
// its peer the half it gives and receives the peer's copy of the half it keeps, so that the two
// halves of the pair's vectors meet on different ranks. The dot product and the squared norms
// are sums over every element of the vectors, which now lie across the whole group of 2d ranks:
// each rank computes its part of them (float64, in element order) and the group sums those
// parts (float64, recursive doubling within the group: partners at distance 1, 2, ..., d), so
// every rank of the group applies the same coefficients to its slice. After the last level each
// rank owns one slice of the result; the levels then run backwards, sending the owned range and
// receiving the peer's, until every rank holds the whole vector.
//
// Rounding. Partial dot products and norms: each element widened to float64, accumulated in
// element order. The group's sums: at partner distance j, (the lower j ranks' sum) + (the upper
// j ranks' sum), the same bits on both sides (IEEE addition commutes). The combination:
// float32 and float64 in float64, a' = T(ca * a + cb * b), as Horovod's portable loop; float16
// and bfloat16 in float32 with the coefficients rounded to float32, as Horovod's F16C loop (which
// bfloat16 lacks in Horovod), then rounded to nearest even. No fused multiply-add (the library is
// built for the baseline ISA). Each element of the result is computed by one rank and copied to
// the others, so every rank holds the same bits.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/context.h"
#include "plan/plan.h"
#include "ringcomm/types.h"

namespace ringcomm::plan {

struct AdasumLevel {
  int distance;  // 1, 2, 4, ...
  int peer;      // rank ^ distance
  bool left;     // (rank & distance) == 0: keeps the first half and is the operand a
  Block keep;    // received and combined at halving, sent at doubling
  Block give;    // sent at halving, received at doubling
};

bool isPowerOfTwo(int n);

// The levels in halving order; none for one rank. size must be a power of two.
std::vector<AdasumLevel> planAdasum(int rank, int size, size_t count);

// How many elements of each tensor lie in `block`, for tensors of `counts` elements back to back.
std::vector<size_t> tensorCountsIn(const std::vector<size_t>& counts, const Block& block);

}  // namespace ringcomm::plan

namespace ringcomm::algorithms {

// The Adasum all-reduce of `count` elements (input may equal output). tensorCounts: the tensors
// of a fused buffer (empty: one tensor). size must be a power of two; type a floating-point one.
void adasumAllreduce(const Context& ctx, const void* input, void* output, size_t count,
                     DataType type, const std::vector<size_t>& tensorCounts);

namespace adasum {

// The element kernels, exposed for the unit tests.
struct DotAndNorms {
  double dot = 0.0;      // sum of a[i] * b[i]
  double aNormSq = 0.0;  // sum of a[i] * a[i]
  double bNormSq = 0.0;  // sum of b[i] * b[i]
};
DotAndNorms dotAndNorms(const void* a, const void* b, size_t count, DataType type);

// 1 - dot / (2 normSq), or 1 when normSq is below sqrt(DBL_MIN) (a vector of zeros, or one too
// small to divide by: it is then added as it is), as Horovod does.
double coefficient(double dot, double normSq);

// a[i] = ca * a[i] + cb * b[i] (see the rounding rules above).
void combine(void* a, const void* b, size_t count, DataType type, double ca, double cb);

}  // namespace adasum
}  // namespace ringcomm::algorithms
