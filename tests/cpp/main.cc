// Runs every TEST registered by the linked test files.
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
    try {
      test.body();
      ++passed;
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
