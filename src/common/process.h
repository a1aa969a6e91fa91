// This host and its processes: its name, and whether processes on it are still running, asked or
// told.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace ringcomm {

// This host's name, as gethostname() gives it ("unknown" where it fails): what the log's lines and
// the trace's file start with.
std::string hostName();

// True when process `pid` has exited: it is gone (kill() says ESRCH), or it is a zombie that its
// parent has not reaped yet. kill(pid, 0) alone succeeds for a zombie, so survivors took a rank
// killed between collectives for alive until its launcher reaped it (issue 33: they waited out
// their whole timeout where they name it in 0.1 s once it is reaped).
bool processGone(int pid);

// Tells, from a thread of its own, the moment any of `pids` exits: `exited` runs on that thread,
// once per process that does. Waits that sleep on shared memory are woken by their peers; a peer
// that dies wakes nobody, and they used to find out at their next look (every 0.1 s), a delay
// every survivor on the host paid before it could fail and shrink (issue 33). Built on pidfds
// (Linux 5.3): a process it cannot open one for is not watched (the looks still find it), one
// already gone is told at once.
class ExitWatch {
 public:
  ExitWatch(const std::vector<int>& pids, std::function<void(int pid)> exited);
  ~ExitWatch();
  ExitWatch(const ExitWatch&) = delete;
  ExitWatch& operator=(const ExitWatch&) = delete;

  // Whether any watched process has exited.
  bool anyExited() const { return anyExited_.load(std::memory_order_acquire); }

 private:
  void run(std::vector<int> pids, std::vector<int> fds);

  std::function<void(int)> exited_;
  std::atomic<bool> anyExited_{false};
  int stopFd_ = -1;  // an eventfd: the destructor's word to the thread
  std::thread thread_;
};

}  // namespace ringcomm
