#include "common/cpu_share.h"

#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

namespace ringcomm {
namespace {

// Busy ticks of the cores this process may run on: user, nice, system, irq and softirq from
// their /proc/stat lines (idle, iowait and steal are no process's). Only those cores: in a
// container limited to a few cores of a large host, the rest of the host's work does not compete.
// -1 if unreadable.
long long busyTicksOfOwnCores() {
  cpu_set_t own;
  CPU_ZERO(&own);
  if (sched_getaffinity(0, sizeof(own), &own) != 0) return -1;
  std::FILE* file = std::fopen("/proc/stat", "r");
  if (file == nullptr) return -1;
  long long busy = 0;
  int cores = 0;
  char line[512];
  while (std::fgets(line, sizeof(line), file) != nullptr) {
    int cpu = -1;
    long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0;
    if (std::sscanf(line, "cpu%d %lld %lld %lld %lld %lld %lld %lld", &cpu, &user, &nice,
                    &system, &idle, &iowait, &irq, &softirq) != 8) {
      continue;  // the machine-wide "cpu " line, and everything after the cores
    }
    if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &own)) continue;
    busy += user + nice + system + irq + softirq;
    ++cores;
  }
  std::fclose(file);
  return cores > 0 ? busy : -1;
}

// utime + stime of every thread of `pid` (fields 14 and 15 of /proc/<pid>/stat); 0 for a process
// that is gone.
long long processTicks(int pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return 0;
  char text[1024];
  const size_t length = std::fread(text, 1, sizeof(text) - 1, file);
  std::fclose(file);
  text[length] = '\0';
  // The command name (field 2) is in parentheses and may hold spaces or parentheses itself.
  const char* fields = std::strrchr(text, ')');
  if (fields == nullptr) return 0;
  unsigned long long utime = 0, stime = 0;
  // From field 3 (state): skip fields 3 to 13, then read 14 and 15.
  if (std::sscanf(fields + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                  &stime) != 2) {
    return 0;
  }
  return static_cast<long long>(utime + stime);
}

}  // namespace

// The first window starts here, so that the first question, often a second or more later (the
// job's setup), already has an answer.
OthersCpuUse::OthersCpuUse(std::vector<int> ownPids)
    : ownPids_(std::move(ownPids)), last_(sample()) {}

OthersCpuUse::Sample OthersCpuUse::sample() const {
  Sample now;
  now.at = std::chrono::steady_clock::now();
  now.machineTicks = busyTicksOfOwnCores();
  for (int pid : ownPids_) now.ownTicks += processTicks(pid);
  return now;
}

double OthersCpuUse::cores() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_.at < kWindow) return cores_;
  const Sample current = sample();
  if (current.machineTicks >= 0 && last_.machineTicks >= 0) {
    const double seconds = std::chrono::duration<double>(current.at - last_.at).count();
    const long long others =
        (current.machineTicks - last_.machineTicks) - (current.ownTicks - last_.ownTicks);
    // A rank that exited mid-window takes its ticks with it: never below zero.
    cores_ = others > 0 ? static_cast<double>(others) / static_cast<double>(sysconf(_SC_CLK_TCK)) /
                              seconds
                        : 0.0;
  }
  last_ = current;
  return cores_;
}

}  // namespace ringcomm
