// TcpStoreServer and TcpStore: the rendezvous store over TCP (wire format in store_protocol.h).
//
// The server is one thread around one poll() loop: it accepts clients, reads their requests into
// per-connection buffers, answers them, and parks a get() whose key is missing until a set() or
// add() creates it or its deadline passes. Nothing blocks inside the loop except poll() itself, so
// one slow or vanished client cannot hold up the others, and stop() only has to wake poll() (a
// self-pipe) to end the thread.
//
// The client has one request in flight per connection, and as many connections as it has
// concurrent callers (a pool, see TcpStore::State); every wait for a reply has a deadline.
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bootstrap/store_protocol.h"
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

// ---- Server ------------------------------------------------------------------------------------

struct Connection {
  net::UniqueFd fd;
  Bytes in;   // received, not yet processed
  Bytes out;  // replies, not yet sent
  size_t outSent = 0;
  bool closing = false;  // dropped at the end of this loop iteration
  // A get() waiting for its key.
  bool parked = false;
  std::string parkedKey;
  Clock::time_point parkedDeadline;

  size_t pendingReplyBytes() const { return out.size() - outSent; }
  bool servable() const { return !parked && pendingReplyBytes() < kMaxPendingReplyBytes; }
};

// Everything the server thread touches, and only it.
class ServerLoop {
 public:
  ServerLoop(int listenFd, net::Wakeup& wakeup, const std::atomic<bool>& stopping)
      : listenFd_(listenFd), wakeup_(wakeup), stopping_(stopping) {}

  void run();

 private:
  using ConnectionId = uint64_t;

  void acceptAll();
  // Reads what is ready; returns false when the client hung up (after processing what it sent).
  bool readAvailable(Connection& connection);
  // Handles every complete request in connection.in while the connection is servable.
  void processRequests(ConnectionId id, Connection& connection);
  void handle(ConnectionId id, Connection& connection, const uint8_t* body, size_t size);
  void reply(Connection& connection, Bytes frame);
  void flush(Connection& connection);
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
  Clock::time_point acceptPausedUntil_{};

  std::unordered_map<std::string, Bytes> values_;
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
    closeFinished();
  }
}

int ServerLoop::pollTimeoutMs(Clock::time_point now) const {
  Clock::time_point next = Clock::time_point::max();
  if (now < acceptPausedUntil_) next = acceptPausedUntil_;
  for (const auto& [id, connection] : connections_) {
    if (connection.parked) next = std::min(next, connection.parkedDeadline);
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
    Connection connection;
    connection.fd = std::move(fd);
    connections_.emplace(nextId_++, std::move(connection));
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
      values_[key] = std::move(value);
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
        values_[key] = std::move(value);
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

void ServerLoop::reply(Connection& connection, Bytes frame) {
  connection.out.insert(connection.out.end(), frame.begin(), frame.end());
}

void ServerLoop::flush(Connection& connection) {
  while (connection.pendingReplyBytes() > 0) {
    size_t n = net::writeSome(connection.fd.get(), connection.out.data() + connection.outSent,
                              connection.pendingReplyBytes());
    if (n == 0) break;  // socket buffer full: POLLOUT will bring us back
    connection.outSent += n;
  }
  if (connection.outSent == connection.out.size()) {
    connection.out.clear();
    connection.outSent = 0;
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
  int port = 0;
  std::mutex stopMutex;
  std::thread thread;
};

TcpStoreServer::TcpStoreServer(const std::string& host, int port)
    : state_(std::make_unique<State>()) {
  state_->listener = net::listenTcp(host, port);
  state_->port = net::localAddress(state_->listener.get()).port();
  State* state = state_.get();
  state_->thread = std::thread([state] {
    try {
      ServerLoop(state->listener.get(), state->wakeup, state->stopping).run();
    } catch (const std::exception& error) {
      // Only poll() itself failing gets here. Ending the thread closes every connection, so the
      // clients raise TransportError rather than wait.
      std::fprintf(stderr, "ringcomm: store server on port %d stopped: %s\n", state->port,
                   error.what());
    }
  });
}

TcpStoreServer::~TcpStoreServer() { stop(); }

int TcpStoreServer::port() const { return state_->port; }

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
};

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
    return net::connectTcp(host, port, connectDeadline);
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

TcpStore::TcpStore(const std::string& host, int port, std::chrono::milliseconds connectTimeout)
    : state_(std::make_unique<State>()) {
  state_->host = host;
  state_->port = port;
  state_->address = net::formatHostPort(host, port);
  state_->requestTimeout = std::max(connectTimeout, kMinRequestTimeout);
  const auto start = Clock::now();
  net::UniqueFd fd;
  try {
    fd = net::connectTcp(host, port, net::deadlineAfter(connectTimeout));
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

std::string TcpStore::localAddress() const { return state_->localHost; }

}  // namespace ringcomm
