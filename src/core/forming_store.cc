// FormingStore (membership.h): the store a regrouping's new communicator forms through, in the
// leader's mailbox, watching the other members while it forms, and the commit that ends a forming
// alike on every member: a claim to go on, and the vetoes of those that could not.
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
                           int rank, std::string secret, MailboxAddress own)
    : inner_(std::move(inner)), members_(std::move(members)), scope_(std::move(scope)),
      rank_(rank), secret_(std::move(secret)), own_(std::move(own)) {}

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

bool FormingStore::goneAt(const MailboxAddress& address) const {
  return goneForSure(probeMailbox(address, secret_, Clock::now() + kProbeWait));
}

void FormingStore::raiseIfGone(int member, const MailboxAddress& address) {
  if (goneAt(address)) {
    throw TransportError("ringcomm: rank " + std::to_string(member) +
                             " is gone (its mailbox refuses or does not prove the secret) while "
                             "the members met",
                         FailureContext{"shrink", rank_, member, 0.0});
  }
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
  if (const std::optional<Bytes> why = inner_->tryGet(scope_ + "forming/abandoned", kProbeWait)) {
    throw TransportError("ringcomm: the survivors' communicator did not form: " + textOf(*why),
                         FailureContext{"shrink", rank_, -1, 0.0});
  }
  for (const auto& [member, address] : members_) raiseIfGone(member, address);
}

void FormingStore::abandon(const std::string& why) {
  inner_->trySet(scope_ + "forming/abandoned",
                 bytesOf("rank " + std::to_string(rank_) + " failed: " + why), kProbeWait);
}

void FormingStore::commit(Clock::time_point deadline) {
  bool formed = false;
  try {
    inner_->set(formedKey(rank_), bytesOf("formed"));
    formed = true;
    awaitEveryMember(deadline);
    if (claimGoingOn(deadline)) return;
    throw TransportError("ringcomm: every member formed the survivors' communicator, but another "
                             "member's wait for it failed first",
                         FailureContext{"shrink", rank_, -1, 0.0});
  } catch (const Error&) {
    // Nobody can have read every "formed" where this member's never got there.
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
  std::vector<std::pair<int, MailboxAddress>> pending = members_;
  while (!pending.empty()) {
    // Blocks on the first that has not formed it for a slice; a broken leader's mailbox raises.
    try {
      inner_->get(formedKey(pending.front().first),
                  std::max(std::chrono::milliseconds(1),
                           std::min(kWaitSlice, millisecondsLeft(deadline))));
    } catch (const TimeoutError&) {
      if (Clock::now() >= deadline) {
        throw TimeoutError("ringcomm: rank " + std::to_string(pending.front().first) +
                               " did not form the survivors' communicator by the deadline",
                           FailureContext{"shrink", rank_, pending.front().first, 0.0});
      }
    }
    auto formed = [&](int member) {
      return inner_->tryGet(formedKey(member), kProbeWait).has_value();
    };
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [&](const auto& member) { return formed(member.first); }),
                  pending.end());
    if (pending.empty() || !lookDue()) continue;
    if (const std::optional<Bytes> why =
            inner_->tryGet(scope_ + "forming/abandoned", kProbeWait)) {
      throw TransportError("ringcomm: the survivors' communicator did not form: " + textOf(*why),
                           FailureContext{"shrink", rank_, -1, 0.0});
    }
    // Only those that have not formed it: one that did and died after is the new
    // communicator's failure. Read again after the ask, since it may have formed it between.
    for (const auto& [member, address] : pending) {
      if (goneAt(address) && !formed(member)) {
        throw TransportError("ringcomm: rank " + std::to_string(member) +
                                 " is gone (its mailbox refuses or does not prove the secret) "
                                 "before it formed the new communicator",
                             FailureContext{"shrink", rank_, member, 0.0});
      }
    }
  }
}

}  // namespace ringcomm
