// minimind-server: an OpenAI-compatible HTTP API over one loaded model.
//
// The model is const and shared; each of --slots slots serves one request at a time, on a session
// (its own KV cache) that grows in blocks as the request's sequence does, up to --ctx. A request that finds every slot busy waits in a bounded FIFO queue; past --queue it gets
// 503 at once. One scheduler thread advances every running request in one forward pass per step
// (continuous batching); the HTTP connection's own thread turns its ids into text and sends them,
// so a reply notices a closed connection at its next token and frees the slot at the next step.
// SIGINT/SIGTERM: stop accepting, answer waiting requests with 503, cut running generations short
// at their next token, exit 0.
#include "cli.hpp"
#include "openai_protocol.hpp"
#include "server_auth.hpp"
#include "server_deadline.hpp"
#include "web_page.hpp"

#include <minimind/trace.hpp>

#include <httplib.h>

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

namespace {

using Json = openai::Json;
using Model = minimind::MiniMindForCausalLM<float>;
using Session = minimind::Session<float>;
using openai::ApiError;
using openai::dump;
using openai::error_json;
using openai::field;
using openai::Job;

void send_json(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status, error_json(e)); }

// ---- Stop strings ----

// Releases generated text as it comes, holding back a tail that could still grow into a stop
// string; when one appears, it and everything after it are dropped.
class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  std::string push(std::string_view piece) {
    pending_ += piece;
    size_t first = std::string::npos;
    for (const auto& s : stops_) first = std::min(first, pending_.find(s));
    if (first != std::string::npos) {
      stopped_ = true;
      std::string out = pending_.substr(0, first);
      pending_.clear();
      return out;
    }
    // The longest suffix that is a proper prefix of some stop string may still become one.
    size_t hold = 0;
    for (const auto& s : stops_) {
      for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
        if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
      }
    }
    std::string out = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return out;
  }
  // At the end of generation the held tail is text like any other.
  std::string finish() { return std::exchange(pending_, {}); }
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

// ---- Whether the client is still there ----

// The socket of the connection a request came on. httplib 0.11 gives a handler no way to ask
// whether its client has gone (later versions have Request::is_connection_closed), so the socket
// is found by its address pair among this process's descriptors. It stays open, and the same
// connection, until the handler returns.
class Connection {
 public:
  static Connection of(const httplib::Request& req) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
      const int fd = std::atoi(entry.path().filename().c_str());
      if (port_of(fd, getpeername) == req.remote_port && port_of(fd, getsockname) == req.local_port &&
          host_of(fd) == req.remote_addr) {
        return Connection(fd);
      }
    }
    return Connection(-1);  // not found: treated as connected
  }

  // True once the peer has closed or reset the connection. Unread bytes (a pipelined request)
  // mean it is still there.
  bool closed() const {
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
    char byte;
    return ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  int fd() const { return fd_; }

 private:
  explicit Connection(int fd) : fd_(fd) {}
  using NameFn = int (*)(int, sockaddr*, socklen_t*);
  static int port_of(int fd, NameFn name) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (name(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
    if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
    return -1;
  }
  // As httplib renders Request::remote_addr.
  static std::string host_of(int fd) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    char host[NI_MAXHOST] = "";
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
        getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) {
      return {};
    }
    return host;
  }

  int fd_;
};

// Whether the client of a request has hung up. Its connection is found on first use: a request
// answered at once never needs it.
class ClientGone {
 public:
  explicit ClientGone(const httplib::Request& req) : req_(req) {}
  bool operator()() {
    if (!connection_) connection_ = Connection::of(req_);
    return connection_->closed();
  }

 private:
  const httplib::Request& req_;
  std::optional<Connection> connection_;
};

// ---- Slots: sessions over the shared model, and the bounded queue in front of them ----

class Slots {
 public:
  Slots(const Model& model, int count, minimind::Index first_context, size_t max_queue)
      : model_(model), first_context_(first_context), max_queue_(max_queue) {
    busy_.assign(static_cast<size_t>(count), false);
  }

  // A slot held by one request; released when the request is done with it (or destroyed). Its
  // session is made on first use with one KV block, and grown by the scheduler as the sequence
  // needs (an inspection holds a slot but no session); released with the slot.
  class Lease {
   public:
    Lease(Slots& owner, size_t index) : owner_(&owner), index_(index) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { release(); }
    Session& session() {
      if (!session_) session_.emplace(owner_->model_.new_session(owner_->first_context_));
      return *session_;
    }
    void release() {
      session_.reset();
      if (owner_) std::exchange(owner_, nullptr)->release(index_);
    }

   private:
    Slots* owner_;
    size_t index_;
    std::optional<Session> session_;
  };

  // Takes a free slot, or waits in FIFO order behind earlier requests; 503 when the queue is full
  // or the server is stopping; null when `gone` says the client left while waiting.
  std::shared_ptr<Lease> acquire(const std::function<bool()>& gone) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (stopping_) throw shutting_down();
    if (waiting_.empty())
      if (auto i = free_slot()) return take(*i);
    if (waiting_.size() >= max_queue_) {
      throw ApiError(503,
                     "the server is busy: all " + std::to_string(busy_.size()) + " slots are in use and " +
                         std::to_string(waiting_.size()) + " requests are waiting (--queue " + std::to_string(max_queue_) +
                         "); retry later",
                     "server_error", std::nullopt, "server_overloaded");
    }
    const uint64_t ticket = next_ticket_++;
    waiting_.push_back(ticket);
    bool left = false;
    // Wakes on every release, and now and then to look at the client.
    while (!changed_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stopping_ || (waiting_.front() == ticket && free_slot()); })) {
      if ((left = gone())) break;
    }
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), ticket));
    changed_.notify_all();  // the next in line may find a slot, or be first now
    if (stopping_) throw shutting_down();
    return left ? nullptr : take(*free_slot());
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
  }
  bool stopping() const { return stopping_; }

  struct Status {
    size_t total, idle, queued;
  };
  Status status() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {busy_.size(), static_cast<size_t>(std::count(busy_.begin(), busy_.end(), false)), waiting_.size()};
  }

  static ApiError shutting_down() { return ApiError(503, "the server is shutting down", "server_error", std::nullopt, "shutting_down"); }

 private:
  std::optional<size_t> free_slot() const {
    auto it = std::find(busy_.begin(), busy_.end(), false);
    return it == busy_.end() ? std::nullopt : std::optional<size_t>(static_cast<size_t>(it - busy_.begin()));
  }
  std::shared_ptr<Lease> take(size_t i) {
    busy_[i] = true;
    return std::make_shared<Lease>(*this, i);
  }
  void release(size_t i) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_[i] = false;
    }
    changed_.notify_all();
  }

  const Model& model_;
  const minimind::Index first_context_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<bool> busy_;
  std::deque<uint64_t> waiting_;  // tickets in arrival order
  uint64_t next_ticket_ = 0;
  size_t max_queue_;
  std::atomic<bool> stopping_{false};
};

// ---- The scheduler: every running request advanced in one forward pass per step ----

// One thread runs steps of a Batch over the running requests (continuous batching): a request
// joins at the next step and leaves after the step that ends it. Each step feeds every decoding
// request its last id and prefills prompts in chunks, at most kPrefillRows prompt positions per
// step, so a long prompt does not stall the others. Sampling and the stop rules stay per request
// (its SequenceSampler); the request's own thread turns its ids into text and sends them.
class Scheduler {
 public:
  static constexpr size_t kPrefillRows = 256;
  // A session's KV cache grows in blocks of this many positions as its sequence advances, up to
  // --ctx, so a slot holds what its request has used, not the worst case.
  static constexpr minimind::Index kKvBlock = 256;

  // A reply that is not streamed wakes its thread every this many ids, not at each: on two cores
  // request threads waking at every step made each step markedly slower (commit c28d2ce).
  // Its stop strings and a closed connection are still noticed, at most
  // this many steps late.
  static constexpr size_t kUnstreamedWakeIds = 16;

  // A request while it runs. The scheduler writes `ids`, `stop`, `error` and `finished`; the
  // request's thread reads them and may set `cancel`; all under the scheduler's mutex. The
  // scheduler wakes the thread through `produced` once `wake_ids()` ids wait, or at the end.
  struct Sequence {
    Sequence(const Job& job_, Session& session_, int64_t vocab, minimind::Index context)
        : job(&job_),
          session(&session_),
          sampler(job_.config, vocab, job_.prompt, context - static_cast<minimind::Index>(job_.prompt.size())) {}
    const Job* job;
    Session* session;
    minimind::SequenceSampler sampler;
    size_t prefilled = 0;  // prompt ids fed so far
    int32_t last = 0;      // the id to feed next, once prefilled
    std::vector<int32_t> ids;  // sampled, not yet taken by the request's thread
    std::optional<minimind::StopReason> stop;
    std::string error;
    bool cancel = false, finished = false;
    std::condition_variable produced;

    size_t wake_ids() const { return job->stream ? 1 : kUnstreamedWakeIds; }
  };

  // `context`: the positions a sequence may reach (--ctx).
  Scheduler(const Model& model, minimind::Index context) : model_(model), context_(context), batch_(model), thread_([this] { loop(); }) {}
  ~Scheduler() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      exiting_ = true;
    }
    work_.notify_all();
    thread_.join();
  }

  // Starts `job` on `session` (a fresh one); it joins the batch at the next step.
  std::shared_ptr<Sequence> start(const Job& job, Session& session) {
    auto seq = std::make_shared<Sequence>(job, session, model_.config().vocab_size, context_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      joining_.push_back(seq);
    }
    work_.notify_all();
    return seq;
  }

  // Moves the ids sampled since the last call into `out`, waiting for the sequence's wake_ids() of
  // them or its end; false once the sequence has finished and every id was taken.
  bool take(Sequence& seq, std::vector<int32_t>& out) {
    std::unique_lock<std::mutex> lock(mutex_);
    seq.produced.wait(lock, [&] { return seq.ids.size() >= seq.wake_ids() || seq.finished; });
    out.swap(seq.ids);
    seq.ids.clear();
    return !out.empty();
  }

  // Ends the sequence at the next step and waits until the scheduler has let go of its session.
  void cancel(Sequence& seq) {
    std::unique_lock<std::mutex> lock(mutex_);
    seq.cancel = true;
    work_.notify_all();
    seq.produced.wait(lock, [&] { return seq.finished; });
  }

 private:
  void loop() {
    std::vector<std::shared_ptr<Sequence>> running;
    // Per step: which running sequences were fed, and whether that ends their prompt.
    std::vector<Sequence*> fed;
    std::vector<std::span<const int32_t>> feeds;
    std::vector<bool> samples;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_.wait(lock, [&] { return exiting_ || !joining_.empty() || !running.empty(); });
        if (exiting_) {
          for (auto& seq : running) {
            seq->error = "the server is shutting down", seq->finished = true;
            seq->produced.notify_all();
          }
          return;
        }
        for (auto& seq : joining_) running.push_back(std::move(seq));
        joining_.clear();
        for (auto& seq : running) {
          if (seq->cancel) seq->finished = true, seq->produced.notify_all();
        }
        std::erase_if(running, [](const auto& seq) { return seq->finished; });
      }
      if (running.empty()) continue;
      fed.clear();
      feeds.clear();
      samples.clear();
      size_t prefill_budget = kPrefillRows;
      for (auto& seq : running) {
        const auto& prompt = seq->job->prompt;
        if (seq->prefilled < prompt.size()) {
          const size_t chunk = std::min(prompt.size() - seq->prefilled, prefill_budget);
          if (chunk == 0) continue;
          feeds.push_back(std::span<const int32_t>(prompt).subspan(seq->prefilled, chunk));
          seq->prefilled += chunk;
          prefill_budget -= chunk;
          samples.push_back(seq->prefilled == prompt.size());
        } else {
          feeds.push_back(std::span<const int32_t>(&seq->last, 1));
          samples.push_back(true);
        }
        fed.push_back(seq.get());
      }
      std::string error;
      try {
        for (size_t i = 0; i < fed.size(); ++i) {
          Session& session = *fed[i]->session;
          const auto needed = session.position() + static_cast<minimind::Index>(feeds[i].size());
          if (needed > session.context()) session.reserve(std::min(context_, (needed + kKvBlock - 1) / kKvBlock * kKvBlock));
          batch_.add(session, feeds[i]);
        }
        const auto logits = batch_.step();
        for (size_t i = 0; i < fed.size(); ++i) {
          if (!samples[i]) continue;
          Sequence& seq = *fed[i];
          seq.last = seq.sampler.next(logits.row(static_cast<minimind::Index>(i)).data());
          seq.stop = seq.sampler.stop(context_ - seq.session->position());
        }
      } catch (const std::exception& e) {
        batch_.clear();
        error = e.what();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 0; i < fed.size(); ++i) {
        Sequence& seq = *fed[i];
        if (!error.empty()) {
          seq.error = error, seq.finished = true;
        } else if (samples[i]) {
          seq.ids.push_back(seq.last);
          seq.finished = seq.stop.has_value();
        }
        if (seq.finished || seq.ids.size() >= seq.wake_ids()) seq.produced.notify_all();
      }
      std::erase_if(running, [](const auto& seq) { return seq->finished; });
    }
  }

  const Model& model_;
  const minimind::Index context_;
  minimind::Batch<float> batch_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::vector<std::shared_ptr<Sequence>> joining_;
  bool exiting_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

// ---- The server ----

enum class Kind { Chat, Completion };

struct Outcome {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::string finish_reason;  // "stop" or "length"; empty when cut short
  bool eos = false;           // the reply ended with an eos id (a constrained one: its document is whole)
  bool disconnected = false, cancelled = false;
};

// What a reply's receiver says after each piece of text: go on, the reply is complete (a single
// tool call when parallel_tool_calls is false), or the client has gone.
enum class Delivery { more, enough, gone };

class Server {
 public:
  Server(const minimind::Pretrained<float>& checkpoint, std::string model_id, int slots, minimind::Index context, size_t max_queue)
      : checkpoint_(checkpoint),
        tokenizer_(checkpoint.require_tokenizer()),
        template_(load_template(tokenizer_)),
        model_id_(std::move(model_id)),
        context_(context),
        slots_(checkpoint.model, slots, std::min(context, Scheduler::kKvBlock), max_queue),
        scheduler_(checkpoint.model, context),
        created_(std::time(nullptr)) {}

  void install(httplib::Server& http) {
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const auto s = slots_.status();
      send_json(res, slots_.stopping() ? 503 : 200,
                {{"status", slots_.stopping() ? "stopping" : "ok"}, {"slots_total", s.total}, {"slots_idle", s.idle}, {"queued", s.queued}});
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"object", "list"}, {"data", Json::array({model_json()})}});
    });
    http.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] == model_id_) return send_json(res, 200, model_json());
      send_error(res, ApiError(404, "the model \"" + req.matches[1].str() + "\" does not exist; this server has \"" + model_id_ + "\"",
                               "invalid_request_error", "model", "model_not_found"));
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(Kind::Chat, req, res); });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(Kind::Completion, req, res); });
    http.Post("/v1/inspect", [this](const httplib::Request& req, httplib::Response& res) { inspect(req, res); });
    http.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(web::index_html, "text/html; charset=utf-8"); });
  }

  Slots& slots() { return slots_; }

 private:
  // A checkpoint whose chat template the library cannot render still serves /v1/completions.
  std::optional<minimind::ChatTemplate> load_template(const minimind::Tokenizer& tokenizer) {
    try {
      return minimind::ChatTemplate(tokenizer.chat_template());
    } catch (const minimind::Error& e) {
      template_error_ = std::string("/v1/chat/completions is not available: ") + e.what();
      std::fprintf(stderr, "minimind-server: warning: %s\n", template_error_.c_str());
      return std::nullopt;
    }
  }

  Json model_json() const { return {{"id", model_id_}, {"object", "model"}, {"created", created_}, {"owned_by", "minimind"}}; }

  void handle(Kind kind, const httplib::Request& req, httplib::Response& res) {
    try {
      const Json body = openai::parse_body(req.body);
      openai::check_fields(body, kind == Kind::Chat ? openai::Endpoint::chat : openai::Endpoint::completion);
      if (auto model = field<std::string>(body, "model"); model && *model != model_id_) {
        throw ApiError(404, "the model \"" + *model + "\" does not exist; this server has \"" + model_id_ + "\"", "invalid_request_error",
                       "model", "model_not_found");
      }
      std::vector<int32_t> prompt;
      std::shared_ptr<const openai::ChatRequest> chat;
      if (kind == Kind::Chat) {
        if (!template_) throw ApiError(500, template_error_, "server_error");
        chat = std::make_shared<const openai::ChatRequest>(openai::parse_chat_request(body, *template_, tokenizer_));
        std::string text;
        try {
          text = template_->render(chat->messages, chat->options);
        } catch (const minimind::Error& e) {
          throw openai::bad_param("messages", e.what());  // an order of turns the template refuses
        }
        prompt = tokenizer_.encode(text + chat->prefill);
      } else {
        prompt = openai::parse_prompt(body, tokenizer_);
      }
      auto job = std::make_shared<Job>(openai::parse_job(body, std::move(prompt), checkpoint_.generation, context_, checkpoint_.model.config().vocab_size));
      if (chat) {
        openai::check_constrained_job(*chat, *job, body);
        job->config.json_grammar = chat->grammar;
      }
      ClientGone client_gone(req);
      auto lease = acquire(kind == Kind::Chat ? "chat" : "completion", client_gone, res);
      if (!lease) return;
      const std::string id = new_id(kind);
      const auto created = static_cast<int64_t>(std::time(nullptr));
      if (job->stream) return stream(kind, job, chat, lease, id, created, res);

      std::string text;
      std::optional<openai::ChatReplyWriter> writer;
      if (chat) writer.emplace(chat->reply, call_id_prefix(id));
      if (writer) writer->push(chat->prefill);
      Outcome outcome = run(*job, lease->session(), [&](std::string_view piece) {
        if (client_gone()) return Delivery::gone;
        if (writer) {
          writer->push(piece);
          return after_calls(*chat, *writer);
        }
        text += piece;
        return Delivery::more;
      });
      lease->release();
      log(kind, outcome);
      if (outcome.cancelled) throw Slots::shutting_down();
      if (outcome.disconnected) return send_error(res, ApiError(503, "the client closed the connection", "server_error"));
      Json choice = {{"index", 0}};
      if (writer) {
        if (outcome.eos) writer->push(chat->suffix);
        writer->finish();
        choice["message"] = writer->message();
        outcome.finish_reason = writer->finish_reason(outcome.finish_reason);
      } else {
        choice["text"] = text;
      }
      choice["logprobs"] = nullptr;
      choice["finish_reason"] = outcome.finish_reason;
      send_json(res, 200,
                {{"id", id},
                 {"object", kind == Kind::Chat ? "chat.completion" : "text_completion"},
                 {"created", created},
                 {"model", model_id_},
                 {"choices", Json::array({choice})},
                 {"usage", usage(outcome)}});
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, e.what(), "server_error"));
    }
  }

  // With parallel_tool_calls false, the reply ends once its first call is complete.
  static Delivery after_calls(const openai::ChatRequest& chat, const openai::ChatReplyWriter& writer) {
    return !chat.parallel_tool_calls && writer.tool_calls() > 0 ? Delivery::enough : Delivery::more;
  }
  // Tool call ids: the reply's id and the call's index, unique as the reply ids are.
  static std::string call_id_prefix(const std::string& reply_id) { return "call_" + reply_id.substr(reply_id.find('-') + 1) + "_"; }

  // A slot for the request (may wait, or throw 503); null, with a 503 sent, when the client hung up
  // while queued.
  std::shared_ptr<Slots::Lease> acquire(const char* what, ClientGone& client_gone, httplib::Response& res) {
    auto lease = slots_.acquire(std::ref(client_gone));
    if (!lease) {
      std::fprintf(stderr, "minimind-server: %s: client disconnected while queued\n", what);
      send_error(res, ApiError(503, "the client closed the connection", "server_error"));  // read by no one
    }
    return lease;
  }

  // The page's Inspect tab: one forward pass over the raw prompt (no chat template), traced; the
  // same JSON as `minimind-next --trace --json`. It holds a slot while it runs (so /health counts
  // it, and the queue and its 503 apply), but runs on this thread, on a session of its own.
  void inspect(const httplib::Request& req, httplib::Response& res) {
    try {
      const Json body = openai::parse_body(req.body);
      openai::check_keys(body, "", {"prompt", "top", "attention"});
      const auto prompt = field<std::string>(body, "prompt");
      if (!prompt) throw openai::bad_param("prompt", "prompt is required (a string, taken as raw text)");
      const auto ids = tokenizer_.encode(*prompt);
      if (ids.empty()) throw openai::bad_param("prompt", "the prompt encodes to no tokens");
      const auto& config = checkpoint_.model.config();
      minimind::TraceOptions options;
      options.top = field<int64_t>(body, "top").value_or(10);
      if (options.top < 1 || options.top > config.vocab_size) {
        throw openai::bad_param("top", "top must be in [1, " + std::to_string(config.vocab_size) + "]");
      }
      options.attention = field<bool>(body, "attention").value_or(false);
      // Maps grow as layers x heads x positions^2 numbers of JSON.
      const size_t limit = options.attention ? kMaxAttentionTokens : static_cast<size_t>(context_);
      if (ids.size() > limit) {
        throw openai::bad_param("prompt", "the prompt has " + std::to_string(ids.size()) + " tokens, more than the " + std::to_string(limit) +
                                      (options.attention ? " an inspection with attention maps takes" : " of the context"));
      }
      ClientGone client_gone(req);
      const auto lease = acquire("inspect", client_gone, res);  // held until the reply is built
      if (!lease) return;
      send_json(res, 200, minimind::trace(checkpoint_.model, ids, &tokenizer_, options).to_json());
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, e.what(), "server_error"));
    }
  }
  static constexpr size_t kMaxAttentionTokens = 256;

  // Server-sent events: one `data: {chunk}` per piece of text (in a chat, per delta: reasoning,
  // content, tool call), then a chunk with finish_reason and usage, then `data: [DONE]`. Headers
  // are already sent when generation starts, so a failure after that is reported as an error event.
  void stream(Kind kind, std::shared_ptr<Job> job, std::shared_ptr<const openai::ChatRequest> chat, std::shared_ptr<Slots::Lease> lease,
              std::string id, int64_t created, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, kind, job, chat, lease, id, created](size_t, httplib::DataSink& sink) {
          auto event = [&](const Json& data) {
            const std::string line = "data: " + dump(data) + "\n\n";
            return sink.write(line.data(), line.size());
          };
          auto chunk = [&](const Json& choice_fields, const Json& finish_reason) {
            Json choice = {{"index", 0}};
            choice.update(choice_fields);
            choice["logprobs"] = nullptr;
            choice["finish_reason"] = finish_reason;
            return Json{{"id", id},
                        {"object", kind == Kind::Chat ? "chat.completion.chunk" : "text_completion"},
                        {"created", created},
                        {"model", model_id_},
                        {"choices", Json::array({choice})}};
          };
          std::optional<openai::ChatReplyWriter> writer;
          if (chat) writer.emplace(chat->reply, call_id_prefix(id));
          auto send_deltas = [&](const std::vector<Json>& deltas) {
            for (const Json& delta : deltas)
              if (!event(chunk({{"delta", delta}}, nullptr))) return false;
            return true;
          };
          Outcome outcome;
          try {
            if (kind == Kind::Chat && !(event(chunk({{"delta", {{"role", "assistant"}, {"content", ""}}}}, nullptr)) &&
                                        send_deltas(writer->push(chat->prefill)))) {
              outcome.disconnected = true;
            } else {
              outcome = run(*job, lease->session(), [&](std::string_view piece) {
                if (!writer) return event(chunk({{"text", piece}}, nullptr)) ? Delivery::more : Delivery::gone;
                return send_deltas(writer->push(piece)) ? after_calls(*chat, *writer) : Delivery::gone;
              });
            }
            lease->release();
            if (writer && !outcome.cancelled && !outcome.disconnected) {
              outcome.disconnected = !((!outcome.eos || send_deltas(writer->push(chat->suffix))) && send_deltas(writer->finish()));
              outcome.finish_reason = writer->finish_reason(outcome.finish_reason);
            }
            if (outcome.cancelled) {
              event(error_json(Slots::shutting_down()));
            } else if (!outcome.disconnected) {
              Json last = chunk(kind == Kind::Chat ? Json{{"delta", Json::object()}} : Json{{"text", ""}}, outcome.finish_reason);
              last["usage"] = usage(outcome);
              event(last);
              if (job->include_usage) {
                Json usage_only = chunk(Json::object(), nullptr);
                usage_only["choices"] = Json::array();
                usage_only["usage"] = usage(outcome);
                event(usage_only);
              }
            }
          } catch (const std::exception& e) {
            lease->release();
            event(error_json(ApiError(500, e.what(), "server_error")));
          }
          log(kind, outcome);
          if (!outcome.disconnected) {
            static const std::string done = "data: [DONE]\n\n";
            sink.write(done.data(), done.size());
          }
          sink.done();
          return true;
        });
  }

  // Generates for `job` on `session` in the scheduler's batch, passing text to `emit`. Returns
  // once the scheduler has let go of the session.
  Outcome run(const Job& job, Session& session, const std::function<Delivery(std::string_view)>& emit) {
    Outcome outcome;
    outcome.prompt_tokens = static_cast<int64_t>(job.prompt.size());
    StopFilter filter(job.stop);
    minimind::TextStream text(tokenizer_, job.config);
    bool enough = false;
    auto deliver = [&](std::string_view piece) {
      if (piece.empty()) return true;
      switch (emit(piece)) {
        case Delivery::more: return true;
        case Delivery::enough: enough = true; return false;
        case Delivery::gone: outcome.disconnected = true; return false;
      }
      return false;
    };
    const auto seq = scheduler_.start(job, session);
    bool keep_going = true;
    std::vector<int32_t> ids;
    while (keep_going && scheduler_.take(*seq, ids)) {
      for (int32_t id : ids) {
        ++outcome.completion_tokens;
        if (slots_.stopping()) {
          outcome.cancelled = true;
        } else if (deliver(filter.push(text.push(id))) && !filter.stopped()) {
          continue;
        }
        keep_going = false;
        break;
      }
    }
    if (!keep_going) {
      scheduler_.cancel(*seq);
    } else {
      if (!seq->error.empty()) throw std::runtime_error(seq->error);
      // The eos id that ended the reply is not part of it.
      if (seq->stop == minimind::StopReason::EndOfSequence) --outcome.completion_tokens;
      deliver(filter.push(text.flush()));
    }
    if (!outcome.disconnected && !outcome.cancelled && !filter.stopped() && !enough) deliver(filter.finish());
    outcome.eos = keep_going && seq->stop == minimind::StopReason::EndOfSequence && !filter.stopped();
    if (filter.stopped() || enough || outcome.eos) outcome.finish_reason = "stop";
    else if (keep_going) outcome.finish_reason = "length";
    return outcome;
  }

  static Json usage(const Outcome& o) {
    return {{"prompt_tokens", o.prompt_tokens}, {"completion_tokens", o.completion_tokens}, {"total_tokens", o.prompt_tokens + o.completion_tokens}};
  }

  std::string new_id(Kind kind) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(next_id_.fetch_add(1) ^ (created_ << 20)));
    return (kind == Kind::Chat ? "chatcmpl-" : "cmpl-") + std::string(hex);
  }

  void log(Kind kind, const Outcome& o) const {
    const char* end = o.disconnected ? "client disconnected" : o.cancelled ? "cancelled (shutting down)" : o.finish_reason.c_str();
    std::fprintf(stderr, "minimind-server: %s: prompt %lld tokens, completion %lld tokens, finish: %s\n",
                 kind == Kind::Chat ? "chat" : "completion", static_cast<long long>(o.prompt_tokens),
                 static_cast<long long>(o.completion_tokens), end);
  }

  const minimind::Pretrained<float>& checkpoint_;
  const minimind::Tokenizer& tokenizer_;
  std::string template_error_;
  const std::optional<minimind::ChatTemplate> template_;
  const std::string model_id_;
  const minimind::Index context_;
  Slots slots_;
  Scheduler scheduler_;
  const int64_t created_;
  std::atomic<uint64_t> next_id_{1};
};

// httplib::Server with its listening socket reachable: the library listens with a backlog of 5,
// and a burst of new connections past that has its SYNs dropped and retried seconds later.
class HttpServer : public httplib::Server {
 public:
  void widen_backlog() {
    if (::listen(svr_sock_, SOMAXCONN) != 0) throw minimind::Error(std::string("listen: ") + std::strerror(errno));
  }
};

// httplib's own errors (unknown path, oversized body, unparsable HTTP) get an OpenAI-style body;
// responses the handlers already filled are left alone.
httplib::Server::HandlerResponse fill_error(const httplib::Request& req, httplib::Response& res, size_t max_body) {
  if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
  std::string message, code;
  switch (res.status) {
    case 404: message = "Invalid URL (" + req.method + " " + req.path + ")", code = "not_found"; break;
    case 413: message = "the request body is larger than the limit of " + std::to_string(max_body) + " bytes (--max-body)", code = "request_too_large"; break;
    case 400: message = "malformed HTTP request"; break;
    default: message = "HTTP error " + std::to_string(res.status);
  }
  send_error(res, ApiError(res.status, message, "invalid_request_error", std::nullopt, code.empty() ? std::nullopt : std::optional(code)));
  return httplib::Server::HandlerResponse::Handled;
}

// The longest one socket read or write waits for the client (httplib's default is 5 s).
constexpr int64_t kIoTimeoutSeconds = 10;

int run(int argc, char** argv) {
  // Block the stop signals in every thread (all are started after this); one thread takes them
  // with sigwait, where stopping the server is safe.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a closed connection is a failed write, not a dead process

  cli::Args args("minimind-server", "an OpenAI-compatible HTTP server (chat/completions, completions, models, health)");
  cli::model_flag(args)
      .value("--host", "address to listen on (default 127.0.0.1)")
      .value("--port", "port to listen on; 0 picks a free one (default 8080)")
      .value("--slots", "requests generated at once, each with its own KV cache (default 4)")
      .value("--queue", "requests that may wait for a slot; more get 503 (default 16)")
      .value("--ctx", "context length of each slot in tokens (default: max_position_embeddings, at most " +
                          std::to_string(Model::kDefaultContext) + ")")
      .value("--max-body", "largest request body in bytes; larger gets 413 (default 1048576)")
      .repeatable("--api-key", "a key requests must send as Authorization: Bearer KEY (repeatable; default: none needed)")
      .repeatable("--api-key-file", "a file of keys, one per line; # starts a comment (repeatable)")
      .value("--timeout", "seconds a whole request may take, from its headers to its reply's end (default 600)");
  if (!args.parse(argc, argv)) return 0;
  const std::string host = args.get_or("--host", "127.0.0.1");
  const int64_t port = args.int_or("--port", 8080);
  if (port < 0 || port > 65535) throw cli::UsageError("--port must be in [0, 65535]");
  const int64_t slots = args.int_or("--slots", 4);
  if (slots < 1 || slots > 1024) throw cli::UsageError("--slots must be in [1, 1024]");
  const int64_t queue = args.int_or("--queue", 16);
  if (queue < 0 || queue > 4096) throw cli::UsageError("--queue must be in [0, 4096]");
  const int64_t max_body = args.int_or("--max-body", 1 << 20);
  if (max_body < 1) throw cli::UsageError("--max-body must be >= 1");
  const server_auth::ApiKeys keys(args.occurrences({"--api-key", "--api-key-file"}));
  const int64_t timeout = args.int_or("--timeout", 600);
  if (timeout < 1 || timeout > 604800) throw cli::UsageError("--timeout must be in [1, 604800] seconds");

  const auto dir = cli::model_dir(args);
  auto checkpoint = cli::load_pretrained(args);
  const int64_t max_context = checkpoint.model.config().max_position_embeddings;
  const int64_t context = args.int_or("--ctx", std::min<int64_t>(max_context, Model::kDefaultContext));
  if (context < 2 || context > max_context) throw cli::UsageError("--ctx must be in [2, " + std::to_string(max_context) + "]");
  // The model's name in the API: its directory's, or a weights file's without the extension.
  const auto resolved = std::filesystem::weakly_canonical(dir);
  std::string model_id = (std::filesystem::is_regular_file(resolved) ? resolved.stem() : resolved.filename()).string();
  if (model_id.empty()) model_id = "minimind";

  Server server(checkpoint, model_id, static_cast<int>(slots), context, static_cast<size_t>(queue));
  server_deadline::RequestDeadlines deadlines{std::chrono::seconds(timeout)};
  HttpServer http;
  // httplib serves a connection on one pool thread from accept to close; a connection beyond the
  // pool waits unseen (no 503) until one closes. Every admitted request holds a thread while it
  // waits or runs; the spare ones answer /health, /v1/models and 503s at once, and carry idle
  // keep-alive connections. An idle thread costs little.
  const size_t http_threads = static_cast<size_t>(slots + queue) + 64;
  http.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
  http.set_payload_max_length(static_cast<size_t>(max_body));
  // httplib writes headers and body (and each SSE event) in separate sends; with Nagle's
  // algorithm against the client's delayed ACK, each would wait some 40 ms.
  http.set_tcp_nodelay(true);
  // httplib's default sets SO_REUSEPORT, which lets a second server bind the same port and take
  // half its connections; SO_REUSEADDR alone still allows a quick restart.
  http.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http.set_error_handler(httplib::Server::HandlerWithResponse([max_body](const httplib::Request& req, httplib::Response& res) {
    return fill_error(req, res, static_cast<size_t>(max_body));
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string message = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, message, "server_error"));
  });
  // Browser chat front ends call from another origin.
  http.set_default_headers({{"Access-Control-Allow-Origin", "*"}});
  http.Options(".*", [](const httplib::Request&, httplib::Response& res) {
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.set_header("Access-Control-Allow-Headers", "Content-Type, Authorization");
  });
  server.install(http);
  // Guards (server_auth.hpp, server_deadline.hpp): one socket read or write waits at most
  // kIoTimeoutSeconds for the client; a request's --timeout starts once its headers are read; a
  // request without a valid key is refused before its body is read.
  http.set_read_timeout(std::min<int64_t>(timeout, kIoTimeoutSeconds), 0);
  http.set_write_timeout(std::min<int64_t>(timeout, kIoTimeoutSeconds), 0);
  http.set_pre_routing_handler([&keys, &deadlines](const httplib::Request& req, httplib::Response& res) {
    deadlines.begin(Connection::of(req).fd());
    return keys.check(req, res);
  });
  http.set_logger([&deadlines](const httplib::Request&, const httplib::Response&) { deadlines.end(); });

  int bound = static_cast<int>(port);
  if (port == 0) {
    bound = http.bind_to_any_port(host);
    if (bound < 0) throw minimind::Error("cannot listen on " + host + " (any port)");
  } else if (!http.bind_to_port(host, bound)) {
    throw minimind::Error("cannot listen on " + host + ":" + std::to_string(bound) + " (in use, or not an address of this machine)");
  }
  http.widen_backlog();
  std::fprintf(stderr, "minimind-server: model %s (%s), %lld slots x %lld tokens of context, queue %lld, %d threads per forward pass\n",
               model_id.c_str(), dir.string().c_str(), static_cast<long long>(slots), static_cast<long long>(context),
               static_cast<long long>(queue), checkpoint.model.threads());
  const bool ipv6 = host.find(':') != std::string::npos;
  std::printf("minimind-server: listening on http://%s%s%s:%d\n", ipv6 ? "[" : "", host.c_str(), ipv6 ? "]" : "", bound);
  std::fflush(stdout);

  std::atomic<bool> signalled{false}, exiting{false};
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (exiting) return;
    signalled = true;
    std::fprintf(stderr, "minimind-server: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    server.slots().stop();  // waiting requests get 503, running ones stop at their next token
    http.stop();
  });
  http.listen_after_bind();
  if (!signalled) {
    // listen ended without a signal (the socket failed): wake the signal thread so it can end.
    exiting = true;
    pthread_kill(signal_thread.native_handle(), SIGTERM);
  }
  signal_thread.join();
  if (!signalled) throw minimind::Error("the server stopped unexpectedly");
  std::fprintf(stderr, "minimind-server: stopped\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run("minimind-server", [&] { return run(argc, argv); });
}
