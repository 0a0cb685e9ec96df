// The one translation unit that compiles the model for the tests (see minimind/instances.hpp).
#include "model_instances.hpp"

namespace minimind {
MINIMIND_INSTANCES()
}  // namespace minimind
