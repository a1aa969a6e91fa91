// Builders for the errors that name a peer: one format everywhere, so tests and users can rely on it:
//   "ringcomm: <operation> on rank R: <what happened> (rank P) after S s"
#pragma once

#include <cstdio>
#include <string>

#include "common/deadline.h"
#include "ringcomm/errors.h"

namespace ringcomm {

inline std::string describeFailure(const Operation& op, const std::string& what) {
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.2f", op.elapsedSeconds());
  return "ringcomm: " + op.name() + " on rank " + std::to_string(op.rank) + ": " + what +
         " after " + seconds + " s";
}

template <typename ErrorType>
[[noreturn]] void raisePeerFailure(const Operation& op, int peer, const std::string& what) {
  throw ErrorType(describeFailure(op, what),
                  FailureContext{op.name(), op.rank, peer, op.elapsedSeconds()});
}

}  // namespace ringcomm
