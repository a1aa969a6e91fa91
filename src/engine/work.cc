#include "ringcomm/work.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace ringcomm {

bool Work::isCompleted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

void Work::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!completed_ && firstWaitHook_) {
    const std::function<void()> hook = std::move(firstWaitHook_);
    firstWaitHook_ = nullptr;
    lock.unlock();
    hook();
    lock.lock();
  }
  if (timeout.count() > 0) {
    if (!done_.wait_for(lock, timeout, [this] { return completed_; })) {
      throw std::runtime_error("Work.wait: not completed within " +
                               std::to_string(timeout.count()) + " ms");
    }
  } else {
    done_.wait(lock, [this] { return completed_; });
  }
  if (error_) std::rethrow_exception(error_);
}

void Work::onCompletion(std::function<void(std::exception_ptr)> callback) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!completed_) {
    callbacks_.push_back(std::move(callback));
    return;
  }
  std::exception_ptr error = error_;
  lock.unlock();
  callback(error);
}

void Work::onFirstWait(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  firstWaitHook_ = std::move(hook);
}

void Work::complete(std::exception_ptr error) {
  std::vector<std::function<void(std::exception_ptr)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completed_ = true;
    error_ = error;
    callbacks.swap(callbacks_);
    firstWaitHook_ = nullptr;  // may hold the queue: nothing waits any more
  }
  done_.notify_all();
  for (auto& callback : callbacks) callback(error);
}

}  // namespace ringcomm
