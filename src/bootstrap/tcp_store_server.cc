// The store server's connections: accept, the handshake, reading requests, writing replies.
//
// One thread around one poll() loop (tcp_store_server.h), which also closes what stalls;
// TcpStoreServer starts and stops that thread.
#include "bootstrap/tcp_store_server.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sys/resource.h>

#include "auth/handshake.h"
#include "bootstrap/store_protocol.h"
#include "common/log.h"
#include "common/socket.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"

namespace ringcomm {
namespace storeserver {
namespace {

// How much the server reads per readiness event on one connection before serving the others.
constexpr size_t kReadChunkBytes = 64 * 1024;
constexpr size_t kMaxReadPerEventBytes = 1024 * 1024;
// While a connection cannot be served (a parked get, or replies the client is not reading), the
// server reads at most this far ahead, enough to notice the client hanging up.
constexpr size_t kReadAheadBytes = 64 * 1024;
// After accept() fails for lack of descriptors (EMFILE), the listener stays readable; pause it
// for this long rather than spin.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
// Connections still in the handshake at once; past this the oldest is closed for a newcomer.
constexpr size_t kMaxPendingHandshakes = 256;
// Descriptors kept free for the rest of the process (the rank that serves the store also runs).
constexpr rlim_t kSpareDescriptors = 128;

// The most connections the server keeps: what the process's descriptor limit leaves.
size_t connectionLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 65536;
  return limit.rlim_cur > 2 * kSpareDescriptors ? limit.rlim_cur - kSpareDescriptors
                                                : limit.rlim_cur / 2;
}

}  // namespace

ServerLoop::ServerLoop(int listenFd, net::Wakeup& wakeup, const std::atomic<bool>& stopping,
                       const std::string& secret, std::atomic<uint64_t>& refused)
    : listenFd_(listenFd), wakeup_(wakeup), stopping_(stopping), secret_(secret),
      refused_(refused), maxConnections_(connectionLimit()) {}

void ServerLoop::run() {
  std::vector<pollfd> fds;
  std::vector<ConnectionId> ids;  // ids[i] belongs to fds[i + 2]
  while (!stopping_.load()) {
    auto now = Clock::now();
    fds.clear();
    ids.clear();
    fds.push_back({wakeup_.readFd(), POLLIN, 0});
    fds.push_back({now >= acceptPausedUntil_ ? listenFd_ : -1, POLLIN, 0});
    for (auto& [id, connection] : connections_) {
      short events = 0;
      if (connection.servable() || connection.in.size() < kReadAheadBytes) events |= POLLIN;
      if (connection.pendingReplyBytes() > 0) events |= POLLOUT;
      fds.push_back({connection.fd.get(), events, 0});
      ids.push_back(id);
    }

    int ready = ::poll(fds.data(), fds.size(), pollTimeoutMs(now));
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw TransportError(std::string("store server: poll() failed: ") + std::strerror(errno),
                           FailureContext{"store server", -1, -1, 0.0});
    }
    if (fds[0].revents != 0) {
      wakeup_.drain();
      if (stopping_.load()) break;
    }
    if (fds[1].revents != 0) acceptAll();

    for (size_t i = 0; i < ids.size(); ++i) {
      short revents = fds[i + 2].revents;
      if (revents == 0) continue;
      ConnectionId id = ids[i];
      Connection& connection = connections_.at(id);
      if (connection.closing) continue;
      guarded(connection, [&] {
        if (!connection.authenticated()) {
          if (revents & (POLLIN | POLLHUP | POLLERR)) continueHandshake(connection);
          if (!connection.closing && (revents & POLLOUT) != 0) flush(connection);
          return;
        }
        if (revents & (POLLIN | POLLHUP | POLLERR)) {
          bool open = readAvailable(connection);
          processRequests(id, connection);
          // POLLHUP / POLLERR: reset, or shut down both ways; no reply can reach the client.
          if (!open || (revents & (POLLHUP | POLLERR)) != 0) connection.closing = true;
        }
        if (!connection.closing && (revents & (POLLOUT | POLLERR)) != 0) {
          flush(connection);
          // Replies drained: requests held back by the backlog can go on.
          processRequests(id, connection);
        }
      });
    }
    expireParked(Clock::now());
    expireStalled(Clock::now());
    closeFinished();
  }
}

int ServerLoop::pollTimeoutMs(Clock::time_point now) const {
  Clock::time_point next = Clock::time_point::max();
  if (now < acceptPausedUntil_) next = acceptPausedUntil_;
  for (const auto& [id, connection] : connections_) {
    if (connection.parked) next = std::min(next, connection.parkedDeadline);
    if (!connection.authenticated()) next = std::min(next, connection.handshakeDeadline);
    if (connection.partialSince) next = std::min(next, *connection.partialSince + kRequestTimeout);
    if (connection.replyQueuedSince) {
      next = std::min(next, *connection.replyQueuedSince + kRequestTimeout);
    }
  }
  if (next == Clock::time_point::max()) return -1;
  if (next <= now) return 0;
  // Round up: waking a millisecond early would only spin until the deadline.
  auto left = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
  return static_cast<int>(std::min<int64_t>(left, 24 * 3600 * 1000));
}

void ServerLoop::acceptAll() {
  while (true) {
    net::UniqueFd fd;
    try {
      fd = net::acceptTcp(listenFd_);
    } catch (const TransportError&) {
      acceptPausedUntil_ = Clock::now() + kAcceptBackoff;  // out of descriptors, most likely
      return;
    }
    if (!fd) return;
    if (pendingHandshakes() >= kMaxPendingHandshakes || liveConnections() >= maxConnections_) {
      // The oldest stranger still in the handshake gives way (a flood of them cannot keep the
      // job's ranks out); with none, the newcomer is turned away.
      auto oldest = connections_.end();
      for (auto it = connections_.begin(); it != connections_.end(); ++it) {
        if (!it->second.authenticated() && !it->second.closing) {
          oldest = it;
          break;  // ids grow with time: the first is the oldest
        }
      }
      if (oldest == connections_.end()) continue;  // fd closes here
      // Only marked: the loop is still walking the connections it polled; closeFinished() at the
      // end of the iteration closes it.
      refuse(oldest->second, "made way for a newer connection");
    }
    Connection connection;
    connection.fd = std::move(fd);
    connection.handshake = std::make_unique<auth::Acceptor>(secret_, auth::Purpose::Store);
    connection.handshakeDeadline = Clock::now() + storeproto::kHandshakeTimeout;
    const auto& hello = connection.handshake->hello();
    connection.out.assign(hello.begin(), hello.end());
    connections_.emplace(nextId_++, std::move(connection));
  }
}

size_t ServerLoop::pendingHandshakes() const {
  size_t pending = 0;
  for (const auto& [id, connection] : connections_) {
    pending += !connection.closing && !connection.authenticated() ? 1 : 0;
  }
  return pending;
}

size_t ServerLoop::liveConnections() const {
  size_t live = 0;
  for (const auto& [id, connection] : connections_) live += connection.closing ? 0 : 1;
  return live;
}

void ServerLoop::refuse(Connection& connection, const char* why) {
  connection.closing = true;
  refused_.fetch_add(1);
  // Who tried without the secret is worth a line (a newcomer of another job, a stranger); a
  // flood of them is not worth one each.
  const auto now = Clock::now();
  if (now - lastRefusalLogged_ < std::chrono::seconds(1)) return;
  lastRefusalLogged_ = now;
  std::string peer = "an unknown address";
  try {
    peer = net::peerAddress(connection.fd.get()).toString();
  } catch (const Error&) {
  }
  RINGCOMM_LOG(LogLevel::Warn, kLogStore,
               "store server on port %d refused a connection from %s: it %s (%llu refused so far)",
               net::localAddress(listenFd_).port(), peer.c_str(), why,
               static_cast<unsigned long long>(refused_.load()));
}

void ServerLoop::continueHandshake(Connection& connection) {
  const size_t wanted = auth::kReplyBytes - connection.in.size();
  uint8_t bytes[auth::kReplyBytes];
  size_t n = 0;
  try {
    n = net::readSome(connection.fd.get(), bytes, wanted);
  } catch (const TransportError&) {
    refuse(connection, "hung up during the handshake");
    return;
  }
  connection.in.insert(connection.in.end(), bytes, bytes + n);
  if (connection.in.size() < auth::kReplyBytes) return;
  const auto accepted = connection.handshake->check(connection.in.data());
  if (!accepted) {
    refuse(connection, "did not prove the job's secret");
    return;
  }
  connection.in.clear();
  connection.handshake.reset();
  const auth::Digest& proof = accepted->second;
  connection.out.insert(connection.out.end(), proof.begin(), proof.end());
  flush(connection);
}

void ServerLoop::expireStalled(Clock::time_point now) {
  for (auto& [id, connection] : connections_) {
    if (connection.closing) continue;
    if (!connection.authenticated()) {
      if (now >= connection.handshakeDeadline) refuse(connection, "took too long over the handshake");
      continue;
    }
    // A request that began to arrive and stopped, or replies the client does not take, hold
    // memory: the client has kRequestTimeout for either.
    if (connection.partialSince && now - *connection.partialSince >= kRequestTimeout) {
      connection.closing = true;
    }
    if (connection.replyQueuedSince && now - *connection.replyQueuedSince >= kRequestTimeout) {
      connection.closing = true;
    }
  }
}

bool ServerLoop::readAvailable(Connection& connection) {
  size_t total = 0;
  while (total < kMaxReadPerEventBytes) {
    if (!connection.servable() && connection.in.size() >= kReadAheadBytes) break;
    size_t old = connection.in.size();
    connection.in.resize(old + kReadChunkBytes);
    size_t n = 0;
    try {
      n = net::readSome(connection.fd.get(), connection.in.data() + old, kReadChunkBytes);
    } catch (const TransportError&) {
      connection.in.resize(old);
      return false;  // hung up or reset: process what arrived, then drop the connection
    }
    connection.in.resize(old + n);
    if (n == 0) break;
    total += n;
  }
  return true;
}

void ServerLoop::flush(Connection& connection) {
  bool moved = false;
  while (connection.pendingReplyBytes() > 0) {
    size_t n = net::writeSome(connection.fd.get(), connection.out.data() + connection.outSent,
                              connection.pendingReplyBytes());
    if (n == 0) break;  // socket buffer full: POLLOUT will bring us back
    connection.outSent += n;
    moved = true;
  }
  if (connection.outSent == connection.out.size()) {
    connection.out.clear();
    connection.outSent = 0;
    connection.replyQueuedSince.reset();
  } else if (!connection.replyQueuedSince || moved) {
    // The client is taking its replies: the deadline counts from its last progress.
    connection.replyQueuedSince = Clock::now();
  }
}

void ServerLoop::closeFinished() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    Connection& connection = it->second;
    if (!connection.closing) {
      ++it;
      continue;
    }
    if (connection.parked) {
      auto found = waiters_.find(connection.parkedKey);
      if (found != waiters_.end()) {
        auto& list = found->second;
        list.erase(std::remove(list.begin(), list.end(), it->first), list.end());
        if (list.empty()) waiters_.erase(found);
      }
    }
    it = connections_.erase(it);  // closes the socket
  }
}

}  // namespace storeserver

struct RINGCOMM_HIDDEN TcpStoreServer::State {
  net::UniqueFd listener;
  net::Wakeup wakeup;
  std::atomic<bool> stopping{false};
  std::string secret;
  std::atomic<uint64_t> refused{0};
  int port = 0;
  std::mutex stopMutex;
  std::thread thread;
};

TcpStoreServer::TcpStoreServer(const std::string& host, int port, const std::string& secret)
    : state_(std::make_unique<State>()) {
  if (secret.empty()) throw InvalidArgument("TcpStoreServer: the job's secret is empty");
  state_->secret = secret;
  state_->listener = net::listenTcp(host, port);
  state_->port = net::localAddress(state_->listener.get()).port();
  State* state = state_.get();
  state_->thread = std::thread([state] {
    try {
      storeserver::ServerLoop(state->listener.get(), state->wakeup, state->stopping, state->secret,
                 state->refused)
          .run();
    } catch (const std::exception& error) {
      // Only poll() itself failing gets here. Ending the thread closes every connection, so the
      // clients raise TransportError rather than wait.
      RINGCOMM_LOG(LogLevel::Warn, kLogStore, "store server on port %d stopped: %s",
                   state->port, error.what());
    }
  });
}

TcpStoreServer::~TcpStoreServer() { stop(); }

int TcpStoreServer::port() const { return state_->port; }

uint64_t TcpStoreServer::refusedConnections() const { return state_->refused.load(); }

void TcpStoreServer::stop() {
  std::lock_guard<std::mutex> lock(state_->stopMutex);
  if (state_->thread.joinable()) {
    state_->stopping.store(true);
    state_->wakeup.notify();
    state_->thread.join();
  }
  state_->listener.reset();
}

}  // namespace ringcomm
