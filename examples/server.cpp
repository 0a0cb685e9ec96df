// minimind-server: an OpenAI-compatible HTTP API over one loaded model.
//
// The HTTP and OpenAI layer over a minimind::Engine (engine.hpp), which does the serving: each of
// --slots slots serves one request at a time on a session that grows in blocks up to --ctx; a
// request that finds every slot busy waits in a bounded FIFO queue, and past --queue gets 503 at
// once; one scheduler thread advances every running request in one forward pass per step
// (continuous batching). The HTTP connection's own thread turns its ids into text and sends them,
// so a reply notices a closed connection at its next token and frees the slot at the next step.
// LoRA adapters (--lora) are held beside the model, unmerged, and each request runs the ones it
// names (its `lora` field) or the global scales (/lora-adapters), as llama-server does.
// SIGINT/SIGTERM: stop accepting, answer waiting requests with 503, cut running generations short
// at their next token, exit 0.
#include "cli.hpp"
#include "server_auth.hpp"
#include "server_deadline.hpp"
#include "server_routes.hpp"

#include <httplib.h>

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>
#include <utility>

namespace {

using Model = minimind::MiniMindForCausalLM<float>;
using openai::ApiError;
using routes::send_error;

// The longest one socket read or write waits for the client (httplib's default is 5 s).
constexpr int64_t kIoTimeoutSeconds = 10;

// glibc's malloc, left to itself, let the resident memory creep up over thousands of requests
// (tests/load/soak.sh: 15 MiB and more after its warm-up, on 2 cores): it gives threads up to 8
// arenas per core, each keeping its own high-water mark, and once a large block has been freed
// it serves blocks that large (a request's KV cache) from the arenas, where they fragment. So:
// two arenas (what the connection threads allocate is small, and the forward pass allocates
// nothing per token), and blocks from kMmapBytes up mapped and unmapped on their own, as they
// are before the first free.
constexpr int kMallocArenas = 2;
constexpr int kMmapBytes = 128 << 10;

int run(int argc, char** argv) {
  // Block the stop signals in every thread (all are started after this); one thread takes them
  // with sigwait, where stopping the server is safe.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a closed connection is a failed write, not a dead process
  mallopt(M_ARENA_MAX, kMallocArenas);
  mallopt(M_MMAP_THRESHOLD, kMmapBytes);

  cli::Args args("minimind-server", "an OpenAI-compatible HTTP server (chat/completions, completions, models, health, metrics)");
  cli::lora_flags(cli::model_flag(args))
      .toggle("--lora-init-without-apply", "load the adapters with global scale 0: requests use them only when they ask (lora field)")
      .value("--host", "address to listen on (default 127.0.0.1)")
      .value("--port", "port to listen on; 0 picks a free one (default 8080)")
      .value("--slots", "requests generated at once, each with its own KV cache (default 4)")
      .value("--queue", "requests that may wait for a slot; more get 503 (default 16)")
      .value("--ctx", "context length of each slot in tokens (default: max_position_embeddings, at most " +
                          std::to_string(Model::kDefaultContext) + ")")
      .value("--cache-mb", "mebibytes of KV cache kept for later requests that start alike (prompt cache); 0: off (default 256)")
      .value("--max-body", "largest request body in bytes; larger gets 413 (default 1048576)")
      .repeatable("--api-key", "a key requests must send as Authorization: Bearer KEY (repeatable; default: none needed)")
      .repeatable("--api-key-file", "a file of keys, one per line; # starts a comment (repeatable)")
      .value("--timeout", "seconds a whole request may take, from its headers to its reply's end (default 600)")
      .value("--web-root", "serve this folder's files at / (minimind-web's build-web/web) with the cross-origin isolation headers");
  if (!args.parse(argc, argv)) return 0;
  const std::string host = args.get_or("--host", "127.0.0.1");
  const int64_t port = args.int_or("--port", 8080);
  if (port < 0 || port > 65535) throw cli::UsageError("--port must be in [0, 65535]");
  const int64_t slots = args.int_or("--slots", 4);
  if (slots < 1 || slots > 1024) throw cli::UsageError("--slots must be in [1, 1024]");
  const int64_t queue = args.int_or("--queue", 16);
  if (queue < 0 || queue > 4096) throw cli::UsageError("--queue must be in [0, 4096]");
  const int64_t cache_mb = args.int_or("--cache-mb", 256);
  if (cache_mb < 0 || cache_mb > (int64_t{1} << 20)) throw cli::UsageError("--cache-mb must be in [0, 1048576]");
  const int64_t max_body = args.int_or("--max-body", 1 << 20);
  if (max_body < 1) throw cli::UsageError("--max-body must be >= 1");
  const server_auth::ApiKeys keys(args.occurrences({"--api-key", "--api-key-file"}));
  const int64_t timeout = args.int_or("--timeout", 600);
  if (timeout < 1 || timeout > 604800) throw cli::UsageError("--timeout must be in [1, 604800] seconds");
  const std::string web_root = args.get_or("--web-root", "");
  if (args.has("--web-root") && !std::filesystem::is_directory(web_root)) {
    throw cli::UsageError("--web-root: \"" + web_root + "\" is not a directory");
  }

  const auto dir = cli::model_dir(args);
  // The adapters are held beside the model, not merged into it: each request chooses its own.
  minimind::LoadOptions load_options = cli::load_options(args);
  std::vector<minimind::LoraUse> adapters = std::exchange(load_options.adapters, {});
  auto checkpoint = minimind::load_pretrained<float>(dir, load_options);
  minimind::check_adapters(adapters, checkpoint.model.config());
  if (args.has("--lora-init-without-apply"))
    for (auto& use : adapters) use.scale = 0;
  const int64_t max_context = checkpoint.model.config().max_position_embeddings;
  const int64_t context = args.int_or("--ctx", std::min<int64_t>(max_context, Model::kDefaultContext));
  if (context < 2 || context > max_context) throw cli::UsageError("--ctx must be in [2, " + std::to_string(max_context) + "]");
  // The model's name in the API: its directory's, or a weights file's without the extension.
  const auto resolved = std::filesystem::weakly_canonical(dir);
  std::string model_id = (std::filesystem::is_regular_file(resolved) ? resolved.stem() : resolved.filename()).string();
  if (model_id.empty()) model_id = "minimind";

  for (size_t i = 0; i < adapters.size(); ++i) std::fprintf(stderr, "minimind-server: lora adapter %zu: %s\n", i, cli::describe(adapters[i]).c_str());
  routes::Server server(checkpoint, model_id, static_cast<int>(slots), context, static_cast<size_t>(queue), static_cast<size_t>(cache_mb),
                       std::move(adapters));
  server_deadline::RequestDeadlines deadlines{std::chrono::seconds(timeout)};
  routes::HttpServer http;
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
    return routes::fill_error(req, res, static_cast<size_t>(max_body));
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
  // The in-browser page (docs/web.md) and its files, before the routes (httplib looks for a file
  // first, and refuses paths that climb out of the folder). Cross-origin isolation gives the page
  // SharedArrayBuffer, which its threads need. Like the built-in page, its files need no key.
  std::set<std::string> web_files;
  if (!web_root.empty()) {
    if (!http.set_mount_point("/", web_root, {{"Cross-Origin-Opener-Policy", "same-origin"}, {"Cross-Origin-Embedder-Policy", "require-corp"}})) {
      throw minimind::Error("--web-root: cannot serve \"" + web_root + "\"");
    }
    for (const auto& entry : std::filesystem::recursive_directory_iterator(web_root)) {
      if (entry.is_regular_file()) web_files.insert("/" + entry.path().lexically_relative(web_root).generic_string());
    }
    if (web_files.count("/index.html")) web_files.insert("/");
  }
  // Guards (server_auth.hpp, server_deadline.hpp): one socket read or write waits at most
  // kIoTimeoutSeconds for the client; a request's --timeout starts once its headers are read; a
  // request without a valid key is refused before its body is read.
  http.set_read_timeout(std::min<int64_t>(timeout, kIoTimeoutSeconds), 0);
  http.set_write_timeout(std::min<int64_t>(timeout, kIoTimeoutSeconds), 0);
  http.set_pre_routing_handler([&keys, &deadlines, &web_files](const httplib::Request& req, httplib::Response& res) {
    deadlines.begin(routes::Connection::of_this_thread(req).fd());
    if ((req.method == "GET" || req.method == "HEAD") && web_files.count(req.path)) return httplib::Server::HandlerResponse::Unhandled;
    return keys.check(req, res);
  });
  http.set_logger([&deadlines, &server](const httplib::Request& req, const httplib::Response& res) {
    deadlines.end();
    server.answered(req, res);
  });

  int bound = static_cast<int>(port);
  if (port == 0) {
    bound = http.bind_to_any_port(host);
    if (bound < 0) throw minimind::Error("cannot listen on " + host + " (any port)");
  } else if (!http.bind_to_port(host, bound)) {
    throw minimind::Error("cannot listen on " + host + ":" + std::to_string(bound) + " (in use, or not an address of this machine)");
  }
  http.widen_backlog();
  std::fprintf(stderr,
               "minimind-server: model %s (%s), %lld slots x %lld tokens of context, queue %lld, prompt cache %lld MiB (%zu positions), %d "
               "threads per forward pass\n",
               model_id.c_str(), dir.string().c_str(), static_cast<long long>(slots), static_cast<long long>(context),
               static_cast<long long>(queue), static_cast<long long>(cache_mb), server.cache_positions(), checkpoint.model.threads());
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
    server.stop();
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
