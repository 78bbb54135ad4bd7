// http_pool.cpp — see http_pool.h. One httplib::Client per connection, checked out for one request
// and checked back in while the connection is healthy (a transport error drops it). httplib's
// socket timeouts bound each read and write; a progress callback cuts a reply that keeps trickling
// past the per-attempt deadline.
#include "http/http_pool.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <ctime>

#include "core/check.h"

namespace phasescope {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string excerpt(const std::string& s, size_t n = 200) {
  std::string out = s.size() > n ? s.substr(0, n) + "..." : s;
  for (char& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  return out;
}

bool retryable_status(int status) { return status == 408 || status == 409 || status == 429 || status >= 500; }

}  // namespace

struct HttpPool::Client {
  httplib::Client cli;
  explicit Client(const std::string& origin, double timeout_s) : cli(origin) {
    const auto us = std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6));
    cli.set_connection_timeout(std::min(us, std::chrono::microseconds(10'000'000)));
    cli.set_read_timeout(us);
    cli.set_write_timeout(us);
    cli.set_keep_alive(true);
    cli.set_tcp_nodelay(true);  // header and body go out in separate writes: no Nagle stall
  }
};

HttpEndpoint http_endpoint_parse(const std::string& base_url) {
  const std::string fix =
      "write the base URL as http://host:port (optionally with a path, e.g. http://host:8000/v1)";
  std::string u = base_url;
  size_t scheme_end = u.find("://");
  if (scheme_end == std::string::npos) fail("--base-url '" + base_url + "'", "no scheme", fix);
  const std::string scheme = u.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https")
    fail("--base-url '" + base_url + "'", "scheme '" + scheme + "' is not http or https", fix);
  const size_t host_begin = scheme_end + 3;
  const size_t path_begin = u.find('/', host_begin);
  HttpEndpoint ep;
  ep.origin = u.substr(0, path_begin);
  if (ep.origin.size() <= host_begin) fail("--base-url '" + base_url + "'", "no host", fix);
  ep.prefix = path_begin == std::string::npos ? "" : u.substr(path_begin);
  while (!ep.prefix.empty() && ep.prefix.back() == '/') ep.prefix.pop_back();
  // OpenAI-style base URLs end in /v1; the paths used here name /v1 themselves
  if (ep.prefix.size() >= 3 && ep.prefix.compare(ep.prefix.size() - 3, 3, "/v1") == 0)
    ep.prefix.resize(ep.prefix.size() - 3);
  return ep;
}

double http_retry_after_seconds(const std::string& value, std::chrono::system_clock::time_point now) {
  if (value.empty()) return -1;
  char* end = nullptr;
  const double s = std::strtod(value.c_str(), &end);
  if (end != value.c_str() && *end == '\0') return std::isfinite(s) && s >= 0 ? s : -1;
  // HTTP-date, e.g. "Wed, 21 Oct 2015 07:28:00 GMT"
  std::tm tm{};
  const char* rest = strptime(value.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (rest == nullptr) return -1;
  const std::time_t when = timegm(&tm);
  const double delta = std::difftime(when, std::chrono::system_clock::to_time_t(now));
  return std::max(0.0, delta);
}

double http_backoff_seconds(const HttpOptions& o, int attempt, double u) {
  const double d = std::min(o.backoff_max_s, o.backoff_s * std::ldexp(1.0, std::min(attempt, 30)));
  return d * (0.5 + 0.5 * u);
}

HttpPool::HttpPool(HttpOptions opt) : opt_(std::move(opt)) {
  if (opt_.base_urls.empty()) fail("HTTP client", "no base URL given", "pass --base-url http://host:port");
  if (opt_.concurrency < 1) fail("--concurrency", "must be at least 1", "pass --concurrency 64");
  if (!(opt_.timeout_s > 0)) fail("--timeout-s", "must be positive", "pass --timeout-s 120");
  if (opt_.retries < 0) fail("--retries", "must be >= 0", "pass --retries 4");
  // a server closing a keep-alive connection while a request is written must be a failed attempt
  // (EPIPE, retried), not a SIGPIPE that kills the process
  std::signal(SIGPIPE, SIG_IGN);
  for (const std::string& u : opt_.base_urls) {
    EndpointState st;
    st.ep = http_endpoint_parse(u);
    endpoints_.push_back(std::move(st));
  }
  if (!opt_.api_key_env.empty()) {
    const char* k = std::getenv(opt_.api_key_env.c_str());
    if (k != nullptr) api_key_ = k;
  }
  for (int i = 0; i < opt_.concurrency; ++i) workers_.emplace_back([this] { worker_loop(); });
}

HttpPool::~HttpPool() {
  {
    std::lock_guard<std::mutex> g(job_mu_);
    stopping_ = true;
  }
  job_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

std::string HttpPool::scrub(std::string text) const {
  if (api_key_.empty()) return text;
  for (size_t p = text.find(api_key_); p != std::string::npos; p = text.find(api_key_, p))
    text.replace(p, api_key_.size(), "***");
  return text;
}

std::string HttpPool::describe() const {
  std::string urls;
  for (const EndpointState& e : endpoints_) urls += (urls.empty() ? "" : ", ") + e.ep.url();
  return fmt::format("{} ({} endpoint{}, <= {} in flight, timeout {} s, {} retries{})", urls,
                     endpoints_.size(), endpoints_.size() == 1 ? "" : "s", opt_.concurrency, opt_.timeout_s,
                     opt_.retries, api_key_.empty() ? "" : ", API key from $" + opt_.api_key_env);
}

std::vector<HttpEndpointStats> HttpPool::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<HttpEndpointStats> out;
  for (const EndpointState& e : endpoints_)
    out.push_back({e.ep.url(), e.requests, e.failures, e.rests, scrub(e.last_failure)});
  return out;
}

size_t HttpPool::pick_endpoint(Clock::time_point* wait_until) {
  std::lock_guard<std::mutex> g(mu_);
  const size_t n = endpoints_.size();
  const size_t start = static_cast<size_t>(rr_.fetch_add(1) % n);
  const auto now = Clock::now();
  size_t soonest = start;
  for (size_t i = 0; i < n; ++i) {
    const size_t e = (start + i) % n;
    if (endpoints_[e].not_before <= now) {
      *wait_until = now;
      return e;
    }
    if (endpoints_[e].not_before < endpoints_[soonest].not_before) soonest = e;
  }
  *wait_until = endpoints_[soonest].not_before;  // every endpoint rests: wait for the first back
  return soonest;
}

std::unique_ptr<HttpPool::Client> HttpPool::checkout(size_t e, bool* fresh) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto& idle = endpoints_[e].idle;
    ++endpoints_[e].requests;
    if (!idle.empty()) {
      std::unique_ptr<Client> c = std::move(idle.back());
      idle.pop_back();
      *fresh = false;
      return c;
    }
  }
  *fresh = true;
  return std::make_unique<Client>(endpoints_[e].ep.origin, opt_.timeout_s);
}

void HttpPool::checkin(size_t e, std::unique_ptr<Client> c) {
  std::lock_guard<std::mutex> g(mu_);
  endpoints_[e].idle.push_back(std::move(c));
}

void HttpPool::record(size_t e, bool ok, double retry_after_s, const std::string& why) {
  std::lock_guard<std::mutex> g(mu_);
  EndpointState& st = endpoints_[e];
  if (ok) {
    st.consecutive_failures = 0;
    st.rest_level = 0;
    return;
  }
  ++st.failures;
  st.last_failure = why;
  const auto now = Clock::now();
  if (retry_after_s >= 0)
    st.not_before =
        std::max(st.not_before, now + std::chrono::microseconds(static_cast<int64_t>(retry_after_s * 1e6)));
  // rest after rest_after consecutive failures; requests that were in flight when a rest began and
  // fail during it are counted but do not lengthen it (one outage seen by 64 requests is one rest)
  if (++st.consecutive_failures >= opt_.rest_after && now >= st.rested_until) {
    const double rest = std::min(300.0, opt_.rest_s * std::ldexp(1.0, std::min(st.rest_level, 20)));
    st.rested_until = now + std::chrono::microseconds(static_cast<int64_t>(rest * 1e6));
    st.not_before = std::max(st.not_before, st.rested_until);
    ++st.rest_level;
    ++st.rests;
    st.consecutive_failures = 0;
  }
}

HttpReply HttpPool::post(const std::string& path, const std::string& body, const HttpAccept& accept) {
  return request("POST", path, body, accept);
}

HttpReply HttpPool::get(const std::string& path, const HttpAccept& accept) {
  return request("GET", path, "", accept);
}

HttpReply HttpPool::request(const std::string& method, const std::string& path, const std::string& body,
                            const HttpAccept& accept) {
  const auto t0 = Clock::now();
  HttpReply reply;
  if (opt_.breaker_after > 0 && failed_in_a_row_ >= opt_.breaker_after) {
    std::lock_guard<std::mutex> g(mu_);
    reply.error = scrub(fmt::format("not sent: the last {} requests all failed, the last with: {}",
                                    int64_t(failed_in_a_row_), breaker_error_));
    return reply;
  }
  for (int attempt = 0; attempt <= opt_.retries; ++attempt) {
    // an endpoint that is not resting (or wait for the first one back)
    Clock::time_point wait_until;
    const size_t e = pick_endpoint(&wait_until);
    if (wait_until > Clock::now()) std::this_thread::sleep_until(wait_until);
    const HttpEndpoint& ep = endpoints_[e].ep;
    reply.endpoint = ep.url();
    reply.attempts = attempt + 1;

    // one attempt
    bool fresh = false;
    std::unique_ptr<Client> c = checkout(e, &fresh);
    httplib::Request req;
    req.method = method;
    req.path = ep.prefix + path;
    if (!api_key_.empty()) req.set_header("Authorization", "Bearer " + api_key_);
    if (method == "POST") {
      req.set_header("Content-Type", "application/json");
      req.body = body;
    }
    const auto deadline =
        Clock::now() + std::chrono::microseconds(static_cast<int64_t>(opt_.timeout_s * 1e6));
    req.progress = [deadline](uint64_t, uint64_t) { return Clock::now() < deadline; };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    // a fresh connection's first request opens it: at most max_connecting at once
    if (fresh && opt_.max_connecting > 0) {
      std::unique_lock<std::mutex> lk(connect_mu_);
      connect_cv_.wait(lk, [&] { return connecting_ < opt_.max_connecting; });
      ++connecting_;
    }
    const bool sent = c->cli.send(req, res, err);
    if (fresh && opt_.max_connecting > 0) {
      {
        std::lock_guard<std::mutex> lk(connect_mu_);
        --connecting_;
      }
      connect_cv_.notify_one();
    }

    // classify it
    double retry_after = -1;
    bool retry = true;
    if (!sent) {
      reply.status = 0;
      reply.body.clear();
      const bool timed_out = err == httplib::Error::Canceled || Clock::now() >= deadline;
      reply.error = timed_out
                        ? fmt::format("no reply from {} within {} s (timeout)", ep.url(), opt_.timeout_s)
                        : fmt::format("no reply from {} ({})", ep.url(), httplib::to_string(err));
      c.reset();  // the connection is in an unknown state
    } else {
      reply.status = res.status;
      reply.body = std::move(res.body);
      if (res.status >= 200 && res.status < 300) {
        try {
          accept(reply.body);
          reply.ok = true;
          reply.error.clear();
          checkin(e, std::move(c));
          record(e, true, -1);
          failed_in_a_row_ = 0;
          reply.ms = ms_since(t0);
          return reply;
        } catch (const std::exception& ex) {
          reply.error = fmt::format("unusable reply from {}{}: {}", ep.url(), path, ex.what());
        }
      } else {
        retry = retryable_status(res.status);
        if (res.status == 429 || res.status >= 500)
          retry_after =
              http_retry_after_seconds(res.get_header_value("Retry-After"), std::chrono::system_clock::now());
        if (retry_after > opt_.retry_after_max_s) retry_after = opt_.retry_after_max_s;
        reply.error = fmt::format("HTTP {} from {}{}: {}", res.status, ep.url(), path, excerpt(reply.body));
      }
      if (c) checkin(e, std::move(c));
    }
    if (!retry) {  // the request itself is wrong (400, 401, 404...): the endpoint is fine
      record(e, true, -1);
      break;
    }
    record(e, false, retry_after, reply.error);
    // nothing listens there and nothing ever answered: retrying a refused connection only delays the news
    if (!sent && err == httplib::Error::Connection) {
      std::lock_guard<std::mutex> g(mu_);
      const EndpointState& st = endpoints_[e];
      if (st.requests == st.failures && endpoints_.size() == 1) break;
    }

    // wait before the next attempt: a Retry-After rests the endpoint (pick_endpoint waits for it or
    // takes another one); otherwise exponential backoff
    if (attempt < opt_.retries && retry_after < 0) {
      const uint64_t x = jitter_.fetch_add(0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
      const double u = double(x >> 11) * (1.0 / 9007199254740992.0);
      std::this_thread::sleep_for(
          std::chrono::microseconds(static_cast<int64_t>(1e6 * http_backoff_seconds(opt_, attempt, u))));
    }
  }
  reply.ok = false;
  reply.ms = ms_since(t0);
  reply.error = scrub(fmt::format("{} (after {} attempt{} over {:.1f} s)", reply.error, reply.attempts,
                                  reply.attempts == 1 ? "" : "s", reply.ms / 1000.0));
  const bool request_at_fault = reply.status >= 400 && reply.status < 500 && !retryable_status(reply.status);
  if (!request_at_fault) {  // the server's failure (no reply, 5xx, 429, an unusable body), not the request's
    if (++failed_in_a_row_ == opt_.breaker_after) {
      std::lock_guard<std::mutex> g(mu_);
      breaker_error_ = reply.error;
    }
  }
  return reply;
}

void HttpPool::worker_loop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lk(job_mu_);
  for (;;) {
    job_cv_.wait(lk, [&] { return stopping_ || (job_gen_ != seen && job_next_ < job_n_); });
    if (stopping_) return;
    while (job_next_ < job_n_) {
      const size_t i = job_next_++;
      const std::function<void(size_t)>* fn = job_fn_;
      lk.unlock();
      (*fn)(i);
      lk.lock();
      if (++job_done_ == job_n_) done_cv_.notify_all();
    }
    seen = job_gen_;
  }
}

void HttpPool::parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  std::lock_guard<std::mutex> one_job(submit_mu_);
  std::unique_lock<std::mutex> lk(job_mu_);
  job_fn_ = &fn;
  job_n_ = n;
  job_next_ = 0;
  job_done_ = 0;
  ++job_gen_;
  job_cv_.notify_all();
  done_cv_.wait(lk, [&] { return job_done_ == job_n_; });
  job_fn_ = nullptr;
  job_n_ = 0;
}

}  // namespace phasescope
