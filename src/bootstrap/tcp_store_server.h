// The rendezvous store's server loop: its connections and the state its one thread keeps.
//
// TcpStoreServer (include/ringcomm/store.h) runs a ServerLoop; wire format in store_protocol.h.
// Its two halves share this state: tcp_store_server.cc runs the connections (accept, the
// handshake, reading, writing, deadlines), tcp_store_requests.cc answers the requests (the table
// of keys, the parked gets).
//
// The server is one thread around one poll() loop: it accepts clients, reads their requests into
// per-connection buffers, answers them, and parks a get() whose key is missing until a set() or
// add() creates it or its deadline passes. Nothing blocks inside the loop except poll() itself, so
// one slow or vanished client cannot hold up the others, and stop() only has to wake poll() (a
// self-pipe) to end the thread.
//
// Strangers: a new connection first goes through the handshake (src/auth/handshake.h), reading
// exactly its 78 bytes within storeproto::kHandshakeTimeout; one that fails is closed and
// counted. At most kMaxPendingHandshakes wait at once (the oldest gives way to a newcomer, so a
// flood cannot keep the job's own ranks out), and the server never holds more descriptors than
// its limit allows.
// Clients that passed are bounded too: values, total bytes held, keys per check, and a deadline
// on every request once it has started to arrive and on every reply once it is queued.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "auth/handshake.h"
#include "bootstrap/store_protocol.h"
#include "common/socket.h"
#include "ringcomm/store.h"

namespace ringcomm::storeserver {

// Replies queued for a client that does not read them; past this the server stops processing
// that client's requests until the backlog drains.
constexpr size_t kMaxPendingReplyBytes = 4 * 1024 * 1024;
// A request that has begun to arrive must arrive whole within this, and a queued reply must be
// taken by the client within it (a parked get() waits as long as it asked to).
constexpr auto kRequestTimeout = std::chrono::seconds(30);

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
             const std::string& secret, std::atomic<uint64_t>& refused);

  void run();

 private:
  using ConnectionId = uint64_t;

  // ---- Connections (tcp_store_server.cc) ----
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
  void flush(Connection& connection);
  int pollTimeoutMs(Clock::time_point now) const;
  void closeFinished();

  // ---- Requests (tcp_store_requests.cc) ----
  // Handles every complete request in connection.in while the connection is servable.
  void processRequests(ConnectionId id, Connection& connection);
  // Answers a GetMany: each key's value where it has one, within a frame.
  void replyMany(Connection& connection, storeproto::Decoder& request);
  void handle(ConnectionId id, Connection& connection, const uint8_t* body, size_t size);
  void reply(Connection& connection, Bytes frame);
  void replyError(Connection& connection, const std::string& message);
  // Whether a request of count keys (verb names it: "check", "get") is within kMaxKeysPerCheck;
  // else replies the error and returns false.
  bool keyCountAllowed(Connection& connection, const char* verb, uint32_t count);
  // Why key (with a value of valueBytes) may not be stored, or "" when it may.
  std::string roomFor(const std::string& key, size_t valueBytes) const;
  void store(const std::string& key, Bytes value);
  // Stores the value where roomFor allows it; else replies the error and returns false.
  bool storeIfRoom(Connection& connection, const std::string& key, Bytes value);
  // Answers the parked gets of key (it now exists), then lets those clients go on.
  void wakeWaiters(const std::string& key);
  void unpark(ConnectionId id, Connection& connection);
  void expireParked(Clock::time_point now);

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

}  // namespace ringcomm::storeserver
