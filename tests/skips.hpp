#pragma once
// A test whose data is absent here (../shared beside the checkout, a Debian data package, a program
// not built) is skipped, not passed: the executable then returns kSkipReturnCode, which CTest's
// SKIP_RETURN_CODE reports as Skipped. CI provides all of it, so under CI=true a skip is a failure.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <string_view>

namespace minimind::testing {

inline constexpr int kSkipReturnCode = 77;

inline int& skipped_tests() {
  static int count = 0;
  return count;
}

inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string_view(ci) == "true";
}

// Records that the calling test cannot run, and why; the caller then returns.
inline void skip_test(const std::string& why) {
  if (in_ci()) {
    const std::string failure = "CI=true, yet " + why;
    FAIL_CHECK(failure);
    return;
  }
  const std::string message = "SKIPPED: " + why;
  MESSAGE(message);
  ++skipped_tests();
}

}  // namespace minimind::testing
