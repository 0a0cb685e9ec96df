#pragma once
// minimind-server's HTTP side (cpp-httplib): the routes and their handlers, which read a request
// with openai_protocol.hpp, run it on the minimind::Engine and send the reply, whole or as
// server-sent events; how a handler notices that its client has gone; httplib's own errors in
// the OpenAI shape. main() in server.cpp parses the flags and runs the listener.
#include "openai_protocol.hpp"
#include "server_metrics.hpp"
#include "web_page.hpp"

#include <minimind/engine.hpp>
#include <minimind/pretrained.hpp>
#include <minimind/trace.hpp>

#include <httplib.h>

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace routes {

using Json = openai::Json;
using openai::ApiError;
using openai::dump;
using openai::error_json;
using openai::field;
using openai::Endpoint;
using openai::Job;
using openai::Outcome;
using RequestHandle = minimind::RequestHandle<float>;
using minimind::Delivery;

inline void send_json(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

inline void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status, error_json(e)); }

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
      if (names(fd, req)) return Connection(fd);
    }
    return Connection(-1);  // not found: treated as connected
  }

  // The same, without scanning the descriptors again while the calling thread serves the same
  // connection (httplib serves a connection on one thread): the thread's last socket is taken
  // when it still has this request's address pair, so a closed connection whose number was
  // reused is never mistaken for it.
  static Connection of_this_thread(const httplib::Request& req) {
    thread_local int last = -1;
    if (last < 0 || !names(last, req)) last = of(req).fd_;
    return Connection(last);
  }

  int fd() const { return fd_; }

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

 private:
  explicit Connection(int fd) : fd_(fd) {}
  // Whether socket `fd` is the connection `req` came on.
  static bool names(int fd, const httplib::Request& req) {
    return port_of(fd, getpeername) == req.remote_port && port_of(fd, getsockname) == req.local_port &&
           host_of(fd) == req.remote_addr;
  }
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

// Whether the client of a request has hung up, asked of its connection.
class ClientGone {
 public:
  explicit ClientGone(const httplib::Request& req) : req_(req) {}
  bool operator()() {
    if (!connection_) connection_ = Connection::of_this_thread(req_);
    return connection_->closed();
  }

 private:
  const httplib::Request& req_;
  std::optional<Connection> connection_;
};

// ---- The server ----

class Server {
 public:
  // A reply that is not streamed wakes its thread every this many ids, not at each: on two cores
  // request threads waking at every step made each step markedly slower (commit c28d2ce). Its
  // stop strings and a closed connection are still noticed, at most this many steps late.
  static constexpr size_t kUnstreamedWakeIds = 16;

  // `adapters`: LoRA adapters held beside the model, unmerged, for requests to choose from; each
  // one's scale is its global scale at start.
  // `cache_mb`: the prompt cache's bound (EngineOptions::cache_mb).
  Server(const minimind::Pretrained<float>& checkpoint, std::string model_id, int slots, minimind::Index context, size_t max_queue,
         size_t cache_mb, std::vector<minimind::LoraUse> adapters = {})
      : checkpoint_(checkpoint),
        tokenizer_(checkpoint.require_tokenizer()),
        template_(load_template(tokenizer_)),
        model_id_(std::move(model_id)),
        context_(context),
        engine_(checkpoint.model, engine_options(slots, max_queue, context, cache_mb, metrics_)),
        lora_(std::move(adapters)),
        created_(std::time(nullptr)) {}

  void install(httplib::Server& http) {
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const auto s = engine_.status();
      send_json(res, engine_.stopping() ? 503 : 200,
                {{"status", engine_.stopping() ? "stopping" : "ok"}, {"slots_total", s.slots}, {"slots_idle", s.idle}, {"queued", s.queued}});
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.render(engine_.status()), server_metrics::kContentType);
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"object", "list"}, {"data", Json::array({model_json()})}});
    });
    http.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] == model_id_) return send_json(res, 200, model_json());
      send_error(res, ApiError(404, "the model \"" + req.matches[1].str() + "\" does not exist; this server has \"" + model_id_ + "\"",
                               "invalid_request_error", "model", "model_not_found"));
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(Endpoint::chat, req, res); });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(Endpoint::completion, req, res); });
    http.Post("/v1/inspect", [this](const httplib::Request& req, httplib::Response& res) { inspect(req, res); });
    http.Get("/lora-adapters", [this](const httplib::Request&, httplib::Response& res) { send_json(res, 200, lora_.list()); });
    http.Post("/lora-adapters", [this](const httplib::Request& req, httplib::Response& res) { set_lora_scales(req, res); });
    http.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(web::index_html, "text/html; charset=utf-8"); });
  }

  // Positions the prompt cache keeps at most (--cache-mb in whole blocks).
  size_t cache_positions() const { return engine_.cache_positions(); }

  // Waiting requests get 503, running ones stop at their next token.
  void stop() { engine_.shutdown(); }

  // Every request once its reply is written (httplib's logger): counted for /metrics.
  void answered(const httplib::Request& req, const httplib::Response& res) { metrics_.request(req.method, req.path, res.status); }

 private:
  static minimind::EngineOptions engine_options(int slots, size_t max_queue, minimind::Index context, size_t cache_mb,
                                                server_metrics::Metrics& metrics) {
    minimind::EngineOptions options;
    options.cache_mb = cache_mb;
    options.slots = slots;
    options.max_queue = max_queue;
    options.context = context;
    options.on_step = [&metrics](const minimind::EngineStep& step) { metrics.step(step); };
    return options;
  }

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

  void handle(Endpoint kind, const httplib::Request& req, httplib::Response& res) {
    const auto arrived = server_metrics::Clock::now();
    try {
      const Json body = openai::parse_body(req.body);
      openai::check_fields(body, kind);
      if (auto model = field<std::string>(body, "model"); model && *model != model_id_) {
        throw ApiError(404, "the model \"" + *model + "\" does not exist; this server has \"" + model_id_ + "\"", "invalid_request_error",
                       "model", "model_not_found");
      }
      std::vector<int32_t> prompt;
      std::shared_ptr<const openai::ChatRequest> chat;
      if (kind == Endpoint::chat) {
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
      auto adapters = lora_.for_request(openai::parse_lora_field(body, lora_.size()));
      ClientGone client_gone(req);
      auto generation = start(kind == Endpoint::chat ? "chat" : "completion", client_gone, res, [&] {
        minimind::EngineRequest request(job->prompt, job->config, std::move(adapters), job->stream ? 1 : kUnstreamedWakeIds);
        request.cache_prompt = job->cache_prompt;
        return engine_.submit(std::move(request));
      });
      if (!generation) return;
      const std::string id = new_id(kind);
      const auto created = static_cast<int64_t>(std::time(nullptr));
      if (job->stream) return stream(kind, job, chat, std::make_shared<RequestHandle>(std::move(*generation)), id, created, arrived, res);

      std::string text;
      std::optional<openai::ChatReplyWriter> writer;
      if (chat) writer.emplace(chat->reply, openai::call_id_prefix(id));
      if (writer) writer->push(chat->prefill);
      Outcome outcome = run(*job, *generation, [&](std::string_view piece) {
        if (client_gone()) return Delivery::gone;
        if (writer) {
          writer->push(piece);
          return after_calls(*chat, *writer);
        }
        text += piece;
        return Delivery::more;
      });
      finished(kind, outcome, arrived);
      if (outcome.cancelled) throw openai::shutting_down_error();
      if (outcome.disconnected) return send_error(res, ApiError(503, "the client closed the connection", "server_error"));
      Json fields;
      if (writer) {
        if (outcome.eos) writer->push(chat->suffix);
        writer->finish();
        fields["message"] = writer->message();
        outcome.finish_reason = writer->finish_reason(outcome.finish_reason);
      } else {
        fields["text"] = text;
      }
      Json reply = openai::reply_json(kind, /*chunk=*/false, id, created, model_id_, fields, outcome.finish_reason);
      reply["usage"] = openai::usage_json(outcome);
      send_json(res, 200, reply);
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

  // Submits a request to the engine (`submit`) and waits while it is queued, looking at the client
  // now and then; throws 503 when the queue is full or the server is stopping; null, with a 503
  // sent, when the client hung up while queued.
  std::optional<RequestHandle> start(const char* what, ClientGone& client_gone, httplib::Response& res,
                                  const std::function<RequestHandle()>& submit) {
    std::optional<RequestHandle> generation;
    try {
      generation.emplace(submit());
    } catch (const minimind::QueueFull& e) {
      throw openai::busy_error(e);
    } catch (const minimind::ShuttingDown&) {
      throw openai::shutting_down_error();
    }
    while (!generation->wait_started(std::chrono::milliseconds(50))) {
      if (client_gone()) {
        generation->cancel();
        std::fprintf(stderr, "minimind-server: %s: client disconnected while queued\n", what);
        send_error(res, ApiError(503, "the client closed the connection", "server_error"));  // read by no one
        return std::nullopt;
      }
    }
    if (generation->outcome().shut_down) throw openai::shutting_down_error();
    return generation;
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
      const auto slot = start("inspect", client_gone, res, [&] { return engine_.reserve_slot(); });  // held until the reply is built
      if (!slot) return;
      send_json(res, 200, minimind::trace(checkpoint_.model, ids, &tokenizer_, options).to_json());
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, e.what(), "server_error"));
    }
  }
  static constexpr size_t kMaxAttentionTokens = 256;

  // POST /lora-adapters: [{"id", "scale"}] sets the global scales (adapters left out: 0), which
  // requests without a `lora` field use from then on; a running request keeps its own.
  void set_lora_scales(const httplib::Request& req, httplib::Response& res) {
    try {
      const auto scales = openai::parse_lora_scales(openai::parse_json(req.body), "", lora_.size());
      lora_.set_scales(scales);
      std::string list;
      for (const auto& s : scales) list += " " + std::to_string(s.id) + ":" + openai::dump(s.scale);
      std::fprintf(stderr, "minimind-server: lora adapters: global scales set (id:scale)%s%s\n", list.c_str(), scales.empty() ? " none" : "");
      send_json(res, 200, {{"success", true}});
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  }

  // Server-sent events: one `data: {chunk}` per piece of text (in a chat, per delta: reasoning,
  // content, tool call), then a chunk with finish_reason and usage, then `data: [DONE]`. Headers
  // are already sent when generation starts, so a failure after that is reported as an error event.
  void stream(Endpoint kind, std::shared_ptr<Job> job, std::shared_ptr<const openai::ChatRequest> chat, std::shared_ptr<RequestHandle> generation,
              std::string id, int64_t created, server_metrics::Clock::time_point arrived, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, kind, job, chat, generation, id, created, arrived](size_t, httplib::DataSink& sink) {
          auto event = [&](const Json& data) {
            const std::string line = openai::sse_event(data);
            return sink.write(line.data(), line.size());
          };
          auto chunk = [&](const Json& choice_fields, const Json& finish_reason) {
            return openai::reply_json(kind, /*chunk=*/true, id, created, model_id_, choice_fields, finish_reason);
          };
          std::optional<openai::ChatReplyWriter> writer;
          if (chat) writer.emplace(chat->reply, openai::call_id_prefix(id));
          auto send_deltas = [&](const std::vector<Json>& deltas) {
            for (const Json& delta : deltas)
              if (!event(chunk({{"delta", delta}}, nullptr))) return false;
            return true;
          };
          Outcome outcome;
          try {
            if (kind == Endpoint::chat && !(event(chunk({{"delta", {{"role", "assistant"}, {"content", ""}}}}, nullptr)) &&
                                        send_deltas(writer->push(chat->prefill)))) {
              outcome.disconnected = true;
            } else {
              outcome = run(*job, *generation, [&](std::string_view piece) {
                if (!writer) return event(chunk({{"text", piece}}, nullptr)) ? Delivery::more : Delivery::gone;
                return send_deltas(writer->push(piece)) ? after_calls(*chat, *writer) : Delivery::gone;
              });
            }
            if (writer && !outcome.cancelled && !outcome.disconnected) {
              outcome.disconnected = !((!outcome.eos || send_deltas(writer->push(chat->suffix))) && send_deltas(writer->finish()));
              outcome.finish_reason = writer->finish_reason(outcome.finish_reason);
            }
            if (outcome.cancelled) {
              event(error_json(openai::shutting_down_error()));
            } else if (!outcome.disconnected) {
              Json last = chunk(kind == Endpoint::chat ? Json{{"delta", Json::object()}} : Json{{"text", ""}}, outcome.finish_reason);
              last["usage"] = openai::usage_json(outcome);
              event(last);
              if (job->include_usage) {
                Json usage_only = chunk(Json::object(), nullptr);
                usage_only["choices"] = Json::array();
                usage_only["usage"] = openai::usage_json(outcome);
                event(usage_only);
              }
            }
          } catch (const std::exception& e) {
            generation->cancel();
            event(error_json(ApiError(500, e.what(), "server_error")));
          }
          finished(kind, outcome, arrived);
          if (!outcome.disconnected) {
            static const std::string done = "data: [DONE]\n\n";
            sink.write(done.data(), done.size());
          }
          sink.done();
          return true;
        });
  }

  // Reads `generation` (of `job`) as text, passing it to `emit`. Returns once the engine has let
  // go of the request's slot.
  Outcome run(const Job& job, RequestHandle& generation, const std::function<Delivery(std::string_view)>& emit) {
    return openai::outcome_of(minimind::read_text(generation, tokenizer_, job.config, job.stop, emit));
  }

  std::string new_id(Endpoint kind) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(next_id_.fetch_add(1) ^ (created_ << 20)));
    return (kind == Endpoint::chat ? "chatcmpl-" : "cmpl-") + std::string(hex);
  }

  // A generation has ended: logged, and counted for /metrics.
  void finished(Endpoint kind, const Outcome& o, server_metrics::Clock::time_point arrived) {
    metrics_.generation(o, arrived);
    const char* end = o.disconnected ? "client disconnected" : o.cancelled ? "cancelled (shutting down)" : o.finish_reason.c_str();
    std::fprintf(stderr, "minimind-server: %s: prompt %lld tokens (%lld cached), completion %lld tokens, finish: %s\n",
                 kind == Endpoint::chat ? "chat" : "completion", static_cast<long long>(o.prompt_tokens),
                 static_cast<long long>(o.cached_tokens), static_cast<long long>(o.completion_tokens), end);
  }

  const minimind::Pretrained<float>& checkpoint_;
  const minimind::Tokenizer& tokenizer_;
  std::string template_error_;
  const std::optional<minimind::ChatTemplate> template_;
  const std::string model_id_;
  const minimind::Index context_;
  server_metrics::Metrics metrics_;  // before engine_, whose scheduler thread records steps in it
  minimind::Engine<float> engine_;
  openai::LoraAdapters lora_;
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
inline httplib::Server::HandlerResponse fill_error(const httplib::Request& req, httplib::Response& res, size_t max_body) {
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
}  // namespace routes
