#include "common/wait_policy.h"

#include <sched.h>

#include <chrono>
#include <cstdio>

namespace ringcomm {
namespace {

// Load changes over seconds; reading /proc/loadavg costs a few microseconds, so not per wait.
constexpr std::chrono::milliseconds kRecheckInterval{200};
// Yields with a core to spare: measured on the 2-core VM (include/ringcomm/config.h).
constexpr int kUncrowdedYields = 16;
// When crowded: one yield hands the core to a peer queued on it, if any, before sleeping.
constexpr int kCrowdedYields = 1;

int64_t nowNanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace

int coresAvailable() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int count = CPU_COUNT(&set);
  return count > 0 ? count : 1;
}

int runnableThreads() {
  std::FILE* file = std::fopen("/proc/loadavg", "r");
  if (file == nullptr) return -1;
  double one = 0, five = 0, fifteen = 0;
  int running = -1, total = 0;
  if (std::fscanf(file, "%lf %lf %lf %d/%d", &one, &five, &fifteen, &running, &total) != 5) {
    running = -1;
  }
  std::fclose(file);
  return running;
}

WaitPolicy::WaitPolicy(int spins, int fixedYields, int localRanks)
    : spins_(spins), fixedYields_(fixedYields), localRanks_(localRanks), cores_(coresAvailable()) {}

int WaitPolicy::yields() {
  if (fixedYields_ >= 0) return fixedYields_;
  const int64_t now = nowNanoseconds();
  if (now >= nextCheck_.load(std::memory_order_relaxed)) recheck(now);
  return crowded() ? kCrowdedYields : kUncrowdedYields;
}

void WaitPolicy::recheck(int64_t now) {
  nextCheck_.store(now + std::chrono::nanoseconds(kRecheckInterval).count(),
                   std::memory_order_relaxed);
  // The reader itself is one of the running threads it counts.
  const int others = runnableThreads() - 1;
  crowded_.store(localRanks_ > cores_ || others > cores_, std::memory_order_relaxed);
}

}  // namespace ringcomm
