#pragma once
// The model as the tests use it: compiled once in the minimind_model library
// (examples/model_instances.cpp; see minimind/instances.hpp), so that a test translation unit does not
// compile the whole forward pass and its kernels again. Every test sees this header through the
// tests' precompiled header (tests/CMakeLists.txt).
#include <minimind/instances.hpp>
