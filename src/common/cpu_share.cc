#include "common/cpu_share.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

namespace ringcomm {
namespace {

// Busy ticks of `cores`: user, nice, system, irq and softirq from their /proc/stat lines (idle,
// iowait and steal are no process's). Only those cores: in a container limited to a few cores of
// a large host, the rest of the host's work does not compete. -1 if unreadable.
long long busyTicksOf(const cpu_set_t& cores) {
  std::FILE* file = std::fopen("/proc/stat", "r");
  if (file == nullptr) return -1;
  long long busy = 0;
  int counted = 0;
  char line[512];
  while (std::fgets(line, sizeof(line), file) != nullptr) {
    // "cpu3 ...": one core. The machine-wide "cpu  ..." line has no number.
    if (std::strncmp(line, "cpu", 3) != 0 || !std::isdigit(static_cast<unsigned char>(line[3]))) {
      continue;
    }
    int cpu = -1;
    long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0;
    if (std::sscanf(line + 3, "%d %lld %lld %lld %lld %lld %lld %lld", &cpu, &user, &nice,
                    &system, &idle, &iowait, &irq, &softirq) != 8) {
      continue;
    }
    if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &cores)) continue;
    busy += user + nice + system + irq + softirq;
    ++counted;
  }
  std::fclose(file);
  return counted > 0 ? busy : -1;
}

// utime + stime of every thread of `pid` (fields 14 and 15 of /proc/<pid>/stat), or -1 for a
// process that is gone.
long long processTicks(int pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return -1;
  char text[1024];
  const size_t length = std::fread(text, 1, sizeof(text) - 1, file);
  std::fclose(file);
  text[length] = '\0';
  // The command name (field 2) is in parentheses and may hold spaces or parentheses itself.
  const char* fields = std::strrchr(text, ')');
  if (fields == nullptr) return -1;
  unsigned long long utime = 0, stime = 0;
  // From field 3 (state): skip fields 3 to 13, then read 14 and 15.
  if (std::sscanf(fields + 1, " %*c %*d %*d %*d %*d %*d %*u %*lu %*lu %*lu %*lu %llu %llu",
                  &utime, &stime) != 2) {
    return -1;
  }
  return static_cast<long long>(utime + stime);
}

// The first word of a small /proc file ("/autogroup-42" from "/autogroup-42 nice 0"), or "".
std::string firstWordOf(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return "";
  char word[128] = {0};
  const bool read = std::fscanf(file, "%127s", word) == 1;
  std::fclose(file);
  return read ? word : "";
}

// The non-negative number a file holds ("1.5\n"), or `otherwise` where it holds none.
double numberIn(const std::string& path, double otherwise) {
  std::FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return otherwise;
  double number = -1;
  const bool read = std::fscanf(file, "%lf", &number) == 1;
  std::fclose(file);
  return read && number >= 0 ? number : otherwise;
}

// Whether `pid` is in the root CPU cgroup, the only one whose tasks the kernel schedules by
// autogroup: the path of a cgroup v1 hierarchy with the cpu controller ("4:cpu,cpuacct:/"), or
// else of the v2 one ("0::/"). False if unreadable.
bool inRootCpuCgroup(int pid) {
  std::FILE* file = std::fopen(("/proc/" + std::to_string(pid) + "/cgroup").c_str(), "r");
  if (file == nullptr) return false;
  std::string unified, cpu;
  bool cpuFound = false;
  char line[1024];
  while (std::fgets(line, sizeof(line), file) != nullptr) {
    std::string text(line);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    const size_t first = text.find(':');
    const size_t second = first == std::string::npos ? first : text.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = "," + text.substr(first + 1, second - first - 1) + ",";
    const std::string path = text.substr(second + 1);
    if (controllers == ",,") unified = path;
    if (controllers.find(",cpu,") != std::string::npos) {
      cpu = path;
      cpuFound = true;
    }
  }
  std::fclose(file);
  return (cpuFound ? cpu : unified) == "/";
}

}  // namespace

bool shareOneAutogroup(const std::vector<int>& pids) {
  if (pids.empty() || firstWordOf("/proc/sys/kernel/sched_autogroup_enabled") != "1") return false;
  const std::string group = firstWordOf("/proc/" + std::to_string(pids.front()) + "/autogroup");
  if (group.empty()) return false;
  return std::all_of(pids.begin(), pids.end(), [&group](int pid) {
    return inRootCpuCgroup(pid) &&
           firstWordOf("/proc/" + std::to_string(pid) + "/autogroup") == group;
  });
}

OthersCpuUse::OthersCpuUse(std::vector<int> ownPids, std::string standInFile)
    : ownPids_(std::move(ownPids)), standInFile_(std::move(standInFile)) {
  std::sort(ownPids_.begin(), ownPids_.end());
  ownPids_.erase(std::unique(ownPids_.begin(), ownPids_.end()), ownPids_.end());
  CPU_ZERO(&jobCores_);
  for (int pid : ownPids_) {
    cpu_set_t cores;
    CPU_ZERO(&cores);
    if (sched_getaffinity(pid, sizeof(cores), &cores) == 0) CPU_OR(&jobCores_, &jobCores_, &cores);
  }
  if (CPU_COUNT(&jobCores_) == 0) sched_getaffinity(0, sizeof(jobCores_), &jobCores_);
  // The first window starts here, so that the first question, often a second or more later (the
  // job's setup), already has an answer.
  last_ = sample(nullptr);
}

OthersCpuUse::Sample OthersCpuUse::sample(const Sample* previous) const {
  Sample now;
  now.at = std::chrono::steady_clock::now();
  now.coreTicks = busyTicksOf(jobCores_);
  now.pidTicks.resize(ownPids_.size(), 0);
  for (size_t i = 0; i < ownPids_.size(); ++i) {
    const long long ticks = processTicks(ownPids_[i]);
    now.pidTicks[i] = ticks >= 0 ? ticks : previous != nullptr ? previous->pidTicks[i] : 0;
  }
  return now;
}

double OthersCpuUse::cores() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_.at < kWindow) return cores_;
  if (!standInFile_.empty()) {
    last_.at = now;  // windows as long as measured ones: the answer changes as often
    cores_ = numberIn(standInFile_, cores_);
    return cores_;
  }
  const Sample current = sample(&last_);
  if (current.coreTicks >= 0 && last_.coreTicks >= 0) {
    long long others = current.coreTicks - last_.coreTicks;
    for (size_t i = 0; i < ownPids_.size(); ++i) others -= current.pidTicks[i] - last_.pidTicks[i];
    const double seconds = std::chrono::duration<double>(current.at - last_.at).count();
    // Ticks are coarse (10 ms): a window can show the job a tick more than its cores had.
    cores_ = others > 0 ? static_cast<double>(others) /
                              static_cast<double>(sysconf(_SC_CLK_TCK)) / seconds
                        : 0.0;
  }
  last_ = current;
  return cores_;
}

}  // namespace ringcomm
