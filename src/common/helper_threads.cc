#include "common/helper_threads.h"

#include <algorithm>

#include "common/wait_policy.h"

namespace ringcomm {
namespace {

// Beyond four threads a rank's reduction gained nothing measurable where it was timed: the memory
// is the limit by then, and the other ranks want cores too.
constexpr int kMaxAutoThreads = 4;

}  // namespace

HelperThreads::HelperThreads(int helpers) {
  helpers_.reserve(static_cast<size_t>(std::max(0, helpers)));
  for (int helper = 0; helper < helpers; ++helper) {
    helpers_.emplace_back([this, helper] { serve(helper); });
  }
}

HelperThreads::~HelperThreads() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& thread : helpers_) thread.join();
}

void HelperThreads::run(int parts, const std::function<void(int)>& body) {
  parts = std::clamp(parts, 0, threads());
  if (parts <= 1) {
    if (parts == 1) body(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    parts_ = parts;
    running_ = static_cast<int>(helpers_.size());
    failure_ = nullptr;
    ++job_;
  }
  wake_.notify_all();
  std::exception_ptr mine;
  try {
    body(0);
  } catch (...) {
    mine = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [this] { return running_ == 0; });
  body_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (failure_) std::rethrow_exception(failure_);
}

void HelperThreads::serve(int helper) {
  unsigned long long seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || job_ != seen; });
    if (stopping_) return;
    seen = job_;
    const int part = helper + 1;
    if (part < parts_) {
      const std::function<void(int)>& body = *body_;
      lock.unlock();
      std::exception_ptr failed;
      try {
        body(part);
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      if (failed && !failure_) failure_ = failed;
    }
    if (--running_ == 0) finished_.notify_one();
  }
}

int reduceThreadsFor(int requested, int localRanks) {
  if (requested >= 1) return requested;
  const int perRank = coresAvailable() / std::max(1, localRanks);
  return perRank >= 2 ? std::min(perRank, kMaxAutoThreads) : 1;
}

}  // namespace ringcomm
