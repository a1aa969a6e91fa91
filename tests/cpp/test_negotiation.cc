// The tensor queue's readiness table and cycle messages (src/queue/negotiation.h): no sockets,
// every rank's table fed the same messages.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "check.h"
#include "queue/negotiation.h"

using namespace ringcomm;
using namespace ringcomm::queue;

namespace {

Announcement allreduce(const std::string& name, std::vector<int64_t> shape = {4}) {
  Announcement a;
  a.name = name;
  a.shape = std::move(shape);
  return a;
}

CycleMessage announcing(std::vector<Announcement> announcements) {
  CycleMessage message;
  message.announcements = std::move(announcements);
  return message;
}

std::vector<std::string> namesOf(const CycleOutcome& outcome) {
  std::vector<std::string> names;
  for (const auto& ready : outcome.ready) names.push_back(ready.name);
  return names;
}

}  // namespace

TEST(cycleMessageRoundTrips) {
  CycleMessage message;
  message.join = true;
  message.expired = {Expiry{"late", "why"}};
  Announcement a = allreduce("layer.weight", {3, 5});
  a.type = DataType::BFloat16;
  a.reduceOp = ReduceOp::Max;
  a.compression = Compression::Float16;
  a.root = 2;
  a.prescale = 0.25;
  a.postscale = 3.0;
  a.device = true;
  a.op = TensorOp::Broadcast;
  message.announcements = {a, allreduce("")};
  const std::vector<uint8_t> bytes = encode(message);
  const CycleMessage back = decode(bytes.data(), bytes.size());
  CHECK(back.join);
  CHECK(!back.shutdown);
  CHECK_EQ(back.expired.size(), size_t(1));
  CHECK_EQ(back.expired[0].name, std::string("late"));
  CHECK_EQ(back.expired[0].reason, std::string("why"));
  CHECK_EQ(back.announcements.size(), size_t(2));
  const Announcement& b = back.announcements[0];
  CHECK(b.op == TensorOp::Broadcast && b.type == DataType::BFloat16 && b.reduceOp == ReduceOp::Max);
  CHECK(b.compression == Compression::Float16 && b.root == 2);
  CHECK(b.prescale == 0.25 && b.postscale == 3.0);
  CHECK(b.device && !back.announcements[1].device);
  CHECK(b.shape == std::vector<int64_t>({3, 5}));
  CHECK_EQ(b.name, std::string("layer.weight"));
}

TEST(truncatedCycleMessageIsAnError) {
  const std::vector<uint8_t> bytes = encode(announcing({allreduce("x")}));
  bool threw = false;
  try {
    decode(bytes.data(), bytes.size() - 1);
  } catch (const Error&) {
    threw = true;
  }
  CHECK(threw);
}

TEST(nameIsReadyOnceEveryRankAnnouncedIt) {
  ReadinessTable table(3, JoinPolicy::Zeros);
  auto outcome = table.record({announcing({allreduce("a")}), announcing({}), announcing({})});
  CHECK(outcome.ready.empty());
  CHECK(table.missing("a") == std::vector<int>({1, 2}));
  outcome = table.record({announcing({}), announcing({allreduce("a")}), announcing({})});
  CHECK(outcome.ready.empty());
  outcome = table.record({announcing({}), announcing({}), announcing({allreduce("a")})});
  CHECK(namesOf(outcome) == std::vector<std::string>({"a"}));
  CHECK_EQ(outcome.ready[0].contributors(), 3);
  CHECK(outcome.ready[0].error.empty());
  CHECK(table.missing("a").empty());
}

TEST(readyNamesRunInTheOrderTheyWereFirstAnnounced) {
  ReadinessTable table(2, JoinPolicy::Zeros);
  // Rank 0 announces b then a; rank 1 a then b, a cycle later: b was first seen first.
  table.record({announcing({allreduce("b"), allreduce("a")}), announcing({})});
  auto outcome = table.record({announcing({}), announcing({allreduce("a"), allreduce("b")})});
  CHECK(namesOf(outcome) == std::vector<std::string>({"b", "a"}));
}

TEST(disagreeingRanksAreNamed) {
  ReadinessTable table(2, JoinPolicy::Zeros);
  auto outcome =
      table.record({announcing({allreduce("w", {2, 3})}), announcing({allreduce("w", {2, 4})})});
  CHECK_EQ(outcome.ready.size(), size_t(1));
  const std::string& error = outcome.ready[0].error;
  CHECK(error.find("'w'") != std::string::npos);
  CHECK(error.find("rank 0 submitted allreduce of float32 [2, 3]") != std::string::npos);
  CHECK(error.find("rank 1 allreduce of float32 [2, 4]") != std::string::npos);
}

TEST(allgatherFirstDimensionMayDiffer) {
  ReadinessTable table(2, JoinPolicy::Zeros);
  Announcement a = allreduce("g", {2, 3});
  Announcement b = allreduce("g", {5, 3});
  a.op = b.op = TensorOp::Allgather;
  auto outcome = table.record({announcing({a}), announcing({b})});
  CHECK(outcome.ready[0].error.empty());
  b.shape = {5, 4};
  outcome = table.record({announcing({a}), announcing({b})});
  CHECK(!outcome.ready[0].error.empty());
}

TEST(broadcastRootsMustAgree) {
  ReadinessTable table(2, JoinPolicy::Zeros);
  Announcement a = allreduce("p");
  a.op = TensorOp::Broadcast;
  Announcement b = a;
  b.root = 1;
  auto outcome = table.record({announcing({a}), announcing({b})});
  CHECK(outcome.ready[0].error.find("from root 0") != std::string::npos);
  CHECK(outcome.ready[0].error.find("from root 1") != std::string::npos);
}

TEST(joinedRanksCountAsReadyUntilEveryRankJoined) {
  ReadinessTable table(3, JoinPolicy::Zeros);
  CycleMessage joining;
  joining.join = true;
  auto outcome = table.record({announcing({allreduce("x")}), joining, announcing({})});
  CHECK(outcome.ready.empty());  // rank 2 has neither announced nor joined
  CHECK(table.missing("x") == std::vector<int>({2}));
  outcome = table.record({announcing({}), announcing({}), announcing({allreduce("x")})});
  CHECK(namesOf(outcome) == std::vector<std::string>({"x"}));
  CHECK_EQ(outcome.ready[0].contributors(), 2);
  CHECK(!outcome.ready[0].byRank[1].has_value());
  CHECK(!outcome.allJoined);
  outcome = table.record({joining, announcing({}), joining});
  CHECK(outcome.allJoined);
  CHECK_EQ(outcome.lastJoined, 2);
  // Joins reset: the next name waits for every rank again.
  outcome = table.record({announcing({allreduce("y")}), announcing({}), announcing({})});
  CHECK(outcome.ready.empty());
}

TEST(averageWithJoinedRanksNeedsFloat32Or64UnderContributors) {
  ReadinessTable table(2, JoinPolicy::Contributors);
  CycleMessage joining;
  joining.join = true;
  Announcement a = allreduce("h");
  a.reduceOp = ReduceOp::Avg;
  a.type = DataType::Float16;
  auto outcome = table.record({announcing({a}), joining});
  CHECK(outcome.ready[0].error.find("float32 or float64") != std::string::npos);
  // Horovod's policy: the joined rank adds zeros and the average divides by every rank.
  ReadinessTable zeros(2, JoinPolicy::Zeros);
  outcome = zeros.record({announcing({a}), joining});
  CHECK(outcome.ready[0].error.empty());
}

TEST(broadcastFromAJoinedRootIsAnErrorUnderContributors) {
  ReadinessTable table(2, JoinPolicy::Contributors);
  CycleMessage joining;
  joining.join = true;
  Announcement a = allreduce("p");
  a.op = TensorOp::Broadcast;
  a.root = 1;
  auto outcome = table.record({announcing({a}), joining});
  CHECK(outcome.ready[0].error.find("root 1, which has joined") != std::string::npos);
}

TEST(shutdownNamesTheLowestRank) {
  ReadinessTable table(3, JoinPolicy::Zeros);
  CycleMessage closing;
  closing.shutdown = true;
  auto outcome = table.record({announcing({}), closing, closing});
  CHECK_EQ(outcome.shutdownBy, 1);
}

// A rank's request that timed out waiting for the others is forgotten by every rank, once, even
// when the missing announcement arrives in the same cycle; other names are not affected.
TEST(anExpiredNameIsForgottenEverywhereAndTheRestGoesOn) {
  ReadinessTable table(3, JoinPolicy::Zeros);
  table.record({announcing({allreduce("stuck"), allreduce("fine")}), announcing({}),
                announcing({allreduce("fine")})});
  CycleMessage expiring = announcing({});
  expiring.expired = {Expiry{"stuck", "rank 0 waited too long"}};
  CycleMessage alsoExpiring = expiring;
  auto outcome = table.record(
      {expiring, announcing({allreduce("stuck"), allreduce("fine")}), alsoExpiring});
  CHECK_EQ(outcome.expired.size(), size_t(1));
  CHECK_EQ(outcome.expired[0].name, std::string("stuck"));
  CHECK_EQ(outcome.expired[0].reason, std::string("rank 0 waited too long"));
  CHECK(namesOf(outcome) == std::vector<std::string>({"fine"}));
  CHECK(table.missing("stuck").empty());
}

// Horovod's policy: a joined rank has nothing to gather or broadcast; ringcomm's relays them.
TEST(allgatherAndBroadcastWithJoinedRanksFollowThePolicy) {
  CycleMessage joined;
  joined.join = true;
  Announcement gather = allreduce("g", {2, 3});
  gather.op = TensorOp::Allgather;
  Announcement cast = allreduce("b");
  cast.op = TensorOp::Broadcast;
  ReadinessTable zeros(2, JoinPolicy::Zeros);
  auto outcome = zeros.record({announcing({gather, cast}), joined});
  CHECK_EQ(outcome.ready.size(), size_t(2));
  CHECK(outcome.ready[0].error.find("allgather while some ranks have joined") !=
        std::string::npos);
  CHECK(outcome.ready[1].error.find("broadcast while some ranks have joined") !=
        std::string::npos);
  ReadinessTable contributors(2, JoinPolicy::Contributors);
  outcome = contributors.record({announcing({gather, cast}), joined});
  CHECK(outcome.ready[0].error.empty() && outcome.ready[1].error.empty());
}

TEST(allgatherOfAZeroDimensionalTensorIsRefused) {
  ReadinessTable table(2, JoinPolicy::Zeros);
  Announcement scalar = allreduce("s", {});
  scalar.op = TensorOp::Allgather;
  auto outcome = table.record({announcing({scalar}), announcing({scalar})});
  CHECK(outcome.ready[0].error.find("tried to allgather a rank-zero tensor") !=
        std::string::npos);
}

// A name in CUDA memory on one rank and in host memory on another cannot run as one collective
// (the device path is part of the message); and host and device tensors never share a fusion.
TEST(ranksDisagreeingAboutDeviceMemoryAreNamed) {
  ReadinessTable table(2, JoinPolicy::Zeros);
  Announcement onDevice = allreduce("grad");
  onDevice.device = true;
  const auto outcome = table.record({announcing({onDevice}), announcing({allreduce("grad")})});
  CHECK_EQ(outcome.ready.size(), size_t(1));
  const std::string& error = outcome.ready[0].error;
  CHECK(error.find("rank 0 submitted allreduce of float32 [4] on CUDA") != std::string::npos);
  CHECK(error.find("rank 1 allreduce of float32 [4] (") != std::string::npos);
  CHECK(!reduceAlike(onDevice, allreduce("other")));
  Announcement alsoOnDevice = allreduce("other", {7});
  alsoOnDevice.device = true;
  CHECK(reduceAlike(onDevice, alsoOnDevice));
}

// An all-to-all's splits travel with it; reducescatter and alltoall refuse joined ranks, as
// Horovod does (a joined rank has no rows to keep or to send).
TEST(alltoallSplitsTravelAndJoinedRanksAreRefused) {
  Announcement a = allreduce("a2a", {5, 2});
  a.op = TensorOp::Alltoall;
  a.splits = {2, 3};
  const std::vector<uint8_t> bytes = encode(announcing({a}));
  const CycleMessage back = decode(bytes.data(), bytes.size());
  CHECK(back.announcements[0].splits == std::vector<int64_t>({2, 3}));

  ReadinessTable table(2, JoinPolicy::Zeros);
  CycleMessage joined;
  joined.join = true;
  Announcement rs = allreduce("rs", {4, 3});
  rs.op = TensorOp::Reducescatter;
  const auto outcome = table.record({announcing({rs}), joined});
  CHECK_EQ(outcome.ready.size(), size_t(1));
  CHECK(outcome.ready[0].error.find("reducescatter while some ranks have joined") !=
        std::string::npos);
}
