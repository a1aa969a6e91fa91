// The harness the kernel tests stand on (support.h), checked on the host: a harness that reports
// failures the kernels did not cause sends the hunt the wrong way.
//
// GuardedArray over host memory follows exactly the steps the device tests take. The first case
// is the one that made every chunk of conversionsMatchTheCpuForEveryInput fail on its first run on
// a GPU ("wrote outside its array, at element -16"): that test encodes into arrays it never
// poisons or uploads, and the guards were only written by poison() and upload(), so a fresh
// allocation's bytes read as a stray write.
#include <cstdint>
#include <string>
#include <vector>

#include "check.h"
#include "support.h"

using namespace ringcomm::cudatest;

namespace {

using HostArray = GuardedArray<uint16_t, HostMemory>;

// The failures download() added, as one message ("" when none).
std::string failuresOf(const HostArray& array, std::vector<uint16_t>* values = nullptr) {
  Failures failures;
  std::vector<uint16_t> got = array.download(failures, "array");
  if (values != nullptr) *values = got;
  try {
    failures.throwIfAny();
  } catch (const ringcomm::testing::CheckFailure& failure) {
    return failure.message;
  }
  return "";
}

}  // namespace

TEST(hostGuardsHoldFromConstruction) {
  for (size_t offset = 0; offset < 8; ++offset) {
    HostArray array(37, offset, HostMemory{});
    // A "kernel" that writes every element and nothing else, with no poison() or upload() first.
    for (size_t i = 0; i < 37; ++i) array.device()[i] = static_cast<uint16_t>(i);
    std::vector<uint16_t> values;
    CHECK_EQ(failuresOf(array, &values), std::string());
    CHECK_EQ(values.size(), size_t{37});
    CHECK_EQ(values[36], uint16_t{36});
  }
}

TEST(hostGuardsCatchWritesOnEitherSide) {
  HostArray before(10, 3, HostMemory{});
  before.device()[-1] = 0;
  CHECK(failuresOf(before).find("at element -1 (count 10)") != std::string::npos);

  HostArray after(10, 3, HostMemory{});
  after.device()[10] = 0;
  CHECK(failuresOf(after).find("at element 10 (count 10)") != std::string::npos);

  // poison() and upload() keep the guards too.
  HostArray reused(10, 0, HostMemory{});
  reused.upload(std::vector<uint16_t>(10, 7));
  reused.poison();
  CHECK_EQ(failuresOf(reused), std::string());
}
