// The one translation unit that compiles the model for a build's programs, tests and fuzzers (see
// minimind/instances.hpp and the top-level CMakeLists.txt).
#include <minimind/instances.hpp>

namespace minimind {
MINIMIND_INSTANCES()
}  // namespace minimind
