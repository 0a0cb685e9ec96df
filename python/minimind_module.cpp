// The Python module `minimind`: a thin pybind11 layer over the library. Each call converts its
// arguments, releases the GIL, runs the library (load_pretrained, forward, generate_text, trace,
// ChatTemplate) and converts the result; nothing here computes what the library already does.
// minimind::Error becomes the Python exception minimind.Error (a RuntimeError) with its message.
#include <minimind/instances.hpp>  // the model is compiled once, in minimind_model
#include <minimind/trace.hpp>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

namespace py = pybind11;
using namespace py::literals;

namespace {

using Model = minimind::Pretrained<float>;

// Text from the library as a Python str; bytes that are not UTF-8 become U+FFFD rather than an
// exception (a token may be half a character).
py::str to_str(std::string_view text) {
  PyObject* s = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace");
  if (s == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

// JSON values to and from Python through the json module, as json.loads and json.dumps see them.
py::object to_python(const nlohmann::json& json) {
  return py::module_::import("json").attr("loads")(json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}
template <class Json>
Json to_json(const py::handle& value) {
  return Json::parse(py::module_::import("json").attr("dumps")(value).cast<std::string>());
}

// Text to encode: a str (as UTF-8; a lone surrogate raises UnicodeEncodeError) or bytes, passed
// as they are so that the library names the offset of any byte that is not UTF-8.
std::string utf8_of(const py::handle& text) {
  if (py::isinstance<py::bytes>(text)) return text.cast<std::string>();
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(text.ptr(), &size);
  if (data == nullptr) throw py::error_already_set();
  return std::string(data, static_cast<size_t>(size));
}

// A str argument, or a TypeError naming it.
std::string text_of(const py::handle& value, const std::string& what) {
  if (!py::isinstance<py::str>(value)) {
    throw py::type_error(what + ": expected a str, got " + std::string(py::str(py::type::of(value).attr("__name__"))));
  }
  return value.cast<std::string>();
}

// Token ids from any sequence of Python or numpy integers; a float, a string or an id beyond
// int32 is refused naming its position (ids outside the vocabulary are the library's to refuse).
std::vector<int32_t> to_ids(const py::handle& ids, const char* what) {
  if (py::isinstance<py::str>(ids) || py::isinstance<py::bytes>(ids)) {
    throw py::type_error(std::string(what) + ": expected a sequence of token ids, got a string");
  }
  std::vector<int32_t> out;
  size_t i = 0;
  for (const py::handle item : py::iter(ids)) {
    PyObject* index = PyNumber_Index(item.ptr());
    if (index == nullptr) {
      PyErr_Clear();
      throw py::type_error(std::string(what) + "[" + std::to_string(i) + "]: expected an integer token id, got " +
                           std::string(py::str(py::type::of(item).attr("__name__"))));
    }
    int overflow = 0;
    const long long id = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (overflow != 0 || id < INT32_MIN || id > INT32_MAX) {
      throw minimind::Error(std::string(what) + "[" + std::to_string(i) + "]: token id " + std::string(py::str(item)) +
                            " is out of range");
    }
    out.push_back(static_cast<int32_t>(id));
    ++i;
  }
  return out;
}

const minimind::Tokenizer& tokenizer_of(const Model& m) {
  if (!m.tokenizer) {
    throw minimind::Error(m.path.string() +
                          ": no tokenizer (no tokenizer.json, no GGUF tokenizer metadata), so text is not possible (use token ids and generate_ids)");
  }
  return *m.tokenizer;
}

// A prompt given as text (encoded with the checkpoint's tokenizer) or as token ids.
std::vector<int32_t> prompt_ids(const Model& m, const py::handle& prompt) {
  std::vector<int32_t> ids = py::isinstance<py::str>(prompt) ? tokenizer_of(m).encode(utf8_of(prompt)) : to_ids(prompt, "prompt");
  if (ids.empty()) throw minimind::Error("the prompt has no tokens");
  return ids;
}

// The generation keywords, each overriding the checkpoint's default (generation_config.json) when given.
struct GenerationKeywords {
  std::optional<int64_t> max_new_tokens, top_k, seed;
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  bool ignore_eos = false;

  minimind::GenerationConfig apply(minimind::GenerationConfig config) const {
    if (max_new_tokens) config.max_new_tokens = *max_new_tokens;
    if (temperature) config.sampling.temperature = *temperature;
    if (top_p) config.sampling.top_p = *top_p;
    if (top_k) config.sampling.top_k = *top_k;
    if (min_p) config.sampling.min_p = *min_p;
    if (repetition_penalty) config.sampling.repetition_penalty = *repetition_penalty;
    if (seed) {
      if (*seed < 0) throw minimind::Error("seed must not be negative, got " + std::to_string(*seed));
      config.sampling.seed = static_cast<uint64_t>(*seed);
    }
    config.ignore_eos = ignore_eos;
    config.validate();
    return config;
  }
};

// The keyword arguments generate, generate_ids and chat share (GenerationKeywords), once.
#define MINIMIND_GENERATION_ARGS                                                                             \
  py::kw_only(), "max_new_tokens"_a = py::none(), "temperature"_a = py::none(), "top_p"_a = py::none(),      \
      "top_k"_a = py::none(), "min_p"_a = py::none(), "repetition_penalty"_a = py::none(), "seed"_a = py::none(), \
      "ignore_eos"_a = false

// One generation: the prompt, its session (sized as minimind-generate sizes it: the prompt plus
// max_new_tokens, within the model's context) and the config.
struct Generation {
  Generation(const Model& m, std::vector<int32_t> prompt_, minimind::GenerationConfig config_)
      : model(&m), prompt(std::move(prompt_)), config(std::move(config_)),
        session(m.model.new_session(context_for(m, prompt.size(), config.max_new_tokens))) {}

  static minimind::Index context_for(const Model& m, size_t prompt_tokens, int64_t max_new_tokens) {
    const int64_t max_context = m.model.config().max_position_embeddings;
    if (static_cast<int64_t>(prompt_tokens) >= max_context) {
      throw minimind::Error("the prompt has " + std::to_string(prompt_tokens) + " tokens; the model's context is " +
                            std::to_string(max_context));
    }
    return std::min<int64_t>(max_context, static_cast<int64_t>(prompt_tokens) + std::max<int64_t>(max_new_tokens, 1));
  }

  minimind::GenerationResult run_text(const minimind::TextCallback& on_text) {
    return minimind::generate_text(model->model, tokenizer_of(*model), session, prompt, config, on_text);
  }

  const Model* model;
  std::vector<int32_t> prompt;
  minimind::GenerationConfig config;
  minimind::Session<float> session;
};

py::dict stats_of(const minimind::GenerationResult& r) {
  return py::dict("prompt_tokens"_a = r.prompt_tokens, "generated_tokens"_a = r.ids.size(), "stop"_a = minimind::to_string(r.stop),
                  "prefill_seconds"_a = r.prefill_seconds, "decode_seconds"_a = r.decode_seconds,
                  "prefill_tokens_per_second"_a = r.prefill_tokens_per_second(),
                  "decode_tokens_per_second"_a = r.decode_tokens_per_second());
}

// generate(..., stream=True): the library's token loop runs on its own thread and hands each piece
// of text over a queue; iterating waits (without the GIL) for the next one. The loop runs at most
// kAhead pieces ahead of the reader, so an iterator left unread does not go on computing. Dropping
// the iterator or calling close() stops the loop at its next token and waits for it, so nothing
// outlives it.
class TextIterator {
 public:
  static constexpr size_t kAhead = 64;

  // `owner`: the Python model the generation runs on, kept alive while the iterator is.
  TextIterator(py::object owner, std::unique_ptr<Generation> generation) : owner_(std::move(owner)), generation_(std::move(generation)) {
    worker_ = std::thread([this] {
      try {
        result_ = generation_->run_text([this](std::string_view piece) {
          std::unique_lock lock(mutex_);
          room_.wait(lock, [this] { return pieces_.size() < kAhead || stop_; });
          if (stop_) return false;
          pieces_.emplace_back(piece);
          ready_.notify_one();
          return true;
        });
      } catch (...) {
        error_ = std::current_exception();
      }
      std::lock_guard lock(mutex_);
      done_ = true;
      ready_.notify_one();
    });
  }
  TextIterator(const TextIterator&) = delete;
  TextIterator& operator=(const TextIterator&) = delete;
  ~TextIterator() { close(); }

  py::str next() {
    std::string piece;
    {
      py::gil_scoped_release release;
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [this] { return !pieces_.empty() || done_; });
      if (!pieces_.empty()) {
        piece = std::move(pieces_.front());
        pieces_.pop_front();
        room_.notify_one();
      }
    }
    if (!piece.empty()) return to_str(piece);
    join();
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    throw py::stop_iteration();
  }

  // Stops the generation and drops the text not yet read.
  void close() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      pieces_.clear();
      room_.notify_one();
    }
    py::gil_scoped_release release;
    join();
  }

  // The generation's numbers once it has finished, else None.
  py::object stats() const {
    std::lock_guard lock(mutex_);
    return done_ && !error_ ? py::object(stats_of(result_)) : py::none();
  }

 private:
  void join() {
    if (worker_.joinable()) worker_.join();
  }

  py::object owner_;  // first, so it is released last
  std::unique_ptr<Generation> generation_;
  mutable std::mutex mutex_;
  std::condition_variable ready_, room_;  // a piece to read; room in the queue
  std::deque<std::string> pieces_;
  bool stop_ = false, done_ = false;
  std::exception_ptr error_;
  minimind::GenerationResult result_;
  std::thread worker_;
};

// What Python keeps per loaded model: the checkpoint and the numbers of its last generation.
struct PyModel {
  std::unique_ptr<Model> pretrained;
  py::object last_stats = py::none();
};

// Runs a generation of the model `self` to its end and returns its text, or returns the iterator
// over its pieces.
py::object generate_text(const py::object& self, std::vector<int32_t> prompt, const GenerationKeywords& keywords, bool stream) {
  PyModel& py_model = self.cast<PyModel&>();
  const Model& m = *py_model.pretrained;
  tokenizer_of(m);  // the output is text, even when the prompt is ids
  auto generation = std::make_unique<Generation>(m, std::move(prompt), keywords.apply(m.generation));
  if (stream) return py::cast(std::make_unique<TextIterator>(self, std::move(generation)));
  std::string text;
  minimind::GenerationResult result;
  {
    py::gil_scoped_release release;
    result = generation->run_text([&](std::string_view piece) {
      text += piece;
      return true;
    });
  }
  py_model.last_stats = stats_of(result);
  return to_str(text);
}

minimind::ChatOptions chat_options(std::optional<bool> enable_thinking, std::optional<bool> open_thinking, const py::object& tools) {
  minimind::ChatOptions options;
  options.add_generation_prompt = true;
  options.enable_thinking = enable_thinking;
  options.open_thinking = open_thinking;
  if (!tools.is_none())
    for (const py::handle tool : tools) options.tools.push_back(to_json<nlohmann::ordered_json>(tool));
  return options;
}

// load's adapters: each a path (scale 1) or a (path, scale) pair, as the programs' --lora and
// --lora-scaled take them; read with the GIL held, loaded without it.
std::vector<std::pair<std::filesystem::path, float>> lora_paths(const py::object& adapters) {
  std::vector<std::pair<std::filesystem::path, float>> out;
  if (adapters.is_none()) return out;
  if (py::isinstance<py::str>(adapters)) throw minimind::Error("adapters must be a list of paths or (path, scale) pairs, not one string");
  size_t i = 0;
  for (const py::handle item : adapters) {
    if (py::isinstance<py::tuple>(item)) {
      const auto pair = item.cast<py::tuple>();
      if (pair.size() != 2) throw minimind::Error("adapters[" + std::to_string(i) + "]: a pair must be (path, scale)");
      out.emplace_back(pair[0].cast<std::filesystem::path>(), pair[1].cast<float>());
    } else {
      out.emplace_back(item.cast<std::filesystem::path>(), 1.0f);
    }
    ++i;
  }
  return out;
}

// Messages as the OpenAI API and transformers' apply_chat_template take them: dicts with "role"
// and "content", and for minimind-3 assistant turns optionally "reasoning_content". Any other key
// is refused rather than silently left out of the prompt.
std::vector<minimind::ChatMessage> chat_messages(const py::handle& messages) {
  std::vector<minimind::ChatMessage> out;
  size_t i = 0;
  for (const py::handle item : messages) {
    const std::string where = "messages[" + std::to_string(i++) + "]";
    if (!py::isinstance<py::dict>(item)) throw py::type_error(where + ": expected a dict with \"role\" and \"content\"");
    minimind::ChatMessage message;
    for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(item)) {
      const std::string name = py::str(key);
      if (name == "role") message.role = text_of(value, where + "[\"role\"]");
      else if (name == "content") message.content = text_of(value, where + "[\"content\"]");
      else if (name == "reasoning_content") message.reasoning_content = text_of(value, where + "[\"reasoning_content\"]");
      else throw minimind::Error(where + ": unknown key \"" + name + "\" (expected role, content, reasoning_content)");
    }
    out.push_back(std::move(message));
  }
  return out;
}

std::string render_chat(const Model& m, const py::handle& messages, const minimind::ChatOptions& options) {
  const minimind::ChatTemplate chat_template(tokenizer_of(m).chat_template());
  return chat_template.render(chat_messages(messages), options);
}

py::dict config_dict(const minimind::Config& c) {
  py::object rope_scaling = py::none();
  if (c.rope_scaling) {
    const auto& r = *c.rope_scaling;
    rope_scaling = py::dict("factor"_a = r.factor, "original_max_position_embeddings"_a = r.original_max_position_embeddings,
                            "beta_fast"_a = r.beta_fast, "beta_slow"_a = r.beta_slow, "attention_factor"_a = r.attention_factor,
                            "rule"_a = r.rule == minimind::YarnRule::MiniMind2 ? "minimind2" : "ramp");
  }
  return py::dict("architecture"_a = c.architecture,
                  "generation"_a = c.generation == minimind::Generation::MiniMind2 ? "MiniMind2" : "minimind-3",
                  "vocab_size"_a = c.vocab_size, "hidden_size"_a = c.hidden_size, "num_hidden_layers"_a = c.num_hidden_layers,
                  "num_attention_heads"_a = c.num_attention_heads, "num_key_value_heads"_a = c.num_key_value_heads,
                  "head_dim"_a = c.head_dim, "intermediate_size"_a = c.intermediate_size,
                  "max_position_embeddings"_a = c.max_position_embeddings, "rms_norm_eps"_a = c.rms_norm_eps,
                  "rope_theta"_a = c.rope_theta, "tie_word_embeddings"_a = c.tie_word_embeddings, "use_qk_norm"_a = c.use_qk_norm,
                  "rope_scaling"_a = rope_scaling, "num_experts"_a = c.num_experts, "num_experts_per_tok"_a = c.num_experts_per_tok,
                  "n_shared_experts"_a = c.n_shared_experts, "moe_intermediate_size"_a = c.moe_intermediate_size,
                  "norm_topk_prob"_a = c.norm_topk_prob, "decoder_sparse_step"_a = c.decoder_sparse_step,
                  "mlp_only_layers"_a = c.mlp_only_layers, "bos_token_id"_a = c.bos_token_id, "eos_token_ids"_a = c.eos_token_ids);
}

}  // namespace

PYBIND11_MODULE(minimind, module) {
  module.doc() = "MiniMind language models run by minimind.cpp (a header-only C++ library)";
  py::register_exception<minimind::Error>(module, "Error", PyExc_RuntimeError);

  py::class_<minimind::Tokenizer>(module, "Tokenizer")
      .def(
          "encode",
          [](const minimind::Tokenizer& t, const std::variant<py::str, py::bytes>& text) {
            return t.encode(std::visit([](const auto& s) { return utf8_of(s); }, text));
          },
          "text"_a, "Token ids of a str or UTF-8 bytes (no BOS/EOS unless tokenizer_config.json asks).")
      .def(
          "decode",
          [](const minimind::Tokenizer& t, const py::handle& ids, bool skip_special_tokens) {
            return to_str(t.decode(to_ids(ids, "ids"), skip_special_tokens));
          },
          "ids"_a, "skip_special_tokens"_a = false)
      .def(
          "token_to_piece", [](const minimind::Tokenizer& t, int32_t id) { return py::bytes(t.token_to_piece(id)); }, "id"_a,
          "The bytes one token decodes to (possibly part of a UTF-8 character).")
      .def("token_to_id", &minimind::Tokenizer::token_to_id, "token"_a)
      .def_property_readonly("vocab_size", &minimind::Tokenizer::vocab_size)
      .def_property_readonly("bos_id", &minimind::Tokenizer::bos_id)
      .def_property_readonly("eos_id", &minimind::Tokenizer::eos_id)
      .def_property_readonly("chat_template", &minimind::Tokenizer::chat_template);

  py::class_<TextIterator>(module, "TextIterator")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &TextIterator::next)
      .def("close", &TextIterator::close, "Stop the generation (at its next token) and wait for it.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](TextIterator& it, const py::args&) { it.close(); })
      .def_property_readonly("stats", &TextIterator::stats);

  py::class_<PyModel>(module, "Model")
      .def_property_readonly("config", [](const PyModel& m) { return config_dict(m.pretrained->model.config()); })
      .def_property_readonly(
          "tokenizer", [](const PyModel& m) { return m.pretrained->tokenizer ? &*m.pretrained->tokenizer : nullptr; },
          py::return_value_policy::reference_internal)
      .def_property_readonly("path", [](const PyModel& m) { return m.pretrained->path; })
      .def_property_readonly("dtype", [](const PyModel& m) { return minimind::format_name(m.pretrained->model.format()); })
      .def_property_readonly("threads", [](const PyModel& m) { return m.pretrained->model.threads(); })
      .def_property_readonly("num_parameters", [](const PyModel& m) { return m.pretrained->model.num_parameters(); })
      .def_property_readonly("generation_config",
                             [](const PyModel& m) {
                               const auto& g = m.pretrained->generation;
                               return py::dict("max_new_tokens"_a = g.max_new_tokens, "temperature"_a = g.sampling.temperature,
                                               "top_p"_a = g.sampling.top_p, "top_k"_a = g.sampling.top_k, "min_p"_a = g.sampling.min_p,
                                               "repetition_penalty"_a = g.sampling.repetition_penalty, "seed"_a = g.sampling.seed,
                                               "eos_token_ids"_a = g.eos_token_ids);
                             })
      .def_readonly("last_stats", &PyModel::last_stats, "Numbers of the last generate/chat that returned text.")
      .def(
          "logits",
          [](const PyModel& m, const py::handle& ids_arg, bool all_positions) {
            const std::vector<int32_t> ids = to_ids(ids_arg, "ids");
            if (ids.empty()) throw minimind::Error("logits: no token ids");
            const auto& model = m.pretrained->model;
            // The logits stay where the forward pass wrote them: the session's buffer is moved
            // into the array's owner, and the array views its first rows (row-major, contiguous).
            auto owner = std::make_unique<minimind::MatrixRM<float>>();
            minimind::Index rows = 0;
            {
              py::gil_scoped_release release;
              auto session = model.new_session(std::min<minimind::Index>(static_cast<minimind::Index>(ids.size()),
                                                                         model.config().max_position_embeddings));
              rows = model.forward(session, ids, all_positions).rows();
              *owner = std::move(session.scratch().logits);
            }
            const float* data = owner->data();
            const auto cols = owner->cols();
            py::capsule base(owner.release(), [](void* p) { delete static_cast<minimind::MatrixRM<float>*>(p); });
            return py::array_t<float>({static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(cols)}, data, base);
          },
          "ids"_a, "all_positions"_a = true,
          "Logits [len(ids), vocab] as float32 (row i after reading ids[0..i]), or [1, vocab] of the last position.")
      .def(
          "generate",
          [](const py::object& self, const py::handle& prompt, std::optional<int64_t> max_new_tokens, std::optional<float> temperature,
             std::optional<float> top_p, std::optional<int64_t> top_k, std::optional<float> min_p,
             std::optional<float> repetition_penalty, std::optional<int64_t> seed, bool ignore_eos, bool stream) {
            const GenerationKeywords keywords{max_new_tokens, top_k, seed, temperature, top_p, min_p, repetition_penalty, ignore_eos};
            return generate_text(self, prompt_ids(*self.cast<PyModel&>().pretrained, prompt), keywords, stream);
          },
          "prompt"_a, MINIMIND_GENERATION_ARGS, "stream"_a = false,
          "Continue a prompt (text or token ids): the new text, or with stream=True an iterator of its pieces.")
      .def(
          "generate_ids",
          [](PyModel& m, const py::handle& prompt, std::optional<int64_t> max_new_tokens, std::optional<float> temperature,
             std::optional<float> top_p, std::optional<int64_t> top_k, std::optional<float> min_p,
             std::optional<float> repetition_penalty, std::optional<int64_t> seed, bool ignore_eos) {
            const GenerationKeywords keywords{max_new_tokens, top_k, seed, temperature, top_p, min_p, repetition_penalty, ignore_eos};
            Generation generation(*m.pretrained, prompt_ids(*m.pretrained, prompt), keywords.apply(m.pretrained->generation));
            minimind::GenerationResult result;
            {
              py::gil_scoped_release release;
              result = minimind::generate(generation.model->model, generation.session, generation.prompt, generation.config);
            }
            m.last_stats = stats_of(result);
            return result.ids;
          },
          "prompt"_a, MINIMIND_GENERATION_ARGS,
          "Continue a prompt: the new token ids (an end-of-sequence id that stopped it included).")
      .def(
          "apply_chat_template",
          [](const PyModel& m, const py::handle& messages, std::optional<bool> enable_thinking, std::optional<bool> open_thinking,
             const py::object& tools) {
            return render_chat(*m.pretrained, messages, chat_options(enable_thinking, open_thinking, tools));
          },
          "messages"_a, py::kw_only(), "enable_thinking"_a = py::none(), "open_thinking"_a = py::none(), "tools"_a = py::none(),
          "The prompt text the checkpoint's chat template renders, ending in the assistant's header.")
      .def(
          "chat",
          [](const py::object& self, const py::handle& messages, std::optional<int64_t> max_new_tokens, std::optional<float> temperature,
             std::optional<float> top_p, std::optional<int64_t> top_k, std::optional<float> min_p,
             std::optional<float> repetition_penalty, std::optional<int64_t> seed, bool ignore_eos, bool stream,
             std::optional<bool> enable_thinking, std::optional<bool> open_thinking, const py::object& tools) {
            const GenerationKeywords keywords{max_new_tokens, top_k, seed, temperature, top_p, min_p, repetition_penalty, ignore_eos};
            const Model& m = *self.cast<PyModel&>().pretrained;
            const std::string prompt = render_chat(m, messages, chat_options(enable_thinking, open_thinking, tools));
            return generate_text(self, tokenizer_of(m).encode(prompt), keywords, stream);
          },
          "messages"_a, MINIMIND_GENERATION_ARGS, "stream"_a = false, "enable_thinking"_a = py::none(),
          "open_thinking"_a = py::none(), "tools"_a = py::none(),
          "The assistant's reply to a conversation (a list of {\"role\", \"content\"} dicts), rendered with the chat template.")
      .def(
          "trace",
          [](const PyModel& m, const py::handle& prompt, int64_t top, bool attention) {
            if (top < 1) throw minimind::Error("top must be at least 1, got " + std::to_string(top));
            const std::vector<int32_t> ids = prompt_ids(*m.pretrained, prompt);
            const auto* tokenizer = m.pretrained->tokenizer ? &*m.pretrained->tokenizer : nullptr;
            minimind::TraceOptions options;
            options.top = top;
            options.attention = attention;
            nlohmann::json json;
            {
              py::gil_scoped_release release;
              json = minimind::trace(m.pretrained->model, ids, tokenizer, options).to_json();
            }
            return to_python(json);
          },
          "prompt"_a, py::kw_only(), "top"_a = 5, "attention"_a = false,
          "One prediction step by step, as the dict `minimind-next --trace --json` prints.");

  module.def(
      "load",
      [](const std::filesystem::path& path, const std::string& dtype, int threads, bool f32_panels, bool quantized_as_stored,
         const py::object& config_overrides, const py::object& adapters) {
        if (threads < 0) throw minimind::Error("threads must be >= 0 (0 = one per core), got " + std::to_string(threads));
        minimind::LoadOptions options;
        options.format = minimind::parse_format(dtype);
        options.threads = threads;
        options.f32_panels = f32_panels;
        options.quantized_as_stored = quantized_as_stored;
        minimind::CheckpointOptions checkpoint_options;
        if (!config_overrides.is_none()) checkpoint_options.config_overrides = to_json<nlohmann::json>(config_overrides);
        const auto adapter_paths = lora_paths(adapters);
        PyModel m;
        py::gil_scoped_release release;
        for (const auto& [adapter, scale] : adapter_paths)
          options.adapters.push_back({std::make_shared<const minimind::LoraAdapter>(minimind::LoraAdapter::load(adapter)), scale});
        m.pretrained = std::make_unique<Model>(minimind::load_pretrained<float>(path, options, checkpoint_options));
        return m;
      },
      "path"_a, "dtype"_a = "f32", "threads"_a = 0, py::kw_only(), "f32_panels"_a = true, "quantized_as_stored"_a = true,
      "config_overrides"_a = py::none(), "adapters"_a = py::none(),
      "Load a checkpoint: a directory (config.json + model.safetensors + tokenizer.json), or a .safetensors, .pth or .gguf file;\n"
      "adapters: LoRA adapters merged at load, each a path (scale 1) or a (path, scale) pair, as --lora / --lora-scaled.");
  module.attr("__version__") = MINIMIND_VERSION;
}
