// The store server's answers to requests: set, get (parked until its key appears), add, check.
//
// Requests are cut from a connection's bytes, checked against the store's bounds, and answered
// in order (tcp_store_server.h; wire format in store_protocol.h).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/store_protocol.h"
#include "bootstrap/tcp_store_server.h"
#include "common/socket.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"

namespace ringcomm::storeserver {

using storeproto::Decoder;
using storeproto::Encoder;
using storeproto::Found;
using storeproto::Op;
using storeproto::Status;

namespace {

// Bytes of keys and values the store holds at most.
constexpr size_t kMaxStoredBytes = size_t{1} << 30;

}  // namespace

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
      if (!storeIfRoom(connection, key, std::move(value))) return;
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
        if (!storeIfRoom(connection, key, std::move(value))) return;
        reply(connection, Encoder(Status::Ok).i64(next).finish());
      } catch (const InvalidArgument& error) {
        replyError(connection, error.what());
        return;
      }
      wakeWaiters(key);
      return;
    }
    case Op::Check: {
      uint32_t count = request.u32();
      if (!keyCountAllowed(connection, "check", count)) return;
      bool present = true;
      for (uint32_t i = 0; i < count; ++i) present = values_.count(request.str()) != 0 && present;
      request.expectEnd();
      reply(connection, Encoder(Status::Ok).u8(present ? 1 : 0).finish());
      return;
    }
    case Op::GetMany:
      return replyMany(connection, request);
  }
  replyError(connection, "unknown store request " + std::to_string(int(op)));
}

void ServerLoop::replyMany(Connection& connection, Decoder& request) {
  const uint32_t count = request.u32();
  if (!keyCountAllowed(connection, "get", count)) return;
  std::vector<std::string> keys;
  keys.reserve(count);
  for (uint32_t i = 0; i < count; ++i) keys.push_back(request.str());
  request.expectEnd();
  Encoder answer(Status::Ok);
  answer.u32(count);
  size_t bytes = 0;
  for (const std::string& key : keys) {
    const auto found = values_.find(key);
    if (found == values_.end()) {
      answer.u8(static_cast<uint8_t>(Found::Missing));
    } else if (bytes + found->second.size() + 5 > storeproto::kMaxValueBytes) {
      answer.u8(static_cast<uint8_t>(Found::LeftOut));
    } else {
      answer.u8(static_cast<uint8_t>(Found::Here)).str(found->second);
      bytes += found->second.size() + 5;
    }
  }
  reply(connection, answer.finish());
}

bool ServerLoop::keyCountAllowed(Connection& connection, const char* verb, uint32_t count) {
  if (count <= storeproto::kMaxKeysPerCheck) return true;
  replyError(connection, std::string("store ") + verb + " of " + std::to_string(count) +
                             " keys; at most " + std::to_string(storeproto::kMaxKeysPerCheck) +
                             " per request");
  return false;
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

bool ServerLoop::storeIfRoom(Connection& connection, const std::string& key, Bytes value) {
  if (const std::string full = roomFor(key, value.size()); !full.empty()) {
    replyError(connection, full);
    return false;
  }
  store(key, std::move(value));
  return true;
}

void ServerLoop::reply(Connection& connection, Bytes frame) {
  connection.out.insert(connection.out.end(), frame.begin(), frame.end());
}

void ServerLoop::replyError(Connection& connection, const std::string& message) {
  reply(connection, Encoder(Status::Error).str(message).finish());
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

}  // namespace ringcomm::storeserver
