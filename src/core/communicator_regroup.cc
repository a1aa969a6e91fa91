// The communicator's regroupings (communicator_impl.h): duplicate(), split(), shrink() and grow(),
// each a new communicator formed among some of the ranks (and newcomers), meeting in a mailbox
// (core/membership.h), and what a successor takes over from the communicator it replaces.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/socket.h"
#include "core/communicator_impl.h"
#include "core/forming.h"
#include "core/membership.h"
#include "ringcomm/errors.h"

namespace ringcomm {
namespace {

// How often grow(expect > 0) looks again for the newcomers it waits for.
constexpr std::chrono::milliseconds kKnockPoll{20};

// shrink() and grow() agree on who forms the new communicator, then form it, in rounds named
// "<call>/<attempt>": a member that fails while it forms makes every member that saw it agree
// again, and the next round finds who is gone, until the deadline. `agree(round)` decides;
// `form(decided, round)` forms (or returns null where there is nothing to form). `what` names the
// communicator in the log.
template <typename Agree, typename Form>
std::shared_ptr<Communicator> formInRounds(const std::string& call, Clock::time_point deadline,
                                           const char* what, Agree agree, Form form) {
  for (int attempt = 0;; ++attempt) {
    const std::string round = call + "/" + std::to_string(attempt);
    const Survivors decided = agree(round);
    try {
      return form(decided, round);
    } catch (const PeerError& error) {
      if (Clock::now() >= deadline) throw;
      RINGCOMM_LOG(LogLevel::Warn, kLogInit, "%s did not form (%s); agreeing again", what,
                   error.what());
    }
  }
}

}  // namespace

std::shared_ptr<Communicator> CommunicatorImpl::duplicate() {
  Config config = config_;
  config.listenAddress = listenAddress_;
  const std::string scope = "duplicate/" + std::to_string(duplicates_.fetch_add(1)) + "/";
  return createInScope(store_, scope, rank_, size_, config);
}

std::shared_ptr<Communicator> CommunicatorImpl::shrink(const std::vector<int>& exclude,
                                                       std::chrono::milliseconds timeout) {
  std::set<int> dropped;
  for (int r : exclude) {
    if (r < 0 || r >= size_) {
      throw InvalidArgument("shrink: exclude names rank " + std::to_string(r) +
                            ", which is not a rank of this communicator of " +
                            std::to_string(size_));
    }
    if (r == rank_) {
      throw InvalidArgument("shrink: exclude names this rank (" + std::to_string(r) +
                            "); a rank leaves a shrink by not calling it");
    }
    dropped.insert(r);
  }
  const auto deadline =
      net::deadlineAfter(timeout.count() > 0 ? timeout : config_.timeout);
  if (!membership_) return duplicate();  // one rank: nobody to agree with
  std::lock_guard<std::mutex> lock(membershipMutex_);
  const std::string call = "shrink/" + std::to_string(shrinks_++);
  return formInRounds(
      call, deadline, "shrink: the survivors' communicator",
      [&](const std::string& round) {
        return membership_->agree(round, dropped, deadline, quietSince());
      },
      [&](const Survivors& survivors, const std::string& round) {
        std::shared_ptr<Communicator> shrunk =
            join(survivors.ranks, survivors.leader, round + "/comm/", deadline, true);
        setFormerRanks(*shrunk, survivors.ranks);
        handOver(*shrunk);
        return shrunk;
      });
}

std::vector<int> CommunicatorImpl::survivors(std::chrono::milliseconds timeout) {
  if (!membership_) return {0};
  const auto deadline = net::deadlineAfter(timeout.count() > 0 ? timeout : config_.timeout);
  std::lock_guard<std::mutex> lock(membershipMutex_);
  const std::string round = "survivors/" + std::to_string(survivorQueries_++);
  return membership_->agree(round, {}, deadline, quietSince()).ranks;
}

std::shared_ptr<Communicator> CommunicatorImpl::split(int color, int key) {
  const int64_t mine[2] = {color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(size_));
  AllgatherOptions exchange;
  exchange.input = mine;
  exchange.output = all.data();
  exchange.count = 2;
  exchange.type = DataType::Int64;
  exchange.name = "split";
  allgather(exchange)->wait();
  std::lock_guard<std::mutex> lock(membershipMutex_);
  const std::string scope =
      "split/" + std::to_string(splits_++) + "/" + std::to_string(color) + "/";
  if (color < 0) return nullptr;
  std::vector<std::pair<int64_t, int>> group;  // (key, rank)
  for (int r = 0; r < size_; ++r) {
    if (all[2 * static_cast<size_t>(r)] == color) group.emplace_back(all[2 * r + 1], r);
  }
  std::sort(group.begin(), group.end());
  std::vector<int> ranks;
  int leader = size_;
  for (const auto& [ignored, r] : group) {
    ranks.push_back(r);
    leader = std::min(leader, r);
  }
  return join(ranks, leader, scope, net::deadlineAfter(config_.timeout));
}

std::shared_ptr<Communicator> CommunicatorImpl::grow(const GrowOptions& options) {
  options.validate();
  if (closed_.load(std::memory_order_acquire)) {
    throw CommunicatorClosed("ringcomm: grow: this communicator is closed (" + closedReason() +
                             "): shrink() it first, then grow the survivors' communicator");
  }
  if (!membership_) {
    throw InvalidArgument("grow: a communicator of one rank made by create() has no mailbox "
                          "for newcomers to reach; create it with the others, or shrink to it");
  }
  std::unique_lock<std::mutex> growing(growMutex_, std::try_to_lock);
  if (!growing.owns_lock()) {
    throw InvalidArgument("grow: another grow of this communicator is under way: one at a time");
  }
  const auto deadline = net::deadlineAfter(
      options.timeout.count() > 0 ? options.timeout : config_.timeout);
  if (newcomersWaiting(options.expect, deadline) == 0) return nullptr;
  std::lock_guard<std::mutex> lock(membershipMutex_);
  const std::string call = "grow/" + std::to_string(grows_++);
  return formInRounds(
      call, deadline, "grow: the grown communicator",
      [&](const std::string& round) {
        return membership_->agree(round, {}, deadline, quietSince(),
                                  membership_->knocks(kDoorLook));
      },
      [&](const Survivors& decided, const std::string& round) -> std::shared_ptr<Communicator> {
        if (decided.joiners.empty() && static_cast<int>(decided.ranks.size()) == size_) {
          return nullptr;  // those that knocked died before they were admitted
        }
        std::shared_ptr<Communicator> grown = formGrown(decided, round, deadline);
        membership_->admitted(decided);
        handOver(*grown);
        return grown;
      });
}

std::string CommunicatorImpl::address() const {
  if (!membership_) return "";
  const MailboxAddress& own = membership_->ownAddress();
  return net::formatHostPort(own.host, own.port);
}

void CommunicatorImpl::publishDoor(std::shared_ptr<Store> board, const std::string& key) {
  if (!board || key.empty()) throw InvalidArgument("publishDoor: a board and a key are needed");
  {
    // Only the fields: the store's round trip below must not hold the lock every failure
    // path takes (markClosed, quietSince).
    std::lock_guard<std::mutex> lock(stateMutex_);
    board_ = board;
    doorKey_ = key;
  }
  if (rank_ != 0 || !membership_) return;
  std::string members;
  for (int r = 0; r < size_; ++r) {
    const MailboxAddress& address = membership_->addressOf(r);
    members += net::formatHostPort(address.host, address.port) + "\n";
  }
  // Best effort: the board may have died with a rank that served it (env://).
  if (!board->trySet(key, Bytes(members.begin(), members.end()), kDoorLook)) {
    RINGCOMM_LOG(LogLevel::Info, kLogInit,
                 "the members' addresses could not be published under %s: its store does not "
                 "answer; newcomers need a member's address",
                 key.c_str());
  }
}

// How many newcomers wait, as every member agrees (each counts those that knocked at its own
// mailbox; an all-reduce takes the largest count, so that all decide alike): at once where
// `expect` is 0, else once at least `expect` do, by `deadline`. Whether the deadline passed
// travels in the same all-reduce: members that gave up at different moments would leave the
// others waiting in the next one.
int64_t CommunicatorImpl::newcomersWaiting(int expect, Clock::time_point deadline) {
  for (;;) {
    int64_t seen[2] = {static_cast<int64_t>(membership_->knocks(kDoorLook).size()),
                       Clock::now() >= deadline ? 1 : 0};
    AllreduceOptions count;
    count.input = seen;
    count.output = seen;
    count.count = 2;
    count.type = DataType::Int64;
    count.op = ReduceOp::Max;
    count.name = "newcomers waiting (grow)";
    count.runInCaller = true;
    allreduce(count)->wait();
    const int64_t waiting = seen[0];
    if (waiting >= std::max(1, expect) || expect == 0) return waiting;
    if (seen[1] != 0) {
      throw TimeoutError("ringcomm: grow: " + std::to_string(expect) +
                             " newcomers expected, " + std::to_string(waiting) +
                             " asked to join by the deadline",
                         FailureContext{"grow", rank_, -1, 0.0});
    }
    std::this_thread::sleep_for(kKnockPoll);
  }
}

// The grown communicator the members agreed on in `round`: its survivors in their order, then
// the joiners; meets in the leader's mailbox, where the leader first writes every member's
// address for the newcomers (who know none but the one they knocked at).
std::shared_ptr<Communicator> CommunicatorImpl::formGrown(const Survivors& decided,
                                                          const std::string& round,
                                                          Clock::time_point deadline) {
  std::vector<MailboxAddress> members;
  for (int r : decided.ranks) members.push_back(membership_->addressOf(r));
  for (const Joiner& joiner : decided.joiners) members.push_back(joiner.address);
  if (decided.leader == rank_) {
    std::string former;
    for (int r : decided.ranks) former += std::to_string(r) + " ";
    membership_->post(round + "/former", Bytes(former.begin(), former.end()), kDoorLook);
    membership_->post(round + "/members", encodeMembers(members), kDoorLook);
  }
  membership_->welcome(decided, round);
  auto newRankOf = [&decided](int rank) {
    return static_cast<int>(std::find(decided.ranks.begin(), decided.ranks.end(), rank) -
                            decided.ranks.begin());
  };
  Config config = config_;
  config.listenAddress = listenAddress_;
  std::shared_ptr<Communicator> grown =
      formAmong(membership_->client(decided.leader, deadline), members, newRankOf(rank_),
                newRankOf(decided.leader), round + "/comm/", config, deadline);
  // This rank's mailbox outlives this communicator: the members met in the leader's, and any
  // member's holds its claim to go on and where it went (FormingStore::commit, door/successor).
  static_cast<CommunicatorImpl&>(*grown).keepAlive(mailbox_);
  std::vector<int> former = decided.ranks;
  former.resize(decided.ranks.size() + decided.joiners.size(), -1);
  setFormerRanks(*grown, std::move(former));
  return grown;
}

// What a communicator that replaces this one (a shrink's, a grow's) takes over: the board
// where the first rank publishes the members, and the way to it for newcomers that knocked
// here too late.
void CommunicatorImpl::handOver(Communicator& successor) {
  std::shared_ptr<Store> board;
  std::string key;
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    board = board_;
    key = doorKey_;
  }
  if (board) successor.publishDoor(board, key);
  const std::string where = successor.address();
  if (membership_ && !where.empty()) {
    membership_->post("door/successor", Bytes(where.begin(), where.end()), kDoorLook);
  }
}

// The communicator of `ranks` (this communicator's ranks, in the new order), meeting in
// `leader`'s mailbox under `scope`: a shrink's survivors, or a split's group.
// `regroup`: the new communicator replaces this one (a shrink), and keeps a mailbox for
// newcomers however few its ranks.
std::shared_ptr<Communicator> CommunicatorImpl::join(const std::vector<int>& ranks, int leader,
                                                     const std::string& scope,
                                                     Clock::time_point deadline, bool regroup) {
  const int newRank = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) -
                                       ranks.begin());
  Config config = config_;
  config.listenAddress = listenAddress_;
  const auto setup = std::max(std::chrono::milliseconds(1), millisecondsLeft(deadline));
  if (!membership_) {
    return createCommunicator(store_, scope, newRank, static_cast<int>(ranks.size()), config,
                              setup, nullptr, regroup);
  }
  const std::shared_ptr<FormingStore> forming =
      membership_->forming(leader, ranks, scope, deadline);
  std::shared_ptr<Communicator> created;
  try {
    created = createCommunicator(forming, scope, newRank, static_cast<int>(ranks.size()),
                                 config, setup, [&forming] { forming->check(); }, regroup);
    forming->commit(deadline);
  } catch (const std::exception& error) {
    // Whatever ended this member's forming (a peer, or this rank's own limits): the others stop
    // too, rather than wait for it until the deadline.
    forming->abandon(error.what());
    throw;
  }
  // As in formGrown: this rank's mailbox lives as long as the communicator that replaced this.
  if (mailbox_) static_cast<CommunicatorImpl&>(*created).keepAlive(mailbox_);
  return created;
}

void keepAlive(Communicator& communicator, std::shared_ptr<void> owner) {
  static_cast<CommunicatorImpl&>(communicator).keepAlive(std::move(owner));
}

void setFormerRanks(Communicator& communicator, std::vector<int> ranks) {
  static_cast<CommunicatorImpl&>(communicator).adoptFormerRanks(std::move(ranks));
}

}  // namespace ringcomm
