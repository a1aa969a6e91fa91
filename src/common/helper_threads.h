// A few threads that share one loop's parts with the thread that calls run(): the single-copy
// all-reduce's reduction where a rank has cores to spare (algorithms/direct_single_copy.cc).
//
// One core reading p inputs and writing p outputs is bound by what one core can pull from memory
// (about 14 GB/s on the GPU machine's Xeon, bench/RESULTS.md), far below what the memory gives
// several cores. NCCL spreads an all-reduce over channels for the same reason.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ringcomm {

class HelperThreads {
 public:
  // `helpers` threads beside the caller's, started now.
  explicit HelperThreads(int helpers);
  ~HelperThreads();
  HelperThreads(const HelperThreads&) = delete;
  HelperThreads& operator=(const HelperThreads&) = delete;

  // Threads in all, the caller's included.
  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Runs body(0) .. body(parts - 1), parts <= threads(): part 0 on the caller's thread, the rest
  // on helpers, and returns once every part has; then raises the first exception a part raised.
  void run(int parts, const std::function<void(int part)>& body);

 private:
  void serve(int helper);

  std::vector<std::thread> helpers_;
  std::mutex mutex_;
  std::condition_variable wake_;      // helpers wait here for a job
  std::condition_variable finished_;  // the caller waits here for the helpers
  const std::function<void(int)>* body_ = nullptr;
  int parts_ = 0;
  unsigned long long job_ = 0;  // jobs started; a helper runs each one once
  int running_ = 0;             // helpers still in the current job
  std::exception_ptr failure_;
  bool stopping_ = false;
};

// Threads a rank's reduction may use: `requested` (RINGCOMM_REDUCE_THREADS) when >= 1; for auto
// (-1), this process's cores shared among the host's `localRanks`, at most kMaxAutoThreads, and 1
// where ranks do not each have two cores.
int reduceThreadsFor(int requested, int localRanks);

}  // namespace ringcomm
