// The communicator's health (communicator_impl.h): what a failure closes, poisons and records
// (abort, poison, failWith, markClosed), since when peers may have been silent (quietSince), and
// the checks on peers (a peer that runs another collective; messages nothing received). The
// records that peers read are failure_records.h's; who is still alive is membership.h's.
#include <cstdio>
#include <optional>
#include <string>

#include "common/failure.h"
#include "core/communicator_impl.h"
#include "ringcomm/errors.h"

namespace ringcomm {

void CommunicatorImpl::abort(const std::string& reason) {
  const std::string why = "communicator aborted on rank " + std::to_string(rank_) + ": " + reason;
  if (!markClosed(why)) return;
  // Before the waits in flight can fail (failWith reads it): they fail because of this.
  abortedHere_.store(true, std::memory_order_release);
  // For peers that find this rank's links closed, or its dials refused (a link made on first
  // use), and would otherwise call it gone: the reason, as a failing rank leaves its own.
  records_->record(why, -1, false);
  if (links_.segments) links_.segments->markAborted(reason);
  closeStreams();
}

// A message that nothing received: a send whose recv the peer never posted (collectives'
// senders wait for an acknowledgement, so a collective cannot leave one behind). The next
// receive would catch it (a MismatchError); after the last call only its arrival here can, so
// say so rather than let the mistake pass.
void CommunicatorImpl::warnOfUnreadMessages() {
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const std::string unread = transport_->unreadMessageFrom(peer);
    if (unread.empty()) continue;
    std::fprintf(stderr,
                 "ringcomm: warning: rank %d shut down with a message from rank %d that no "
                 "receive matched: %s. A send had no matching recv, so the ranks' calls "
                 "disagreed and some rank's results may be wrong\n",
                 rank_, peer, unread.c_str());
  }
}

// Returns false if it was already closed.
bool CommunicatorImpl::markClosed(const std::string& reason) {
  std::lock_guard<std::mutex> lock(stateMutex_);
  if (!closedReason_.empty()) return false;
  closedReason_ = reason;
  closedAt_ = Clock::now();
  closed_.store(true, std::memory_order_release);
  return true;
}

// Since when peers that do not answer now may have been silent (Membership::agree): a link
// timeout before this communicator failed, or now while it runs.
Clock::time_point CommunicatorImpl::quietSince() {
  std::lock_guard<std::mutex> lock(stateMutex_);
  return closedReason_.empty() ? Clock::now() : closedAt_ - config_.linkTimeout;
}

std::string CommunicatorImpl::closedReason() {
  std::lock_guard<std::mutex> lock(stateMutex_);
  return closedReason_;
}

void CommunicatorImpl::closeStreams() {
  // Only shutdown() on sockets here: safe while the engine thread is still using them.
  transport_->closeLinks();
}

// `blamed`: the peer this rank's failure names (-1: none), recorded with the reason so that
// ranks further along can follow the failure back to where it started; `mismatch`: whether
// that failure was ranks disagreeing on a collective (a MismatchError), which those ranks then
// raise too.
void CommunicatorImpl::poison(const std::string& reason, int blamed, bool mismatch) {
  if (!markClosed(reason)) return;
  // Leave the reason where peers can read it (core/failure_records.h): a TCP peer only sees the
  // connection close, and a peer that timed out waiting for this rank wants to know what this
  // rank was waiting for.
  records_->record(reason, blamed, mismatch);
  // Peers waiting on this rank learn of the failure now instead of at their own timeout.
  if (links_.segments) links_.segments->markAborted(reason);
  transport_->abort();
}

// Whether `peer` shares this host's memory and its process is gone without having aborted.
bool CommunicatorImpl::diedWithoutAborting(int peer) const {
  if (!links_.segments) return false;
  for (size_t local = 0; local < links_.localRanks.size(); ++local) {
    if (links_.segments->globalRank(static_cast<int>(local)) == peer) {
      return links_.segments->diedWithoutAborting(static_cast<int>(local));
    }
  }
  return false;
}

void CommunicatorImpl::failWith(const PeerError& error) {
  // An operation in flight when this rank aborted: its waits ended because of the abort (they
  // see it on shared memory, or their sockets closed under them, which reads as the peer's
  // "closed its connection"). CommunicatorClosed, with the abort's reason, as abort() says.
  if (abortedHere_.load(std::memory_order_acquire)) {
    throw CommunicatorClosed("ringcomm: " + error.context().operation + ": " + closedReason());
  }
  bool mismatch = dynamic_cast<const MismatchError*>(&error) != nullptr;
  // First, so that peers reading our reason are not kept waiting.
  poison(error.what(), error.context().peer, mismatch);
  const std::string what = records_->traced(error, mismatch);
  // Ranks that disagreed on a collective: every rank raises it as such, also those that only
  // saw the first to notice close its connection (they too called something else).
  if (mismatch) throw MismatchError(what, error.context());
  if (dynamic_cast<const TimeoutError*>(&error)) throw TimeoutError(what, error.context());
  if (dynamic_cast<const TransportError*>(&error)) throw TransportError(what, error.context());
  throw PeerError(what, error.context());
}

void CommunicatorImpl::throwIfClosed(const OperationLabel& label) {
  if (!closed_.load(std::memory_order_acquire)) return;
  throw CommunicatorClosed("ringcomm: " + label.describe() + ": " + closedReason());
}

// A collective that has waited a while for `peer`: this rank puts what it runs in the store
// (once) and reads what the peer runs. The same collective number with another kind, type,
// reduction, root, schedule, compression or size is a MismatchError naming both: ranks that
// disagree so often wait for messages the other never sends (gather against scatter, ring
// against tree, all-reduce against all-gather on shared memory).
void CommunicatorImpl::checkPeerRunsTheSame(const Operation& op, bool& published, int peer) {
  const std::optional<std::string> theirs = records_->otherCollectiveOf(op, published, peer);
  if (!theirs) return;
  raisePeerFailure<MismatchError>(
      op, peer,
      "rank " + std::to_string(peer) + " runs " + *theirs +
          " (ranks called different collectives, or with another size, type, reduction, "
          "root, algorithm or compression)");
}

}  // namespace ringcomm
