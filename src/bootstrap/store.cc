// Store::wait's and tryGetMany's default implementations, and PrefixStore. The stores themselves live in
// hash_store.cc (in-process) and tcp_store.cc (server and client).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/store_protocol.h"
#include "common/socket.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"

namespace ringcomm {

namespace {

// Time left until deadline, for handing a shared deadline to one get() after another.
std::chrono::milliseconds remaining(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return std::chrono::milliseconds::max();
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

}  // namespace

// One get() per key under one overall deadline. A store that can wait for several keys in one
// round trip may override this; fetching the values is the price of needing nothing else from it.
void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  const auto deadline = net::deadlineAfter(timeout);
  for (size_t i = 0; i < keys.size(); ++i) {
    try {
      get(keys[i], remaining(deadline));
    } catch (const TimeoutError&) {
      double waited = net::secondsSince(start);
      throw TimeoutError("store wait('" + keys[i] + "') timed out after " +
                             storeproto::formatSeconds(waited) + " s (" +
                             std::to_string(i) + " of " + std::to_string(keys.size()) +
                             " keys present)",
                         FailureContext{"store wait('" + keys[i] + "')", -1, -1, waited});
    }
  }
}

std::optional<Bytes> Store::tryGet(const std::string& key, std::chrono::milliseconds) {
  try {
    return get(key, std::chrono::milliseconds(0));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool Store::trySet(const std::string& key, const Bytes& value, std::chrono::milliseconds) {
  try {
    set(key, value);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::vector<std::optional<Bytes>> Store::tryGetMany(const std::vector<std::string>& keys,
                                                   std::chrono::milliseconds within) {
  std::vector<std::optional<Bytes>> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) values.push_back(tryGet(key, within));
  return values;
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  if (!inner_) throw InvalidArgument("PrefixStore('" + prefix_ + "') needs a store to wrap");
  // "prefix/key", as torch.distributed's PrefixStore writes it, so that both see the same keys.
  prefix_ += '/';
}

void PrefixStore::set(const std::string& key, const Bytes& value) {
  inner_->set(prefix_ + key, value);
}

Bytes PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return inner_->get(prefix_ + key, timeout);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return inner_->add(prefix_ + key, delta);
}

std::optional<Bytes> PrefixStore::tryGet(const std::string& key, std::chrono::milliseconds within) {
  return inner_->tryGet(prefix_ + key, within);
}

bool PrefixStore::trySet(const std::string& key, const Bytes& value,
                         std::chrono::milliseconds within) {
  return inner_->trySet(prefix_ + key, value, within);
}

std::vector<std::optional<Bytes>> PrefixStore::tryGetMany(const std::vector<std::string>& keys,
                                                         std::chrono::milliseconds within) {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const std::string& key : keys) prefixed.push_back(prefix_ + key);
  return inner_->tryGetMany(prefixed, within);
}

}  // namespace ringcomm
