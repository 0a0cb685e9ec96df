#pragma once
// The whole library: include this one header.
#include "minimind/batch.hpp"
#include "minimind/chat_template.hpp"
#include "minimind/config.hpp"
#include "minimind/embedding.hpp"
#include "minimind/error.hpp"
#include "minimind/generate.hpp"
#include "minimind/model.hpp"
#include "minimind/observer.hpp"
#include "minimind/sampler.hpp"
#include "minimind/session.hpp"
#include "minimind/tokenizer.hpp"
