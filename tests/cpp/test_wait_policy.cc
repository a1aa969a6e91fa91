// How ranks adapt to crowded cores: a fixed yield count is honoured; chosen by load, more local
// ranks than cores always count as crowded, and then the direct schedule's slots grow; the CPU
// time other processes take is told from the job's own, and a test can stand in for it.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "check.h"
#include "common/cpu_share.h"
#include "common/wait_policy.h"
#include "transport/shm/segment.h"

using namespace ringcomm;

TEST(fixedYieldsAreHonoured) {
  WaitPolicy policy(0, 5, 64);
  CHECK_EQ(policy.yields(), 5);
  CHECK_EQ(WaitPolicy(0, 0, 1).yields(), 0);
}

TEST(moreLocalRanksThanCoresIsCrowded) {
  WaitPolicy policy(0, -1, coresAvailable() + 1);
  CHECK_EQ(policy.yields(), 1);
  CHECK(policy.crowded());
}

TEST(theMachineIsReadable) {
  CHECK(coresAvailable() >= 1);
  CHECK(runnableThreads() >= 1);  // this thread is running
}

TEST(slotsGrowOnlyWhenRanksOutnumberCoresAndNothingIsConfigured) {
  CHECK_EQ(shm::slotBytesFor(0, 2, 2), shm::kDefaultSlotBytes);
  CHECK_EQ(shm::slotBytesFor(0, 16, 2), shm::kCrowdedSlotBytes);
  CHECK_EQ(shm::slotBytesFor(65536, 16, 2), size_t(65536));
}

TEST(theCpuTimeOfProcessesOutsideTheJobIsCounted) {
  const pid_t spinner = fork();
  if (spinner == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // gone with the test, whatever happens to it
    volatile unsigned long spins = 0;  // a loop with a side effect: one the compiler keeps
    while (true) spins = spins + 1;
  }
  CHECK(spinner > 0);
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reaper{spinner};
  // Both windows start and end together: they differ by the spinner's time alone.
  OthersCpuUse spinnerIsOther({getpid()});
  OthersCpuUse spinnerIsOwn({getpid(), spinner, getpid()});
  CHECK(spinnerIsOwn.jobCores() >= 1);
  CHECK_EQ(spinnerIsOther.cores(), 0.0);  // the first window has not ended
  std::this_thread::sleep_for(OthersCpuUse::kWindow + std::chrono::milliseconds(500));
  const double withSpinner = spinnerIsOther.cores();
  const double withoutSpinner = spinnerIsOwn.cores();
  // A spinning process takes most of a core (this test runs alone; loose for a busy machine).
  CHECK(withSpinner >= 0.3);
  CHECK(withSpinner - withoutSpinner >= 0.25);
}

TEST(ranksInOneSessionShareOneAutogroupAndNotOnceOneLeaves) {
  // Where autogroups are off, no processes share one: nothing to tell apart.
  if (!shareOneAutogroup({getpid()})) return;
  int toChild[2], toParent[2];
  CHECK_EQ(pipe(toChild), 0);
  CHECK_EQ(pipe(toParent), 0);
  const pid_t child = fork();
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char go = 0;
    if (read(toChild[0], &go, 1) != 1) _exit(1);
    setsid();  // a session, and with it an autogroup, of its own
    if (write(toParent[1], &go, 1) != 1) _exit(1);
    pause();
  }
  CHECK(child > 0);
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reaper{child};
  CHECK(shareOneAutogroup({getpid(), child, getpid()}));
  char go = 'g';
  CHECK_EQ(write(toChild[1], &go, 1), 1);
  CHECK_EQ(read(toParent[0], &go, 1), 1);  // the child is in its own session now
  CHECK(!shareOneAutogroup({getpid(), child}));
  CHECK(!shareOneAutogroup({}));
  for (int fd : {toChild[0], toChild[1], toParent[0], toParent[1]}) close(fd);
}

TEST(aStandInFileAnswersInsteadOfTheMachine) {
  char path[] = "/tmp/ringcomm-others-cores-XXXXXX";
  const int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  const auto say = [&path](const char* text) {
    std::FILE* file = std::fopen(path, "w");
    std::fputs(text, file);
    std::fclose(file);
  };
  say("1.5\n");
  OthersCpuUse standIn({getpid()}, path);
  CHECK_EQ(standIn.cores(), 0.0);  // the first window has not ended
  std::this_thread::sleep_for(OthersCpuUse::kWindow + std::chrono::milliseconds(50));
  CHECK_EQ(standIn.cores(), 1.5);
  say("0");
  std::this_thread::sleep_for(OthersCpuUse::kWindow + std::chrono::milliseconds(50));
  CHECK_EQ(standIn.cores(), 0.0);
  say("busy");  // no number: the last answer stands
  std::this_thread::sleep_for(OthersCpuUse::kWindow + std::chrono::milliseconds(50));
  CHECK_EQ(standIn.cores(), 0.0);
  unlink(path);
}
