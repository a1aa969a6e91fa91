// HashStore: the in-process Store (tests, world size 1). One map under one mutex; get() sleeps on
// a condition variable that every set() and add() signals.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "bootstrap/store_protocol.h"
#include "common/socket.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"

namespace ringcomm {

struct RINGCOMM_HIDDEN HashStore::State {
  std::mutex mutex;
  std::condition_variable changed;
  std::unordered_map<std::string, Bytes> values;
};

HashStore::HashStore() : state_(std::make_unique<State>()) {}

HashStore::~HashStore() = default;

void HashStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->values[key] = value;
  }
  state_->changed.notify_all();
}

Bytes HashStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  const auto deadline = net::deadlineAfter(timeout);
  std::unique_lock<std::mutex> lock(state_->mutex);
  auto present = [&] { return state_->values.count(key) != 0; };
  if (deadline == Clock::time_point::max()) {
    // wait_until(max) would convert an infinite deadline into the OS's clock and may overflow.
    state_->changed.wait(lock, present);
  } else if (!state_->changed.wait_until(lock, deadline, present)) {
    double waited = net::secondsSince(start);
    throw TimeoutError(storeproto::getTimeoutMessage(key, waited),
                       FailureContext{"store get('" + key + "')", -1, -1, waited});
  }
  return state_->values.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t result = 0;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    auto found = state_->values.find(key);
    bool exists = found != state_->values.end();
    Bytes value = exists ? found->second : Bytes();
    result = storeproto::applyAdd(key, value, exists, delta);
    state_->values[key] = std::move(value);
  }
  // The first add() creates the key, which a get() may be waiting for.
  state_->changed.notify_all();
  return result;
}

}  // namespace ringcomm
