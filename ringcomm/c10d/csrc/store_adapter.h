// Presents a torch.distributed Store (the one torch hands every process group, already prefixed
// with the group's name) as the ringcomm Store the core's rendezvous uses.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
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

  // torch reads a zero timeout as "none": look first, then get.
  std::optional<Bytes> tryGet(const std::string& key, std::chrono::milliseconds) override {
    try {
      if (!store_->check({key})) return std::nullopt;
      return store_->get(key);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }

 private:
  c10::intrusive_ptr<::c10d::Store> store_;
};

}  // namespace ringcomm::c10d_backend
