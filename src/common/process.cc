#include "common/process.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>
#include <utility>

namespace ringcomm {

std::string hostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

bool processGone(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  // /proc/<pid>/stat: "<pid> (<command>) <state> ...", where the command may hold spaces and
  // parentheses: the state follows the last ')'.
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(file, line)) return false;  // no /proc here: kill() has answered
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

namespace {

int openPidfd(int pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

ExitWatch::ExitWatch(const std::vector<int>& pids, std::function<void(int pid)> exited)
    : exited_(std::move(exited)) {
  std::vector<int> watched;
  std::vector<int> fds;
  for (int pid : pids) {
    if (pid <= 0) continue;
    const int fd = openPidfd(pid);
    if (fd >= 0) {
      watched.push_back(pid);
      fds.push_back(fd);
    } else if (errno == ESRCH) {
      anyExited_.store(true, std::memory_order_release);
      exited_(pid);
    }
  }
  if (fds.empty()) return;
  stopFd_ = ::eventfd(0, EFD_CLOEXEC);
  if (stopFd_ < 0) {
    for (int fd : fds) ::close(fd);
    return;
  }
  thread_ = std::thread(&ExitWatch::run, this, std::move(watched), std::move(fds));
}

ExitWatch::~ExitWatch() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    while (::write(stopFd_, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  if (stopFd_ >= 0) ::close(stopFd_);
}

void ExitWatch::run(std::vector<int> pids, std::vector<int> fds) {
  std::vector<pollfd> polled;
  polled.push_back(pollfd{stopFd_, POLLIN, 0});
  for (int fd : fds) polled.push_back(pollfd{fd, POLLIN, 0});
  size_t open = fds.size();
  while (open > 0) {
    if (::poll(polled.data(), polled.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (polled[0].revents != 0) break;
    for (size_t i = 1; i < polled.size(); ++i) {
      if (polled[i].fd < 0 || polled[i].revents == 0) continue;
      // A pidfd reads ready once its process has exited, zombie or reaped.
      ::close(polled[i].fd);
      polled[i].fd = -1;  // poll() skips it from now on
      --open;
      anyExited_.store(true, std::memory_order_release);
      exited_(pids[i - 1]);
    }
  }
  for (size_t i = 1; i < polled.size(); ++i) {
    if (polled[i].fd >= 0) ::close(polled[i].fd);
  }
}

}  // namespace ringcomm
