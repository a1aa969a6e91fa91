// The end of a forming (FormingStore::commit, core/membership.h) where its leader dies just as
// the members read that every one formed the new communicator: those that go on and those that
// agree again must be decided alike, however long a member is held before it claims its going
// on. Ranks are played by hand on real mailboxes: rank 0 leads, rank 1 is the member held or
// claiming, rank 2 commits through FormingStore as a rank does.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "check.h"
#include "core/membership.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"

using namespace ringcomm;

namespace {

const std::string kSecret = "forming-commit-test-secret-0123456789";
const std::string kScope = "round/comm/";
constexpr std::chrono::milliseconds kConnect{500};

class ThreeMembers {
 public:
  ThreeMembers() {
    for (int r = 0; r < 3; ++r) {
      mailboxes_.push_back(std::make_unique<TcpStoreServer>("127.0.0.1", 0, kSecret));
    }
  }

  MailboxAddress address(int rank) const {
    return {"127.0.0.1", mailboxes_.at(static_cast<size_t>(rank))->port()};
  }
  std::unique_ptr<TcpStore> client(int rank) const {
    return std::make_unique<TcpStore>("127.0.0.1", address(rank).port, kConnect, kSecret);
  }
  void kill(int rank) { mailboxes_.at(static_cast<size_t>(rank))->stop(); }

  // Rank 2's commit, meeting in rank 0's mailbox: "" where it went on, or its error.
  std::string commitOfRankTwo(std::chrono::seconds within = std::chrono::seconds(5)) const {
    try {
      FormingStore forming(client(0), {{0, address(0)}, {1, address(1)}}, kScope, 2,
                           /*leader=*/0, kSecret, address(2));
      forming.commit(Clock::now() + within);
      return "";
    } catch (const Error& error) {
      return error.what();
    }
  }

 private:
  std::vector<std::unique_ptr<TcpStoreServer>> mailboxes_;
};

Bytes bytesOf(const std::string& text) { return Bytes(text.begin(), text.end()); }

// Rank `rank` formed the communicator, as its commit says so in the leader's mailbox.
void formedBy(const ThreeMembers& members, int rank) {
  members.client(0)->add(kScope + "forming/count", 1);
  members.client(0)->set(kScope + "forming/formed/" + std::to_string(rank), bytesOf("formed"));
}

const std::string claim = kScope + "forming/claim";
const std::string outcome = kScope + "forming/outcome";

// The leader formed it; once rank 2 posted that it did too, `then` runs (rank 1's part) and the
// leader dies before rank 2 reads rank 1's "formed".
std::string leaderDiesOnceRankTwoFormed(ThreeMembers& members, std::function<void()> then) {
  formedBy(members, 0);
  std::thread leader([&] {
    members.client(0)->get(kScope + "forming/formed/2", std::chrono::seconds(5));
    then();
    members.kill(0);
  });
  const std::string error = members.commitOfRankTwo();
  leader.join();
  return error;
}

}  // namespace

TEST(everyMemberFormedItAndTheClaimGoesOn) {
  ThreeMembers members;
  for (int r : {0, 1}) formedBy(members, r);
  CHECK_EQ(members.commitOfRankTwo(), std::string());
  const auto own = members.client(2);
  CHECK_EQ(own->add(claim, 0), 1);  // its claim, and nobody's veto
  CHECK(own->get(outcome, std::chrono::seconds(1)) == bytesOf("on"));
}

TEST(aMemberThatClaimedBeforeTheLeaderDiedIsFollowed) {
  // Rank 1 read every "formed" and went on; rank 2's wait fails with the leader: it goes on too.
  ThreeMembers members;
  const std::string error = leaderDiesOnceRankTwoFormed(members, [&] {
    const auto one = members.client(1);
    CHECK_EQ(one->add(claim, 1), 1);
    one->set(outcome, bytesOf("on"));
  });
  CHECK_EQ(error, std::string());
}

TEST(aMemberHeldBeforeItsClaimFindsItVetoed) {
  // Rank 1 read every "formed" but is held before it claims (for longer than any look would
  // wait): rank 2, whose wait failed, agrees again, and rank 1's late claim finds the veto, so
  // it agrees again too.
  ThreeMembers members;
  const std::string error = leaderDiesOnceRankTwoFormed(members, [] {});
  CHECK(!error.empty());
  CHECK_EQ(members.client(1)->add(claim, 1), 3);  // not its claim alone: it does not go on
}

TEST(aClaimAndAVetoInAnOrderTheCountDoesNotKeepAreToldByTheClaimant) {
  for (const bool claimFirst : {true, false}) {
    ThreeMembers members;
    const auto one = members.client(1);
    // Another member's veto and rank 1's claim, in either order: the counter reads 3 both ways.
    one->add(claim, claimFirst ? 1 : 2);
    one->add(claim, claimFirst ? 2 : 1);
    std::thread claimant([&] {
      // Rank 1 says what it found a moment after rank 2 looks (held between claim and word).
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      members.client(1)->set(outcome, bytesOf(claimFirst ? "on" : "off"));
    });
    const std::string error = leaderDiesOnceRankTwoFormed(members, [] {});
    claimant.join();
    CHECK_EQ(error.empty(), claimFirst);
  }
}

TEST(aMemberThatNeverFormedItStopsEveryOther) {
  // The leader dies before rank 2's own "formed" is posted: nobody can have gone on.
  ThreeMembers members;
  members.kill(0);
  const auto started = Clock::now();
  CHECK(!members.commitOfRankTwo().empty());
  CHECK(Clock::now() - started < std::chrono::seconds(2));
}

TEST(aFailedWaitInAnIncompleteCountAsksNoMembersMailbox) {
  // Rank 1 gave up before it formed the communicator: it vetoed the count and said why. Rank 2
  // finds the count incomplete under its own veto, so nobody can have gone on: it agrees again
  // without vetoing any member's claim in that member's mailbox.
  ThreeMembers members;
  formedBy(members, 0);
  members.client(0)->add(kScope + "forming/count", int64_t{1} << 32);
  members.client(0)->set(kScope + "forming/abandoned", bytesOf("rank 1 failed: test"));
  const std::string error = members.commitOfRankTwo();
  CHECK(error.find("rank 1 failed: test") != std::string::npos);
  for (int r : {0, 1}) CHECK_EQ(members.client(r)->add(claim, 0), 0);
}
