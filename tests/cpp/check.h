// A minimal unit-test harness for the C++ tests (no external framework needed to build them):
//   TEST(name) { CHECK(cond); CHECK_EQ(a, b); }
// Each test file is linked with tests/cpp/main.cc, which runs every registered test and prints
// "N passed, N failed".
#pragma once

#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ringcomm::testing {

struct TestCase {
  const char* name;
  std::function<void()> body;
};

inline std::vector<TestCase>& registry() {
  static std::vector<TestCase> tests;
  return tests;
}

struct Registrar {
  Registrar(const char* name, std::function<void()> body) {
    registry().push_back({name, std::move(body)});
  }
};

struct CheckFailure {
  std::string message;
};

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace ringcomm::testing

#define RC_CONCAT_INNER(a, b) a##b
#define RC_CONCAT(a, b) RC_CONCAT_INNER(a, b)

#define TEST(name)                                                              \
  static void name();                                                           \
  static ::ringcomm::testing::Registrar RC_CONCAT(registrar_, name)(#name, name); \
  static void name()

#define CHECK(cond)                                                                        \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::ostringstream where_;                                                           \
      where_ << __FILE__ << ":" << __LINE__ << ": CHECK(" #cond ") failed";                \
      throw ::ringcomm::testing::CheckFailure{where_.str()};                               \
    }                                                                                      \
  } while (0)

#define CHECK_EQ(a, b)                                                                     \
  do {                                                                                     \
    auto&& a_ = (a);                                                                       \
    auto&& b_ = (b);                                                                       \
    if (!(a_ == b_)) {                                                                     \
      std::ostringstream where_;                                                           \
      where_ << __FILE__ << ":" << __LINE__ << ": CHECK_EQ(" #a ", " #b ") failed: " << a_ \
             << " != " << b_;                                                              \
      throw ::ringcomm::testing::CheckFailure{where_.str()};                               \
    }                                                                                      \
  } while (0)
