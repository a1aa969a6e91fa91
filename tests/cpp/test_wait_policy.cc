// The waiting policy: a fixed yield count is honoured; chosen by load, more local ranks than
// cores always count as crowded.
#include "check.h"
#include "common/wait_policy.h"

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
