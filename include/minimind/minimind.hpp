#pragma once
// The whole public library: include this one header. What it is built from (file formats,
// kernels, the tokenizer's stages) lives in minimind/detail/.
#include "minimind/batch.hpp"
#include "minimind/chat_template.hpp"
#include "minimind/checkpoint.hpp"
#include "minimind/config.hpp"
#include "minimind/embedding.hpp"
#include "minimind/error.hpp"
#include "minimind/generate.hpp"
#include "minimind/gguf_export.hpp"
#include "minimind/gguf_writer.hpp"
#include "minimind/model.hpp"
#include "minimind/observer.hpp"
#include "minimind/pretrained.hpp"
#include "minimind/sampler.hpp"
#include "minimind/session.hpp"
#include "minimind/tokenizer.hpp"
#include "minimind/trace.hpp"
