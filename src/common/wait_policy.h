// How a waiting rank spends the time before it sleeps, chosen from how crowded the cores are.
//
// With a core to itself, a rank that polls through sched_yield() catches a peer a few
// microseconds behind without a sleep/wake round trip (src/common/spin.h). When runnable threads
// outnumber the cores (more local ranks than cores, or other work on the machine), a yielding rank
// stays runnable: the scheduler keeps handing it the core it just gave away, and the peers that
// have work to do wait behind it. Then a rank should sleep almost at once and be woken by the one
// peer it waits for: for the direct schedule, the last of the peers it waits for
// (shm::Segments::sleepUntilAllReach).
#pragma once

#include <atomic>
#include <cstdint>

#include "common/spin.h"

namespace ringcomm {

class WaitPolicy {
 public:
  // fixedYields >= 0 (RINGCOMM_YIELD_COUNT): always that many yields; < 0: chosen from the load.
  WaitPolicy(int spins, int fixedYields, int localRanks);

  SpinBudget budget() { return SpinBudget(spins_, yields()); }
  // Yields before sleeping, now: re-evaluated at most every kRecheckInterval.
  int yields();
  // Whether runnable threads outnumbered this process's cores at the last check.
  bool crowded() const { return crowded_.load(std::memory_order_relaxed); }

 private:
  void recheck(int64_t now);

  const int spins_;
  const int fixedYields_;
  const int localRanks_;
  const int cores_;
  std::atomic<bool> crowded_{false};
  std::atomic<int64_t> nextCheck_{0};
};

// The cores this process may run on (sched_getaffinity), at least 1.
int coresAvailable();
// Threads runnable on the machine right now (/proc/loadavg's fourth field), or -1 if unknown.
int runnableThreads();

}  // namespace ringcomm
