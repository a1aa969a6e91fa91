// TcpStoreServer and TcpStore: the rendezvous store over TCP (wire format in store_protocol.h).
//
// The server is one thread around one poll() loop: it accepts clients, reads their requests into
// per-connection buffers, answers them, and parks a get() whose key is missing until a set() or
// add() creates it or its deadline passes. Nothing blocks inside the loop except poll() itself, so
// one slow or vanished client cannot hold up the others, and stop() only has to wake poll() (a
// self-pipe) to end the thread.
//
// Strangers: a new connection first goes through the handshake (src/auth/handshake.h), reading
// exactly its 78 bytes within kHandshakeTimeout; one that fails is closed and counted. At most
// kMaxPendingHandshakes wait at once (the oldest gives way to a newcomer, so a flood cannot keep
// the job's own ranks out), and the server never holds more descriptors than its limit allows.
// Clients that passed are bounded too: values, total bytes held, keys per check, and a deadline
// on every request once it has started to arrive and on every reply once it is queued.
//
// The client has one request in flight per connection, and as many connections as it has
// concurrent callers (a pool, see TcpStore::State); every wait for a reply has a deadline.
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
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

using storeproto::Decoder;
using storeproto::Encoder;
using storeproto::Op;
using storeproto::Status;

namespace {

// How much the server reads per readiness event on one connection before serving the others.
constexpr size_t kReadChunkBytes = 64 * 1024;
constexpr size_t kMaxReadPerEventBytes = 1024 * 1024;
// While a connection cannot be served (a parked get, or replies the client is not reading), the
// server reads at most this far ahead, enough to notice the client hanging up.
constexpr size_t kReadAheadBytes = 64 * 1024;
// Replies queued for a client that does not read them; past this the server stops processing
// that client's requests until the backlog drains.
constexpr size_t kMaxPendingReplyBytes = 4 * 1024 * 1024;
// After accept() fails for lack of descriptors (EMFILE), the listener stays readable; pause it
// for this long rather than spin.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
// A new connection has this long to complete the handshake (a real client needs a round trip).
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
// Connections still in the handshake at once; past this the oldest is closed for a newcomer.
constexpr size_t kMaxPendingHandshakes = 256;
// A request that has begun to arrive must arrive whole within this, and a queued reply must be
// taken by the client within it (a parked get() waits as long as it asked to).
constexpr auto kRequestTimeout = std::chrono::seconds(30);
// Bytes of keys and values the store holds at most.
constexpr size_t kMaxStoredBytes = size_t{1} << 30;
// Descriptors kept free for the rest of the process (the rank that serves the store also runs).
constexpr rlim_t kSpareDescriptors = 128;

// The most connections the server keeps: what the process's descriptor limit leaves.
size_t connectionLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 65536;
  return limit.rlim_cur > 2 * kSpareDescriptors ? limit.rlim_cur - kSpareDescriptors
                                                : limit.rlim_cur / 2;
}

// ---- Server ------------------------------------------------------------------------------------

struct Connection {
  net::UniqueFd fd;
  // Until the client has proved the secret: the handshake in progress, and its deadline.
  std::unique_ptr<auth::Acceptor> handshake;
  Clock::time_point handshakeDeadline;
  Bytes in;   // received, not yet processed (during the handshake: the client's reply so far)
  Bytes out;  // replies, not yet sent
  size_t outSent = 0;
  bool closing = false;  // dropped at the end of this loop iteration
  // A get() waiting for its key.
  bool parked = false;
  std::string parkedKey;
  Clock::time_point parkedDeadline;
  // Since when a request has been partly received, and a reply queued: each gets kRequestTimeout.
  std::optional<Clock::time_point> partialSince;
  std::optional<Clock::time_point> replyQueuedSince;

  size_t pendingReplyBytes() const { return out.size() - outSent; }
  bool authenticated() const { return !handshake; }
  bool servable() const {
    return authenticated() && !parked && pendingReplyBytes() < kMaxPendingReplyBytes;
  }
};

// Everything the server thread touches, and only it.
class ServerLoop {
 public:
  ServerLoop(int listenFd, net::Wakeup& wakeup, const std::atomic<bool>& stopping,
             const std::string& secret, std::atomic<uint64_t>& refused)
      : listenFd_(listenFd), wakeup_(wakeup), stopping_(stopping), secret_(secret),
        refused_(refused), maxConnections_(connectionLimit()) {}

  void run();

 private:
  using ConnectionId = uint64_t;

  void acceptAll();
  // Reads what is left of the client's handshake reply, and checks it once it is whole.
  void continueHandshake(Connection& connection);
  void refuse(Connection& connection, const char* why);
  // Closes handshakes past their deadline, requests that stopped arriving, replies not taken.
  void expireStalled(Clock::time_point now);
  size_t pendingHandshakes() const;
  size_t liveConnections() const;
  // Reads what is ready; returns false when the client hung up (after processing what it sent).
  bool readAvailable(Connection& connection);
  // Handles every complete request in connection.in while the connection is servable.
  void processRequests(ConnectionId id, Connection& connection);
  void handle(ConnectionId id, Connection& connection, const uint8_t* body, size_t size);
  void reply(Connection& connection, Bytes frame);
  void flush(Connection& connection);
  // Why key (with a value of valueBytes) may not be stored, or "" when it may.
  std::string roomFor(const std::string& key, size_t valueBytes) const;
  void store(const std::string& key, Bytes value);
  // Answers the parked gets of key (it now exists), then lets those clients go on.
  void wakeWaiters(const std::string& key);
  void unpark(ConnectionId id, Connection& connection);
  void expireParked(Clock::time_point now);
  int pollTimeoutMs(Clock::time_point now) const;
  void closeFinished();

  // Runs step on one connection; any error drops that client only.
  template <typename Step>
  void guarded(Connection& connection, Step step) {
    try {
      step();
    } catch (const std::exception&) {
      connection.closing = true;
    }
  }

  int listenFd_;
  net::Wakeup& wakeup_;
  const std::atomic<bool>& stopping_;
  const std::string& secret_;
  std::atomic<uint64_t>& refused_;  // connections closed for failing the handshake
  const size_t maxConnections_;
  Clock::time_point acceptPausedUntil_{};
  Clock::time_point lastRefusalLogged_{};

  std::unordered_map<std::string, Bytes> values_;
  size_t storedBytes_ = 0;  // keys and values
  std::unordered_map<std::string, std::vector<ConnectionId>> waiters_;
  // std::map: references stay valid while connections are added during a loop iteration.
  std::map<ConnectionId, Connection> connections_;
  ConnectionId nextId_ = 0;
};

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
    connection.handshakeDeadline = Clock::now() + kHandshakeTimeout;
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

void ServerLoop::processRequests(ConnectionId id, Connection& connection) {
  size_t consumed = 0;
  while (connection.servable() && !connection.closing) {
    size_t available = connection.in.size() - consumed;
    if (available < storeproto::kFrameHeaderBytes) break;
    uint32_t length = storeproto::loadU32(connection.in.data() + consumed);
    if (length == 0 || length > storeproto::kMaxFrameBytes) {
      connection.closing = true;  // not our protocol, or corrupt: nothing after it can be trusted
      break;
    }
    if (available - storeproto::kFrameHeaderBytes < length) break;
    const uint8_t* body = connection.in.data() + consumed + storeproto::kFrameHeaderBytes;
    consumed += storeproto::kFrameHeaderBytes + length;
    handle(id, connection, body, length);
  }
  connection.in.erase(connection.in.begin(), connection.in.begin() + consumed);
  // Bytes of a request still arriving start its deadline (kept while more of it comes).
  if (connection.in.empty() || connection.parked) {
    connection.partialSince.reset();
  } else if (consumed > 0 || !connection.partialSince) {
    connection.partialSince = Clock::now();
  }
  if (!connection.closing) flush(connection);
}

void ServerLoop::handle(ConnectionId id, Connection& connection, const uint8_t* body,
                        size_t size) {
  Decoder request(body, size);
  auto op = static_cast<Op>(request.u8());
  switch (op) {
    case Op::Set: {
      std::string key = request.str();
      Bytes value = request.bytes();
      request.expectEnd();
      if (const std::string full = roomFor(key, value.size()); !full.empty()) {
        reply(connection, Encoder(Status::Error).str(full).finish());
        return;
      }
      store(key, std::move(value));
      reply(connection, Encoder(Status::Ok).finish());
      wakeWaiters(key);
      return;
    }
    case Op::Get: {
      std::string key = request.str();
      int64_t timeoutMs = request.i64();
      request.expectEnd();
      auto found = values_.find(key);
      if (found != values_.end()) {
        reply(connection, Encoder(Status::Ok).str(found->second).finish());
      } else if (timeoutMs <= 0) {
        reply(connection, Encoder(Status::Timeout).finish());
      } else {
        connection.parked = true;
        connection.parkedKey = key;
        connection.parkedDeadline = net::deadlineAfter(std::chrono::milliseconds(timeoutMs));
        waiters_[key].push_back(id);
      }
      return;
    }
    case Op::Add: {
      std::string key = request.str();
      int64_t delta = request.i64();
      request.expectEnd();
      auto found = values_.find(key);
      bool exists = found != values_.end();
      Bytes value = exists ? found->second : Bytes();
      try {
        int64_t next = storeproto::applyAdd(key, value, exists, delta);
        if (const std::string full = roomFor(key, value.size()); !full.empty()) {
          reply(connection, Encoder(Status::Error).str(full).finish());
          return;
        }
        store(key, std::move(value));
        reply(connection, Encoder(Status::Ok).i64(next).finish());
      } catch (const InvalidArgument& error) {
        reply(connection, Encoder(Status::Error).str(std::string(error.what())).finish());
        return;
      }
      wakeWaiters(key);
      return;
    }
    case Op::Check: {
      uint32_t count = request.u32();
      if (count > storeproto::kMaxKeysPerCheck) {
        reply(connection, Encoder(Status::Error)
                              .str("store check of " + std::to_string(count) + " keys; at most " +
                                   std::to_string(storeproto::kMaxKeysPerCheck) + " per request")
                              .finish());
        return;
      }
      bool present = true;
      for (uint32_t i = 0; i < count; ++i) present = values_.count(request.str()) != 0 && present;
      request.expectEnd();
      reply(connection, Encoder(Status::Ok).u8(present ? 1 : 0).finish());
      return;
    }
  }
  reply(connection, Encoder(Status::Error)
                        .str("unknown store request " + std::to_string(int(op)))
                        .finish());
}

std::string ServerLoop::roomFor(const std::string& key, size_t valueBytes) const {
  if (key.size() > storeproto::kMaxKeyBytes) {
    return "store key of " + std::to_string(key.size()) + " bytes; at most " +
           std::to_string(storeproto::kMaxKeyBytes);
  }
  auto found = values_.find(key);
  const size_t freed = found == values_.end() ? 0 : key.size() + found->second.size();
  if (storedBytes_ - freed + key.size() + valueBytes > kMaxStoredBytes) {
    return "store full: it holds " + std::to_string(storedBytes_) + " bytes, at most " +
           std::to_string(kMaxStoredBytes);
  }
  return "";
}

void ServerLoop::store(const std::string& key, Bytes value) {
  auto found = values_.find(key);
  if (found != values_.end()) storedBytes_ -= key.size() + found->second.size();
  storedBytes_ += key.size() + value.size();
  values_[key] = std::move(value);
}

void ServerLoop::reply(Connection& connection, Bytes frame) {
  connection.out.insert(connection.out.end(), frame.begin(), frame.end());
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

void ServerLoop::wakeWaiters(const std::string& key) {
  auto found = waiters_.find(key);
  if (found == waiters_.end()) return;
  std::vector<ConnectionId> ids = std::move(found->second);
  waiters_.erase(found);
  const Bytes& value = values_.at(key);
  for (ConnectionId id : ids) {
    auto it = connections_.find(id);
    if (it == connections_.end()) continue;
    Connection& connection = it->second;
    if (connection.closing || !connection.parked) continue;
    connection.parked = false;
    reply(connection, Encoder(Status::Ok).str(value).finish());
    unpark(id, connection);
  }
}

void ServerLoop::unpark(ConnectionId id, Connection& connection) {
  // The client may have pipelined more requests behind the parked get.
  guarded(connection, [&] { processRequests(id, connection); });
}

void ServerLoop::expireParked(Clock::time_point now) {
  for (auto& [id, connection] : connections_) {
    if (!connection.parked || connection.closing || connection.parkedDeadline > now) continue;
    auto& list = waiters_[connection.parkedKey];
    list.erase(std::remove(list.begin(), list.end(), id), list.end());
    if (list.empty()) waiters_.erase(connection.parkedKey);
    connection.parked = false;
    reply(connection, Encoder(Status::Timeout).finish());
    unpark(id, connection);
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

}  // namespace

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
      ServerLoop(state->listener.get(), state->wakeup, state->stopping, state->secret,
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

// ---- Client ------------------------------------------------------------------------------------

namespace {

// The server answers a get() that timed out itself; the client waits this much longer before
// deciding that the server stopped answering, so the two deadlines never race.
constexpr auto kServerReplyGrace = std::chrono::milliseconds(5000);
// A live server answers set() and add() at once. They are bounded by the connect timeout, but
// never by less than this, so that a short connect timeout (the server was known to be up) does
// not make a busy server look dead.
constexpr auto kMinRequestTimeout = std::chrono::milliseconds(10000);
// How long opening an extra pooled connection may retry (see TcpStore::State).
constexpr auto kExtraConnectTimeout = std::chrono::milliseconds(5000);

std::string quoted(const char* verb, const std::string& key) {
  return std::string("store ") + verb + "('" + key + "')";
}

// Decodes a reply body with parse(Decoder&, Status); a body that does not parse becomes a
// TransportError naming the operation and the store.
template <typename Parse>
auto parseReply(const Bytes& body, const std::string& operation, const std::string& address,
                Clock::time_point start, Parse parse) {
  try {
    Decoder reply(body.data(), body.size());
    auto status = static_cast<Status>(reply.u8());
    return parse(reply, status);
  } catch (const storeproto::MalformedMessage& error) {
    throw TransportError(operation + " failed: store at " + address + ": " + error.what(),
                         FailureContext{operation, -1, -1, net::secondsSince(start)});
  }
}

}  // namespace

// Connections are pooled: a request takes an idle connection, or opens one more when every
// connection has a request in flight, and hands it back when the reply is in. So a get() parked on
// the server holds up nobody: another thread's set() of the very key it waits for goes out on a
// second connection. Single-threaded use never opens a second connection.
struct RINGCOMM_HIDDEN TcpStore::State {
  std::string host;
  int port = 0;
  std::string secret;
  std::string address;                       // "host:port", for messages
  std::chrono::milliseconds requestTimeout;  // of set() and add()
  std::string localHost;

  std::mutex mutex;                // guards what follows
  std::vector<net::UniqueFd> idle;  // connections with no request in flight
  // Set when the server closed or reset a connection, or sent what no server sends: every later
  // request fails at once rather than waiting to reconnect to a server that is gone.
  std::string goneBecause;

  // Sends a request frame and returns the reply body, whose first byte is the status. operation
  // names the call in errors: "store get('k') timed out after 3.0 s", "store set('k') failed:
  // store at 127.0.0.1:29500: connection closed by peer".
  Bytes call(const Bytes& frame, Clock::time_point start, Clock::time_point deadline,
             const std::string& operation);
  net::UniqueFd acquire(Clock::time_point start, Clock::time_point deadline,
                        const std::string& operation);
  [[noreturn]] void fail(const std::string& operation, const std::string& why,
                         Clock::time_point start);
  // A new connection, past the handshake.
  net::UniqueFd open(Clock::time_point deadline);
};

net::UniqueFd TcpStore::State::open(Clock::time_point deadline) {
  net::UniqueFd fd = net::connectTcp(host, port, deadline);
  const auto start = Clock::now();
  try {
    auth::connectHandshake(fd.get(), secret, auth::Purpose::Store, auth::Caller{},
                           std::min(deadline, net::deadlineAfter(kHandshakeTimeout)),
                           "the store at " + address);
  } catch (const TimeoutError&) {
    const double waited = net::secondsSince(start);
    throw TimeoutError("the store at " + address + " did not answer the handshake within " +
                           storeproto::formatSeconds(waited) + " s (is it a ringcomm store?)",
                       FailureContext{"store connect", -1, -1, waited});
  }
  return fd;
}

void TcpStore::State::fail(const std::string& operation, const std::string& why,
                           Clock::time_point start) {
  throw TransportError(operation + " failed: store at " + address + ": " + why,
                       FailureContext{operation, -1, -1, net::secondsSince(start)});
}

net::UniqueFd TcpStore::State::acquire(Clock::time_point start, Clock::time_point deadline,
                                       const std::string& operation) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!goneBecause.empty()) fail(operation, goneBecause, start);
    if (!idle.empty()) {
      net::UniqueFd fd = std::move(idle.back());
      idle.pop_back();
      return fd;
    }
  }
  // Every connection is busy. The server is known to be up, so this connect needs no long retry,
  // but a burst of ranks connecting at once can briefly fill the listen backlog.
  try {
    auto connectDeadline = std::min(deadline, net::deadlineAfter(kExtraConnectTimeout));
    return open(connectDeadline);
  } catch (const TimeoutError& error) {
    fail(operation, std::string("cannot open another connection: ") + error.what(), start);
  }
}

Bytes TcpStore::State::call(const Bytes& frame, Clock::time_point start,
                            Clock::time_point deadline, const std::string& operation) {
  net::UniqueFd fd = acquire(start, deadline, operation);
  try {
    net::writeFully(fd.get(), frame.data(), frame.size(), deadline);
    uint8_t header[storeproto::kFrameHeaderBytes];
    net::readFully(fd.get(), header, sizeof(header), deadline);
    uint32_t length = storeproto::loadU32(header);
    if (length == 0 || length > storeproto::kMaxFrameBytes) {
      throw TransportError("malformed store message: reply of " + std::to_string(length) +
                               " bytes",
                           FailureContext{operation, -1, -1, 0.0});
    }
    Bytes body(length);
    net::readFully(fd.get(), body.data(), body.size(), deadline);
    std::lock_guard<std::mutex> lock(mutex);
    idle.push_back(std::move(fd));
    return body;
  } catch (const TimeoutError&) {
    // The connection is dropped (fd closes here), not pooled: a late reply on it would be taken
    // for the next request's. The server may merely be slow, so the store stays usable.
    double waited = net::secondsSince(start);
    throw TimeoutError(operation + " timed out after " + storeproto::formatSeconds(waited) +
                           " s (no reply from the store at " + address + ")",
                       FailureContext{operation, -1, -1, waited});
  } catch (const TransportError& error) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (goneBecause.empty()) goneBecause = error.what();
      idle.clear();
    }
    fail(operation, error.what(), start);
  }
}

TcpStore::TcpStore(const std::string& host, int port, std::chrono::milliseconds connectTimeout,
                   const std::string& secret)
    : state_(std::make_unique<State>()) {
  if (secret.empty()) throw InvalidArgument("TcpStore: the job's secret is empty");
  state_->host = host;
  state_->port = port;
  state_->secret = secret;
  state_->address = net::formatHostPort(host, port);
  state_->requestTimeout = std::max(connectTimeout, kMinRequestTimeout);
  const auto start = Clock::now();
  net::UniqueFd fd;
  try {
    fd = state_->open(net::deadlineAfter(connectTimeout));
  } catch (const TimeoutError& error) {
    throw TimeoutError(std::string("store: ") + error.what(),
                       FailureContext{"store connect", -1, -1, net::secondsSince(start)});
  }
  state_->localHost = net::localAddress(fd.get()).host();
  state_->idle.push_back(std::move(fd));
}

TcpStore::~TcpStore() = default;

void TcpStore::set(const std::string& key, const Bytes& value) {
  const auto start = Clock::now();
  const std::string operation = quoted("set", key);
  Bytes frame = Encoder(Op::Set).str(key).str(value).finish();
  Bytes body = state_->call(frame, start, net::deadlineAfter(state_->requestTimeout), operation);
  parseReply(body, operation, state_->address, start, [&](Decoder& reply, Status status) {
    if (status == Status::Ok) return;
    state_->fail(operation, status == Status::Error ? "rejected: " + reply.str() : "bad reply",
                 start);
  });
}

Bytes TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  const std::string operation = quoted("get", key);
  Bytes frame = Encoder(Op::Get).str(key).i64(std::max<int64_t>(timeout.count(), 0)).finish();
  auto deadline = net::extendDeadline(net::deadlineAfter(timeout), kServerReplyGrace);
  Bytes body = state_->call(frame, start, deadline, operation);
  return parseReply(body, operation, state_->address, start, [&](Decoder& reply, Status status) {
    if (status == Status::Ok) return reply.bytes();
    if (status == Status::Timeout) {
      double waited = net::secondsSince(start);
      throw TimeoutError(storeproto::getTimeoutMessage(key, waited),
                         FailureContext{operation, -1, -1, waited});
    }
    state_->fail(operation, status == Status::Error ? "rejected: " + reply.str() : "bad reply",
                 start);
  });
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  const auto start = Clock::now();
  const std::string operation = quoted("add", key);
  Bytes frame = Encoder(Op::Add).str(key).i64(delta).finish();
  Bytes body = state_->call(frame, start, net::deadlineAfter(state_->requestTimeout), operation);
  return parseReply(body, operation, state_->address, start, [&](Decoder& reply, Status status) {
    if (status == Status::Ok) return reply.i64();
    // The server refuses an add() on a value that is not a counter, or one that overflows.
    if (status == Status::Error) throw InvalidArgument(reply.str());
    state_->fail(operation, "bad reply", start);
  });
}

// A get that the server answers at once (timeoutMs 0) and a set, each under one deadline for the
// whole call, the reply included: a store across a dead link costs the caller `within`, no more.
std::optional<Bytes> TcpStore::tryGet(const std::string& key, std::chrono::milliseconds within) {
  const auto start = Clock::now();
  try {
    Bytes frame = Encoder(Op::Get).str(key).i64(0).finish();
    Bytes body = state_->call(frame, start, net::deadlineAfter(within), quoted("get", key));
    Decoder reply(body.data(), body.size());
    if (static_cast<Status>(reply.u8()) != Status::Ok) return std::nullopt;
    return reply.bytes();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool TcpStore::trySet(const std::string& key, const Bytes& value,
                      std::chrono::milliseconds within) {
  const auto start = Clock::now();
  try {
    Bytes frame = Encoder(Op::Set).str(key).str(value).finish();
    Bytes body = state_->call(frame, start, net::deadlineAfter(within), quoted("set", key));
    return !body.empty() && static_cast<Status>(body[0]) == Status::Ok;
  } catch (const std::exception&) {
    return false;
  }
}

std::string TcpStore::localAddress() const { return state_->localHost; }

}  // namespace ringcomm
