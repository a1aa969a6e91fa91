// Time bookkeeping of one collective: when it started, when it must end, and what to call it in
// an error message. Every blocking wait in the core takes an Operation.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "common/log.h"

namespace ringcomm {

using Clock = std::chrono::steady_clock;

// What is left until `deadline`, in whole milliseconds, 0 once it has passed.
inline std::chrono::milliseconds millisecondsLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? left : std::chrono::milliseconds(0);
}

// How long a wait blocks on one peer before it asks what that peer is doing (Operation::
// checkPeer), and how often it asks again: long enough that healthy collectives never pay for
// it, short against any deadline.
constexpr std::chrono::milliseconds kPeerCheckAfter{1000};
constexpr std::chrono::milliseconds kPeerCheckEvery{500};

// What an operation is, kept as plain fields (pointers to string literals) and turned into text
// only when an error needs it: a small collective must not pay for building a sentence it never
// prints.
struct OperationLabel {
  const char* collective = "operation";  // "allreduce", "send", "connecting to peers"...
  const char* algorithm = nullptr;       // "ring" (all-reduce only)
  const char* compression = nullptr;     // "fp16" (compressed all-reduce only)
  const char* reduceOp = nullptr;        // "sum"
  const char* type = nullptr;            // "float32"
  size_t count = 0;                      // elements (per rank where perRank)
  bool perRank = false;
  int root = -1;
  int peer = -1;                         // send / recv
  int tag = 0;
  size_t bytes = 0;                      // send / recv; a collective's payload (trace)
  int64_t sequence = -1;                 // collective sequence number, -1 if none
  std::string name;                      // the caller's name for the data, if it gave one

  std::string describe() const {
    std::string text = collective;
    if (!name.empty()) text += " '" + name + "'";
    std::string details;
    auto add = [&details](const std::string& part) {
      details += (details.empty() ? "" : ", ") + part;
    };
    if (algorithm != nullptr) add(algorithm);
    if (compression != nullptr) add(std::string(compression) + " on the wire");
    if (reduceOp != nullptr) add(reduceOp);
    if (root >= 0) add("root " + std::to_string(root));
    if (peer >= 0) add("rank " + std::to_string(peer) + ", tag " + std::to_string(tag) + ", " +
                       std::to_string(bytes) + " bytes");
    if (type != nullptr) {
      add(std::to_string(count) + " x " + type + (perRank ? " per rank" : ""));
    }
    if (!details.empty()) text += " (" + details + ")";
    if (sequence >= 0) text += " #" + std::to_string(sequence);
    return text;
  }
};

struct Operation {
  OperationLabel label;
  int rank = -1;
  Clock::time_point start = Clock::now();
  Clock::time_point deadline = Clock::time_point::max();
  // When to warn, once, that the operation is still waiting (as Horovod's stall check does);
  // max() = never.
  Clock::time_point stallWarning = Clock::time_point::max();
  mutable bool warned = false;
  // Set by the communicator for collectives: looks up what `peer` is doing and throws
  // MismatchError when it is in another collective of the same number. Ranks that called
  // different collectives often wait for messages the other never sends; this names them within
  // a second or two instead of at the deadline.
  std::function<void(int peer)> checkPeer;
  mutable Clock::time_point nextPeerCheck = Clock::time_point::max();

  Operation() = default;
  Operation(OperationLabel what, int thisRank, std::chrono::milliseconds timeout,
            std::chrono::milliseconds warnAfter = std::chrono::milliseconds(0))
      : label(what), rank(thisRank), start(Clock::now()), deadline(start + timeout),
        nextPeerCheck(start + kPeerCheckAfter) {
    if (warnAfter.count() > 0 && warnAfter < timeout) stallWarning = start + warnAfter;
  }

  // Called by waits while they block on `peer`: asks what the peer is doing when that is due,
  // and prints the stall warning when it is due.
  void noteWaitingFor(int peer) const {
    const Clock::time_point now = Clock::now();
    if (checkPeer && now >= nextPeerCheck) {
      nextPeerCheck = now + kPeerCheckEvery;
      checkPeer(peer);
    }
    if (warned || now < stallWarning) return;
    warned = true;
    RINGCOMM_LOG(LogLevel::Warn, kLogTransport,
                 "%s on rank %d has waited %.0f s for rank %d; still waiting (the deadline is "
                 "in %.0f s)",
                 name().c_str(), rank, elapsedSeconds(), peer,
                 std::chrono::duration<double>(deadline - Clock::now()).count());
  }

  std::string name() const { return label.describe(); }
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
