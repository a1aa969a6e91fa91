#include "work.h"

#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "ringcomm/errors.h"

namespace ringcomm::c10d_backend {

RingcommWork::RingcommWork(int rank, ::c10d::OpType type, OpName op,
                           const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs,
                           std::vector<at::Tensor> keepAlive, const DeviceContext& device)
    // torch's Work starts a profiler event under this title (when a profiler is on) and ends it
    // in finish(), on whichever thread completes the work: the event spans the whole operation.
    : ::c10d::Work(rank, type, op.title, inputs),
      name_(op.name),
      outputs_(std::move(outputs)),
      keepAlive_(std::move(keepAlive)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), device.devices())),
      stream_(device.stream) {}

void RingcommWork::completeWhen(const c10::intrusive_ptr<RingcommWork>& work,
                                const std::vector<ringcomm::WorkPtr>& parts,
                                std::function<void()> finish) {
  if (parts.empty()) {
    std::exception_ptr error;
    try {
      if (finish) finish();
    } catch (...) {
      error = std::current_exception();
    }
    work->complete(error);
    return;
  }
  work->pending_.store(parts.size());
  auto finishOnce = std::make_shared<std::function<void()>>(std::move(finish));
  for (const auto& part : parts) {
    // The callback holds the work alive until the core is done with its buffers.
    part->onCompletion([work, finishOnce](std::exception_ptr error) {
      if (error) {
        std::lock_guard<std::mutex> lock(work->errorMutex_);
        if (!work->firstError_) work->firstError_ = error;
      }
      if (work->pending_.fetch_sub(1) != 1) return;
      std::exception_ptr failure;
      {
        std::lock_guard<std::mutex> lock(work->errorMutex_);
        failure = work->firstError_;
      }
      if (!failure && *finishOnce) {
        try {
          (*finishOnce)();
        } catch (...) {
          failure = std::current_exception();
        }
      }
      work->complete(failure);
    });
  }
}

void RingcommWork::complete(std::exception_ptr error) {
  // A CUDA future records its events on the current stream: make it the operation's, which the
  // core made wait for the collective (the completing thread's own would be the default one).
  std::optional<c10::StreamGuard> onStream;
  if (stream_) onStream.emplace(*stream_);
  // Released tensors may be reused at once by torch's caching allocator, but only by work on the
  // stream they were allocated on, which is ordered after the collective.
  keepAlive_.clear();
  if (error && failures_) failures_->record(error);
  if (error) error = toTorchError(error, name_);
  // The Future before the Work, as gloo finishes its work: finish() is what wakes wait(), and
  // code that reads the Future as soon as wait() returns (torchft does) must find it done, with
  // its value or error, and the callbacks chained on it before completion already run. Those
  // callbacks run inline here, so one that asks is_completed() gets false, as under gloo, and
  // one that waits for this Work would never return.
  try {
    completeFuture(error);
  } catch (...) {
    finish(error);  // a callback that throws must not leave wait() blocked forever
    throw;
  }
  finish(error);
}

void RingcommWork::completeFuture(const std::exception_ptr& error) {
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

void FirstFailure::record(const std::exception_ptr& error) {
  ::c10d::ErrorType type = ::c10d::ErrorType::COMM_ERROR;
  std::string message;
  try {
    std::rethrow_exception(error);
  } catch (const ringcomm::InvalidArgument&) {
    return;
  } catch (const ringcomm::TimeoutError& e) {
    type = ::c10d::ErrorType::TIMEOUT;
    message = e.what();
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown error";
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (type_ != ::c10d::ErrorType::SUCCESS) return;
  type_ = type;
  message_ = std::move(message);
}

::c10d::ErrorType FirstFailure::type() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return type_;
}

std::string FirstFailure::message() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return message_;
}

std::exception_ptr toTorchError(std::exception_ptr error, const char* operation) {
  const std::string prefix = std::string("ringcomm ") + operation + ": ";
  try {
    std::rethrow_exception(error);
  } catch (const ringcomm::InvalidArgument& e) {
    return std::make_exception_ptr(c10::ValueError({__func__, __FILE__, __LINE__}, prefix + e.what()));
  } catch (const ringcomm::TimeoutError& e) {
    // "Timed out" first, as torch's own backends say it (and its tests look for it).
    char elapsed[32];
    std::snprintf(elapsed, sizeof(elapsed), "%.1f", e.context().elapsedSeconds);
    return std::make_exception_ptr(c10::DistBackendError(
        {__func__, __FILE__, __LINE__},
        prefix + "Timed out after " + elapsed + " s: " + e.what()));
  } catch (const ringcomm::Error& e) {
    return std::make_exception_ptr(
        c10::DistBackendError({__func__, __FILE__, __LINE__}, prefix + e.what()));
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace ringcomm::c10d_backend
