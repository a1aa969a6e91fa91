// Membership (membership.h): the mailboxes of a communicator's ranks, read and written with a
// deadline, and the agreement on who is alive (agree: the leader's view, the followers' part).
// The probe of a mailbox is mailbox_probe.cc's; the store a regrouping forms through is
// forming_store.cc's.
#include "core/membership.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/socket.h"
#include "core/mailbox_waits.h"
#include "ringcomm/errors.h"

namespace ringcomm {
namespace {

// At most this much of what is left before the deadline the leader keeps for writing its
// decision, so that the others read it before theirs.
constexpr std::chrono::milliseconds kDecisionGrace{500};

std::string joined(const std::set<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : " ") + std::to_string(r);
  return text.empty() ? "none" : text;
}

// "<word> 1 2 3": the word and the numbers after it.
std::pair<std::string, std::set<int>> parseList(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  in >> word;
  std::set<int> ranks;
  for (int r; in >> r;) ranks.insert(r);
  return {word, ranks};
}

std::string firstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

// A view's or a decision's joiners: one "join <id> <host> <port>" line each after its first.
std::string joinerLines(const std::vector<Joiner>& joiners) {
  std::string text;
  for (const Joiner& joiner : joiners) {
    text += "\njoin " + joiner.id + " " + joiner.address.host + " " +
            std::to_string(joiner.address.port);
  }
  return text;
}

std::vector<Joiner> parseJoiners(const std::string& text) {
  std::vector<Joiner> joiners;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string word;
    Joiner joiner;
    if (words >> word >> joiner.id >> joiner.address.host >> joiner.address.port &&
        word == "join") {
      joiners.push_back(joiner);
    }
  }
  return joiners;
}

}  // namespace

Membership::Membership(int rank, std::vector<MailboxAddress> mailboxes, std::string secret,
                       std::chrono::milliseconds linkTimeout)
    : rank_(rank), mailboxes_(std::move(mailboxes)), secret_(std::move(secret)),
      linkTimeout_(linkTimeout) {}

std::vector<Reach> Membership::reachAll() {
  // Every mailbox at once, for the wait of one: where one host is lost, so are all its ranks,
  // and the agreement that follows counts these answers as its first asks.
  const auto asked = Clock::now();
  std::vector<Reach> reached = probeMailboxes(mailboxes_, secret_, asked + kProbeWait);
  reached[static_cast<size_t>(rank_)] = Reach::Answers;
  std::lock_guard<std::mutex> lock(recordsMutex_);
  for (size_t r = 0; r < reached.size(); ++r) {
    if (reached[r] == Reach::Silent) silentAsked_[static_cast<int>(r)] = asked;
  }
  return reached;
}

bool Membership::silentSince(int rank, Clock::time_point since) {
  std::lock_guard<std::mutex> lock(recordsMutex_);
  const auto found = silentAsked_.find(rank);
  return found != silentAsked_.end() && found->second >= since;
}

std::shared_ptr<Store> Membership::open(int rank, Clock::time_point deadline,
                                        Reach& reach) const {
  const MailboxAddress& address = mailboxes_.at(static_cast<size_t>(rank));
  // TcpStore's constructor retries a refused connection until its timeout (a server may start
  // late); mailboxes start with their communicator, so one that refuses is gone: ask once first.
  reach = rank == rank_ ? Reach::Answers
                        : probeMailbox(address, secret_, std::min(deadline, Clock::now() + kProbeWait));
  if (reach != Reach::Answers) return nullptr;
  try {
    return std::make_shared<TcpStore>(
        address.host, address.port,
        std::max(std::chrono::milliseconds(1), millisecondsLeft(deadline)), secret_);
  } catch (const Error&) {
    reach = Reach::Silent;
    return nullptr;
  }
}

bool Membership::post(const std::string& key, const Bytes& value,
                      std::chrono::milliseconds within) {
  const std::optional<std::shared_ptr<Store>> own = recordClient(rank_, Clock::now() + within);
  return own && (*own)->trySet(key, value, within);
}

std::optional<Bytes> Membership::read(int rank, const std::string& key,
                                      std::chrono::milliseconds within) {
  if (rank < 0 || rank >= static_cast<int>(mailboxes_.size())) return std::nullopt;
  const auto deadline = Clock::now() + within;
  const std::optional<std::shared_ptr<Store>> peer = recordClient(rank, deadline);
  if (!peer) return std::nullopt;
  return (*peer)->tryGet(key, std::max(std::chrono::milliseconds(1), millisecondsLeft(deadline)));
}

bool Membership::refuses(int rank, Clock::time_point deadline) {
  if (rank == rank_ || rank < 0 || rank >= static_cast<int>(mailboxes_.size())) return false;
  {
    std::lock_guard<std::mutex> lock(recordsMutex_);
    if (recordsGone_.count(rank)) return true;
  }
  // At least a probe's whole wait: a shorter one cannot tell a mute squatter from a mailbox.
  const auto until = std::max(deadline, Clock::now() + kProbeWait);
  if (!goneForSure(probeMailbox(mailboxes_[static_cast<size_t>(rank)], secret_, until))) {
    return false;
  }
  std::lock_guard<std::mutex> lock(recordsMutex_);
  recordsGone_.insert(rank);
  recordClients_.erase(rank);
  return true;
}

std::optional<std::shared_ptr<Store>> Membership::recordClient(int rank,
                                                                Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(recordsMutex_);
    if (recordsGone_.count(rank)) return std::nullopt;
    auto found = recordClients_.find(rank);
    if (found != recordClients_.end()) return found->second;
  }
  Reach reach = Reach::Silent;
  std::shared_ptr<Store> store = open(rank, deadline, reach);
  std::lock_guard<std::mutex> lock(recordsMutex_);
  if (goneForSure(reach)) recordsGone_.insert(rank);
  if (!store) return std::nullopt;
  recordClients_[rank] = store;
  return store;
}

std::shared_ptr<Store> Membership::client(int rank, Clock::time_point deadline) {
  auto found = clients_.find(rank);
  if (found != clients_.end()) return found->second;
  Reach reach = Reach::Silent;
  std::shared_ptr<Store> store =
      open(rank, std::max(deadline, Clock::now() + std::chrono::milliseconds(1000)), reach);
  if (!store) {
    const MailboxAddress& address = mailboxes_.at(static_cast<size_t>(rank));
    throw TransportError("ringcomm: rank " + std::to_string(rank) + "'s mailbox at " +
                             net::formatHostPort(address.host, address.port) + " does not answer",
                         FailureContext{"shrink", rank_, rank, 0.0});
  }
  clients_[rank] = store;
  return store;
}

std::shared_ptr<FormingStore> Membership::forming(int leader, const std::vector<int>& members,
                                                  const std::string& scope,
                                                  Clock::time_point deadline) {
  std::vector<std::pair<int, MailboxAddress>> watched;
  for (int member : members) {
    if (member != rank_) watched.emplace_back(member, mailboxes_.at(static_cast<size_t>(member)));
  }
  return std::make_shared<FormingStore>(client(leader, deadline), std::move(watched), scope,
                                        rank_, leader, secret_, ownAddress());
}

std::set<int> Membership::gone(const std::set<int>& ranks, Clock::time_point deadline,
                               std::map<int, Silence>& silences) {
  std::set<int> found;
  std::vector<int> asked;
  std::vector<MailboxAddress> addresses;
  for (int rank : ranks) {
    if (refused_.count(rank) || silent_.count(rank)) {
      found.insert(rank);
    } else {
      asked.push_back(rank);
      addresses.push_back(mailboxes_.at(static_cast<size_t>(rank)));
    }
  }
  const auto now = Clock::now();
  const std::vector<Reach> reached =
      probeMailboxes(addresses, secret_, std::min(deadline, now + kProbeWait));
  for (size_t i = 0; i < asked.size(); ++i) {
    const int rank = asked[i];
    switch (reached[i]) {
      case Reach::Answers:
        silences.erase(rank);
        continue;
      case Reach::Refused:
      case Reach::Unproven:
        refused_.insert(rank);
        clients_.erase(rank);
        RINGCOMM_LOG(LogLevel::Info, kLogInit, "shrink: rank %d is gone (%s)", rank,
                     reached[i] == Reach::Refused
                         ? "its mailbox refuses, or its process on this host exited"
                         : "what answers at its mailbox does not prove the job's secret: another "
                           "process holds the port");
        found.insert(rank);
        continue;
      case Reach::Silent:
        break;
    }
    auto [silence, first] = silences.emplace(rank, Silence{std::min(now, quietSince_)});
    // A silent answer to the failing rank's own question (reach()) was the first ask.
    if (first && silentSince(rank, quietSince_)) silence->second.asks = 1;
    if (++silence->second.asks < 2 || Clock::now() - silence->second.since < linkTimeout_) {
      continue;
    }
    silent_.insert(rank);
    clients_.erase(rank);
    RINGCOMM_LOG(LogLevel::Info, kLogInit,
                 "shrink: rank %d is lost (its mailbox has not answered for %.1f s, "
                 "RINGCOMM_LINK_TIMEOUT)",
                 rank, linkTimeout_.count() / 1000.0);
    found.insert(rank);
  }
  return found;
}

Survivors Membership::agree(const std::string& round, const std::set<int>& exclude,
                            Clock::time_point deadline, Clock::time_point quietSince,
                            const std::vector<Joiner>& knocking) {
  quietSince_ = quietSince;
  for (;;) {
    int leader = -1;
    for (int r = 0; r < static_cast<int>(mailboxes_.size()); ++r) {
      if (!refused_.count(r) && !silent_.count(r) && !exclude.count(r)) {
        leader = r;
        break;
      }
    }
    if (leader == rank_) return lead(round, exclude, knocking, deadline);
    if (std::optional<Survivors> decided = follow(leader, round, exclude, knocking, deadline)) {
      return *decided;
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError("ringcomm: shrink: no decision on who goes on within the deadline (rank " +
                             std::to_string(leader) + " led the last attempt)",
                         FailureContext{"shrink", rank_, leader, 0.0});
    }
  }
}

std::optional<Survivors> Membership::follow(int leader, const std::string& round,
                                            const std::set<int>& exclude,
                                            const std::vector<Joiner>& knocking,
                                            Clock::time_point deadline) {
  std::map<int, Silence> silences;
  std::shared_ptr<Store> store;
  // Post this rank's view to the leader's mailbox.
  for (;;) {
    if (Clock::now() >= deadline) return std::nullopt;
    try {
      if (!store) store = client(leader, deadline);
      std::string view = "exclude";
      for (int r : exclude) view += " " + std::to_string(r);
      view += joinerLines(knocking);
      if (store->trySet(round + "/view/" + std::to_string(rank_), bytesOf(view),
                        std::min(millisecondsLeft(deadline), linkTimeout_))) {
        break;
      }
    } catch (const Error&) {
      store.reset();
    }
    if (!gone({leader}, deadline, silences).empty()) return std::nullopt;
    std::this_thread::sleep_for(kWaitSlice);
  }
  // Wait for its decision, asking now and then whether it still lives.
  auto lastProbe = Clock::now();
  for (;;) {
    if (Clock::now() >= deadline) return std::nullopt;
    try {
      const std::string decision = textOf(
          store->get(round + "/decision", std::min(kWaitSlice, millisecondsLeft(deadline))));
      const auto [word, ranks] = parseList(firstLine(decision));
      if (word == "survivors") {
        if (!ranks.count(rank_)) {
          throw MembershipError("ringcomm: shrink: the survivors, led by rank " +
                                std::to_string(leader) + ", went on without rank " +
                                std::to_string(rank_) + " (survivors: " + joined(ranks) +
                                "); it was excluded, or did not join the agreement in time");
        }
        return Survivors{std::vector<int>(ranks.begin(), ranks.end()), leader,
                         parseJoiners(decision)};
      }
      throw MembershipError("ringcomm: shrink on rank " + std::to_string(rank_) + ": " +
                            firstLine(decision).substr(word.size() + 1));
    } catch (const MembershipError&) {
      throw;
    } catch (const Error&) {
      // Not decided yet (a timeout of this slice), or the leader's mailbox broke: ask below.
    }
    if (Clock::now() - lastProbe >= kProbeInterval) {
      lastProbe = Clock::now();
      if (!gone({leader}, deadline, silences).empty()) return std::nullopt;
    }
  }
}

Survivors Membership::lead(const std::string& round, const std::set<int>& exclude,
                           const std::vector<Joiner>& knocking, Clock::time_point deadline) {
  std::shared_ptr<Store> own = client(rank_, deadline);
  std::set<int> pending;
  for (int r = 0; r < static_cast<int>(mailboxes_.size()); ++r) {
    if (r != rank_ && !refused_.count(r) && !silent_.count(r) && !exclude.count(r)) {
      pending.insert(r);
    }
  }
  std::set<int> posted;
  std::set<int> excluded = exclude;
  std::map<int, std::vector<Joiner>> knocked{{rank_, knocking}};  // by the rank that knew them
  std::map<int, Silence> silences;
  const auto collectUntil = deadline - std::min(kDecisionGrace, millisecondsLeft(deadline) / 5);
  // The first look at once: a rank killed is usually why this agreement runs.
  auto lastProbe = Clock::now() - kProbeInterval;
  while (!pending.empty() && Clock::now() < collectUntil) {
    // Every pending view in one request: a round trip a look, not one a rank.
    std::vector<std::string> keys;
    for (int rank : pending) keys.push_back(round + "/view/" + std::to_string(rank));
    const std::vector<std::optional<Bytes>> views = own->tryGetMany(keys, kProbeWait);
    size_t at = 0;
    for (auto it = pending.begin(); it != pending.end(); ++at) {
      const std::optional<Bytes>& view = views[at];
      if (!view) {
        ++it;
        continue;
      }
      const auto [word, theirExclude] = parseList(firstLine(textOf(*view)));
      excluded.insert(theirExclude.begin(), theirExclude.end());
      knocked[*it] = parseJoiners(textOf(*view));
      posted.insert(*it);
      silent_.erase(*it);
      it = pending.erase(it);
    }
    if (pending.empty()) break;
    if (Clock::now() - lastProbe >= kProbeInterval) {
      lastProbe = Clock::now();
      for (int rank : gone(pending, collectUntil, silences)) pending.erase(rank);
      if (pending.empty()) break;
    }
    try {  // sleeps until the first missing view arrives, or a slice
      own->get(round + "/view/" + std::to_string(*pending.begin()),
               std::min(kWaitSlice, millisecondsLeft(collectUntil)));
    } catch (const Error&) {
    }
  }
  // Alive but not there by the deadline: as good as beyond a partition.
  silent_.insert(pending.begin(), pending.end());

  std::set<int> survivors{rank_};
  for (int r : posted) {
    if (!excluded.count(r)) survivors.insert(r);
  }
  std::set<int> lost;
  for (int r : silent_) {
    if (!excluded.count(r) && !survivors.count(r)) lost.insert(r);
  }
  std::string decision;
  const bool quorum = survivors.size() > lost.size();
  std::vector<Joiner> joiners;
  if (quorum) {
    joiners = answering(knocked, survivors, deadline);
    decision = "survivors " + joined(survivors) + joinerLines(joiners);
  } else {
    decision = "quorum: this side lost its quorum (it holds ranks " + joined(survivors) +
               ", and cannot reach ranks " + joined(lost) +
               ", which may go on beyond a partition: only a strict majority of the ranks not "
               "known to be gone may go on; gone for sure: " +
               joined(refused_) + ")";
  }
  RINGCOMM_LOG(LogLevel::Info, kLogInit, "shrink %s: rank %d decided: %s", round.c_str(), rank_,
               decision.c_str());
  own->set(round + "/decision", bytesOf(decision));
  if (!quorum) {
    throw MembershipError("ringcomm: shrink on rank " + std::to_string(rank_) + ": " +
                          decision.substr(std::string("quorum: ").size()));
  }
  return Survivors{std::vector<int>(survivors.begin(), survivors.end()), rank_, joiners};
}

std::vector<Joiner> Membership::answering(const std::map<int, std::vector<Joiner>>& knocked,
                                          const std::set<int>& survivors,
                                          Clock::time_point deadline) const {
  std::vector<Joiner> candidates;
  std::set<std::string> seen;
  for (const auto& [rank, joiners] : knocked) {
    if (!survivors.count(rank)) continue;
    for (const Joiner& joiner : joiners) {
      if (seen.insert(joiner.id).second) candidates.push_back(joiner);
    }
  }
  if (candidates.empty()) return {};
  std::vector<MailboxAddress> addresses;
  for (const Joiner& joiner : candidates) addresses.push_back(joiner.address);
  const std::vector<Reach> reached =
      probeMailboxes(addresses, secret_, std::min(deadline, Clock::now() + kProbeWait));
  std::vector<Joiner> alive;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (reached[i] == Reach::Answers) {
      alive.push_back(candidates[i]);
    } else {
      RINGCOMM_LOG(LogLevel::Info, kLogInit,
                   "grow: the newcomer %s at %s is not admitted: its mailbox does not answer "
                   "with proof of the secret",
                   candidates[i].id.c_str(),
                   net::formatHostPort(candidates[i].address.host, candidates[i].address.port)
                       .c_str());
    }
  }
  return alive;
}

std::vector<Joiner> Membership::knocks(std::chrono::milliseconds within) {
  const auto deadline = Clock::now() + within;
  const std::optional<std::shared_ptr<Store>> own = recordClient(rank_, deadline);
  if (!own) return {};
  const int64_t knocked = (*own)->add("door/knocks", 0);
  for (int64_t n = knocksRead_ + 1; n <= knocked; ++n) {
    // A newcomer counts its knock before it writes it: one not there yet is read next time.
    const std::optional<Bytes> knock = (*own)->tryGet(
        "door/knock/" + std::to_string(n),
        std::max(std::chrono::milliseconds(1), millisecondsLeft(deadline)));
    if (!knock) break;
    std::vector<Joiner> parsed = parseJoiners("knock\n" + textOf(*knock));
    if (!parsed.empty()) knocks_[n] = parsed.front();
    knocksRead_ = n;
  }
  std::vector<Joiner> waiting;
  for (const auto& [n, joiner] : knocks_) waiting.push_back(joiner);
  return waiting;
}

void Membership::welcome(const Survivors& decided, const std::string& round) {
  const MailboxAddress& leader = mailboxes_.at(static_cast<size_t>(decided.leader));
  const std::string where = round + " " + leader.host + " " + std::to_string(leader.port);
  for (const auto& [n, joiner] : knocks_) {
    const bool admitted = std::any_of(decided.joiners.begin(), decided.joiners.end(),
                                      [&](const Joiner& j) { return j.id == joiner.id; });
    if (admitted) post("door/welcome/" + std::to_string(n), bytesOf(where), kProbeWait);
  }
}

void Membership::admitted(const Survivors& decided) {
  for (auto it = knocks_.begin(); it != knocks_.end();) {
    const bool admitted = std::any_of(decided.joiners.begin(), decided.joiners.end(),
                                      [&](const Joiner& j) { return j.id == it->second.id; });
    it = admitted ? knocks_.erase(it) : std::next(it);
  }
}

}  // namespace ringcomm
