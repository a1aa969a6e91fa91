// How ranks adapt to crowded cores: a fixed yield count is honoured; chosen by load, more local
// ranks than cores always count as crowded, and then the direct schedule's slots grow.
#include "check.h"
#include "common/wait_policy.h"
#include "transport/shm/segment.h"

using namespace ringcomm;

TEST(fixedYieldsAreHonoured) {
  WaitPolicy policy(0, 5, 64);
  CHECK_EQ(policy.yields(), 5);
  CHECK_EQ(WaitPolicy(0, 0, 1).yields(), 0);
}

TEST(moreLocalRanksThanCoresIsCrowded) {
  WaitPolicy policy(0, -1, coresAvailable() + 1);
  CHECK_EQ(policy.yields(), 1);
  CHECK(policy.crowded());
}

TEST(theMachineIsReadable) {
  CHECK(coresAvailable() >= 1);
  CHECK(runnableThreads() >= 1);  // this thread is running
}

TEST(slotsGrowOnlyWhenRanksOutnumberCoresAndNothingIsConfigured) {
  CHECK_EQ(shm::slotBytesFor(0, 2, 2), shm::kDefaultSlotBytes);
  CHECK_EQ(shm::slotBytesFor(0, 16, 2), shm::kCrowdedSlotBytes);
  CHECK_EQ(shm::slotBytesFor(65536, 16, 2), size_t(65536));
}
