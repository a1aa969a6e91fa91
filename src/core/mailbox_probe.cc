// Whether a mailbox answers (probeMailbox, probeMailboxes; membership.h): a connection without
// blocking, then the proof of the job's secret, many mailboxes at once.
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <optional>
#include <string>
#include <vector>

#include "auth/handshake.h"
#include "common/process.h"
#include "common/socket.h"
#include "core/membership.h"
#include "ringcomm/errors.h"

namespace ringcomm {

namespace {

// How long a connection that was accepted may stay without the mailbox's proof of the secret
// before what accepted it counts as a stranger. A mailbox's server sends its hello the moment it
// accepts and its proof one round trip later (tens of microseconds, a few milliseconds on a
// crowded host); a squatter that accepts and says nothing would be waited for until the deadline.
constexpr std::chrono::milliseconds kProofPatience{150};
// How many mailboxes one call asks at once: a leader of thousands of ranks would otherwise hold
// a descriptor for each (past `ulimit -n`, where a probe raises). A living mailbox answers in a
// round trip, so the next start within milliseconds; those not started by the deadline say
// Silent, one silent ask to the agreement (a rank is lost only after a link timeout of them).
constexpr size_t kProbesAtOnce = 128;

// One mailbox's liveness question: a connection attempt to its addresses in turn, started
// without blocking so that many mailboxes are asked at once, then the handshake of the job's
// secret (auth/handshake.h): only a mailbox that proves the secret answers. A connection that is
// accepted proves the host is reachable; what then fails the proof (closes, speaks another
// protocol, proves another secret, or stays mute) took the port after the rank's process died.
class Probe {
 public:
  Probe(const MailboxAddress& address, const std::string& secret)
      : address_(address), connector_(secret, auth::Purpose::Store, auth::Caller{}) {}

  // Starts the connection (a probe never started says Silent: nothing was heard).
  void start() {
    started_ = true;
    if (address_.localPid > 0 && processGone(address_.localPid)) {
      result_ = Reach::Refused;  // its process exited: whatever answers there is not it
      return;
    }
    try {
      targets_ = net::resolve(address_.host, address_.port, /*passive=*/false);
    } catch (const Error&) {
    }
    startNext();
  }

  bool started() const { return started_; }
  bool done() const { return result_.has_value(); }
  int fd() const { return fd_.get(); }
  short events() const {
    return step_ == Step::Connecting || step_ == Step::Replying ? POLLOUT : POLLIN;
  }
  // What it found by `now`, the deadline: a connection accepted long enough ago without the
  // proof is a stranger's; a shorter wait tells nothing.
  Reach result(Clock::time_point now) const {
    if (result_) return *result_;
    if (step_ != Step::Connecting && now - connectedAt_ >= kProofPatience) return Reach::Unproven;
    return Reach::Silent;
  }

  // The socket is ready for what this probe waits for (or has an error or hang-up pending).
  void advance() {
    switch (step_) {
      case Step::Connecting:
        return settleConnect();
      case Step::ReadingHello:
        if (!readSome(hello_.data(), hello_.size())) return;
        if (const auto reply = connector_.reply(hello_.data())) {
          reply_ = *reply;
          step_ = Step::Replying;
          done_ = 0;
          return advance();  // the reply fits the socket's buffer: most likely sent at once
        }
        return finish(Reach::Unproven);
      case Step::Replying: {
        const ssize_t sent = ::send(fd_.get(), reply_.data() + done_, reply_.size() - done_,
                                    MSG_NOSIGNAL);
        if (sent < 0) {
          if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) finish(Reach::Unproven);
          return;
        }
        done_ += static_cast<size_t>(sent);
        if (done_ == reply_.size()) {
          step_ = Step::ReadingProof;
          done_ = 0;
        }
        return;
      }
      case Step::ReadingProof:
        if (!readSome(proof_.data(), proof_.size())) return;
        return finish(connector_.proves(proof_.data()) ? Reach::Answers : Reach::Unproven);
    }
  }

 private:
  enum class Step { Connecting, ReadingHello, Replying, ReadingProof };

  void finish(Reach reach) {
    result_ = reach;
    fd_.reset();  // a mailbox that proved itself sees the connection close: a probe's end
  }

  // Reads into `into` up to `size` bytes in all; true once they are all there. A hang-up or an
  // error before then: the other side is not a mailbox that proves the secret.
  bool readSome(uint8_t* into, size_t size) {
    const ssize_t got = ::recv(fd_.get(), into + done_, size - done_, 0);
    if (got < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) finish(Reach::Unproven);
      return false;
    }
    if (got == 0) {
      finish(Reach::Unproven);
      return false;
    }
    done_ += static_cast<size_t>(got);
    return done_ == size;
  }

  void connected() {
    step_ = Step::ReadingHello;
    connectedAt_ = Clock::now();
    done_ = 0;
  }

  void settleConnect() {
    int error = 0;
    socklen_t length = sizeof(error);
    if (::getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
    if (error == 0) {
      connected();
    } else if (error == ECONNREFUSED) {
      finish(Reach::Refused);
    } else {
      refusedOrReset_ = refusedOrReset_ || error == ECONNRESET || error == ECONNABORTED;
      startNext();
    }
  }

  void startNext() {
    fd_.reset();
    while (next_ < targets_.size()) {
      const net::Address& target = targets_[next_++];
      net::UniqueFd fd(::socket(target.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!fd && (errno == EMFILE || errno == ENFILE)) {
        // This rank's own limit, not the peer's absence: said as such, or the peer would be
        // taken for lost.
        throw TransportError("ringcomm: asking " + target.toString() +
                                 "'s mailbox whether its rank lives: socket() failed: " +
                                 net::errnoText(errno),
                             FailureContext{"probe", -1, -1, 0.0});
      }
      if (!fd) continue;
      if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&target.storage),
                    target.length) == 0) {
        fd_ = std::move(fd);
        connected();
        return;
      }
      if (errno == ECONNREFUSED) {
        result_ = Reach::Refused;
        return;
      }
      if (errno == ECONNRESET || errno == ECONNABORTED) refusedOrReset_ = true;
      if (errno == EINPROGRESS || errno == EINTR) {
        fd_ = std::move(fd);
        return;
      }
    }
    // A reset is an answer from the host: its mailbox closed while the connection was being
    // made (a rank shutting its communicator down). Silent is only for a host that said nothing:
    // taken for lost, its record would not be looked for, and a mismatch the rank recorded
    // before it closed was once reported to its peers as a broken connection.
    result_ = refusedOrReset_ ? Reach::Refused : Reach::Silent;
  }

  const MailboxAddress address_;
  bool started_ = false;
  std::vector<net::Address> targets_;
  size_t next_ = 0;
  net::UniqueFd fd_;
  Step step_ = Step::Connecting;
  Clock::time_point connectedAt_{};
  auth::Connector connector_;
  std::array<uint8_t, auth::kHelloBytes> hello_{};
  std::array<uint8_t, auth::kReplyBytes> reply_{};
  std::array<uint8_t, auth::kProofBytes> proof_{};
  size_t done_ = 0;  // bytes of the step under way
  bool refusedOrReset_ = false;  // a target's host answered with a reset
  std::optional<Reach> result_;
};

}  // namespace

std::vector<Reach> probeMailboxes(const std::vector<MailboxAddress>& addresses,
                                  const std::string& secret, Clock::time_point deadline) {
  std::vector<Probe> probes;
  probes.reserve(addresses.size());
  for (const MailboxAddress& address : addresses) probes.emplace_back(address, secret);
  size_t unstarted = 0;  // probes before it have been started
  for (;;) {
    std::vector<pollfd> waiting;
    std::vector<Probe*> owners;
    for (size_t i = 0; i < unstarted; ++i) {
      if (probes[i].done()) continue;
      waiting.push_back(pollfd{probes[i].fd(), probes[i].events(), 0});
      owners.push_back(&probes[i]);
    }
    // At most kProbesAtOnce connections at once, the next started as one ends.
    while (unstarted < probes.size() && waiting.size() < kProbesAtOnce) {
      Probe& probe = probes[unstarted++];
      probe.start();
      if (probe.done()) continue;
      waiting.push_back(pollfd{probe.fd(), probe.events(), 0});
      owners.push_back(&probe);
    }
    const auto left = millisecondsLeft(deadline).count();
    if (waiting.empty() || left <= 0) break;
    const int ready = ::poll(waiting.data(), waiting.size(), static_cast<int>(left));
    if (ready < 0 && errno != EINTR) break;
    for (size_t i = 0; i < waiting.size(); ++i) {
      if (waiting[i].revents != 0) owners[i]->advance();
    }
  }
  const auto now = Clock::now();
  std::vector<Reach> reached;
  reached.reserve(probes.size());
  for (const Probe& probe : probes) reached.push_back(probe.result(now));
  return reached;
}

Reach probeMailbox(const MailboxAddress& address, const std::string& secret,
                   Clock::time_point deadline) {
  return probeMailboxes({address}, secret, deadline).front();
}

}  // namespace ringcomm
