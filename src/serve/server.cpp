// server.cpp — see server.h.
#include "serve/server.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <malloc.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <mutex>
#include <ostream>
#include <random>
#include <thread>

#include "core/check.h"
#include "serve/api.h"

namespace phasescope {

// The largest request body the server reads: far above any prompt a served phasescope model can take
// (thousands of token ids), far below what would let one client grow the server by gigabytes.
constexpr size_t kMaxBodyBytes = size_t(8) << 20;

namespace {

using Clock = std::chrono::steady_clock;

const char* kJson = "application/json";

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e), kJson);
}

}  // namespace

struct Server::Impl {
  ServeOptions opt;
  std::unique_ptr<Engine> engine;
  ApiModel model;
  httplib::Server http;
  std::thread listener;
  int port = 0;
  int listen_fd = -1;  // httplib's listening socket (owned by httplib), kept to raise its backlog
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> next_id{1};
  std::mutex seed_mu, log_mu, shutdown_mu;
  std::mt19937_64 seeds{std::random_device{}()};  // sampling seeds of requests that give none
  bool shut = false;

  uint64_t fresh_seed() {
    std::lock_guard<std::mutex> lk(seed_mu);
    return seeds();
  }

  // Run one handler body: ApiError -> its status and error object; anything else -> 500 (503 while stopping).
  template <class F>
  void respond(const httplib::Request& req, httplib::Response& res, F&& body) {
    const auto t0 = Clock::now();
    try {
      body();
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res,
                 ApiError(stopping ? 503 : 500, e.what(), "", stopping ? "shutting_down" : "internal_error"));
    }
    // the allocator is tuned to keep freed memory for speed (core/runtime.h); after a large request
    // give it back, so a burst of big bodies does not leave the server gigabytes larger
    if (req.body.size() > (size_t(1) << 20)) ::malloc_trim(0);
    if (opt.log) {
      std::lock_guard<std::mutex> lk(log_mu);
      // httplib fills in 200 after the handler returns
      *opt.log << fmt::format("{} {} {} {:.1f} ms\n", req.method, req.path, res.status < 0 ? 200 : res.status,
                              std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      opt.log->flush();
    }
  }

  // completions and chat: check, queue on the engine, wait, render
  void generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    respond(req, res, [&] {
      const CompletionJob job =
          chat ? chat_parse(req.body, model, fresh_seed()) : completion_parse(req.body, model, fresh_seed());
      std::vector<GenOutput> outs = engine->submit(job.specs).get();
      const std::string id = fmt::format("{}-{:x}", chat ? "chatcmpl" : "cmpl", next_id++);
      res.set_content(completion_reply(job, outs, model, id, int64_t(std::time(nullptr))), kJson);
    });
  }

  void routes() {
    // a JSON API has no byte ranges: cpp-httplib would answer a Range header with 206 and a slice of
    // the JSON (`{"`), so ranges are dropped before routing and every reply is whole
    http.set_pre_routing_handler([](const httplib::Request& q, httplib::Response&) {
      const_cast<httplib::Request&>(q).ranges.clear();
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http.Post("/v1/completions",
              [this](const httplib::Request& q, httplib::Response& r) { generate(q, r, false); });
    http.Post("/v1/chat/completions",
              [this](const httplib::Request& q, httplib::Response& r) { generate(q, r, true); });
    http.Get("/v1/models", [this](const httplib::Request& q, httplib::Response& r) {
      respond(q, r, [&] { r.set_content(models_reply(model), kJson); });
    });
    http.Post("/tokenize", [this](const httplib::Request& q, httplib::Response& r) {
      respond(q, r, [&] { r.set_content(tokenize_reply(q.body, model), kJson); });
    });
    http.Post("/detokenize", [this](const httplib::Request& q, httplib::Response& r) {
      respond(q, r, [&] { r.set_content(detokenize_reply(q.body, model), kJson); });
    });
    http.Get("/health", [this](const httplib::Request& q, httplib::Response& r) {
      respond(q, r, [&] {
        if (stopping) throw ApiError(503, "the server is shutting down", "", "shutting_down");
        r.set_content(R"({"status":"ok"})", kJson);
      });
    });
    // the right path with the wrong method: 405 naming the method to use
    for (const char* p : {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"})
      http.Get(p, [p](const httplib::Request&, httplib::Response& r) {
        send_error(r,
                   ApiError(405, fmt::format("{} takes POST with a JSON body", p), "", "method_not_allowed"));
      });
    for (const char* p : {"/v1/models", "/health"})
      http.Post(p, [p](const httplib::Request&, httplib::Response& r) {
        send_error(r, ApiError(405, fmt::format("{} takes GET", p), "", "method_not_allowed"));
      });
    // unknown paths (and any other error status without a body): an error object too
    http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& q,
                                                                   httplib::Response& r) {
      if (!r.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      if (r.status == 413) {
        send_error(r, ApiError(413,
                               fmt::format("the request body is larger than {} bytes; send a shorter prompt "
                                           "(token ids: at most max_model_len of them)",
                                           kMaxBodyBytes),
                               "", "request_too_large"));
        return httplib::Server::HandlerResponse::Handled;
      }
      if (r.status == 408 || r.status == 400) {
        send_error(r, ApiError(r.status,
                               r.status == 408 ? "the request was not received in time (--timeout-s)"
                                               : "the HTTP request could not be read (headers, length, body)",
                               "", r.status == 408 ? "request_timeout" : "bad_request"));
        return httplib::Server::HandlerResponse::Handled;
      }
      send_error(r, ApiError(r.status,
                             fmt::format("{} {} is not an endpoint of this server (POST /v1/completions, "
                                         "POST /v1/chat/completions, GET /v1/models, POST /tokenize, "
                                         "POST /detokenize, GET /health)",
                                         q.method, q.path),
                             "", r.status == 404 ? "not_found" : ""));
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& r, std::exception_ptr) {
      send_error(r, ApiError(500, "internal error while handling the request", "", "internal_error"));
    });
  }
};

Server::Server(const ServeOptions& opt) : impl_(new Impl) {
  Impl& m = *impl_;
  m.opt = opt;
  if (opt.http_threads < 1)
    fail("serve", fmt::format("--http-threads {} is not positive", opt.http_threads), "use 1 or more");
  if (opt.timeout_s < 1)
    fail("serve", fmt::format("--timeout-s {} is not positive", opt.timeout_s), "use 1 or more");
  // a client that hangs up mid-reply must not kill the server (httplib writes without MSG_NOSIGNAL)
  ::signal(SIGPIPE, SIG_IGN);

  // the model and what requests see of it
  EngineOptions eo;
  eo.max_batch = opt.max_batch;
  eo.batch_window_ms = opt.batch_window_ms;
  m.engine.reset(new Engine(opt.checkpoint, eo));
  m.model.id = opt.model_name.empty() ? m.engine->preset().name : opt.model_name;
  m.model.vocab = m.engine->vocab();
  m.model.max_model_len = opt.max_model_len > 0 ? opt.max_model_len : m.engine->preset().task.seq_len;
  m.model.max_logprobs = eo.max_logprobs;
  m.model.created = int64_t(std::time(nullptr));
  m.model.root = opt.checkpoint;

  // HTTP: routes, one pool thread per connection, timeouts, then bind and listen
  m.routes();
  const int threads = opt.http_threads;
  m.http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  m.http.set_read_timeout(opt.timeout_s, 0);
  m.http.set_write_timeout(opt.timeout_s, 0);
  m.http.set_keep_alive_max_count(1000);
  m.http.set_keep_alive_timeout(2);  // an idle kept-alive connection ends after 2 s (bounds shutdown)
  m.http.set_tcp_nodelay(true);
  m.http.set_payload_max_length(kMaxBodyBytes);  // larger bodies: 413 with a message (error handler)
  // httplib 0.11 listens with a backlog of 5: a burst of new connections (64 clients starting together)
  // overflows it and the kernel drops SYNs, which clients retry only after 1 s. Keep the listening socket
  // (SO_REUSEADDR as httplib's default; no SO_REUSEPORT, so a port in use is an error) and listen again
  // with the system's maximum backlog.
  Impl* self = &m;
  m.http.set_socket_options([self](int fd) {
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    self->listen_fd = fd;
  });
  if (opt.port == 0) {
    m.port = m.http.bind_to_any_port(opt.host);
  } else {
    m.port = m.http.bind_to_port(opt.host, opt.port) ? opt.port : -1;
  }
  if (m.port > 0 && m.listen_fd >= 0) ::listen(m.listen_fd, SOMAXCONN);
  if (m.port <= 0) {
    m.engine->stop();
    fail("serve", fmt::format("cannot listen on {}:{} ({})", opt.host, opt.port, std::strerror(errno)),
         "choose another --port (0 = any free port) or stop whatever holds this one");
  }
  m.listener = std::thread([this] { impl_->http.listen_after_bind(); });
  const auto t0 = Clock::now();
  while (!m.http.is_running() && Clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

Server::~Server() { shutdown(); }

int Server::port() const { return impl_->port; }
std::string Server::url() const { return fmt::format("http://{}:{}", impl_->opt.host, impl_->port); }
std::string Server::model_id() const { return impl_->model.id; }
int Server::max_model_len() const { return impl_->model.max_model_len; }
EngineStats Server::stats() const { return impl_->engine->stats(); }

std::string Server::describe() const {
  const Impl& m = *impl_;
  return fmt::format(
      "model '{}' ({}); max_model_len {}, batches of up to {} gathered within {} ms, {} HTTP threads",
      m.model.id, m.engine->describe(), m.model.max_model_len, m.opt.max_batch, m.opt.batch_window_ms,
      m.opt.http_threads);
}

void Server::shutdown() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lk(m.shutdown_mu);
  if (m.shut) return;
  m.shut = true;
  m.stopping = true;
  // close the listening socket; listen_after_bind returns once every accepted connection is answered
  // (the engine keeps running meanwhile, so queued requests finish too)
  m.http.stop();
  if (m.listener.joinable()) m.listener.join();
  m.engine->stop();
}

// ---- serve until a signal

namespace {

int g_signal_pipe[2] = {-1, -1};
std::atomic<int> g_signals{0};

extern "C" void on_stop_signal(int sig) {
  if (g_signals.fetch_add(1) >= 1) _exit(128 + sig);  // the second signal: stop now
  const char c = char(sig);
  ssize_t ignored = ::write(g_signal_pipe[1], &c, 1);
  (void)ignored;
}

}  // namespace

int serve_until_signal(const ServeOptions& opt, std::ostream& out) {
  // signals only write a byte to a pipe (async-signal-safe); this thread waits for it
  if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0)
    fail("serve", std::string("cannot create the signal pipe: ") + std::strerror(errno),
         "check the process's file limit");
  g_signals = 0;
  struct sigaction sa = {}, old_term = {}, old_int = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, &old_term);
  ::sigaction(SIGINT, &sa, &old_int);

  // load, bind, serve
  int sig = 0;
  {
    Server server(opt);
    out << "serving " << server.describe() << "\n";
    out << "listening on " << server.url() << " (SIGTERM or Ctrl-C stops it gracefully)\n";
    out.flush();

    // wait for SIGTERM / SIGINT, then finish what was accepted
    char c = 0;
    while (::read(g_signal_pipe[0], &c, 1) < 0 && errno == EINTR) {
    }
    sig = int(c);
    out << fmt::format("received {}: no new connections; finishing the requests in flight\n",
                       sig == SIGTERM ? "SIGTERM" : "SIGINT");
    out.flush();
    const auto t0 = Clock::now();
    server.shutdown();
    const EngineStats st = server.stats();
    out << fmt::format(
        "stopped after {:.2f} s: {} requests, {} sequences, {} tokens generated in {} forward passes\n",
        std::chrono::duration<double>(Clock::now() - t0).count(), st.requests, st.sequences,
        st.tokens_generated, st.forwards);
    out.flush();
  }
  ::sigaction(SIGTERM, &old_term, nullptr);
  ::sigaction(SIGINT, &old_int, nullptr);
  ::close(g_signal_pipe[0]);
  ::close(g_signal_pipe[1]);
  return 0;
}

}  // namespace phasescope
