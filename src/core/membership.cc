#include "core/membership.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <iterator>
#include <sstream>
#include <thread>
#include <utility>

#include "auth/handshake.h"
#include "common/log.h"
#include "common/process.h"
#include "common/socket.h"
#include "ringcomm/errors.h"

namespace ringcomm {
namespace {

// How long one liveness question waits for the connection to be accepted or refused.
constexpr std::chrono::milliseconds kProbeWait{200};
// How often a waiting rank asks the mailboxes of those it waits for whether they still live.
constexpr std::chrono::milliseconds kProbeInterval{100};
// How long one wait for a key in a mailbox blocks before the waiter looks around again.
constexpr std::chrono::milliseconds kWaitSlice{50};
// What a member's claim to go on and another's veto add to the claimant's counter
// (FormingStore::commit): odd where the claim is in, the count of vetoes by halves.
constexpr int64_t kClaim = 1;
constexpr int64_t kVeto = 2;
// How long a vetoer waits at least for a claimant to say whether its claim came first (it says
// so right after claiming): past the forming's deadline too, which may be what failed.
constexpr std::chrono::milliseconds kOutcomeLook{2000};
// How long a claim or a veto may take to connect to a living mailbox (its proof of the secret
// included): longer than a probe's wait, since a mailbox slow to answer on a busy machine must
// still get its claim or its veto, or the members could decide apart.
constexpr std::chrono::milliseconds kClaimConnect{2000};
// At most this much of what is left before the deadline the leader keeps for writing its
// decision, so that the others read it before theirs.
constexpr std::chrono::milliseconds kDecisionGrace{500};

std::string joined(const std::set<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : " ") + std::to_string(r);
  return text.empty() ? "none" : text;
}

Bytes bytesOf(const std::string& text) { return Bytes(text.begin(), text.end()); }
std::string textOf(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

// "<word> 1 2 3": the word and the numbers after it.
std::pair<std::string, std::set<int>> parseList(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  in >> word;
  std::set<int> ranks;
  for (int r; in >> r;) ranks.insert(r);
  return {word, ranks};
}

std::string firstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

// A view's or a decision's joiners: one "join <id> <host> <port>" line each after its first.
std::string joinerLines(const std::vector<Joiner>& joiners) {
  std::string text;
  for (const Joiner& joiner : joiners) {
    text += "\njoin " + joiner.id + " " + joiner.address.host + " " +
            std::to_string(joiner.address.port);
  }
  return text;
}

std::vector<Joiner> parseJoiners(const std::string& text) {
  std::vector<Joiner> joiners;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string word;
    Joiner joiner;
    if (words >> word >> joiner.id >> joiner.address.host >> joiner.address.port &&
        word == "join") {
      joiners.push_back(joiner);
    }
  }
  return joiners;
}

}  // namespace

namespace {

// How long a connection that was accepted may stay without the mailbox's proof of the secret
// before what accepted it counts as a stranger. A mailbox's server sends its hello the moment it
// accepts and its proof one round trip later (tens of microseconds, a few milliseconds on a
// crowded host); a squatter that accepts and says nothing would be waited for until the deadline.
constexpr std::chrono::milliseconds kProofPatience{150};

// One mailbox's liveness question: a connection attempt to its addresses in turn, started
// without blocking so that many mailboxes are asked at once, then the handshake of the job's
// secret (auth/handshake.h): only a mailbox that proves the secret answers. A connection that is
// accepted proves the host is reachable; what then fails the proof (closes, speaks another
// protocol, proves another secret, or stays mute) took the port after the rank's process died.
class Probe {
 public:
  Probe(const MailboxAddress& address, const std::string& secret)
      : connector_(secret, auth::Purpose::Store, auth::Caller{}) {
    if (address.localPid > 0 && processGone(address.localPid)) {
      result_ = Reach::Refused;  // its process exited: whatever answers there is not it
      return;
    }
    try {
      targets_ = net::resolve(address.host, address.port, /*passive=*/false);
    } catch (const Error&) {
    }
    startNext();
  }

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
      startNext();
    }
  }

  void startNext() {
    fd_.reset();
    while (next_ < targets_.size()) {
      const net::Address& target = targets_[next_++];
      net::UniqueFd fd(::socket(target.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
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
      if (errno == EINPROGRESS || errno == EINTR) {
        fd_ = std::move(fd);
        return;
      }
    }
    result_ = Reach::Silent;  // unreachable: no route, no host, or nothing answered
  }

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
  std::optional<Reach> result_;
};

}  // namespace

std::vector<Reach> probeMailboxes(const std::vector<MailboxAddress>& addresses,
                                  const std::string& secret, Clock::time_point deadline) {
  std::vector<Probe> probes;
  probes.reserve(addresses.size());
  for (const MailboxAddress& address : addresses) probes.emplace_back(address, secret);
  for (;;) {
    std::vector<pollfd> waiting;
    std::vector<Probe*> owners;
    for (Probe& probe : probes) {
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

Membership::Membership(int rank, std::vector<MailboxAddress> mailboxes, std::string secret,
                       std::chrono::milliseconds linkTimeout)
    : rank_(rank), mailboxes_(std::move(mailboxes)), secret_(std::move(secret)),
      linkTimeout_(linkTimeout) {}

std::vector<Reach> Membership::reachAll() {
  // Every mailbox at once, for the wait of one: where one host is lost, so are all its ranks,
  // and the agreement that follows counts these answers as its first asks.
  const auto asked = Clock::now();
  std::vector<Reach> reached = probeMailboxes(mailboxes_, secret_, asked + kProbeWait);
  reached[static_cast<size_t>(rank_)] = Reach::Answers;
  std::lock_guard<std::mutex> lock(recordsMutex_);
  for (size_t r = 0; r < reached.size(); ++r) {
    if (reached[r] == Reach::Silent) silentAsked_[static_cast<int>(r)] = asked;
  }
  return reached;
}

bool Membership::silentSince(int rank, Clock::time_point since) {
  std::lock_guard<std::mutex> lock(recordsMutex_);
  const auto found = silentAsked_.find(rank);
  return found != silentAsked_.end() && found->second >= since;
}

std::shared_ptr<Store> Membership::open(int rank, Clock::time_point deadline,
                                        Reach& reach) const {
  const MailboxAddress& address = mailboxes_.at(static_cast<size_t>(rank));
  // TcpStore's constructor retries a refused connection until its timeout (a server may start
  // late); mailboxes start with their communicator, so one that refuses is gone: ask once first.
  reach = rank == rank_ ? Reach::Answers
                        : probeMailbox(address, secret_, std::min(deadline, Clock::now() + kProbeWait));
  if (reach != Reach::Answers) return nullptr;
  try {
    return std::make_shared<TcpStore>(
        address.host, address.port,
        std::max(std::chrono::milliseconds(1), millisecondsLeft(deadline)), secret_);
  } catch (const Error&) {
    reach = Reach::Silent;
    return nullptr;
  }
}

bool Membership::post(const std::string& key, const Bytes& value,
                      std::chrono::milliseconds within) {
  const std::optional<std::shared_ptr<Store>> own = recordClient(rank_, Clock::now() + within);
  return own && (*own)->trySet(key, value, within);
}

std::optional<Bytes> Membership::read(int rank, const std::string& key,
                                      std::chrono::milliseconds within) {
  if (rank < 0 || rank >= static_cast<int>(mailboxes_.size())) return std::nullopt;
  const auto deadline = Clock::now() + within;
  const std::optional<std::shared_ptr<Store>> peer = recordClient(rank, deadline);
  if (!peer) return std::nullopt;
  return (*peer)->tryGet(key, std::max(std::chrono::milliseconds(1), millisecondsLeft(deadline)));
}

bool Membership::refuses(int rank, Clock::time_point deadline) {
  if (rank == rank_ || rank < 0 || rank >= static_cast<int>(mailboxes_.size())) return false;
  {
    std::lock_guard<std::mutex> lock(recordsMutex_);
    if (recordsGone_.count(rank)) return true;
  }
  // At least a probe's whole wait: a shorter one cannot tell a mute squatter from a mailbox.
  const auto until = std::max(deadline, Clock::now() + kProbeWait);
  if (!goneForSure(probeMailbox(mailboxes_[static_cast<size_t>(rank)], secret_, until))) {
    return false;
  }
  std::lock_guard<std::mutex> lock(recordsMutex_);
  recordsGone_.insert(rank);
  recordClients_.erase(rank);
  return true;
}

std::optional<std::shared_ptr<Store>> Membership::recordClient(int rank,
                                                                Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(recordsMutex_);
    if (recordsGone_.count(rank)) return std::nullopt;
    auto found = recordClients_.find(rank);
    if (found != recordClients_.end()) return found->second;
  }
  Reach reach = Reach::Silent;
  std::shared_ptr<Store> store = open(rank, deadline, reach);
  std::lock_guard<std::mutex> lock(recordsMutex_);
  if (goneForSure(reach)) recordsGone_.insert(rank);
  if (!store) return std::nullopt;
  recordClients_[rank] = store;
  return store;
}

std::shared_ptr<Store> Membership::client(int rank, Clock::time_point deadline) {
  auto found = clients_.find(rank);
  if (found != clients_.end()) return found->second;
  Reach reach = Reach::Silent;
  std::shared_ptr<Store> store =
      open(rank, std::max(deadline, Clock::now() + std::chrono::milliseconds(1000)), reach);
  if (!store) {
    const MailboxAddress& address = mailboxes_.at(static_cast<size_t>(rank));
    throw TransportError("ringcomm: rank " + std::to_string(rank) + "'s mailbox at " +
                             net::formatHostPort(address.host, address.port) + " does not answer",
                         FailureContext{"shrink", rank_, rank, 0.0});
  }
  clients_[rank] = store;
  return store;
}

std::shared_ptr<FormingStore> Membership::forming(int leader, const std::vector<int>& members,
                                                  const std::string& scope,
                                                  Clock::time_point deadline) {
  std::vector<std::pair<int, MailboxAddress>> watched;
  for (int member : members) {
    if (member != rank_) watched.emplace_back(member, mailboxes_.at(static_cast<size_t>(member)));
  }
  return std::make_shared<FormingStore>(client(leader, deadline), std::move(watched), scope,
                                        rank_, secret_, ownAddress());
}

FormingStore::FormingStore(std::shared_ptr<Store> inner,
                           std::vector<std::pair<int, MailboxAddress>> members, std::string scope,
                           int rank, std::string secret, MailboxAddress own)
    : inner_(std::move(inner)), members_(std::move(members)), scope_(std::move(scope)),
      rank_(rank), secret_(std::move(secret)), own_(std::move(own)) {}

void FormingStore::set(const std::string& key, const Bytes& value) { inner_->set(key, value); }
int64_t FormingStore::add(const std::string& key, int64_t delta) {
  return inner_->add(key, delta);
}
std::optional<Bytes> FormingStore::tryGet(const std::string& key,
                                          std::chrono::milliseconds within) {
  return inner_->tryGet(key, within);
}
bool FormingStore::trySet(const std::string& key, const Bytes& value,
                          std::chrono::milliseconds within) {
  return inner_->trySet(key, value, within);
}

Bytes FormingStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = net::deadlineAfter(timeout);
  for (;;) {
    try {
      return inner_->get(key, std::min(kProbeInterval, millisecondsLeft(deadline)));
    } catch (const TimeoutError&) {
      if (Clock::now() >= deadline) throw;
    }
    check();
  }
}

std::string FormingStore::formedKey(int rank) const {
  return scope_ + "forming/formed/" + std::to_string(rank);
}

bool FormingStore::goneAt(const MailboxAddress& address) const {
  return goneForSure(probeMailbox(address, secret_, Clock::now() + kProbeWait));
}

void FormingStore::raiseIfGone(int member, const MailboxAddress& address) {
  if (goneAt(address)) {
    throw TransportError("ringcomm: rank " + std::to_string(member) +
                             " is gone (its mailbox refuses or does not prove the secret) while "
                             "the members met",
                         FailureContext{"shrink", rank_, member, 0.0});
  }
}

bool FormingStore::lookDue() {
  std::lock_guard<std::mutex> lock(lookMutex_);
  const auto now = Clock::now();
  if (now - lastLook_ < kProbeInterval) return false;
  lastLook_ = now;
  return true;
}

void FormingStore::check() {
  if (!lookDue()) return;
  if (const std::optional<Bytes> why = inner_->tryGet(scope_ + "forming/abandoned", kProbeWait)) {
    throw TransportError("ringcomm: the survivors' communicator did not form: " + textOf(*why),
                         FailureContext{"shrink", rank_, -1, 0.0});
  }
  for (const auto& [member, address] : members_) raiseIfGone(member, address);
}

void FormingStore::abandon(const std::string& why) {
  inner_->trySet(scope_ + "forming/abandoned",
                 bytesOf("rank " + std::to_string(rank_) + " failed: " + why), kProbeWait);
}

void FormingStore::commit(Clock::time_point deadline) {
  bool formed = false;
  try {
    inner_->set(formedKey(rank_), bytesOf("formed"));
    formed = true;
    awaitEveryMember(deadline);
    if (claimGoingOn(deadline)) return;
    throw TransportError("ringcomm: every member formed the survivors' communicator, but another "
                             "member's wait for it failed first",
                         FailureContext{"shrink", rank_, -1, 0.0});
  } catch (const Error&) {
    // Nobody can have read every "formed" where this member's never got there.
    if (!formed || !someoneWentOn(deadline)) throw;
    RINGCOMM_LOG(LogLevel::Warn, kLogInit,
                 "the new communicator's wait failed on rank %d, but another member went on "
                 "with it (every member formed it): going on too",
                 rank_);
  }
}

std::string FormingStore::claimKey() const { return scope_ + "forming/claim"; }
std::string FormingStore::outcomeKey() const { return scope_ + "forming/outcome"; }

bool FormingStore::claimGoingOn(Clock::time_point deadline) {
  // This mailbox is this process's own: it fails only as the process ends, and then the error
  // ends this member's forming too.
  TcpStore own(own_.host, own_.port, std::max(kClaimConnect, millisecondsLeft(deadline)),
               secret_);
  const bool first = own.add(claimKey(), kClaim) == kClaim;
  // For a vetoer that cannot tell from the counter which came first.
  own.set(outcomeKey(), bytesOf(first ? "on" : "off"));
  return first;
}

bool FormingStore::someoneWentOn(Clock::time_point deadline) {
  const auto until = std::max(deadline, Clock::now() + kOutcomeLook);
  for (const auto& [member, address] : members_) {
    // Each living member's claim gets this member's veto, or is read where it came first; a
    // member gone for sure goes on no more (one that went on and died is the next
    // communicator's failure).
    while (!goneAt(address)) {
      try {
        TcpStore theirs(address.host, address.port,
                        std::max(kProbeWait, std::min(kClaimConnect, millisecondsLeft(until))),
                        secret_);
        const int64_t before = theirs.add(claimKey(), kVeto) - kVeto;
        if (claimCameFirst(theirs, before, address, deadline)) return true;
        break;
      } catch (const Error&) {
        if (Clock::now() >= until) break;  // unreachable for as long as it may take
        std::this_thread::sleep_for(kWaitSlice);
      }
    }
  }
  return false;
}

bool FormingStore::claimCameFirst(Store& theirs, int64_t before, const MailboxAddress& address,
                                  Clock::time_point deadline) {
  if (before == kClaim) return true;         // its claim, and no veto before it
  if (before % kVeto == 0) return false;     // no claim yet: it will find a veto before its own
  // A claim and vetoes, in an order the count does not keep: the claimant says which it found.
  const auto until = std::max(deadline, Clock::now() + kOutcomeLook);
  while (Clock::now() < until) {
    if (const std::optional<Bytes> outcome = theirs.tryGet(outcomeKey(), kProbeWait)) {
      return textOf(*outcome) == "on";
    }
    if (goneAt(address)) return false;  // it died before it could go on
    std::this_thread::sleep_for(kWaitSlice);
  }
  return false;
}

void FormingStore::awaitEveryMember(Clock::time_point deadline) {
  std::vector<std::pair<int, MailboxAddress>> pending = members_;
  while (!pending.empty()) {
    // Blocks on the first that has not formed it for a slice; a broken leader's mailbox raises.
    try {
      inner_->get(formedKey(pending.front().first),
                  std::max(std::chrono::milliseconds(1),
                           std::min(kWaitSlice, millisecondsLeft(deadline))));
    } catch (const TimeoutError&) {
      if (Clock::now() >= deadline) {
        throw TimeoutError("ringcomm: rank " + std::to_string(pending.front().first) +
                               " did not form the survivors' communicator by the deadline",
                           FailureContext{"shrink", rank_, pending.front().first, 0.0});
      }
    }
    auto formed = [&](int member) {
      return inner_->tryGet(formedKey(member), kProbeWait).has_value();
    };
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [&](const auto& member) { return formed(member.first); }),
                  pending.end());
    if (pending.empty() || !lookDue()) continue;
    if (const std::optional<Bytes> why =
            inner_->tryGet(scope_ + "forming/abandoned", kProbeWait)) {
      throw TransportError("ringcomm: the survivors' communicator did not form: " + textOf(*why),
                           FailureContext{"shrink", rank_, -1, 0.0});
    }
    // Only those that have not formed it: one that did and died after is the new
    // communicator's failure. Read again after the ask, since it may have formed it between.
    for (const auto& [member, address] : pending) {
      if (goneAt(address) && !formed(member)) {
        throw TransportError("ringcomm: rank " + std::to_string(member) +
                                 " is gone (its mailbox refuses or does not prove the secret) "
                                 "before it formed the new communicator",
                             FailureContext{"shrink", rank_, member, 0.0});
      }
    }
  }
}

std::set<int> Membership::gone(const std::set<int>& ranks, Clock::time_point deadline,
                               std::map<int, Silence>& silences) {
  std::set<int> found;
  std::vector<int> asked;
  std::vector<MailboxAddress> addresses;
  for (int rank : ranks) {
    if (refused_.count(rank) || silent_.count(rank)) {
      found.insert(rank);
    } else {
      asked.push_back(rank);
      addresses.push_back(mailboxes_.at(static_cast<size_t>(rank)));
    }
  }
  const auto now = Clock::now();
  const std::vector<Reach> reached =
      probeMailboxes(addresses, secret_, std::min(deadline, now + kProbeWait));
  for (size_t i = 0; i < asked.size(); ++i) {
    const int rank = asked[i];
    switch (reached[i]) {
      case Reach::Answers:
        silences.erase(rank);
        continue;
      case Reach::Refused:
      case Reach::Unproven:
        refused_.insert(rank);
        clients_.erase(rank);
        RINGCOMM_LOG(LogLevel::Info, kLogInit, "shrink: rank %d is gone (%s)", rank,
                     reached[i] == Reach::Refused
                         ? "its mailbox refuses, or its process on this host exited"
                         : "what answers at its mailbox does not prove the job's secret: another "
                           "process holds the port");
        found.insert(rank);
        continue;
      case Reach::Silent:
        break;
    }
    auto [silence, first] = silences.emplace(rank, Silence{std::min(now, quietSince_)});
    // A silent answer to the failing rank's own question (reach()) was the first ask.
    if (first && silentSince(rank, quietSince_)) silence->second.asks = 1;
    if (++silence->second.asks < 2 || Clock::now() - silence->second.since < linkTimeout_) {
      continue;
    }
    silent_.insert(rank);
    clients_.erase(rank);
    RINGCOMM_LOG(LogLevel::Info, kLogInit,
                 "shrink: rank %d is lost (its mailbox has not answered for %.1f s, "
                 "RINGCOMM_LINK_TIMEOUT)",
                 rank, linkTimeout_.count() / 1000.0);
    found.insert(rank);
  }
  return found;
}

Survivors Membership::agree(const std::string& round, const std::set<int>& exclude,
                            Clock::time_point deadline, Clock::time_point quietSince,
                            const std::vector<Joiner>& knocking) {
  quietSince_ = quietSince;
  for (;;) {
    int leader = -1;
    for (int r = 0; r < static_cast<int>(mailboxes_.size()); ++r) {
      if (!refused_.count(r) && !silent_.count(r) && !exclude.count(r)) {
        leader = r;
        break;
      }
    }
    if (leader == rank_) return lead(round, exclude, knocking, deadline);
    if (std::optional<Survivors> decided = follow(leader, round, exclude, knocking, deadline)) {
      return *decided;
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError("ringcomm: shrink: no decision on who goes on within the deadline (rank " +
                             std::to_string(leader) + " led the last attempt)",
                         FailureContext{"shrink", rank_, leader, 0.0});
    }
  }
}

std::optional<Survivors> Membership::follow(int leader, const std::string& round,
                                            const std::set<int>& exclude,
                                            const std::vector<Joiner>& knocking,
                                            Clock::time_point deadline) {
  std::map<int, Silence> silences;
  std::shared_ptr<Store> store;
  // Post this rank's view to the leader's mailbox.
  for (;;) {
    if (Clock::now() >= deadline) return std::nullopt;
    try {
      if (!store) store = client(leader, deadline);
      std::string view = "exclude";
      for (int r : exclude) view += " " + std::to_string(r);
      view += joinerLines(knocking);
      if (store->trySet(round + "/view/" + std::to_string(rank_), bytesOf(view),
                        std::min(millisecondsLeft(deadline), linkTimeout_))) {
        break;
      }
    } catch (const Error&) {
      store.reset();
    }
    if (!gone({leader}, deadline, silences).empty()) return std::nullopt;
    std::this_thread::sleep_for(kWaitSlice);
  }
  // Wait for its decision, asking now and then whether it still lives.
  auto lastProbe = Clock::now();
  for (;;) {
    if (Clock::now() >= deadline) return std::nullopt;
    try {
      const std::string decision = textOf(
          store->get(round + "/decision", std::min(kWaitSlice, millisecondsLeft(deadline))));
      const auto [word, ranks] = parseList(firstLine(decision));
      if (word == "survivors") {
        if (!ranks.count(rank_)) {
          throw MembershipError("ringcomm: shrink: the survivors, led by rank " +
                                std::to_string(leader) + ", went on without rank " +
                                std::to_string(rank_) + " (survivors: " + joined(ranks) +
                                "); it was excluded, or did not join the agreement in time");
        }
        return Survivors{std::vector<int>(ranks.begin(), ranks.end()), leader,
                         parseJoiners(decision)};
      }
      throw MembershipError("ringcomm: shrink on rank " + std::to_string(rank_) + ": " +
                            firstLine(decision).substr(word.size() + 1));
    } catch (const MembershipError&) {
      throw;
    } catch (const Error&) {
      // Not decided yet (a timeout of this slice), or the leader's mailbox broke: ask below.
    }
    if (Clock::now() - lastProbe >= kProbeInterval) {
      lastProbe = Clock::now();
      if (!gone({leader}, deadline, silences).empty()) return std::nullopt;
    }
  }
}

Survivors Membership::lead(const std::string& round, const std::set<int>& exclude,
                           const std::vector<Joiner>& knocking, Clock::time_point deadline) {
  std::shared_ptr<Store> own = client(rank_, deadline);
  std::set<int> pending;
  for (int r = 0; r < static_cast<int>(mailboxes_.size()); ++r) {
    if (r != rank_ && !refused_.count(r) && !silent_.count(r) && !exclude.count(r)) {
      pending.insert(r);
    }
  }
  std::set<int> posted;
  std::set<int> excluded = exclude;
  std::map<int, std::vector<Joiner>> knocked{{rank_, knocking}};  // by the rank that knew them
  std::map<int, Silence> silences;
  const auto collectUntil = deadline - std::min(kDecisionGrace, millisecondsLeft(deadline) / 5);
  // The first look at once: a rank killed is usually why this agreement runs.
  auto lastProbe = Clock::now() - kProbeInterval;
  while (!pending.empty() && Clock::now() < collectUntil) {
    for (auto it = pending.begin(); it != pending.end();) {
      const std::optional<Bytes> view =
          own->tryGet(round + "/view/" + std::to_string(*it), kProbeWait);
      if (!view) {
        ++it;
        continue;
      }
      const auto [word, theirExclude] = parseList(firstLine(textOf(*view)));
      excluded.insert(theirExclude.begin(), theirExclude.end());
      knocked[*it] = parseJoiners(textOf(*view));
      posted.insert(*it);
      silent_.erase(*it);
      it = pending.erase(it);
    }
    if (pending.empty()) break;
    if (Clock::now() - lastProbe >= kProbeInterval) {
      lastProbe = Clock::now();
      for (int rank : gone(pending, collectUntil, silences)) pending.erase(rank);
      if (pending.empty()) break;
    }
    try {  // sleeps until the first missing view arrives, or a slice
      own->get(round + "/view/" + std::to_string(*pending.begin()),
               std::min(kWaitSlice, millisecondsLeft(collectUntil)));
    } catch (const Error&) {
    }
  }
  // Alive but not there by the deadline: as good as beyond a partition.
  silent_.insert(pending.begin(), pending.end());

  std::set<int> survivors{rank_};
  for (int r : posted) {
    if (!excluded.count(r)) survivors.insert(r);
  }
  std::set<int> lost;
  for (int r : silent_) {
    if (!excluded.count(r) && !survivors.count(r)) lost.insert(r);
  }
  std::string decision;
  const bool quorum = survivors.size() > lost.size();
  std::vector<Joiner> joiners;
  if (quorum) {
    joiners = answering(knocked, survivors, deadline);
    decision = "survivors " + joined(survivors) + joinerLines(joiners);
  } else {
    decision = "quorum: this side lost its quorum (it holds ranks " + joined(survivors) +
               ", and cannot reach ranks " + joined(lost) +
               ", which may go on beyond a partition: only a strict majority of the ranks not "
               "known to be gone may go on; gone for sure: " +
               joined(refused_) + ")";
  }
  RINGCOMM_LOG(LogLevel::Info, kLogInit, "shrink %s: rank %d decided: %s", round.c_str(), rank_,
               decision.c_str());
  own->set(round + "/decision", bytesOf(decision));
  if (!quorum) {
    throw MembershipError("ringcomm: shrink on rank " + std::to_string(rank_) + ": " +
                          decision.substr(std::string("quorum: ").size()));
  }
  return Survivors{std::vector<int>(survivors.begin(), survivors.end()), rank_, joiners};
}

std::vector<Joiner> Membership::answering(const std::map<int, std::vector<Joiner>>& knocked,
                                          const std::set<int>& survivors,
                                          Clock::time_point deadline) const {
  std::vector<Joiner> candidates;
  std::set<std::string> seen;
  for (const auto& [rank, joiners] : knocked) {
    if (!survivors.count(rank)) continue;
    for (const Joiner& joiner : joiners) {
      if (seen.insert(joiner.id).second) candidates.push_back(joiner);
    }
  }
  if (candidates.empty()) return {};
  std::vector<MailboxAddress> addresses;
  for (const Joiner& joiner : candidates) addresses.push_back(joiner.address);
  const std::vector<Reach> reached =
      probeMailboxes(addresses, secret_, std::min(deadline, Clock::now() + kProbeWait));
  std::vector<Joiner> alive;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (reached[i] == Reach::Answers) {
      alive.push_back(candidates[i]);
    } else {
      RINGCOMM_LOG(LogLevel::Info, kLogInit,
                   "grow: the newcomer %s at %s is not admitted: its mailbox does not answer "
                   "with proof of the secret",
                   candidates[i].id.c_str(),
                   net::formatHostPort(candidates[i].address.host, candidates[i].address.port)
                       .c_str());
    }
  }
  return alive;
}

std::vector<Joiner> Membership::knocks(std::chrono::milliseconds within) {
  const auto deadline = Clock::now() + within;
  const std::optional<std::shared_ptr<Store>> own = recordClient(rank_, deadline);
  if (!own) return {};
  const int64_t knocked = (*own)->add("door/knocks", 0);
  for (int64_t n = knocksRead_ + 1; n <= knocked; ++n) {
    // A newcomer counts its knock before it writes it: one not there yet is read next time.
    const std::optional<Bytes> knock = (*own)->tryGet(
        "door/knock/" + std::to_string(n),
        std::max(std::chrono::milliseconds(1), millisecondsLeft(deadline)));
    if (!knock) break;
    std::vector<Joiner> parsed = parseJoiners("knock\n" + textOf(*knock));
    if (!parsed.empty()) knocks_[n] = parsed.front();
    knocksRead_ = n;
  }
  std::vector<Joiner> waiting;
  for (const auto& [n, joiner] : knocks_) waiting.push_back(joiner);
  return waiting;
}

void Membership::welcome(const Survivors& decided, const std::string& round) {
  const MailboxAddress& leader = mailboxes_.at(static_cast<size_t>(decided.leader));
  const std::string where = round + " " + leader.host + " " + std::to_string(leader.port);
  for (const auto& [n, joiner] : knocks_) {
    const bool admitted = std::any_of(decided.joiners.begin(), decided.joiners.end(),
                                      [&](const Joiner& j) { return j.id == joiner.id; });
    if (admitted) post("door/welcome/" + std::to_string(n), bytesOf(where), kProbeWait);
  }
}

void Membership::admitted(const Survivors& decided) {
  for (auto it = knocks_.begin(); it != knocks_.end();) {
    const bool admitted = std::any_of(decided.joiners.begin(), decided.joiners.end(),
                                      [&](const Joiner& j) { return j.id == it->second.id; });
    it = admitted ? knocks_.erase(it) : std::next(it);
  }
}

}  // namespace ringcomm
