// The error hierarchy. Every error says what operation failed, on which rank, because of which peer,
// and how long the rank waited, so a user reading one line knows where to look.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "ringcomm/export.h"

namespace ringcomm {

class RINGCOMM_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Bad arguments from the caller: wrong dtype, mismatched sizes, a root out of range...
class RINGCOMM_API InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Details shared by the failures that involve a peer.
struct FailureContext {
  std::string operation;  // e.g. "allreduce #12 (ring, 4096 bytes)"
  int rank = -1;          // this rank
  int peer = -1;          // the peer at fault, or -1 when none is known
  double elapsedSeconds = 0.0;
};

class RINGCOMM_API PeerError : public Error {
 public:
  PeerError(const std::string& what, FailureContext context)
      : Error(what), context_(std::move(context)) {}
  const FailureContext& context() const { return context_; }

 private:
  FailureContext context_;
};

// A peer closed its connection, died, or aborted.
class RINGCOMM_API TransportError : public PeerError {
 public:
  using PeerError::PeerError;
};

// A deadline passed while waiting for a peer.
class RINGCOMM_API TimeoutError : public PeerError {
 public:
  using PeerError::PeerError;
};

// Ranks called different collectives, or the same one with different sizes/types/roots.
class RINGCOMM_API MismatchError : public PeerError {
 public:
  using PeerError::PeerError;
};

// Communicator::shrink on a side that may not go on: it lost its quorum (no strict majority of
// the ranks not known to be gone), or the survivors left this rank out.
class RINGCOMM_API MembershipError : public Error {
 public:
  using Error::Error;
};

// The communicator was shut down or poisoned by an earlier failure.
class RINGCOMM_API CommunicatorClosed : public Error {
 public:
  using Error::Error;
};

}  // namespace ringcomm
