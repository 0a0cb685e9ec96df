// The one translation unit that compiles the model for the tests (see model_instances.hpp).
#include "model_instances.hpp"

namespace minimind {
MINIMIND_TEST_INSTANCES()
}  // namespace minimind
