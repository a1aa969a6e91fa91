// copyBytes copies every byte at every relative alignment and length, whichever path it takes
// (memcpy, or the vector loop for destinations just after their source modulo the page).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "check.h"
#include "common/bytes.h"

using namespace ringcomm;

TEST(theSlowWindowIsOneToSixtyThreeBytesAfterTheSourceModuloThePage) {
  alignas(4096) static uint8_t page[8192];
  CHECK(!isShortForwardDistance(page, page));
  CHECK(isShortForwardDistance(page + 1, page));
  CHECK(isShortForwardDistance(page + 16, page));
  CHECK(isShortForwardDistance(page + 4096 + 63, page));
  CHECK(!isShortForwardDistance(page + 64, page));
  CHECK(!isShortForwardDistance(page, page + 16));  // the destination before the source
}

TEST(copyBytesCopiesEveryByteAtEveryDistanceAndLength) {
  std::vector<uint8_t> source(3 * 4096 + 200), target(source.size() + 4096 + 64);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t distance : {0, 1, 16, 31, 63, 64, 100}) {
    for (size_t bytes : {0, 1, 63, 2047, 2048, 2049, 4096 + 17, 3 * 4096 + 199}) {
      // Place the destination `distance` bytes after the source modulo the page.
      const uintptr_t from = reinterpret_cast<uintptr_t>(source.data()) + 1;
      uintptr_t to = reinterpret_cast<uintptr_t>(target.data());
      to += (from + distance - to) % 4096;
      auto* destination = reinterpret_cast<uint8_t*>(to);
      std::fill(target.begin(), target.end(), 0xAB);
      copyBytes(destination, source.data() + 1, bytes);
      for (size_t i = 0; i < bytes; ++i) CHECK_EQ(destination[i], source[i + 1]);
      if (destination + bytes < target.data() + target.size()) CHECK_EQ(destination[bytes], 0xAB);
      if (destination > target.data()) CHECK_EQ(destination[-1], 0xAB);
    }
  }
}
