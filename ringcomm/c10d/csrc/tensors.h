// From torch tensors to the core's (pointer, count, element type) buffers: which dtypes each kind
// of operation accepts, and the staging a non-contiguous tensor needs.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Stream.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ringcomm/types.h"

namespace ringcomm::c10d_backend {

struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  DataType type = DataType::Uint8;
};

// The arrays of a collective's options: `counted`'s elements, from `input` into `output`.
template <typename Options>
void setArrays(Options& o, const void* input, void* output, const Buffer& counted) {
  o.input = input;
  o.output = output;
  o.count = counted.count;
  o.type = counted.type;
}

// A reduction on `tensor` with torch's `op`: the core's element type and operator. Complex sums
// reduce their real and imaginary parts as floats; bool reduces logically (SUM and MAX are or,
// PRODUCT and MIN and, so the result stays a valid bool; AVG is refused). Anything else is
// refused, naming op and dtype.
struct Reduction {
  DataType type;
  ReduceOp op;
  bool viewAsReal = false;
};
Reduction reductionFor(const at::Tensor& tensor, const ::c10d::ReduceOp& op, const char* operation);

// The buffer of a contiguous tensor for a reduction (after reductionFor).
Buffer reducible(const at::Tensor& tensor, const Reduction& reduction);
// The buffer of a contiguous tensor for an operation that only moves data: its own element type
// where the core has it (so ranks that disagree on it get a MismatchError), else raw bytes.
Buffer movable(const at::Tensor& tensor);

// How many of the core's elements one element of this dtype is: 1 where the core has the type,
// else its size in bytes (the core moves it as raw bytes).
size_t coreUnitsPerElement(const at::Tensor& tensor);

// Checks that every tensor is a dense CPU or CUDA tensor, naming the operation and argument
// otherwise.
void requireDense(const at::Tensor& tensor, const char* operation, const char* argument);
void requireDense(const std::vector<at::Tensor>& tensors, const char* operation,
                  const char* argument);

// Checks an output tensor against its input: both dense, the output of the input's dtype.
void requireDensePair(const at::Tensor& output, const at::Tensor& input, const char* operation);
void requireOutputDtype(const at::Tensor& output, const at::Tensor& input, const char* operation);
// Checks that `whole` holds world size (`size`) times the elements of `part`: the output of
// all_gather_into_tensor, the input of reduce_scatter_tensor.
void requireWorldSizeTimes(const at::Tensor& whole, const char* wholeName, const at::Tensor& part,
                           const char* partName, int64_t size, const char* operation);

// Where an operation's tensors live. For CUDA tensors: the device and the stream torch currently
// queues work on there, which the core orders the collective after (and makes wait for it).
// Found through c10's device-generic stream interface, so this compiles against a CPU-only torch
// too (where no tensor is ever on CUDA).
struct DeviceContext {
  std::optional<c10::Stream> stream;  // set for CUDA tensors
  std::vector<c10::Device> devices() const;
};
DeviceContext deviceContextOf(const std::vector<at::Tensor>& inputs,
                              const std::vector<at::Tensor>& outputs, const char* operation);
// Checks that a list holds exactly `expected` tensors.
void requireCount(const std::vector<at::Tensor>& tensors, size_t expected, const char* operation,
                  const char* argument);
// Checks that every tensor has the dtype and element count of `like`.
void requireSameShape(const std::vector<at::Tensor>& tensors, const at::Tensor& like,
                      const char* operation, const char* argument);
// torch's list of lists where a collective takes one list a rank (all_gather's outputs, scatter's
// inputs): checks that `lists` holds one list, naming `side` ("output", "input") and saying who
// needs it (`who`: "expected", "the root needs"), and that this list holds `size` dense tensors
// shaped like `like`.
void requireOneList(const std::vector<std::vector<at::Tensor>>& lists, const char* who,
                    const char* side, const char* operation);
void requireRankList(const std::vector<at::Tensor>& list, const at::Tensor& like, int64_t size,
                     const char* side, const char* operation);
// A rooted collective's arguments (gather: an input a rank and the root's output list; scatter:
// an output a rank and the root's input list). Checks that `tensors` holds one dense tensor (the
// `side` each rank passes), and that the root (`rank` == `root`) passes one list of `size` tensors
// shaped like it in `lists` (the `listSide`), which this returns; the other ranks pass none (no
// list, or one empty list) and get an empty one.
std::vector<at::Tensor> rootList(const std::vector<at::Tensor>& tensors, const char* side,
                                 const std::vector<std::vector<at::Tensor>>& lists,
                                 const char* listSide, int64_t rank, int64_t root, int64_t size,
                                 const char* operation);

// Contiguous tensors the core can use in place of the caller's; where one had to be copied,
// copyBack() writes the result to the original.
class Staging {
 public:
  // The tensor itself if it is contiguous, else a contiguous copy to be written back afterwards.
  at::Tensor inOut(const at::Tensor& tensor);
  // The tensor itself if contiguous, else a contiguous copy that is read only.
  static at::Tensor in(const at::Tensor& tensor) { return tensor.contiguous(); }
  void copyBack() const;
  bool empty() const { return pairs_.empty(); }

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs_;  // (caller's, staging)
};

// The (input, output) pairs of a coalesced collective: each input staged to be read, each output
// to be written back by one Staging; `keep` holds every staged tensor, for the Work to keep alive.
struct StagedPairs {
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs;
  std::vector<at::Tensor> keep;
  std::shared_ptr<Staging> staging = std::make_shared<Staging>();

  void add(const at::Tensor& input, const at::Tensor& output) {
    pairs.emplace_back(Staging::in(input), staging->inOut(output));
    keep.push_back(pairs.back().first);
    keep.push_back(pairs.back().second);
  }
};

// Checks pair `index` of a coalesced collective: both dense, of one dtype, and the whole (the
// output of an all-gather, the input of a reduce-scatter) world size (`size`) times the other's
// elements.
enum class Whole { Input, Output };
void requireCoalescedPair(const at::Tensor& input, const at::Tensor& output, Whole whole,
                          size_t index, int64_t size, const char* operation);

// One contiguous tensor holding `tensors` end to end, and the copy back into them.
at::Tensor flatten(const std::vector<at::Tensor>& tensors);
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& tensors);

}  // namespace ringcomm::c10d_backend
