// Time bookkeeping of one collective: when it started, when it must end, and what to call it in an
// error message. Every blocking wait in the core takes an Operation.
#pragma once

#include <chrono>
#include <string>

namespace ringcomm {

using Clock = std::chrono::steady_clock;

struct Operation {
  std::string name;  // "allreduce #12 (ring, float32 sum, 4194304 bytes)"
  int rank = -1;
  Clock::time_point start = Clock::now();
  Clock::time_point deadline = Clock::time_point::max();

  Operation() = default;
  Operation(std::string operationName, int thisRank, std::chrono::milliseconds timeout)
      : name(std::move(operationName)), rank(thisRank), start(Clock::now()),
        deadline(start + timeout) {}

  bool expired() const { return Clock::now() >= deadline; }
  double elapsedSeconds() const {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
  std::chrono::milliseconds remaining() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return left.count() > 0 ? left : std::chrono::milliseconds(0);
  }
};

}  // namespace ringcomm
