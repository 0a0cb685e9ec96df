#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "skips.hpp"

// doctest's own main, except that an executable with a skipped test and no failure returns
// CTest's skip code.
int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit() || status != 0) return status;
  return minimind::testing::skipped_tests() > 0 ? minimind::testing::kSkipReturnCode : 0;
}
