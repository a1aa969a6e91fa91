// Membership without launching processes: the agreement of shrink() among ranks played by
// threads, each with a mailbox of its own (core/membership.h); a rank whose mailbox is stopped is
// gone, one whose address nobody answers is lost beyond a partition. Also the helper threads of the
// single-copy reduction, the zombie test of processGone() and ExitWatch.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "common/helper_threads.h"
#include "common/process.h"
#include "core/membership.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"

using namespace ringcomm;

namespace {

const std::string kMembershipSecret = "membership-test-secret-0123456789";

// A listening socket on a free loopback port that nobody accepts on: its fd, and `address` set.
int listenOnLoopback(int backlog, sockaddr_in& address) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  address = sockaddr_in{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  listen(listener, backlog);
  socklen_t length = sizeof(address);
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  return listener;
}

// An address whose connections go unanswered, as a host beyond a partition's: a listener whose
// accept queue is full, so that the kernel drops further SYNs (an outside address will not do: a
// sandbox's network may answer for any). Filled by connections nobody accepts.
class Unanswered {
 public:
  Unanswered() {
    sockaddr_in address{};
    listener_ = listenOnLoopback(0, address);
    port_ = ntohs(address.sin_port);
    for (int i = 0; i < 4; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
      fillers_.push_back(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ~Unanswered() {
    for (int fd : fillers_) close(fd);
    close(listener_);
  }
  MailboxAddress address() const { return {"127.0.0.1", port_}; }

 private:
  int listener_ = -1;
  int port_ = 0;
  std::vector<int> fillers_;
};

// A process that took a dead rank's mailbox port: it listens and the kernel accepts connections
// for it, but it never proves the job's secret. Mute: it says nothing (nobody accepts); HangsUp:
// it accepts and closes at once; OtherJob: another job's mailbox, with another secret.
class Squatter {
 public:
  enum class Kind { Mute, HangsUp, OtherJob };

  explicit Squatter(Kind kind) : kind_(kind) {
    if (kind == Kind::OtherJob) {
      otherJob_ = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "another-job-secret-0123456789");
      port_ = otherJob_->port();
      return;
    }
    sockaddr_in address{};
    listener_ = listenOnLoopback(64, address);
    port_ = ntohs(address.sin_port);
    if (kind == Kind::HangsUp) {
      hangingUp_ = std::thread([this] {
        for (int fd; (fd = accept(listener_, nullptr, nullptr)) >= 0;) close(fd);
      });
    }
  }
  ~Squatter() {
    if (listener_ >= 0) shutdown(listener_, SHUT_RDWR);  // ends the accept loop
    if (hangingUp_.joinable()) hangingUp_.join();
    if (listener_ >= 0) close(listener_);
  }
  MailboxAddress address() const { return {"127.0.0.1", port_}; }

 private:
  Kind kind_;
  int listener_ = -1;
  int port_ = 0;
  std::thread hangingUp_;
  std::unique_ptr<TcpStoreServer> otherJob_;
};

struct Outcome {
  std::vector<int> survivors;
  std::string error;
};

// `ranks` ranks as threads: those in `dead` have no mailbox any more, those in `lost` one nobody
// answers, those in `squatted` one a mute stranger holds; the others agree. Returns each rank's
// outcome (empty for dead, lost and squatted ranks).
std::vector<Outcome> agreeAmong(int ranks, const std::set<int>& dead, const std::set<int>& lost,
                                const std::set<int>& exclude = {},
                                const std::set<int>& squatted = {}) {
  std::vector<std::unique_ptr<TcpStoreServer>> servers;
  std::vector<MailboxAddress> mailboxes;
  const Unanswered unanswered;
  const Squatter squatter(Squatter::Kind::Mute);
  for (int r = 0; r < ranks; ++r) {
    servers.push_back(std::make_unique<TcpStoreServer>("127.0.0.1", 0, kMembershipSecret));
    mailboxes.push_back(lost.count(r)       ? unanswered.address()
                        : squatted.count(r) ? squatter.address()
                                            : MailboxAddress{"127.0.0.1", servers.back()->port()});
  }
  for (int r : squatted) servers[static_cast<size_t>(r)]->stop();
  for (int r : dead) servers[static_cast<size_t>(r)]->stop();
  std::vector<Outcome> outcomes(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  const auto linkTimeout = std::chrono::milliseconds(300);
  for (int r = 0; r < ranks; ++r) {
    if (dead.count(r) || lost.count(r) || squatted.count(r)) continue;
    threads.emplace_back([&, r] {
      Membership membership(r, mailboxes, kMembershipSecret, linkTimeout);
      try {
        // As after a failure found by a link timeout: silent mailboxes count as lost at once.
        const auto now = Clock::now();
        outcomes[static_cast<size_t>(r)].survivors =
            membership.agree("test", exclude, now + std::chrono::seconds(10), now - linkTimeout)
                .ranks;
      } catch (const std::exception& error) {
        outcomes[static_cast<size_t>(r)].error = error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return outcomes;
}

}  // namespace

TEST(survivorsAgreeWithoutTheDeadOnes) {
  const auto outcomes = agreeAmong(5, {0, 3}, {});  // rank 0, the first leader, among them
  for (int r : {1, 2, 4}) {
    CHECK_EQ(outcomes[static_cast<size_t>(r)].error, std::string());
    CHECK((outcomes[static_cast<size_t>(r)].survivors == std::vector<int>{1, 2, 4}));
  }
}

TEST(ranksExcludedOnPurposeAreLeftOut) {
  const auto outcomes = agreeAmong(4, {}, {}, {2});
  CHECK((outcomes[0].survivors == std::vector<int>{0, 1, 3}));
  CHECK((outcomes[3].survivors == std::vector<int>{0, 1, 3}));
  // Rank 2 was excluded but called too: the others went on without it.
  CHECK(outcomes[2].error.find("went on without rank 2") != std::string::npos);
}

TEST(aMajorityBeyondWhichRanksAreLostGoesOn) {
  const auto outcomes = agreeAmong(4, {}, {3});
  CHECK((outcomes[0].survivors == std::vector<int>{0, 1, 2}));
  CHECK((outcomes[2].survivors == std::vector<int>{0, 1, 2}));
}

TEST(aTieStops) {
  const auto outcomes = agreeAmong(4, {}, {2, 3});
  for (int r : {0, 1}) {
    CHECK(outcomes[static_cast<size_t>(r)].survivors.empty());
    CHECK(outcomes[static_cast<size_t>(r)].error.find("lost its quorum") != std::string::npos);
  }
}

TEST(goneRanksDoNotCountAgainstTheQuorum) {
  // Two of four gone for sure (their hosts refused): the other two are no minority.
  const auto outcomes = agreeAmong(4, {2, 3}, {});
  CHECK((outcomes[0].survivors == std::vector<int>{0, 1}));
}

TEST(probingTellsGoneFromLost) {
  TcpStoreServer server("127.0.0.1", 0, kMembershipSecret);
  const MailboxAddress alive{"127.0.0.1", server.port()};
  const auto soon = [] { return Clock::now() + std::chrono::milliseconds(200); };
  CHECK(probeMailbox(alive, kMembershipSecret, soon()) == Reach::Answers);
  server.stop();
  CHECK(probeMailbox(alive, kMembershipSecret, soon()) == Reach::Refused);
  const Unanswered unanswered;
  CHECK(probeMailbox(unanswered.address(), kMembershipSecret, soon()) == Reach::Silent);
}

TEST(aProbeOutOfDescriptorsSaysSoRatherThanCallThePeerLost) {
  // At its descriptor limit a rank cannot ask; were it to answer Silent, its peer would be
  // reported lost (issue 52: a 64-rank job under ulimit -n 256 named rank 0 "gone"). No server
  // runs meanwhile: under a limit of 0 its poll() would fail too (EINVAL).
  const MailboxAddress anywhere{"127.0.0.1", 9};
  rlimit saved{};
  CHECK(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  rlimit none = saved;
  none.rlim_cur = 0;  // no new descriptor at all: socket() fails with EMFILE
  CHECK(::setrlimit(RLIMIT_NOFILE, &none) == 0);
  std::string what;
  try {
    probeMailbox(anywhere, kMembershipSecret, Clock::now() + std::chrono::milliseconds(200));
  } catch (const TransportError& error) {
    what = error.what();
  }
  CHECK(::setrlimit(RLIMIT_NOFILE, &saved) == 0);
  CHECK(what.find("ulimit -n 0") != std::string::npos);
}

TEST(manyMailboxesAreAskedAFewAtATimeUnderADescriptorLimit) {
  // A leader of thousands of ranks asks every mailbox that has not posted: at once, it would
  // need a descriptor each (past a default `ulimit -n` of 1,024 at a few thousand ranks).
  // 600 probes of 4 living mailboxes under a limit 400 above what is open now: all answer.
  std::vector<std::unique_ptr<TcpStoreServer>> mailboxes;
  for (int i = 0; i < 4; ++i) {
    mailboxes.push_back(std::make_unique<TcpStoreServer>("127.0.0.1", 0, kMembershipSecret));
  }
  std::vector<MailboxAddress> asked;
  for (int i = 0; i < 600; ++i) asked.push_back({"127.0.0.1", mailboxes[i % 4]->port()});
  int open = 0;
  for (int fd = 0; fd < 4096; ++fd) open += ::fcntl(fd, F_GETFD) != -1 ? 1 : 0;
  rlimit saved{};
  CHECK(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(open + 400);
  CHECK(::setrlimit(RLIMIT_NOFILE, &tight) == 0);
  std::vector<Reach> reached;
  std::string failure;
  try {
    reached = probeMailboxes(asked, kMembershipSecret, Clock::now() + std::chrono::seconds(10));
  } catch (const Error& error) {
    failure = error.what();
  }
  CHECK(::setrlimit(RLIMIT_NOFILE, &saved) == 0);
  CHECK_EQ(failure, std::string());
  CHECK_EQ(reached.size(), asked.size());
  for (const Reach reach : reached) CHECK(reach == Reach::Answers);
}

TEST(onlyAMailboxThatProvesTheSecretAnswers) {
  // Whatever took a dead rank's port is no proof of its life (issue 48): it counts as gone for
  // sure, at once where it hangs up or speaks another secret, after kProofPatience where mute.
  const auto soon = [] { return Clock::now() + std::chrono::milliseconds(300); };
  for (const auto kind : {Squatter::Kind::HangsUp, Squatter::Kind::OtherJob}) {
    const Squatter squatter(kind);
    const auto started = Clock::now();
    CHECK(probeMailbox(squatter.address(), kMembershipSecret, soon()) == Reach::Unproven);
    CHECK(Clock::now() - started < std::chrono::milliseconds(150));
  }
  const Squatter mute(Squatter::Kind::Mute);
  CHECK(probeMailbox(mute.address(), kMembershipSecret, soon()) == Reach::Unproven);
  // Too short a wait to tell it from a slow mailbox: no verdict.
  CHECK(probeMailbox(mute.address(), kMembershipSecret,
                     Clock::now() + std::chrono::milliseconds(50)) == Reach::Silent);
  CHECK(goneForSure(Reach::Unproven) && goneForSure(Reach::Refused));
  CHECK(!goneForSure(Reach::Silent) && !goneForSure(Reach::Answers));
}

TEST(aSquattedMailboxIsGoneNotLost) {
  // Two ranks, rank 1's port taken by a mute stranger: rank 0 goes on alone within a probe's
  // patience (it lost its quorum after 14.5 s when an accepted connection counted as life).
  auto started = Clock::now();
  auto outcomes = agreeAmong(2, {}, {}, {}, {1});
  CHECK((outcomes[0].survivors == std::vector<int>{0}));
  CHECK(Clock::now() - started < std::chrono::milliseconds(1500));
  // Three ranks, the leader's port squatted: the others agree under the next leader.
  started = Clock::now();
  outcomes = agreeAmong(3, {}, {}, {}, {0});
  for (int r : {1, 2}) {
    CHECK_EQ(outcomes[static_cast<size_t>(r)].error, std::string());
    CHECK((outcomes[static_cast<size_t>(r)].survivors == std::vector<int>{1, 2}));
  }
  CHECK(Clock::now() - started < std::chrono::milliseconds(1500));
}

TEST(manyMailboxesAreAskedAtOnce) {
  // Two silent mailboxes cost one wait, not two (a leader that lost a host asks all its ranks).
  TcpStoreServer alive("127.0.0.1", 0, kMembershipSecret);
  TcpStoreServer stopped("127.0.0.1", 0, kMembershipSecret);
  const MailboxAddress gone{"127.0.0.1", stopped.port()};
  stopped.stop();
  const Unanswered first, second;
  const auto started = Clock::now();
  const std::vector<Reach> reached = probeMailboxes(
      {first.address(), {"127.0.0.1", alive.port()}, gone, second.address()}, kMembershipSecret,
      started + std::chrono::milliseconds(300));
  const auto waited = Clock::now() - started;
  CHECK((reached == std::vector<Reach>{Reach::Silent, Reach::Answers, Reach::Refused,
                                        Reach::Silent}));
  CHECK(waited < std::chrono::milliseconds(550));
  CHECK(probeMailboxes({}, kMembershipSecret, started).empty());
}

TEST(aMailboxThatStopsAfterAnsweringRefusesFromThen) {
  // A rank killed a moment ago answered reachAll() while its process was taken apart; a failing
  // rank that follows its chain asks again rather than wait a second for a record (issue 33).
  TcpStoreServer zero("127.0.0.1", 0, kMembershipSecret);
  TcpStoreServer one("127.0.0.1", 0, kMembershipSecret);
  Membership membership(0, {{"127.0.0.1", zero.port()}, {"127.0.0.1", one.port()}}, kMembershipSecret,
                        std::chrono::milliseconds(300));
  const auto soon = [] { return Clock::now() + std::chrono::milliseconds(200); };
  CHECK(!membership.refuses(1, soon()));
  CHECK(!membership.refuses(0, soon()));  // this rank's own
  CHECK((membership.reachAll() == std::vector<Reach>{Reach::Answers, Reach::Answers}));
  one.stop();
  CHECK(membership.refuses(1, soon()));
  CHECK(!membership.read(1, "abort", std::chrono::milliseconds(100)));
}

TEST(anExitWatchTellsOfAnExitAtOnce) {
  // Not at the next look: a waiter asleep on shared memory is woken the moment a peer dies.
  int pipeFds[2];
  CHECK_EQ(pipe(pipeFds), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(pipeFds[1]);
    char byte;
    (void)!read(pipeFds[0], &byte, 1);  // until the parent closes its end
    _exit(0);
  }
  std::atomic<int> told{0};
  std::atomic<int64_t> toldAt{0};
  ExitWatch watch({static_cast<int>(child), static_cast<int>(getpid())}, [&](int pid) {
    CHECK_EQ(pid, static_cast<int>(child));
    toldAt = Clock::now().time_since_epoch().count();
    ++told;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(!watch.anyExited());
  CHECK_EQ(told.load(), 0);
  const auto exited = Clock::now();
  close(pipeFds[1]);
  for (int i = 0; i < 400 && told.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK_EQ(told.load(), 1);
  CHECK(watch.anyExited());
  CHECK(Clock::time_point(Clock::duration(toldAt.load())) - exited < std::chrono::seconds(1));
  int status = 0;
  waitpid(child, &status, 0);  // a zombie until now: the watch told of it before
  close(pipeFds[0]);
  // A process already gone is told before the constructor returns.
  std::atomic<int> gone{0};
  ExitWatch late({static_cast<int>(child)}, [&](int) { ++gone; });
  CHECK_EQ(gone.load(), 1);
  CHECK(late.anyExited());
}

TEST(helperThreadsRunEveryPartAndRaiseTheFirstFailure) {
  HelperThreads helpers(3);
  CHECK_EQ(helpers.threads(), 4);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::atomic<int>> ran(4);
    helpers.run(round % 5, [&](int part) { ran[static_cast<size_t>(part)]++; });
    for (int part = 0; part < 4; ++part) {
      CHECK_EQ(ran[static_cast<size_t>(part)].load(), part < round % 5 ? 1 : 0);
    }
  }
  bool raised = false;
  try {
    helpers.run(4, [](int part) {
      if (part == 2) throw std::runtime_error("part 2 failed");
    });
  } catch (const std::runtime_error& error) {
    raised = std::string(error.what()) == "part 2 failed";
  }
  CHECK(raised);
  std::atomic<int> after{0};
  helpers.run(4, [&](int) { after++; });  // still usable
  CHECK_EQ(after.load(), 4);
}

TEST(anExitedProcessIsGoneBeforeItIsReaped) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  // A zombie until waited for: kill(pid, 0) still succeeds.
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = processGone(child);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(gone);
  CHECK_EQ(kill(child, 0), 0);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(processGone(child));
  CHECK(!processGone(getpid()));
}
