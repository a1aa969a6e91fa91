// The rendezvous store's client over TCP: TcpStore (the server: tcp_store_server.h).
//
// The client has one request in flight per connection, and as many connections as it has
// concurrent callers (a pool, see TcpStore::State); every wait for a reply has a deadline.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "auth/handshake.h"
#include "bootstrap/store_protocol.h"
#include "common/deadline.h"
#include "common/socket.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"

namespace ringcomm {

using storeproto::Decoder;
using storeproto::Encoder;
using storeproto::Found;
using storeproto::Op;
using storeproto::Status;

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
                           std::min(deadline, net::deadlineAfter(storeproto::kHandshakeTimeout)),
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

std::vector<std::optional<Bytes>> TcpStore::tryGetMany(const std::vector<std::string>& keys,
                                                      std::chrono::milliseconds within) {
  const auto start = Clock::now();
  const auto deadline = net::deadlineAfter(within);
  std::vector<std::optional<Bytes>> values(keys.size());
  try {
    // A request at a time of at most kMaxKeysPerCheck keys and 1 MiB of them.
    for (size_t from = 0; from < keys.size();) {
      size_t until = from;
      size_t bytes = 0;
      while (until < keys.size() && until - from < storeproto::kMaxKeysPerCheck &&
             bytes < (size_t{1} << 20)) {
        bytes += keys[until++].size() + 4;
      }
      Encoder frame(Op::GetMany);
      frame.u32(static_cast<uint32_t>(until - from));
      for (size_t i = from; i < until; ++i) frame.str(keys[i]);
      Bytes body = state_->call(frame.finish(), start, deadline,
                                "get of " + std::to_string(until - from) + " keys");
      Decoder reply(body.data(), body.size());
      if (static_cast<Status>(reply.u8()) != Status::Ok) {
        // A server without GetMany (Error: unknown request): one key at a time.
        for (size_t i = from; i < until; ++i) values[i] = tryGet(keys[i], millisecondsLeft(deadline));
      } else {
        reply.u32();
        for (size_t i = from; i < until; ++i) {
          if (static_cast<Found>(reply.u8()) == Found::Here) values[i] = reply.bytes();
        }
      }
      from = until;
    }
  } catch (const std::exception&) {
  }
  return values;
}

std::string TcpStore::localAddress() const { return state_->localHost; }

}  // namespace ringcomm
