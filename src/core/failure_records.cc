#include "core/failure_records.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "auth/sha256.h"
#include "common/log.h"

namespace ringcomm {
namespace {

// How long a failing rank looks for the records along its chain, in all.
constexpr std::chrono::milliseconds kChainWait{1000};
// How long one look at a record, or at what a peer runs, may take.
constexpr std::chrono::milliseconds kLookupWait{200};
// How often a rank looks for a record meanwhile.
constexpr std::chrono::milliseconds kLookupPoll{50};
// How long a failing rank waits for its own record to be taken.
constexpr std::chrono::milliseconds kRecordWait{500};

std::string storeKey(const char* kind, int rank) {
  return std::string(kind) + "/" + std::to_string(rank);
}

// What separates a record's text from its MAC (64 hex digits) at its end.
constexpr const char* kMacMark = "\n#mac ";

// Bound to the key, so that a record cannot be moved to another rank's or kind's place.
auth::Digest macOf(const std::string& secret, const std::string& key, const std::string& text) {
  return auth::hmacSha256(secret, {"ringcomm record ", key, "\n", text});
}

std::string hex(const auth::Digest& digest) {
  std::string text(2 * digest.size(), '0');
  for (size_t i = 0; i < digest.size(); ++i) {
    std::snprintf(&text[2 * i], 3, "%02x", digest[i]);
  }
  return text;
}

std::optional<auth::Digest> fromHex(const std::string& text) {
  auth::Digest digest{};
  if (text.size() != 2 * digest.size()) return std::nullopt;
  for (size_t i = 0; i < digest.size(); ++i) {
    unsigned value = 0;
    if (std::sscanf(text.c_str() + 2 * i, "%2x", &value) != 1) return std::nullopt;
    digest[i] = static_cast<uint8_t>(value);
  }
  return digest;
}

}  // namespace

FailureRecords::FailureRecords(int rank, std::shared_ptr<Store> store, Membership* membership,
                               std::string secret, std::function<bool(int)> diedWithoutAborting)
    : rank_(rank), store_(std::move(store)), membership_(membership), secret_(std::move(secret)),
      diedWithoutAborting_(std::move(diedWithoutAborting)) {}

Bytes FailureRecords::sealed(const std::string& key, const std::string& text) const {
  const std::string record = text + kMacMark + hex(macOf(secret_, key, text));
  return Bytes(record.begin(), record.end());
}

std::optional<std::string> FailureRecords::opened(const std::string& key, const Bytes& value) const {
  const std::string record(value.begin(), value.end());
  const size_t mark = record.rfind(kMacMark);
  if (!secret_.empty() && mark != std::string::npos) {
    const std::string text = record.substr(0, mark);
    const std::optional<auth::Digest> mac = fromHex(record.substr(mark + std::strlen(kMacMark)));
    if (mac && auth::sameDigest(*mac, macOf(secret_, key, text))) return text;
  }
  if (!forgeryLogged_.exchange(true)) {
    RINGCOMM_LOG(LogLevel::Warn, kLogAuth,
                 "ignored a record under '%s' that no rank of this job wrote (its MAC under the "
                 "job's secret is missing or wrong): something else writes to the job's store",
                 key.c_str());
  }
  return std::nullopt;
}

FailureRecords::~FailureRecords() { finish(); }

void FailureRecords::finish() {
  if (reporter_.joinable()) reporter_.join();
}

void FailureRecords::record(const std::string& reason, int blamed, bool mismatch) {
  // "<blamed> mismatch|failure <reason>"
  const std::string text =
      std::to_string(blamed) + (mismatch ? " mismatch " : " failure ") + reason;
  const std::string key = storeKey("abort", rank_);
  const Bytes bytes = sealed(key, text);
  if (!membership_) {
    recorded_ = store_->trySet(key, bytes, kRecordWait);
    return;
  }
  recorded_ = membership_->post("abort", bytes, kRecordWait);
  if (!reporter_.joinable()) {
    reporter_ = std::thread([store = store_, key, bytes] { store->trySet(key, bytes, kRecordWait); });
  }
}

std::optional<FailureRecords::Recorded> FailureRecords::recordOf(int peer,
                                                                 Clock::time_point deadline,
                                                                 bool& gone) {
  const std::string key = storeKey("abort", peer);
  for (bool first = true;; first = false) {
    const auto left = std::max(std::chrono::milliseconds(first ? 50 : 0),
                               millisecondsLeft(deadline));
    if (left.count() <= 0) return std::nullopt;
    std::optional<Bytes> value;
    if (membership_) value = membership_->read(peer, "abort", std::min(left, kLookupPoll));
    if (!value) value = store_->tryGet(key, std::min(left, kLookupPoll));
    const std::optional<std::string> opened = value ? this->opened(key, *value) : std::nullopt;
    if (opened) {
      std::istringstream text(*opened);
      Recorded recorded;
      std::string kind;
      text >> recorded.blamed >> kind;
      recorded.mismatch = kind == "mismatch";
      std::getline(text >> std::ws, recorded.reason);
      return recorded;
    }
    if (Clock::now() >= deadline) return std::nullopt;
    // A peer killed a moment ago still answered reachAll() while its process was taken apart
    // (seen across hosts: the whole chain wait, a second, spent on a dead rank's record).
    if (!gone && membership_ &&
        membership_->refuses(peer, std::min(deadline, Clock::now() + kLookupPoll))) {
      gone = true;  // a rank that left recorded its reason before it closed its mailbox
      return std::nullopt;
    }
    std::this_thread::sleep_for(kLookupPoll);
  }
}

std::string FailureRecords::traced(const PeerError& error, bool& mismatch) {
  std::string text = error.what();
  int next = error.context().peer;
  std::set<int> seen{rank_};
  if (!recorded_) {
    // Nobody's record can be read either, and waiting for one would only keep this rank from
    // reporting before its launcher ends it (mpirun's and torchrun's do at once).
    return text + "; the job's store did not answer this rank either: the process that serves "
                  "it (rank 0 under mpirun and env://, the launcher under ringcomm-run and "
                  "torchrun) may have failed first, or the way to it did";
  }
  // Those along the chain record their reasons before they close anything, so all are there by
  // the time their failure reaches this rank; only the culprit's is missing. The wait for the
  // last lookup, which fails, is bounded for the whole chain.
  const Clock::time_point deadline = Clock::now() + kChainWait;
  std::vector<Reach> reached;  // asked once, when the chain first needs it
  while (next >= 0 && seen.insert(next).second) {
    // A rank on this host whose process is gone without having aborted never recorded a reason:
    // no waiting for one (a launcher may end this rank any moment: mpirun's at once, torchrun's
    // after 0.1 s).
    if (diedWithoutAborting_(next)) {
      if (next != error.context().peer) {
        text += "; rank " + std::to_string(next) + " died without a word (its process is gone)";
      }
      break;
    }
    // Nor will one whose mailbox refuses: its process is gone (over TCP the wait for its reason
    // cost the survivors a second), or it left the communicator (then its record is in the store,
    // if it left one): a look or two. Nor one whose mailbox is silent: its host or the link to it
    // is lost (a cut link), and so is the store's record of it, if that lies beyond the cut: the
    // wait for it once kept the majority of a partition a second longer from going on.
    if (membership_ && reached.empty()) reached = membership_->reachAll();
    const Reach reach =
        next < static_cast<int>(reached.size()) ? reached[static_cast<size_t>(next)] : Reach::Answers;
    if (reach == Reach::Silent) {
      if (next != error.context().peer) {
        text += "; rank " + std::to_string(next) +
                " cannot be reached (its mailbox does not answer: its host or the link to it is"
                " lost)";
      }
      break;
    }
    bool left = goneForSure(reach);
    const auto recorded = recordOf(next, left ? Clock::now() + kLookupPoll : deadline, left);
    if (!recorded) {
      if (left && next != error.context().peer) {
        text += "; rank " + std::to_string(next) +
                " is gone without a word (its process died, or it left this communicator)";
      } else if (next != error.context().peer) {
        text += "; rank " + std::to_string(next) +
                " recorded no reason: the failure may have started there (it died, stopped or"
                " exited, cannot reach the store, or has not failed yet)";
      }
      break;
    }
    // A shared-memory abort already quotes the peer's reason ("rank 3 aborted: ...").
    if (text.find(recorded->reason) == std::string::npos) {
      text += "; rank " + std::to_string(next) + " reported: " + recorded->reason;
    }
    mismatch = mismatch || recorded->mismatch;
    next = recorded->blamed;
  }
  return text;
}

std::optional<std::string> FailureRecords::otherCollectiveOf(const Operation& op, bool& published,
                                                             int peer) {
  const std::string mine = inflightRecord(op);
  if (!published) published = publishInFlight(mine);
  const std::optional<std::string> value = inFlightOf(peer);
  if (!value) return std::nullopt;  // the peer has not waited this long (yet), or is out of reach
  const std::string& theirs = *value;
  const std::string sequence = theirs.substr(0, theirs.find(' '));
  if (sequence != std::to_string(op.label.sequence)) return std::nullopt;  // behind or ahead
  if (mine.substr(0, mine.find('\n')) == theirs.substr(0, theirs.find('\n'))) return std::nullopt;
  return theirs.substr(theirs.find('\n') + 1);
}

std::string FailureRecords::inflightRecord(const Operation& op) {
  const OperationLabel& l = op.label;
  // An alltoallv's counts are each rank's own: they may differ.
  const bool countsAgree = std::string(l.collective) != "alltoallv";
  std::ostringstream record;
  record << l.sequence << " " << l.collective << " " << (l.type ? l.type : "-") << " "
         << (l.reduceOp ? l.reduceOp : "-") << " " << l.root << " "
         << (l.algorithm ? l.algorithm : "-") << " " << (l.compression ? l.compression : "-")
         << " " << (countsAgree ? std::to_string(l.count) : "-") << "\n"
         << l.describe();
  return record.str();
}

bool FailureRecords::publishInFlight(const std::string& record) {
  const Bytes bytes = sealed(storeKey("inflight", rank_), record);
  return membership_ ? membership_->post("inflight", bytes, kLookupWait)
                     : store_->trySet(storeKey("inflight", rank_), bytes, kLookupWait);
}

std::optional<std::string> FailureRecords::inFlightOf(int peer) {
  const std::optional<Bytes> value =
      membership_ ? membership_->read(peer, "inflight", kLookupWait)
                  : store_->tryGet(storeKey("inflight", peer), kLookupWait);
  if (!value) return std::nullopt;
  return opened(storeKey("inflight", peer), *value);
}

}  // namespace ringcomm
