#pragma once
// The whole library: include this one header.
#include "minimind/config.hpp"
#include "minimind/embedding.hpp"
#include "minimind/error.hpp"
#include "minimind/model.hpp"
#include "minimind/session.hpp"
