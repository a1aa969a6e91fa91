// The rendezvous store: a small key-value service every rank can reach (set / get / wait / add).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ringcomm/export.h"

namespace ringcomm {

using Bytes = std::vector<uint8_t>;

class RINGCOMM_API Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Blocks until the key exists or the timeout passes (TimeoutError naming the key).
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Adds delta to an integer counter (created at 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  // Calls with a hard deadline, for callers that must not wait on a store that may be gone (a
  // rank reporting a failure, a waiting rank asking what a peer runs): the value, or nothing
  // when the key is missing or the store does not answer within `within`; whether the set took
  // effect. They never throw. The defaults suit stores that answer at once (in-process ones).
  virtual std::optional<Bytes> tryGet(const std::string& key, std::chrono::milliseconds within);
  virtual bool trySet(const std::string& key, const Bytes& value, std::chrono::milliseconds within);
  // tryGet() of each key, in their order: one round trip where the store can (TcpStore), so that
  // one reader of a thousand ranks' keys (a leader, a rendezvous's rank 0) is not a thousand
  // round trips. Never throws; a key missing, or not answered within `within`, is nothing.
  virtual std::vector<std::optional<Bytes>> tryGetMany(const std::vector<std::string>& keys,
                                                       std::chrono::milliseconds within);
};

// Namespaces every key, so that several communicators share one store.
class RINGCOMM_API PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::optional<Bytes> tryGet(const std::string& key, std::chrono::milliseconds within) override;
  bool trySet(const std::string& key, const Bytes& value, std::chrono::milliseconds within) override;
  std::vector<std::optional<Bytes>> tryGetMany(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds within) override;
  // The store whose keys this one namespaces.
  Store& inner() const { return *inner_; }

 private:
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

// In-process store, for tests and for world size 1.
class RINGCOMM_API HashStore : public Store {
 public:
  HashStore();
  ~HashStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A store in a directory of files, one a key: for what must outlive every process of a job where
// no launcher serves a store (under mpirun and srun), on a file system all its hosts see. The
// members' addresses for newcomers (Communicator::publishDoor) are its use; it is not meant for
// rendezvous traffic. A value is written to a file of its own and renamed into place, so that a
// reader sees the old value or the new one, never part of either.
class RINGCOMM_API FileStore : public Store {
 public:
  explicit FileStore(std::string directory);
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;

 private:
  std::string pathOf(const std::string& key) const;
  std::string directory_;
};

// Serves a store over TCP from a background thread. Port 0 picks a free port. Every connection
// must prove it knows `secret` before its first request (src/auth/handshake.h); one that does
// not is closed and counted.
class RINGCOMM_API TcpStoreServer {
 public:
  TcpStoreServer(const std::string& host, int port, const std::string& secret);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const;
  // Connections closed for failing (or not finishing) the handshake, so far.
  uint64_t refusedConnections() const;
  void stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Client of TcpStoreServer. Retries the connection until the timeout (the server may start late).
// Every connection proves `secret` to the server, and has the server prove it back.
class RINGCOMM_API TcpStore : public Store {
 public:
  TcpStore(const std::string& host, int port, std::chrono::milliseconds connectTimeout,
           const std::string& secret);
  ~TcpStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::optional<Bytes> tryGet(const std::string& key, std::chrono::milliseconds within) override;
  bool trySet(const std::string& key, const Bytes& value, std::chrono::milliseconds within) override;
  std::vector<std::optional<Bytes>> tryGetMany(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds within) override;
  // The local address of the connection to the store: the interface that reaches the other ranks.
  std::string localAddress() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ringcomm
