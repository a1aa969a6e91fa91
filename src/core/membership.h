// Membership: which ranks of a communicator go on after a failure, agreed by the survivors
// (Communicator::shrink), in the sense of MPI ULFM's MPIX_Comm_shrink.
//
// The agreement needs nothing that may have died with a rank: not the rendezvous store (rank 0
// serves it under mpirun and env://) and not the data links (a broken collective may have left
// them mid-frame). Every rank of a communicator serves a mailbox instead, a small store server
// of its own for as long as the communicator lives (TcpStoreServer: connections prove the job's
// secret), whose address the rendezvous published. A rank's mailbox answers exactly while its
// process lives, so asking it is the liveness test; an answer counts only with proof of the job's
// secret (the handshake of auth/handshake.h, both ways), since once the process died any other
// may bind its port and accept connections there:
//
//   answers   its mailbox proved the secret: the process lives (it may be slow to join the
//             agreement: it is waited for);
//   refused   the process is gone: its host's kernel refused the connection. Gone for sure;
//   unproven  the host accepted the connection, but what answered did not prove the secret
//             (hung up, spoke another protocol or another job's secret, or said nothing for
//             kProofPatience): another process holds the port. Gone for sure, as refused;
//   silent    no answer within RINGCOMM_LINK_TIMEOUT: its host or the way to it is lost. It may
//             live on the other side of a partition.
//
// One round of the agreement (every survivor calls it, with the same round name):
//
//   1. The leader is the lowest rank this rank does not know to be gone. This rank posts its view
//      (which ranks the caller excludes on purpose) to the leader's mailbox; a leader that does
//      not answer is gone, and the next lowest leads.
//   2. The leader waits until every rank it does not know to be gone has posted, asking the
//      mailbox of each that has not every 100 ms, by the deadline: refused and silent ranks are
//      gone, a rank still missing at the deadline is taken for silent.
//   3. The leader decides: the survivors are itself and the ranks that posted, less those
//      anyone excludes. It writes the decision into its own mailbox, where every survivor reads
//      it; ranks that read it and are not among the survivors raise. A leader that dies before
//      deciding is found gone by the others, who agree again under the next leader.
//
// Partitions: only a side that holds a strict majority of the ranks not known to be gone may
// decide, that is more survivors than silent ranks (refused and excluded ones do not count): of
// two sides that cannot reach each other at most one goes on, and a tie stops both. Both sides'
// leaders write a decision; the side without the majority writes that it lost its quorum, and its
// ranks raise MembershipError saying what they see.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "ringcomm/store.h"

namespace ringcomm {

// Where a rank's mailbox listens.
struct MailboxAddress {
  std::string host;
  int port = 0;
  // The rank's process id where it runs on this host (0: another host, or unknown): a process
  // that is gone is asked nothing, however its port answers (another process may hold it).
  int localPid = 0;
};

enum class Reach { Answers, Refused, Unproven, Silent };

// Whether `reach` says the rank's process is gone for sure (above).
inline bool goneForSure(Reach reach) { return reach == Reach::Refused || reach == Reach::Unproven; }

// One connection attempt to `address` and its proof of `secret` by `deadline` (no retries): what
// the liveness test above reads from it. A deadline under kProofPatience (150 ms) away cannot
// tell a mute stranger from a slow mailbox: it says silent.
Reach probeMailbox(const MailboxAddress& address, const std::string& secret,
                   Clock::time_point deadline);
// The same for several mailboxes at once (one wait for all, not one each), in their order.
std::vector<Reach> probeMailboxes(const std::vector<MailboxAddress>& addresses,
                                  const std::string& secret, Clock::time_point deadline);

// A process that asked to join the communicator (Communicator::join): its own name for itself,
// and its mailbox, which answers for it while it waits (the same liveness test as a rank's).
struct Joiner {
  std::string id;  // random, the same across its knocks
  MailboxAddress address;
};

// What the survivors agreed on.
struct Survivors {
  std::vector<int> ranks;  // their ranks in the communicator shrunk, ascending
  int leader = -1;         // whose mailbox holds the decision, and serves the new rendezvous
  std::vector<Joiner> joiners;  // admitted with them (a grow), in the order of their new ranks
};

// A client of the leader's mailbox through which the survivors' new communicator forms
// (rendezvous, connections, shared memory), watching that it can still form: every 100 ms its
// waits, and check(), look whether a member gave up (abandon()), and raise TransportError naming
// it. The leader alone asks the members' mailboxes whether they live, a window of them at a time,
// and gives up (so that every member stops) where one is gone before it formed the communicator;
// the others learn it from the leader, and find the leader gone where its mailbox fails them. A
// survivor that dies, or fails to form the communicator, stops every other at once instead of at
// the deadline, and they all agree again (Communicator::shrink). Each member's looks cost the
// leader's mailbox one request, and the leader one probe of each member a sweep: the forming of N
// ranks costs O(N), not each member asking every other.
//
// commit() ends the forming: the communicator is used only once every member formed it, so that
// the survivors go on together or agree again together, never some of each:
//   - a member posts "formed" once its communicator exists and counts itself in the leader's
//     mailbox; the member whose count completes the members posts "every member formed", or
//     "abandoned" where it failed;
//   - a member that has read "every member formed" in the leader's mailbox claims its going on
//     in its own mailbox, and goes on if its claim came first there;
//   - a member whose wait fails (the leader died, a member gave up or left before forming)
//     vetoes the count in the leader's mailbox: where the count was not complete before, nobody
//     can ever read "every member formed", and it agrees again. Where it was complete, or the
//     leader's mailbox is gone, it vetoes the claim of every member still alive, each in that
//     member's own mailbox: it goes on too where a claim came before its veto, and agrees again
//     otherwise; a member whose claim comes after a veto does the same.
// The claim and the veto are one counter in the claimant's mailbox (added to, atomic), so each
// member goes on exactly where the others find that it did, however long it is held between
// reading "every member formed" and claiming. A member that dies once every member formed it does
// not stop those that read so: the new communicator's first collective names it, and the
// survivors shrink that one. What remains: a member that went on and dies in the moment others
// look at its claim, while the leader is dying too (two deaths in one moment): those that looked
// before go on, those after agree again.
class FormingStore : public Store {
 public:
  // `members`: every other member, by a number `rank` and `leader` share; `leader`: whose mailbox
  // `inner` reaches (this rank's own where it leads). `own`: this member's mailbox (of the
  // communicator it leaves), where it claims its going on.
  FormingStore(std::shared_ptr<Store> inner, std::vector<std::pair<int, MailboxAddress>> members,
               std::string scope, int rank, int leader, std::string secret, MailboxAddress own);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::optional<Bytes> tryGet(const std::string& key, std::chrono::milliseconds within) override;
  bool trySet(const std::string& key, const Bytes& value,
              std::chrono::milliseconds within) override;
  std::vector<std::optional<Bytes>> tryGetMany(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds within) override;

  // Raises TransportError where a member gave up, the leader is gone, or (asked by the leader) a
  // member is gone before it formed the communicator; looks at most every 100 ms.
  void check();
  // This rank failed to form the communicator (`why`): every other member stops too.
  void abandon(const std::string& why);
  // This rank formed the communicator: waits until every member did, by `deadline`, and goes on
  // (returns) or raises as the others find (above).
  void commit(Clock::time_point deadline);

 private:
  std::string formedKey(int rank) const;
  std::string countKey() const;
  std::string everyMemberFormedKey() const;
  // Raises where a member gave up (abandon()), or the leader's mailbox fails this member.
  void raiseIfAbandoned();
  // The leader's look at the next window of members: raises naming one gone before it formed.
  void watchMembers();
  // Whether `member` posted that it formed the communicator.
  bool formedBy(int member);
  // Whether `address` shows its process gone for sure.
  bool goneAt(const MailboxAddress& address) const;
  void awaitEveryMember(Clock::time_point deadline);
  // The first member that has not posted "formed" (asked at the deadline, to name it).
  int firstNotFormed();
  std::string claimKey() const;
  std::string outcomeKey() const;
  // Claims this member's going on in its own mailbox: whether the claim came before any veto.
  bool claimGoingOn(Clock::time_point deadline);
  // After this member's wait failed: whether another member may have gone on, so that this one
  // must too (vetoes the count in the leader's mailbox, and where that cannot tell, every living
  // member's claim).
  bool someoneWentOn(Clock::time_point deadline);
  // The walk over the members' own mailboxes (commit() above): vetoes each living member's claim;
  // whether one came first.
  bool someClaimCameFirst(Clock::time_point deadline);
  // Whether `member`'s claim came first, its counter having read `before` ahead of this veto.
  bool claimCameFirst(Store& theirs, int64_t before, const MailboxAddress& address,
                      Clock::time_point deadline);
  // Whether kProbeInterval has passed since the last look (and, if so, starts the next): the
  // new communicator's threads may wait on this store at once.
  bool lookDue();

  std::shared_ptr<Store> inner_;
  const std::vector<std::pair<int, MailboxAddress>> members_;  // all but this rank
  const std::string scope_;
  const int rank_;
  const int leader_;
  const std::string secret_;
  const MailboxAddress own_;
  std::mutex lookMutex_;
  Clock::time_point lastLook_{};
  size_t watchFrom_ = 0;  // the leader's next window of members starts here (under lookMutex_)
};

class Membership {
 public:
  // `mailboxes`: every rank's, this one's included, in rank order.
  Membership(int rank, std::vector<MailboxAddress> mailboxes, std::string secret,
             std::chrono::milliseconds linkTimeout);

  // One round of the agreement (above) under the name `round`, which every survivor gives
  // alike and no earlier round used. `exclude`: ranks the caller drops on purpose. Returns the
  // survivors, this rank among them; raises MembershipError where this side lost its quorum or
  // the others excluded this rank, TimeoutError where no decision came by `deadline`.
  // `quietSince`: since when a rank whose mailbox is silent now may have been (now, for a shrink
  // on purpose): a silent mailbox counts as lost once RINGCOMM_LINK_TIMEOUT has passed since
  // then, and at the second ask at the earliest. A communicator that failed across a lost link
  // found it after a link timeout of silence: the caller gives the failure's time less that.
  // `knocking`: processes that asked this rank to join (knocks()); the leader admits those of
  // every survivor's list whose mailbox answers, in the order of the ranks that knew them (a
  // grow); none for a shrink.
  Survivors agree(const std::string& round, const std::set<int>& exclude,
                  Clock::time_point deadline, Clock::time_point quietSince,
                  const std::vector<Joiner>& knocking = {});

  // Joining (Communicator::join): a newcomer knocks at a member's mailbox, leaving its Joiner
  // under "door/knock/<n>" (n from the counter "door/knocks"); the members admit it in a grow
  // and this rank, where it knocked, writes "door/welcome/<n>": the round whose decision admits
  // it, and where (the leader's mailbox). A communicator that a shrink or a grow replaced says
  // where its members went on under "door/successor", for newcomers that knocked too late.
  //
  // The knocks waiting in this rank's mailbox, oldest first (read afresh, bounded by `within`).
  std::vector<Joiner> knocks(std::chrono::milliseconds within);
  // Tells the newcomers that knocked here and are among `decided`'s joiners where they meet.
  void welcome(const Survivors& decided, const std::string& round);
  // The newcomers among `decided`'s joiners are members now: no longer waiting.
  void admitted(const Survivors& decided);
  // A client of `rank`'s mailbox (kept); raises TransportError where it does not answer.
  std::shared_ptr<Store> client(int rank, Clock::time_point deadline);
  // This rank's mailbox, as newcomers reach it.
  const MailboxAddress& ownAddress() const { return mailboxes_.at(static_cast<size_t>(rank_)); }
  const MailboxAddress& addressOf(int rank) const { return mailboxes_.at(static_cast<size_t>(rank)); }

  // Whether each rank's mailbox answers a connection with proof of the secret now, in rank order
  // (all asked at once, at most 200 ms): Refused or Unproven, the process is gone; Silent, its
  // host or the way to it is lost; this rank's own answers. For a failing rank that
  // follows the reasons its peers recorded: neither kind will give one. The silent ones count as
  // the first asks of the agreement that follows.
  std::vector<Reach> reachAll();

  // Records a rank leaves in its own mailbox for its peers, and reads in theirs: why it failed,
  // which collective it waits in (core/communicator_health.cc). In the mailbox rather than the
  // job's store, which may have died with the rank that failed first, or lie across the broken
  // link: a rank's own is always there, and a peer's answers exactly while that peer lives. Each
  // call is bounded by `within`; safe from any thread (the agreement's state is not touched).
  bool post(const std::string& key, const Bytes& value, std::chrono::milliseconds within);
  std::optional<Bytes> read(int rank, const std::string& key, std::chrono::milliseconds within);
  // Whether `rank`'s process is gone (its mailbox refuses, or another process holds its port),
  // asked afresh (by `deadline`, or kProofPatience at least, to tell a mute stranger)
  // until it once has: a process killed a moment ago answers while the kernel takes it apart,
  // so what reachAll() found in the first milliseconds after a failure may be out of date.
  bool refuses(int rank, Clock::time_point deadline);

  // The store through which the communicator of `members` forms under `scope` in `leader`'s
  // mailbox (FormingStore, below). Raises TransportError where that mailbox does not answer.
  std::shared_ptr<FormingStore> forming(int leader, const std::vector<int>& members,
                                        const std::string& scope, Clock::time_point deadline);

 private:
  // Silence seen in one wait: since when, how many asks (a rank is gone only after a whole link
  // timeout of it, counted from the failure at the earliest).
  struct Silence {
    Clock::time_point since;
    int asks = 0;
  };
  std::optional<Survivors> follow(int leader, const std::string& round,
                                  const std::set<int>& exclude, const std::vector<Joiner>& knocking,
                                  Clock::time_point deadline);
  Survivors lead(const std::string& round, const std::set<int>& exclude,
                 const std::vector<Joiner>& knocking, Clock::time_point deadline);
  // The joiners the survivors knew (`knocked`, by rank), once each, whose mailboxes answer now.
  std::vector<Joiner> answering(const std::map<int, std::vector<Joiner>>& knocked,
                                const std::set<int>& survivors, Clock::time_point deadline) const;
  // Asks the mailboxes of `ranks` at once whether they live; records what it found and returns
  // those gone or lost.
  std::set<int> gone(const std::set<int>& ranks, Clock::time_point deadline,
                     std::map<int, Silence>& silences);
  // Whether reach() found `rank`'s mailbox silent at `since` or later.
  bool silentSince(int rank, Clock::time_point since);
  // A new client of `rank`'s mailbox after one liveness question (its answer in `reach`), or
  // nullptr where the mailbox does not answer.
  std::shared_ptr<Store> open(int rank, Clock::time_point deadline, Reach& reach) const;
  // post() and read()'s client of `rank`'s mailbox (kept), or nothing where it is gone.
  std::optional<std::shared_ptr<Store>> recordClient(int rank, Clock::time_point deadline);

  const int rank_;
  const std::vector<MailboxAddress> mailboxes_;
  const std::string secret_;
  const std::chrono::milliseconds linkTimeout_;
  Clock::time_point quietSince_;  // of the agreement under way (agree())
  std::map<int, std::shared_ptr<Store>> clients_;
  // post() and read()'s own clients, the mailboxes they found gone, and when reach() last
  // found one silent.
  std::mutex recordsMutex_;
  std::map<int, std::shared_ptr<Store>> recordClients_;
  std::set<int> recordsGone_;
  std::map<int, Clock::time_point> silentAsked_;
  std::set<int> refused_;  // gone for sure
  // Knocks at this rank's mailbox not yet admitted, by their number there, and how far read.
  std::map<int64_t, Joiner> knocks_;
  int64_t knocksRead_ = 0;
  std::set<int> silent_;   // lost: they may live beyond a partition
};

}  // namespace ringcomm
