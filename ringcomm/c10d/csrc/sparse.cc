#include "sparse.h"

#include <c10/util/Exception.h>

namespace ringcomm::c10d_backend {
namespace {

constexpr int64_t kSparseDims = 0;
constexpr int64_t kDenseDims = 1;
constexpr int64_t kNonZeros = 2;
constexpr int64_t kDims = 3;
constexpr int64_t kSizes = 4;

}  // namespace

at::Tensor sparseLayoutOf(const at::Tensor& coalesced) {
  const int64_t dims = coalesced.dim();
  TORCH_CHECK_VALUE(dims <= kMaxSparseTensorDims, "ringcomm all_reduce: sparse tensors of up to ",
                    kMaxSparseTensorDims, " dimensions are supported; got ", dims);
  at::Tensor layout = at::zeros({kSparseLayoutWords}, at::kLong);
  auto* words = layout.data_ptr<int64_t>();
  words[kSparseDims] = coalesced.sparse_dim();
  words[kDenseDims] = coalesced.dense_dim();
  words[kNonZeros] = coalesced._nnz();
  words[kDims] = dims;
  for (int64_t d = 0; d < dims; ++d) words[kSizes + d] = coalesced.size(d);
  return layout;
}

std::vector<int64_t> nonZerosByRank(const at::Tensor& layouts, int size) {
  const auto* words = layouts.data_ptr<int64_t>();
  const auto shapeOf = [&](int rank) {
    const int64_t* at = words + rank * kSparseLayoutWords;
    std::vector<int64_t> shape{at[kSparseDims], at[kDenseDims], at[kDims]};
    shape.insert(shape.end(), at + kSizes, at + kSizes + at[kDims]);
    return shape;
  };
  const std::vector<int64_t> first = shapeOf(0);
  std::vector<int64_t> nonZeros;
  for (int r = 0; r < size; ++r) {
    TORCH_CHECK_VALUE(shapeOf(r) == first, "ringcomm all_reduce: ranks 0 and ", r,
                      " passed sparse tensors of different sizes or sparse/dense dimensions (",
                      c10::IntArrayRef(first), " against ", c10::IntArrayRef(shapeOf(r)),
                      ", as [sparse dims, dense dims, dims, sizes...])");
    nonZeros.push_back(words[r * kSparseLayoutWords + kNonZeros]);
  }
  return nonZeros;
}

at::Tensor sumOfGathered(const at::Tensor& indices, const at::Tensor& values,
                         const at::Tensor& like) {
  // coalesce() adds up the rows that share an index, in the order they come: the same on every
  // rank, since every rank holds the same gathered rows.
  return at::sparse_coo_tensor(indices.t(), values, like.sizes(),
                               values.options().layout(at::kSparse))
      .coalesce();
}

}  // namespace ringcomm::c10d_backend
