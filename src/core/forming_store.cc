// FormingStore (membership.h): the store a regrouping's new communicator forms through, in the
// leader's mailbox, the leader watching the other members while it forms, and the commit that ends
// a forming alike on every member: a count of those that formed it, a claim to go on, and the
// vetoes of those that could not.
#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/socket.h"
#include "core/mailbox_waits.h"
#include "core/membership.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"

namespace ringcomm {
namespace {

// What a member's claim to go on and another's veto add to the claimant's counter
// (FormingStore::commit): odd where the claim is in, the count of vetoes by halves.
constexpr int64_t kClaim = 1;
constexpr int64_t kVeto = 2;
// What a member whose wait failed adds to the count of members that formed the communicator in
// the leader's mailbox: past any count of members, so that the count never reads complete after.
constexpr int64_t kCountVeto = int64_t{1} << 32;
// How many members the leader asks at once, a window each look: a sweep of a thousand members
// takes 16 looks, and the leader holds 64 descriptors for it, not a thousand.
constexpr size_t kWatchWindow = 64;
// How long a vetoer waits at least for a claimant to say whether its claim came first (it says
// so right after claiming): past the forming's deadline too, which may be what failed.
constexpr std::chrono::milliseconds kOutcomeLook{2000};
// How long a claim or a veto may take to connect to a living mailbox (its proof of the secret
// included): longer than a probe's wait, since a mailbox slow to answer on a busy machine must
// still get its claim or its veto, or the members could decide apart.
constexpr std::chrono::milliseconds kClaimConnect{2000};

}  // namespace

FormingStore::FormingStore(std::shared_ptr<Store> inner,
                           std::vector<std::pair<int, MailboxAddress>> members, std::string scope,
                           int rank, int leader, std::string secret, MailboxAddress own)
    : inner_(std::move(inner)), members_(std::move(members)), scope_(std::move(scope)),
      rank_(rank), leader_(leader), secret_(std::move(secret)), own_(std::move(own)) {}

void FormingStore::set(const std::string& key, const Bytes& value) { inner_->set(key, value); }
int64_t FormingStore::add(const std::string& key, int64_t delta) {
  return inner_->add(key, delta);
}
std::optional<Bytes> FormingStore::tryGet(const std::string& key,
                                          std::chrono::milliseconds within) {
  return inner_->tryGet(key, within);
}
bool FormingStore::trySet(const std::string& key, const Bytes& value,
                          std::chrono::milliseconds within) {
  return inner_->trySet(key, value, within);
}

std::vector<std::optional<Bytes>> FormingStore::tryGetMany(const std::vector<std::string>& keys,
                                                          std::chrono::milliseconds within) {
  return inner_->tryGetMany(keys, within);
}

Bytes FormingStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = net::deadlineAfter(timeout);
  for (;;) {
    try {
      return inner_->get(key, std::min(kProbeInterval, millisecondsLeft(deadline)));
    } catch (const TimeoutError&) {
      if (Clock::now() >= deadline) throw;
    }
    check();
  }
}

std::string FormingStore::formedKey(int rank) const {
  return scope_ + "forming/formed/" + std::to_string(rank);
}
std::string FormingStore::countKey() const { return scope_ + "forming/count"; }
std::string FormingStore::everyMemberFormedKey() const { return scope_ + "forming/all"; }

bool FormingStore::goneAt(const MailboxAddress& address) const {
  return goneForSure(probeMailbox(address, secret_, Clock::now() + kProbeWait));
}

bool FormingStore::lookDue() {
  std::lock_guard<std::mutex> lock(lookMutex_);
  const auto now = Clock::now();
  if (now - lastLook_ < kProbeInterval) return false;
  lastLook_ = now;
  return true;
}

void FormingStore::check() {
  if (!lookDue()) return;
  raiseIfAbandoned();
  if (rank_ == leader_) watchMembers();
}

void FormingStore::raiseIfAbandoned() {
  Bytes why;
  try {
    why = inner_->get(scope_ + "forming/abandoned", std::chrono::milliseconds(0));
  } catch (const TimeoutError&) {
    return;  // nobody gave up (or the leader's mailbox is slow to say: looked at again)
  } catch (const TransportError& error) {
    // A request of the leader's mailbox fails where its process is gone (or another holds its
    // port): then the members no longer meet anywhere.
    throw TransportError("ringcomm: rank " + std::to_string(leader_) +
                             ", in whose mailbox the members meet, is gone while they formed "
                             "the new communicator: " +
                             error.what(),
                         FailureContext{"shrink", rank_, leader_, 0.0});
  }
  throw TransportError("ringcomm: the survivors' communicator did not form: " + textOf(why),
                       FailureContext{"shrink", rank_, -1, 0.0});
}

void FormingStore::watchMembers() {
  if (members_.empty()) return;
  std::vector<size_t> window;
  {
    std::lock_guard<std::mutex> lock(lookMutex_);
    for (size_t i = 0; i < std::min(kWatchWindow, members_.size()); ++i) {
      window.push_back((watchFrom_ + i) % members_.size());
    }
    watchFrom_ = (watchFrom_ + window.size()) % members_.size();
  }
  std::vector<MailboxAddress> addresses;
  for (size_t at : window) addresses.push_back(members_[at].second);
  const std::vector<Reach> reached =
      probeMailboxes(addresses, secret_, Clock::now() + kProbeWait);
  for (size_t i = 0; i < window.size(); ++i) {
    const int member = members_[window[i]].first;
    // One that formed it and died after is the new communicator's failure, not the forming's.
    // Read after the ask, since it may have formed it between.
    if (goneForSure(reached[i]) && !formedBy(member)) {
      throw TransportError("ringcomm: rank " + std::to_string(member) +
                               " is gone (its mailbox refuses or does not prove the secret) "
                               "before it formed the new communicator",
                           FailureContext{"shrink", rank_, member, 0.0});
    }
  }
}

bool FormingStore::formedBy(int member) {
  return inner_->tryGet(formedKey(member), kProbeWait).has_value();
}

void FormingStore::abandon(const std::string& why) {
  // As long as a claim may take: an abandonment that does not get through leaves every other
  // member waiting for this one until the deadline (a crowded leader's mailbox is slow, not gone).
  inner_->trySet(scope_ + "forming/abandoned",
                 bytesOf("rank " + std::to_string(rank_) + " failed: " + why), kClaimConnect);
}

void FormingStore::commit(Clock::time_point deadline) {
  bool formed = false;
  try {
    // Counted first: a member gone with its "formed" posted must be one the count holds, or the
    // leader would wait for the count's completion with nobody to stop it.
    const int64_t count = inner_->add(countKey(), 1);
    formed = true;
    inner_->set(formedKey(rank_), bytesOf("formed"));
    if (count == static_cast<int64_t>(members_.size()) + 1) {
      inner_->set(everyMemberFormedKey(), bytesOf("formed"));
    }
    awaitEveryMember(deadline);
    if (claimGoingOn(deadline)) return;
    throw TransportError("ringcomm: every member formed the survivors' communicator, but another "
                             "member's wait for it failed first",
                         FailureContext{"shrink", rank_, -1, 0.0});
  } catch (const Error&) {
    // Nobody can have read that every member formed it where this member's count never got in.
    if (!formed || !someoneWentOn(deadline)) throw;
    RINGCOMM_LOG(LogLevel::Warn, kLogInit,
                 "the new communicator's wait failed on rank %d, but another member went on "
                 "with it (every member formed it): going on too",
                 rank_);
  }
}

std::string FormingStore::claimKey() const { return scope_ + "forming/claim"; }
std::string FormingStore::outcomeKey() const { return scope_ + "forming/outcome"; }

bool FormingStore::claimGoingOn(Clock::time_point deadline) {
  // This mailbox is this process's own: it fails only as the process ends, and then the error
  // ends this member's forming too.
  TcpStore own(own_.host, own_.port, std::max(kClaimConnect, millisecondsLeft(deadline)),
               secret_);
  const bool first = own.add(claimKey(), kClaim) == kClaim;
  // For a vetoer that cannot tell from the counter which came first.
  own.set(outcomeKey(), bytesOf(first ? "on" : "off"));
  return first;
}

bool FormingStore::someoneWentOn(Clock::time_point deadline) {
  try {
    // A claim follows "every member formed", which only the count's completion posts: a veto
    // in an incomplete count means nobody ever claims, and no member's mailbox need be asked.
    const int64_t before = inner_->add(countKey(), kCountVeto) - kCountVeto;
    if (before != static_cast<int64_t>(members_.size()) + 1) return false;
  } catch (const Error&) {
    // The leader's mailbox is gone (or the count cannot be read): ask the members.
  }
  return someClaimCameFirst(deadline);
}

bool FormingStore::someClaimCameFirst(Clock::time_point deadline) {
  const auto until = std::max(deadline, Clock::now() + kOutcomeLook);
  for (const auto& [member, address] : members_) {
    // Each living member's claim gets this member's veto, or is read where it came first; a
    // member gone for sure goes on no more (one that went on and died is the next
    // communicator's failure).
    while (!goneAt(address)) {
      try {
        TcpStore theirs(address.host, address.port,
                        std::max(kProbeWait, std::min(kClaimConnect, millisecondsLeft(until))),
                        secret_);
        const int64_t before = theirs.add(claimKey(), kVeto) - kVeto;
        if (claimCameFirst(theirs, before, address, deadline)) return true;
        break;
      } catch (const Error&) {
        if (Clock::now() >= until) break;  // unreachable for as long as it may take
        std::this_thread::sleep_for(kWaitSlice);
      }
    }
  }
  return false;
}

bool FormingStore::claimCameFirst(Store& theirs, int64_t before, const MailboxAddress& address,
                                  Clock::time_point deadline) {
  if (before == kClaim) return true;         // its claim, and no veto before it
  if (before % kVeto == 0) return false;     // no claim yet: it will find a veto before its own
  // A claim and vetoes, in an order the count does not keep: the claimant says which it found.
  const auto until = std::max(deadline, Clock::now() + kOutcomeLook);
  while (Clock::now() < until) {
    if (const std::optional<Bytes> outcome = theirs.tryGet(outcomeKey(), kProbeWait)) {
      return textOf(*outcome) == "on";
    }
    if (goneAt(address)) return false;  // it died before it could go on
    std::this_thread::sleep_for(kWaitSlice);
  }
  return false;
}

void FormingStore::awaitEveryMember(Clock::time_point deadline) {
  // One wait in the leader's mailbox for the count's completion, not a read of each member's
  // "formed": a member's wait costs the leader's mailbox a request a slice, whatever the size.
  const int64_t everyMember = static_cast<int64_t>(members_.size()) + 1;
  for (;;) {
    try {
      inner_->get(everyMemberFormedKey(),
                  std::max(std::chrono::milliseconds(1),
                           std::min(kWaitSlice, millisecondsLeft(deadline))));
      return;
    } catch (const TimeoutError&) {
      if (Clock::now() >= deadline) {
        const int late = firstNotFormed();
        throw TimeoutError("ringcomm: rank " + std::to_string(late) +
                               " did not form the survivors' communicator by the deadline",
                           FailureContext{"shrink", rank_, late, 0.0});
      }
    }
    if (!lookDue()) continue;
    // The member whose count completed it may have died before it said so. A complete count has
    // no veto in it: a veto keeps it past every member's count for good.
    if (inner_->add(countKey(), 0) == everyMember) return;
    raiseIfAbandoned();
    if (rank_ == leader_) watchMembers();
  }
}

int FormingStore::firstNotFormed() {
  for (const auto& [member, address] : members_) {
    if (!formedBy(member)) return member;
  }
  return -1;  // every one formed it just now: the count's completion came late
}

}  // namespace ringcomm
