// How much of the job's cores other processes used lately: whether ranks crowded onto few cores
// also compete with work that is not theirs (a busy laptop, a shared VM).
//
// Ranks that outnumber the cores keep them busy themselves, so neither the run queue's length
// (/proc/loadavg) nor CPU pressure tells their own crowding from other work. CPU time does: the
// busy time of the cores the job's processes may run on (/proc/stat) less the time those
// processes used (/proc/<pid>/stat) is what everything else took there.
#pragma once

#include <sched.h>

#include <chrono>
#include <string>
#include <vector>

namespace ringcomm {

class OthersCpuUse {
 public:
  // `ownPids`: the job's processes on this host (its local ranks; repeats are counted once).
  // Their cores are the union of their affinity masks, read now. `standInFile`, where not empty:
  // each window's answer is the number in that file instead (Config::shmCrossMemoryOthersCoresFile:
  // tests say "crowded" or "not" whatever else the machine runs); unreadable, the last answer.
  explicit OthersCpuUse(std::vector<int> ownPids, std::string standInFile = "");

  // How many cores the job's processes may run on, together.
  int jobCores() const { return CPU_COUNT(&jobCores_); }

  // Cores' worth of CPU time that other processes used on the job's cores since the previous
  // measurement, taken again when at least kWindow has passed since it (the first window starts
  // at construction); until then the last answer. 0 before the first window ends and where /proc
  // cannot be read.
  double cores();

  static constexpr std::chrono::milliseconds kWindow{500};

 private:
  struct Sample {
    std::chrono::steady_clock::time_point at;
    long long coreTicks = -1;          // busy clock ticks of the job's cores, or -1 if unreadable
    std::vector<long long> pidTicks;   // user + system ticks of each of ownPids_
  };
  // `previous`: a process that is gone keeps its ticks from there, so that it neither counts
  // against the others nor for them.
  Sample sample(const Sample* previous) const;

  std::vector<int> ownPids_;
  std::string standInFile_;
  cpu_set_t jobCores_;
  Sample last_;
  double cores_ = 0;
};

// Whether the kernel schedules all of `pids` as one group against other processes: autogroups are
// on (/proc/sys/kernel/sched_autogroup_enabled), every one of them is in the same one
// (/proc/<pid>/autogroup), as ranks that one shell or one Python process started are, and in the
// root CPU cgroup (the kernel applies autogroups there only; a container's or a Slurm job's
// cgroup is scheduled as a cgroup). Then the ranks together get one group's share of the cores,
// however many they are; ranks in sessions of their own (ringcomm-run, mpiexec, torchrun) are
// each a group. False if /proc cannot tell.
bool shareOneAutogroup(const std::vector<int>& pids);

}  // namespace ringcomm
