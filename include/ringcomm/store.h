// The rendezvous store: a small key-value service every rank can reach (set / get / wait / add).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
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
};

// Namespaces every key, so that several communicators share one store.
class RINGCOMM_API PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;

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

// Serves a store over TCP from a background thread. Port 0 picks a free port.
class RINGCOMM_API TcpStoreServer {
 public:
  TcpStoreServer(const std::string& host, int port);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const;
  void stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Client of TcpStoreServer. Retries the connection until the timeout (the server may start late).
class RINGCOMM_API TcpStore : public Store {
 public:
  TcpStore(const std::string& host, int port, std::chrono::milliseconds connectTimeout);
  ~TcpStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  // The local address of the connection to the store: the interface that reaches the other ranks.
  std::string localAddress() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ringcomm
