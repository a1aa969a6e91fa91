// Presents a torch.distributed Store (the one torch hands every process group, already prefixed
// with the group's name) as the ringcomm Store the core's rendezvous uses.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "ringcomm/store.h"

namespace ringcomm::c10d_backend {

class TorchStoreAdapter : public ringcomm::Store {
 public:
  explicit TorchStoreAdapter(c10::intrusive_ptr<::c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const Bytes& value) override { store_->set(key, value); }

  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    // torch's get() waits with the store's own timeout; wait first, with ours.
    store_->wait({key}, timeout);
    return store_->get(key);
  }

  int64_t add(const std::string& key, int64_t delta) override { return store_->add(key, delta); }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    store_->wait(keys, timeout);
  }

  // The calls with a hard deadline (ringcomm::Store): a failing rank reports its reason and
  // reads its peers' through them, and must not wait on a store that died with a rank (torch's
  // TCPStore client reconnects until its own timeout, minutes: the survivors of a lost rank 0
  // under env:// hung there). torch's call runs on a thread of its own, and one that has not
  // answered by the deadline is left to finish; until it has, these calls answer "nothing" at
  // once, so that at most one thread waits on a dead store.
  std::optional<Bytes> tryGet(const std::string& key, std::chrono::milliseconds within) override {
    // torch reads a zero timeout as "none": look first, then get.
    return bounded<std::optional<Bytes>>(within, std::nullopt,
                                         [store = store_, key]() -> std::optional<Bytes> {
                                           if (!store->check({key})) return std::nullopt;
                                           return store->get(key);
                                         });
  }

  // Where every key is there (a rendezvous's records, once counted): torch's multiGet, one
  // round trip for its TCPStore; else a key at a time.
  std::vector<std::optional<Bytes>> tryGetMany(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds within) override {
    using Values = std::vector<std::optional<Bytes>>;
    Values nothing(keys.size());
    Values all = bounded<Values>(within, nothing, [store = store_, keys, nothing]() -> Values {
      if (keys.empty() || !store->check(keys)) return nothing;
      Values found;
      for (std::vector<uint8_t>& value : store->multiGet(keys)) found.emplace_back(std::move(value));
      return found;
    });
    if (all.size() != keys.size()) all = nothing;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!all[i]) all[i] = tryGet(keys[i], within);
    }
    return all;
  }

  bool trySet(const std::string& key, const Bytes& value,
              std::chrono::milliseconds within) override {
    return bounded<bool>(within, false, [store = store_, key, value] {
      store->set(key, value);
      return true;
    });
  }

 private:
  template <typename Result, typename Call>
  Result bounded(std::chrono::milliseconds within, Result otherwise, Call call) {
    if (waiting_->load()) return otherwise;  // an earlier call still waits on the store
    auto answer = std::make_shared<std::promise<Result>>();
    std::future<Result> future = answer->get_future();
    waiting_->store(true);
    std::thread([answer, call, otherwise, waiting = waiting_] {
      try {
        answer->set_value(call());
      } catch (...) {
        answer->set_value(otherwise);
      }
      waiting->store(false);
    }).detach();
    if (future.wait_for(within) != std::future_status::ready) return otherwise;
    return future.get();
  }

  c10::intrusive_ptr<::c10d::Store> store_;
  // Whether a bounded call's thread is still in torch's store (shared with that thread).
  std::shared_ptr<std::atomic<bool>> waiting_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace ringcomm::c10d_backend
