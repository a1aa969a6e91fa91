// How much of this process's cores other processes used lately: whether ranks crowded onto few
// cores also compete with work that is not theirs (a busy laptop, a shared VM).
//
// Ranks that outnumber the cores keep them busy themselves, so neither the run queue's length
// (/proc/loadavg) nor CPU pressure tells their own crowding from other work. CPU time does: the
// busy time of the cores this process may run on (/proc/stat) less the time the ranks' own
// processes used (/proc/<pid>/stat) is what everything else took there.
#pragma once

#include <chrono>
#include <vector>

namespace ringcomm {

class OthersCpuUse {
 public:
  // `ownPids`: the processes whose time is the job's own (this host's ranks, this one included).
  explicit OthersCpuUse(std::vector<int> ownPids);

  // Cores' worth of CPU time that other processes used over the last window of at least
  // kWindow (the first starts at construction), measured again once a window has passed since
  // the last measurement; 0 before the first window ends and where /proc cannot be read.
  double cores();

  static constexpr std::chrono::milliseconds kWindow{500};

 private:
  struct Sample {
    std::chrono::steady_clock::time_point at;
    long long machineTicks = -1;  // busy clock ticks of this process's cores, or -1
    long long ownTicks = 0;       // user and system ticks of ownPids
  };
  Sample sample() const;

  std::vector<int> ownPids_;
  Sample last_;
  double cores_ = 0;
};

}  // namespace ringcomm
