// server.cpp — see server.h.
#include "serve/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <malloc.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <optional>
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

// ---- connections: a whole request within timeout_s, at most http_threads at once
//
// cpp-httplib 0.11 times out each socket read on its own, so a client that sends one header line
// every few seconds holds its connection thread for ever, and its fixed pool lets 64 such clients
// starve everyone. Here every request must arrive whole (head and body) within timeout_s of its first
// byte; connection threads start as connections arrive, up to http_threads; a connection beyond that
// gets 503 server_busy with Retry-After at once, so the others keep being served.

thread_local bool t_request_deadline_hit = false;  // this connection's request ran out of time
thread_local bool t_close_after_reply = false;     // the request could not be read whole: close after it
thread_local bool t_large_exchange = false;        // a body or reply over 1 MiB went through this thread

// Answer a request that could not be read whole (or will not be read) and close its connection after
// the reply: what follows on it is the rest of this request, not another one.
void refuse_and_close(httplib::Response& res, const ApiError& e) {
  send_error(res, e);
  res.set_header("Connection", "close");
  t_close_after_reply = true;
}

ApiError request_too_large(const std::string& what) {
  return ApiError(
      413,
      fmt::format("{} is more than this server reads ({} bytes); send a shorter prompt (token ids: "
                  "at most max_model_len of them)",
                  what, kMaxBodyBytes),
      "", "request_too_large");
}

// A socket stream for httplib's request parser: buffered reads that share one deadline per request,
// writes bounded by the write timeout.
class RequestStream : public httplib::Stream {
 public:
  RequestStream(int fd, int read_timeout_s, int write_timeout_s, int request_timeout_s)
      : fd_(fd),
        read_ms_(read_timeout_s * 1000),
        write_ms_(write_timeout_s * 1000),
        request_s_(request_timeout_s) {}

  // Wait up to seconds for the next request's first byte (keep-alive idle); false: none came.
  bool wait_next_request(int seconds) {
    return pos_ < len_ || wait_fd(POLLIN, std::max(1, seconds * 1000)) > 0;
  }
  void start_request() {
    deadline_ = Clock::now() + std::chrono::seconds(request_s_);
    t_request_deadline_hit = false;
    t_close_after_reply = false;
  }

  bool is_readable() const override { return pos_ < len_ || wait_readable(); }
  bool is_writable() const override { return wait_fd(POLLOUT, write_ms_) > 0; }
  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == len_) {
      if (!wait_readable()) return -1;
      const ssize_t n = ::recv(fd_, buf_, sizeof buf_, 0);
      if (n <= 0) return n;
      pos_ = 0;
      len_ = size_t(n);
    }
    const size_t n = std::min(size, len_ - pos_);
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    return ::send(fd_, ptr, size, MSG_NOSIGNAL);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(false, ip, port); }
  socket_t socket() const override { return fd_; }

 private:
  // Wait for bytes: at most the per-read timeout, and no longer than what is left of the request's time
  // (running out of that marks the request as timed out: 408).
  bool wait_readable() const {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    if (left > 0 && wait_fd(POLLIN, int(std::min<int64_t>(read_ms_, left))) > 0) return true;
    if (left <= read_ms_) t_request_deadline_hit = true;
    return false;
  }
  int wait_fd(short events, int ms) const {
    pollfd p = {fd_, events, 0};
    int r;
    do r = ::poll(&p, 1, ms);
    while (r < 0 && errno == EINTR);
    return r > 0 && (p.revents & (events | POLLHUP | POLLERR)) ? 1 : r < 0 ? -1 : 0;
  }
  void address(bool peer, std::string& ip, int& port) const {
    sockaddr_storage a = {};
    socklen_t n = sizeof a;
    ip.clear();
    port = 0;
    auto* sa = reinterpret_cast<sockaddr*>(&a);
    if ((peer ? ::getpeername(fd_, sa, &n) : ::getsockname(fd_, sa, &n)) != 0) return;
    char text[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<sockaddr_in*>(&a);
      ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
      port = ntohs(v4->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<sockaddr_in6*>(&a);
      ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
      port = ntohs(v6->sin6_port);
    }
    ip = text;
  }

  int fd_, read_ms_, write_ms_, request_s_;
  Clock::time_point deadline_ = Clock::now();
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
};

// One thread per connection, started as connections arrive; shutdown() waits for all of them. Beyond
// a hard cap (well above http_threads, whose extra connections only get a quick 503) a connection is
// handled on the accepting thread, which answers it 503 at once.
class ConnectionThreads : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(int hard_cap) : hard_cap_(hard_cap) {}
  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (active_ >= hard_cap_) {
        fn();
        return;
      }
      ++active_;
    }
    std::thread([this, fn = std::move(fn)] {
      fn();
      std::lock_guard<std::mutex> lk(mu_);
      --active_;
      done_.notify_all();
    }).detach();
  }
  void shutdown() override {
    std::unique_lock<std::mutex> lk(mu_);
    done_.wait(lk, [&] { return active_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable done_;
  int active_ = 0;
  const int hard_cap_;
};

}  // namespace

// httplib's server with its connection handling replaced (RequestStream, the connection cap); routing,
// parsing and writing are httplib's own.
class GuardedHttpServer : public httplib::Server {
 public:
  int max_connections = 256;
  int request_timeout_s = 30;
  std::atomic<int> open{0};

 private:
  bool process_and_close_socket(socket_t sock) override {
    const int n = ++open;
    bool ret = false;
    if (n > max_connections) {
      refuse_busy(sock);
    } else {
      RequestStream strm(sock, int(read_timeout_sec_), int(write_timeout_sec_), request_timeout_s);
      size_t count = keep_alive_max_count_;
      while (svr_sock_ != INVALID_SOCKET && count > 0 &&
             strm.wait_next_request(int(keep_alive_timeout_sec_))) {
        strm.start_request();
        bool closed = false;
        ret = process_request(strm, count == 1, closed, nullptr);
        // after a request that could not be read whole, what follows on the connection is its rest,
        // not a request: close rather than answer it again
        if (!ret || closed || t_close_after_reply) break;
        --count;
      }
    }
    linger_close(sock, 2000);
    // the allocator keeps freed memory for speed (core/runtime.h); after a large body or reply, once it
    // is freed (here, not in the handler, where the reply still exists), give it back
    // ... and when the last connection closes (the server goes idle), whatever the requests were
    const bool idle = --open == 0;
    if (t_large_exchange || idle) {
      t_large_exchange = false;
      ::malloc_trim(0);
    }
    return ret;
  }

  // Close after the reply: stop writing, then read and drop what the client still sends (at most
  // linger_ms and 64 MiB) before closing, so a client that is still sending a refused body reads the
  // refusal instead of a connection reset.
  static void linger_close(int fd, int linger_ms) {
    ::shutdown(fd, SHUT_WR);
    char sink[16384];
    size_t dropped = 0;
    const auto until = Clock::now() + std::chrono::milliseconds(linger_ms);
    pollfd q = {fd, POLLIN, 0};
    while (dropped < (size_t(64) << 20)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0 || ::poll(&q, 1, int(left)) <= 0) break;
      const ssize_t n = ::recv(fd, sink, sizeof sink, 0);
      if (n <= 0) break;
      dropped += size_t(n);
    }
    ::close(fd);
  }

  // 503 at once (linger_close then lets the client's request bytes drain, so it reads the answer)
  void refuse_busy(int fd) const {
    const std::string body = error_body(ApiError(
        503,
        fmt::format("the server has {} connections open, its limit (--http-threads); retry after a second",
                    max_connections),
        "", "server_busy"));
    const std::string reply = fmt::format(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
        "Connection: close\r\nContent-Length: {}\r\n\r\n{}",
        body.size(), body);
    pollfd p = {fd, POLLOUT, 0};
    if (::poll(&p, 1, 1000) > 0) (void)!::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
  }
};

struct Server::Impl {
  ServeOptions opt;
  std::unique_ptr<Engine> engine;
  ApiModel model;
  GuardedHttpServer http;
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
    // a large exchange: the connection gives the memory back when it ends (GuardedHttpServer)
    if (req.body.size() > (size_t(1) << 20) || res.body.size() > (size_t(1) << 20)) t_large_exchange = true;
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
    // A body's length is checked before the body is read (httplib would wait for a body that has no
    // length until the client closes, and read an absurd length's bytes before refusing them): a POST
    // without Content-Length gets 411, one over the limit 413, a malformed length 400, all at once and
    // with the connection closed (its unread body cannot be taken for the next request).
    http.set_pre_routing_handler([](const httplib::Request& q, httplib::Response& r) {
      const_cast<httplib::Request&>(q).ranges.clear();
      if (q.method != "POST" && q.method != "PUT" && q.method != "PATCH")
        return httplib::Server::HandlerResponse::Unhandled;
      if (q.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos)
        return httplib::Server::HandlerResponse::Unhandled;  // httplib bounds chunked bodies itself
      std::optional<ApiError> refusal;
      if (!q.has_header("Content-Length")) {
        refusal = ApiError(411, "a POST needs a Content-Length header (or Transfer-Encoding: chunked)", "",
                           "length_required");
      } else {
        const std::string v = q.get_header_value("Content-Length");
        char* end = nullptr;
        errno = 0;
        const unsigned long long len = std::strtoull(v.c_str(), &end, 10);
        if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || errno != 0 || *end)
          refusal =
              ApiError(400, fmt::format("Content-Length '{}' is not a byte count", v), "", "bad_request");
        else if (len > kMaxBodyBytes)
          refusal = request_too_large(fmt::format("Content-Length {}", len));
      }
      if (!refusal) return httplib::Server::HandlerResponse::Unhandled;
      refuse_and_close(r, *refusal);
      return httplib::Server::HandlerResponse::Handled;
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
    http.set_error_handler(
        httplib::Server::HandlerWithResponse([](const httplib::Request& q, httplib::Response& r) {
          if (!r.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          if (r.status == 413) {
            refuse_and_close(r, request_too_large("the request body"));
            return httplib::Server::HandlerResponse::Handled;
          }
          if (r.status == 408 || r.status == 400) {
            if (t_request_deadline_hit) r.status = 408;  // a read failed because the request's time ran out
            refuse_and_close(
                r, ApiError(r.status,
                            r.status == 408
                                ? "the request did not arrive whole in time (serve --timeout-s); send "
                                  "the whole request, with as many body bytes as its Content-Length"
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
  // one connection thread each: glibc would give them up to 8 x cores malloc arenas, each keeping its
  // freed memory; two arenas bound what a storm of concurrent requests leaves behind
  ::mallopt(M_ARENA_MAX, 2);

  // the model and what requests see of it
  EngineOptions eo;
  eo.max_batch = opt.max_batch;
  eo.batch_window_ms = opt.batch_window_ms;
  eo.kv_cache = opt.kv_cache;
  m.engine.reset(new Engine(opt.checkpoint, eo));
  m.model.id = opt.model_name.empty() ? m.engine->preset().name : opt.model_name;
  m.model.vocab = m.engine->vocab();
  m.model.max_model_len = opt.max_model_len > 0 ? opt.max_model_len : m.engine->preset().task.seq_len;
  m.model.max_logprobs = eo.max_logprobs;
  m.model.created = int64_t(std::time(nullptr));
  m.model.root = opt.checkpoint;
  if (!opt.align_card.empty()) m.model.align_card = card_read(opt.align_card);

  // HTTP: routes, one pool thread per connection, timeouts, then bind and listen
  m.routes();
  const int threads = opt.http_threads;
  m.http.max_connections = threads;
  m.http.request_timeout_s = opt.timeout_s;
  m.http.new_task_queue = [threads] { return new ConnectionThreads(2 * threads + 16); };
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
      "model '{}' ({}); max_model_len {}, batches of up to {} gathered within {} ms, {}, {} HTTP threads",
      m.model.id, m.engine->describe(), m.model.max_model_len, m.opt.max_batch, m.opt.batch_window_ms,
      m.engine->stats().kv_cache ? "KV cache (prefill once, one cached step per token)"
                                 : "no KV cache (whole forward per token)",
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
