// The IPC all-reduce's decisions from what each rank says of its device (ipc_plan.h): which ranks
// share a GPU, whether one time-slices between processes, and why a pair cannot map each other's
// memory. No GPU needed: the records are built by hand.
#include <string>
#include <vector>

#include "check.h"
#include "device/ipc_plan.h"

using namespace ringcomm::device;

namespace {

RankDevice on(uint8_t gpu, int64_t pid, int32_t mps = 0, uint64_t pidNamespace = 1) {
  RankDevice rank;
  rank.pid = pid;
  rank.pidNamespace = pidNamespace;
  rank.mps = mps;
  rank.uuid[0] = gpu;
  rank.uuid[15] = static_cast<uint8_t>(0xf0 | gpu);
  return rank;
}

using ::ringcomm::testing::contains;

}  // namespace

TEST(oneGpuPerRankIsNotTimeSliced) {
  const std::vector<RankDevice> ranks{on(0, 100), on(1, 101), on(2, 102), on(3, 103)};
  CHECK(!anyDeviceTimeSliced(ranks));
  CHECK(ranksSharingDevice(ranks, 2) == std::vector<int>{2});
}

TEST(processesSharingAGpuWithoutMpsAreTimeSliced) {
  const std::vector<RankDevice> ranks{on(0, 100), on(0, 101), on(1, 102)};
  CHECK(anyDeviceTimeSliced(ranks));
  CHECK((ranksSharingDevice(ranks, 1) == std::vector<int>{0, 1}));
  // MPS on one side only still leaves the other's context time-sliced.
  CHECK(anyDeviceTimeSliced({on(0, 100, 1), on(0, 101, 0)}));
  // Under MPS on both, the daemon runs both clients at once.
  CHECK(!anyDeviceTimeSliced({on(0, 100, 1), on(0, 101, 1), on(1, 102, 0)}));
}

TEST(ranksOfOneProcessShareItsContext) {
  // Threads of one process on one GPU share a context: no time slicing, and no IPC either.
  const std::vector<RankDevice> ranks{on(0, 100), on(0, 100)};
  CHECK(!anyDeviceTimeSliced(ranks));
  CHECK(contains(ipcBlocker(0, 1, ranks[0], ranks[1], PeerAccess::Yes), "share a process"));
}

TEST(equalPidsInDifferentNamespacesAreDifferentProcesses) {
  // Containers sharing a host's network each number their processes from 1.
  const RankDevice first = on(0, 1, 0, 4026531836);
  const RankDevice second = on(0, 1, 0, 4026532290);
  CHECK(!sameProcess(first, second));
  CHECK(anyDeviceTimeSliced({first, second}));
  CHECK(ipcBlocker(0, 1, first, second, PeerAccess::Yes).empty());
}

TEST(gpusWithoutPeerAccessNameBothRanksAndGpus) {
  const RankDevice mine = on(0, 100);
  const RankDevice theirs = on(1, 101);
  const std::string why = ipcBlocker(3, 12, mine, theirs, PeerAccess::No);
  CHECK(contains(why, "ranks 3 and 12"));
  CHECK(contains(why, uuidText(mine.uuid)));
  CHECK(contains(why, uuidText(theirs.uuid)));
  // A GPU this process cannot see is tested by mapping, not refused up front.
  CHECK(ipcBlocker(3, 12, mine, theirs, PeerAccess::Unknown).empty());
  CHECK(ipcBlocker(3, 12, mine, theirs, PeerAccess::Yes).empty());
  // One GPU needs no peer access to itself.
  CHECK(ipcBlocker(3, 12, mine, on(0, 101), PeerAccess::No).empty());
}

TEST(uuidTextIsWrittenAsNvidiaSmiDoes) {
  uint8_t uuid[16];
  for (int i = 0; i < 16; ++i) uuid[i] = static_cast<uint8_t>(i * 17);
  CHECK_EQ(uuidText(uuid), std::string("GPU-00112233-4455-6677-8899-aabbccddeeff"));
}

TEST(thisProcessHasAPidNamespace) {
  CHECK(currentPidNamespace() != 0);
}

TEST(slicesCoverTheBufferInAlignedPieces) {
  // 1000 float32 at 3 ranks: 334 rounded up to 64 elements (256 bytes) is 384 each.
  CHECK(ipcSlice(1000, 4, 3, 0).begin == 0 && ipcSlice(1000, 4, 3, 0).count == 384);
  CHECK(ipcSlice(1000, 4, 3, 1).begin == 384 && ipcSlice(1000, 4, 3, 1).count == 384);
  CHECK(ipcSlice(1000, 4, 3, 2).begin == 768 && ipcSlice(1000, 4, 3, 2).count == 232);
  // Fewer elements than one aligned piece per rank: the first rank has them all.
  CHECK(ipcSlice(10, 8, 4, 0).count == 10);
  CHECK(ipcSlice(10, 8, 4, 3).begin == 10 && ipcSlice(10, 8, 4, 3).count == 0);
  CHECK(ipcSlice(0, 2, 2, 1).count == 0);
  for (const size_t count : {1ul, 255ul, 4097ul, 1500007ul}) {
    size_t covered = 0;
    for (int r = 0; r < 5; ++r) {
      const Slice slice = ipcSlice(count, 2, 5, r);
      CHECK(slice.begin == covered || slice.count == 0);
      CHECK(slice.begin * 2 % kSliceAlignBytes == 0 || slice.count == 0);
      covered += slice.count;
    }
    CHECK(covered == count);
  }
}
