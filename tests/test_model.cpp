// The whole forward pass against reference logits made by PyTorch: the project's own cases under
// tests/data/golden (always present) and the shared cases in ../shared/golden (when present).
#include "golden.hpp"

using namespace minimind;
using minimind::testing::check_golden_case;

namespace {

void check_cases_in(const std::filesystem::path& root) {
  size_t cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    if (!std::filesystem::exists(entry.path() / "expected.json")) continue;
    SUBCASE(entry.path().filename().string().c_str()) {
      const double worst = check_golden_case(entry.path());
      MESSAGE(entry.path().filename().string() << ": max |logit difference| " << worst);
    }
    ++cases;
  }
  CHECK(cases > 0);
}

}  // namespace

TEST_CASE("shared golden cases: logits and greedy ids, full and cached") {
  auto dir = minimind::testing::shared_dir("golden");
  if (!dir) return;
  check_cases_in(*dir);
}

TEST_CASE("own golden cases (tests/data/golden): logits and greedy ids, full and cached") {
  const auto dir = minimind::testing::data_dir() / "golden";
  REQUIRE_MESSAGE(std::filesystem::exists(dir), "tests/data/golden is missing; run tools/make_golden.py");
  check_cases_in(dir);
}
