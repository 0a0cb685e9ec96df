// The one translation unit that compiles the model for all the programs (see minimind/instances.hpp).
#include <minimind/instances.hpp>

namespace minimind {
MINIMIND_INSTANCES()
}  // namespace minimind
