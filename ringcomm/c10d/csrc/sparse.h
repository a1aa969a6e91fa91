// all_reduce of sparse COO tensors, as gloo does it: every rank's coalesced indices and values
// are all-gathered (ranks may hold different numbers of non-zeros), and every rank adds them up
// into one coalesced tensor. Each rank sums the same gathered rows in the same order, so every
// rank gets the same bits. Only SUM, as in gloo.
//
// These are the pure parts: describing a rank's tensor in a fixed number of words (so the
// descriptions travel in one all-gather), checking that the ranks agree, and the local sum.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace ringcomm::c10d_backend {

// Words in a rank's description: sparse dims, dense dims, non-zeros, dims, and the sizes.
constexpr int64_t kMaxSparseTensorDims = 16;
constexpr int64_t kSparseLayoutWords = 4 + kMaxSparseTensorDims;

// The description of a coalesced sparse tensor (refuses more than kMaxSparseTensorDims dims).
at::Tensor sparseLayoutOf(const at::Tensor& coalesced);

// Every rank's non-zeros, from the all-gathered descriptions (size x kSparseLayoutWords); throws
// a ValueError naming two ranks whose shapes or sparse/dense split differ.
std::vector<int64_t> nonZerosByRank(const at::Tensor& layouts, int size);

// The sum of every rank's rows: `indices` [total, sparse dims] and `values` [total, dense...], in
// rank order, added up into one coalesced tensor of the caller's shape.
at::Tensor sumOfGathered(const at::Tensor& indices, const at::Tensor& values,
                         const at::Tensor& like);

}  // namespace ringcomm::c10d_backend
