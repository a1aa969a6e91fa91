// The torch Work handed back for every operation. It completes when the core's Work does, on the
// engine thread (or on the caller's, for a blocking call that ran there), after copying results
// back into the caller's tensors where the operation needed a staging buffer; it completes the
// torch Future that DDP and comm hooks chain on first, then itself (which wakes wait()).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ringcomm/work.h"
#include "tensors.h"

namespace ringcomm::c10d_backend {

// What an operation is called: `name` in error messages (torch's Python name for it), `title` in
// profiler traces, "ringcomm:<op>" as gloo's events are "gloo:<op>" (torch's tests and tools look
// for that form). Both must be string literals: torch's RecordFunction keeps the pointer.
struct OpName {
  const char* name;
  const char* title;
};

// The first operation of a group to fail on a peer or a timeout, kept for Backend::getError():
// what torchft's errored() asks after each step, to give up a step whose collectives failed
// where nobody waited on them. Bad arguments are the caller's, not the group's: not kept.
class FirstFailure {
 public:
  void record(const std::exception_ptr& error);
  ::c10d::ErrorType type() const;
  std::string message() const;  // "" while nothing failed

 private:
  mutable std::mutex mutex_;
  ::c10d::ErrorType type_ = ::c10d::ErrorType::SUCCESS;
  std::string message_;
};

// What a group counts of the operations it starts: torch's sequence number, and the first to fail.
struct OperationCount {
  std::atomic<uint64_t> sequence{0};
  std::shared_ptr<FirstFailure> failures = std::make_shared<FirstFailure>();
};

class RingcommWork : public ::c10d::Work {
 public:
  // inputs: what the profiler records as the operation's input shapes. outputs: what result()
  // and the Future hold. keepAlive: tensors the core reads or writes while it runs (staging
  // buffers included), released at completion.
  // device: where the tensors are; for CUDA ones the Future is a CUDA future on that device, and
  // completes with the operation's stream current.
  RingcommWork(int rank, ::c10d::OpType type, OpName op, const std::vector<at::Tensor>& inputs,
               std::vector<at::Tensor> outputs, std::vector<at::Tensor> keepAlive,
               const DeviceContext& device);

  // Completes this work when every one of `parts` has completed, after running `finish` (the
  // copy back into the caller's tensors) if they all succeeded.
  static void completeWhen(const c10::intrusive_ptr<RingcommWork>& work,
                           const std::vector<ringcomm::WorkPtr>& parts,
                           std::function<void()> finish);

  // Where this work's failure is kept as its group's (set before the work can complete).
  void reportFailuresTo(std::shared_ptr<FirstFailure> failures) {
    failures_ = std::move(failures);
  }

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  int sourceRank() const override { return source_; }
  // Where a receive from any rank writes the sender's rank.
  int* sourceSlot() { return &source_; }

 private:
  void complete(std::exception_ptr error);
  // Sets the Future's value (outputs_) or error, running the callbacks chained on it.
  void completeFuture(const std::exception_ptr& error);

  const char* name_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keepAlive_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::optional<c10::Stream> stream_;
  int source_ = -1;
  std::atomic<size_t> pending_{0};
  std::exception_ptr firstError_;
  std::mutex errorMutex_;
  std::shared_ptr<FirstFailure> failures_;
};

// A ringcomm error as the exception torch.distributed users expect: DistBackendError for a peer's
// failure or a timeout (a RuntimeError in Python), ValueError for bad arguments.
std::exception_ptr toTorchError(std::exception_ptr error, const char* operation);

}  // namespace ringcomm::c10d_backend
