// A handle on a collective that may still be running on the engine thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "ringcomm/export.h"

namespace ringcomm {

class RINGCOMM_API Work {
 public:
  Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  bool isCompleted() const;
  // Blocks until completion; rethrows the collective's error. A zero timeout waits without limit
  // (the collective itself always has a deadline, so this cannot hang).
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Runs once the work completes, on the thread that completed it (or at once if already done).
  void onCompletion(std::function<void(std::exception_ptr)> callback);

  // Engine side.
  void complete(std::exception_ptr error);
  // Runs once, on the caller's thread, when wait() is first called before completion: the
  // tensor queue starts its next cycle then instead of sleeping the rest of it (tensor_queue.h).
  void onFirstWait(std::function<void()> hook);

 private:
  mutable std::mutex mutex_;
  std::condition_variable done_;
  bool completed_ = false;
  std::exception_ptr error_;
  std::function<void()> firstWaitHook_;
  std::vector<std::function<void(std::exception_ptr)>> callbacks_;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace ringcomm
