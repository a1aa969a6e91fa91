// TCP links made on first use (tcp_dialer.h): the acceptor thread, the verdict on a proven
// caller, and the engine thread's dial.
#include "transport/tcp/tcp_dialer.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/failure.h"
#include "common/log.h"
#include "ringcomm/errors.h"
#include "transport/tcp/tcp_link.h"

namespace ringcomm::transport {
namespace {

// The byte the acceptor sends after its proof: whether the caller's connection is the link.
constexpr uint8_t kLinkAccepted = 1;
constexpr uint8_t kLinkRefused = 0;
// How long a dial waits for the peer's port to answer. Its listener is open from before the
// rendezvous until its communicator closes, and the kernel queues a connection whatever its
// process is doing, so a refusal means it is gone: one attempt, not retried (as connectTcp does
// for listeners that start late).
constexpr std::chrono::milliseconds kDialConnectWait{2000};
// A dialer refused by a lower rank that dials it waits for that dial this long, then dials again:
// the lower rank may have closed or died before its dial arrived (a dial to a closed rank ends
// in its end of file, naming it), or given its dial up.
constexpr std::chrono::milliseconds kRedialInterval{200};
// The acceptor's longest poll (it wakes at once for close() and for newcomers).
constexpr std::chrono::milliseconds kAcceptorPoll{1000};
// Out of descriptors, the acceptor leaves its listener alone this long (the connection stays
// queued) rather than spin on it.
constexpr std::chrono::milliseconds kAcceptPause{100};

void makePipe(net::UniqueFd& read, net::UniqueFd& write) {
  int fds[2];
  if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    throw TransportError(std::string("ringcomm: pipe() failed: ") + net::errnoText(errno),
                         FailureContext{"connecting to peers", -1, -1, 0.0});
  }
  read = net::UniqueFd(fds[0]);
  write = net::UniqueFd(fds[1]);
}

void logLink(int rank, int peer, const char* how, bool sealed) {
  RINGCOMM_LOG(LogLevel::Info, kLogTransport, "rank %d linked to rank %d over TCP (%s%s)", rank,
               peer, how, sealed ? ", sealed" : "");
}

}  // namespace

TcpDialer::TcpDialer(int rank, std::map<int, PeerAddress> peers, net::UniqueFd listener,
                     const Config& config)
    : rank_(rank), peers_(std::move(peers)), config_(config), listener_(std::move(listener)) {
  makePipe(arrivalRead_, arrivalWrite_);
  makePipe(stopRead_, stopWrite_);
  acceptor_ = std::thread([this] { acceptLoop(); });
}

TcpDialer::~TcpDialer() {
  close();
  if (acceptor_.joinable()) acceptor_.join();
}

void TcpDialer::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return;
  closed_ = true;
  // Links peers made that the transport never took: their peers wait on them, and must see
  // this rank go as they would on a link it took (Transport::closeLinks closes those).
  for (auto& [peer, record] : records_) {
    if (record.state == State::Arrived && record.stream) record.stream->close();
  }
  const uint8_t stop = 1;
  [[maybe_unused]] const ssize_t written = ::write(stopWrite_.get(), &stop, 1);
  arrived_.notify_all();
}

std::string TcpDialer::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

int TcpDialer::linkCount() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int count = 0;
  for (const auto& [peer, record] : records_) {
    count += record.state == State::Arrived || record.state == State::Taken;
  }
  return count;
}

void TcpDialer::acceptLoop() {
  HandshakeServer server(rank_, listener_.get(), config_.secret);
  const auto take = [this](int from, net::UniqueFd& fd, const auth::LinkKeys& keys,
                           const auth::Digest& proof) { return answer(from, fd, keys, proof); };
  Clock::time_point pausedUntil{};
  size_t told = 0;  // connections dropped for not proving the secret, as the log has said
  for (;;) {
    std::vector<pollfd> fds;
    const Clock::time_point wake = server.pollFds(fds, Clock::now() + kAcceptorPoll);
    const bool paused = Clock::now() < pausedUntil;
    if (paused) fds[0].events = 0;
    fds.push_back({stopRead_.get(), POLLIN, 0});
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count();
    const int64_t longest = paused ? kAcceptPause.count() : kAcceptorPoll.count();
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<int64_t>(left, 0, longest))) <
        0) {
      if (errno == EINTR) continue;
      std::lock_guard<std::mutex> lock(mutex_);
      if (failure_.empty()) failure_ = std::string("poll() failed: ") + std::strerror(errno);
      break;
    }
    if (fds.back().revents != 0) break;
    const std::string failure = server.serve(!paused && fds[0].revents != 0, take);
    if (!failure.empty()) {
      pausedUntil = Clock::now() + kAcceptPause;
      std::lock_guard<std::mutex> lock(mutex_);
      if (failure_.empty()) failure_ = "rank " + std::to_string(rank_) + " " + failure;
    }
    if (told == 0 && server.refused() > 0) told = warnOfStrangers(server.refused(), false);
  }
  if (server.refused() > told) warnOfStrangers(server.refused(), true);
  // Dials to this rank are refused from here on (those queued are reset).
  listener_.reset();
}

// Connections to this rank's port that did not prove the job's secret: said at the first, and
// how many in all when the communicator closes.
size_t TcpDialer::warnOfStrangers(size_t count, bool closing) const {
  RINGCOMM_LOG(LogLevel::Warn, kLogAuth,
               "rank %d dropped %zu connection(s) to its port that did not prove the job's "
               "secret (strangers, or ranks of another job)%s",
               rank_, count, closing ? "" : "; the count follows when it closes");
  return count;
}

// The rule (tcp_dialer.h): refused where a link exists or is waiting, or where this rank dials
// the caller too and has the lower rank; else accepted and kept. Sent under the mutex, so that
// link() sees the link the moment it is accepted.
bool TcpDialer::answer(int from, net::UniqueFd& fd, const auth::LinkKeys& keys,
                       const auth::Digest& proof) {
  const auto peer = peers_.find(from);
  if (peer == peers_.end()) return false;  // not a TCP peer of this rank
  std::lock_guard<std::mutex> lock(mutex_);
  // Closed: no verdict, the caller reads the end of the connection (a refusal would have it
  // wait for a dial from this rank).
  if (closed_) return false;
  Record& record = records_[from];
  const bool accept = record.state != State::Arrived && record.state != State::Taken &&
                      !(record.state == State::Dialing && rank_ < from);
  const int raw = fd.get();
  std::unique_ptr<ByteStream> stream;
  bool sealed = false;
  if (accept) {
    try {
      stream = makeTcpLink(std::move(fd), from, config_, peer->second.otherHost, keys, &sealed);
    } catch (const Error&) {
      return false;
    }
  }
  uint8_t message[sizeof(auth::Digest) + 1];
  std::memcpy(message, proof.data(), proof.size());
  message[proof.size()] = accept ? kLinkAccepted : kLinkRefused;
  try {
    net::writeFully(raw, message, proof.size() + 1, Clock::now() + kHandshakeTimeout);
  } catch (const Error&) {
    return false;  // the caller is gone: its link (if accepted) closes with `stream`
  }
  if (!accept) return true;  // answered; the connection closes
  record.state = State::Arrived;
  record.stream = std::move(stream);
  logLink(rank_, from, "its dial", sealed);
  if (!signalled_) {
    const uint8_t one = 1;
    [[maybe_unused]] const ssize_t written = ::write(arrivalWrite_.get(), &one, 1);
    signalled_ = true;
  }
  arrived_.notify_all();
  return true;
}

std::vector<std::pair<int, std::unique_ptr<ByteStream>>> TcpDialer::takeArrived() {
  std::vector<std::pair<int, std::unique_ptr<ByteStream>>> taken;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!signalled_) return taken;
  for (auto& [peer, record] : records_) {
    if (record.state != State::Arrived) continue;
    record.state = State::Taken;
    taken.emplace_back(peer, std::move(record.stream));
  }
  uint8_t drained[16];
  while (::read(arrivalRead_.get(), drained, sizeof(drained)) > 0) {
  }
  signalled_ = false;
  return taken;
}

std::unique_ptr<ByteStream> TcpDialer::link(int peer, const Operation& op) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) {
      raisePeerFailure<TransportError>(op, -1, "this rank's communicator closed before its link to "
                                               "rank " + std::to_string(peer) + " was made");
    }
    Record& record = records_[peer];
    if (record.state == State::Arrived) {
      record.state = State::Taken;
      return std::move(record.stream);
    }
    record.state = State::Dialing;
  }
  try {
    std::unique_ptr<ByteStream> stream = dial(peer, op);
    if (!stream) return awaitArrival(peer, op);
    std::lock_guard<std::mutex> lock(mutex_);
    records_[peer].state = State::Taken;
    return stream;
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (records_[peer].state == State::Dialing) records_[peer].state = State::None;
    throw;
  }
}

std::unique_ptr<ByteStream> TcpDialer::dial(int peer, const Operation& op) {
  const PeerAddress& address = peers_.at(peer);
  const std::string who = "rank " + std::to_string(peer);
  net::UniqueFd fd;
  try {
    fd = net::connectTcp(address.host, address.port,
                         std::min(op.deadline, Clock::now() + kDialConnectWait), false);
  } catch (const PeerError& error) {
    if (atDescriptorLimit(error)) {
      raisePeerFailure<TransportError>(op, -1, "rank " + std::to_string(rank_) +
                                                   " could not link to " + who + ": " +
                                                   error.what());
    }
    raisePeerFailure<TransportError>(
        op, peer, who + " does not take this rank's link at " +
                      net::formatHostPort(address.host, address.port) + " (" + error.what() +
                      "): it closed or aborted its communicator, or is gone");
  }
  auth::LinkKeys keys;
  uint8_t verdict = kLinkRefused;
  try {
    keys = auth::connectHandshake(fd.get(), config_.secret, auth::Purpose::Data,
                                  auth::Caller{rank_, peer}, op.deadline, who);
    net::readFully(fd.get(), &verdict, 1, op.deadline);
  } catch (const TimeoutError& error) {
    raisePeerFailure<TimeoutError>(op, peer,
                                   who + " did not finish the handshake: " + error.what());
  } catch (const TransportError& error) {
    raisePeerFailure<TransportError>(op, peer,
                                     who + " closed this rank's link before its verdict (it "
                                           "closed its communicator, or is gone): " +
                                         error.what());
  }
  if (verdict == kLinkRefused) return nullptr;
  if (verdict != kLinkAccepted) {
    raisePeerFailure<TransportError>(op, peer, who + " answered this rank's link with verdict " +
                                                   std::to_string(verdict) +
                                                   " (another version of ringcomm?)");
  }
  bool sealed = false;
  std::unique_ptr<ByteStream> stream =
      makeTcpLink(std::move(fd), peer, config_, address.otherHost, keys, &sealed);
  logLink(rank_, peer, "this rank's dial", sealed);
  return stream;
}

// Refused: the peer has the lower rank and dials this one at the same time (or its link came
// first); its link arrives through the acceptor. Dialed again every kRedialInterval meanwhile:
// a peer that closed or died before its dial came ends the wait, named.
std::unique_ptr<ByteStream> TcpDialer::awaitArrival(int peer, const Operation& op) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const auto here = [&] { return closed_ || records_[peer].state == State::Arrived; };
      arrived_.wait_until(lock, std::min(op.deadline, Clock::now() + kRedialInterval), here);
      if (closed_) {
        raisePeerFailure<TransportError>(op, -1, "this rank's communicator closed before its "
                                                 "link to rank " + std::to_string(peer) +
                                                     " was made");
      }
      Record& record = records_[peer];
      if (record.state == State::Arrived) {
        record.state = State::Taken;
        return std::move(record.stream);
      }
    }
    if (op.expired()) {
      raisePeerFailure<TimeoutError>(
          op, peer, "rank " + std::to_string(peer) +
                        " refused this rank's link as it was linking to this rank itself, and its "
                        "link did not come");
    }
    std::unique_ptr<ByteStream> stream = dial(peer, op);
    if (stream) {
      std::lock_guard<std::mutex> lock(mutex_);
      records_[peer].state = State::Taken;
      return stream;
    }
  }
}

}  // namespace ringcomm::transport
