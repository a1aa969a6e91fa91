// How long a waiting rank polls before it blocks (futex or poll()).
//
// Polling catches a peer that is a few microseconds behind without a sleep/wake round trip, but
// a polling rank holds a core: with more ranks than cores (or other work on the machine) it
// delays the very peer it waits for. Polling through sched_yield() keeps the latency and gives
// the core away whenever anything else can use it (Config::yieldCount says what was measured);
// pure polls are available (Config::spinCount) but off by default, and bounded by time.
#pragma once

#include <sched.h>

#include <chrono>

#include "common/deadline.h"

namespace ringcomm {

// Measured on the 2-core development VM: a cross-core cache-line round trip costs ~2 us, a
// futex sleep/wake ~10-20 us; polling much past the latter only burns the core.
constexpr std::chrono::microseconds kMaxSpinTime{500};

class SpinBudget {
 public:
  // maxYields: after the polls, how many times to hand the core to another runnable thread
  // before blocking. When local ranks outnumber cores, the peer we wait for is often runnable on
  // our own core: sched_yield() lets it run at once, where a futex sleep costs a wake-up later.
  SpinBudget(int maxSpins, int maxYields) : maxSpins_(maxSpins), maxYields_(maxYields) {}

  // True: poll again. False: block now.
  bool spinAgain() {
    if (spins_ >= maxSpins_) {
      if (yields_ >= maxYields_) return false;
      ++yields_;
      sched_yield();
      return true;
    }
    if ((++spins_ & 63) == 0 && Clock::now() - start_ > kMaxSpinTime) {
      spins_ = maxSpins_;
      return false;
    }
    // A compiler barrier, not PAUSE: under a hypervisor with pause-loop exiting (the 2-core
    // development VMs) a PAUSE loop makes the vCPU yield to the host.
    asm volatile("" ::: "memory");
    return true;
  }

  // Progress was made: the peer is active, polling is worth it again.
  void reset() {
    spins_ = 0;
    yields_ = 0;
    start_ = Clock::now();
  }

 private:
  int maxSpins_;
  int maxYields_;
  int spins_ = 0;
  int yields_ = 0;
  Clock::time_point start_ = Clock::now();
};

}  // namespace ringcomm
