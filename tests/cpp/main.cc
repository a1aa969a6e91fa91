// Runs every TEST registered by the linked test files (those whose name contains argv[1], if
// given), and names the slow ones: the sanitizer builds (tests/test_sanitizers.py) run several
// times slower, and their time in CI is budgeted.
#include <chrono>
#include <cstring>
#include <exception>
#include <iostream>

#include "check.h"

int main(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : nullptr;
  int passed = 0;
  int failed = 0;
  for (const auto& test : ringcomm::testing::registry()) {
    if (filter != nullptr && std::strstr(test.name, filter) == nullptr) continue;
    const auto start = std::chrono::steady_clock::now();
    try {
      test.body();
      ++passed;
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (seconds >= 1.0) std::cout << "slow: " << test.name << " " << seconds << " s\n";
    } catch (const ringcomm::testing::CheckFailure& failure) {
      ++failed;
      std::cout << "FAILED " << test.name << ": " << failure.message << "\n";
    } catch (const std::exception& error) {
      ++failed;
      std::cout << "FAILED " << test.name << ": exception: " << error.what() << "\n";
    }
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
