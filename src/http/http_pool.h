// http_pool.h — JSON over HTTP to one or more servers, the patient way: requests are spread
// round-robin over the base URLs, at most `concurrency` in flight (a fixed set of worker threads,
// each request on a pooled keep-alive connection); a request that fails (no connection, timeout,
// 429, 5xx, a body the caller cannot parse) is retried with exponential backoff, or after the
// server's Retry-After when it gives one; an endpoint that keeps failing is rested and tried
// again later. The API key is read from an environment variable, sent as a bearer token and
// scrubbed from every error message; it is never stored anywhere else.
// Not here: what the requests mean (openai_client.h, server_tokenizer.h).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace phasescope {

struct HttpOptions {
  std::vector<std::string> base_urls;          // "http://host:port[/prefix]"; a trailing "/v1" is dropped
  std::string api_key_env = "OPENAI_API_KEY";  // environment variable holding the key ("" = none)
  int concurrency = 64;                        // requests in flight at most (worker threads)
  double timeout_s = 120;                      // per attempt: connect, send and the whole reply
  int retries = 4;                             // retries after the first attempt
  double backoff_s = 0.25;                     // first backoff; doubles on each retry (half of it jittered)
  double backoff_max_s = 20;                   // cap of one backoff
  double retry_after_max_s = 120;              // a longer Retry-After is clamped to this
  int max_connecting = 4;                      // new connections being opened at once (a burst of 64 connects
                           // overflows small listen queues: httplib servers listen with 5)
  int rest_after = 3;  // consecutive failures that rest an endpoint
  double rest_s = 5;   // first rest; doubles while the endpoint keeps failing (cap 300 s)
  // circuit breaker: after this many requests in a row failed (each after its retries; a 4xx is the
  // request's fault and does not count) every later request fails at once, naming the last error,
  // so a dead or always-failing server stops a run in seconds instead of hours. 0 = never
  int breaker_after = 32;
};

// One base URL split for httplib: "http://host:port" and a path prefix ("" or "/something").
struct HttpEndpoint {
  std::string origin;  // scheme://host[:port]
  std::string prefix;  // prepended to every path
  std::string url() const { return origin + prefix; }
};
// Throws Error for anything that is not http(s)://host[:port][/path].
HttpEndpoint http_endpoint_parse(const std::string& base_url);

// Retry-After: delta-seconds (decimals accepted) or an HTTP-date. Negative when absent/unreadable.
double http_retry_after_seconds(const std::string& value, std::chrono::system_clock::time_point now);

// The backoff before retry number `attempt` (0-based): min(cap, base * 2^attempt) * (0.5 + 0.5 u),
// u in [0, 1) from the caller.
double http_backoff_seconds(const HttpOptions& o, int attempt, double u);

struct HttpReply {
  bool ok = false;    // a 2xx reply that the caller's `accept` took
  int status = 0;     // last HTTP status (0: no reply)
  std::string body;   // last body
  std::string error;  // why not ok (key scrubbed): the last attempt's failure, with the attempt count
  int attempts = 0;
  std::string endpoint;  // URL of the endpoint that answered last
  double ms = 0;         // wall time including retries and waits
};

// accept(body) parses a 2xx body; it throws (any std::exception) when the body is unusable, which
// counts as a failed attempt and is retried (a malformed or truncated reply is usually transient).
using HttpAccept = std::function<void(const std::string& body)>;

struct HttpEndpointStats {
  std::string url;
  int64_t requests = 0, failures = 0, rests = 0;  // attempts sent, failed attempts, times rested
  std::string last_failure;                       // why the last failed attempt failed (key scrubbed)
};

class HttpPool {
 public:
  explicit HttpPool(HttpOptions opt);
  ~HttpPool();
  HttpPool(const HttpPool&) = delete;
  HttpPool& operator=(const HttpPool&) = delete;

  // POST a JSON body (GET when body is empty and get is true) to path on some endpoint, retrying as
  // the options say. Thread-safe; blocks the calling thread. Non-retryable: 4xx other than 408/409/429.
  HttpReply post(const std::string& path, const std::string& body, const HttpAccept& accept);
  HttpReply get(const std::string& path, const HttpAccept& accept);

  // Run fn(i) for every i in [0, n) on the worker threads (at most `concurrency` at once) and wait.
  // fn must not throw. Calls from several threads queue up behind each other.
  void parallel_for(size_t n, const std::function<void(size_t)>& fn);

  const HttpOptions& options() const { return opt_; }
  bool has_api_key() const { return !api_key_.empty(); }
  std::string describe() const;  // "http://a, http://b (2 endpoints, 64 in flight, timeout 120 s)"
  std::vector<HttpEndpointStats> stats() const;
  std::string scrub(std::string text) const;  // the API key replaced by "***"

 private:
  struct Client;
  struct EndpointState {
    HttpEndpoint ep;
    std::vector<std::unique_ptr<Client>> idle;  // keep-alive connections not in use
    int consecutive_failures = 0;
    int rest_level = 0;
    std::chrono::steady_clock::time_point not_before{};  // rested / Retry-After until then
    std::chrono::steady_clock::time_point
        rested_until{};  // the current rest (failures during it do not escalate)
    int64_t requests = 0, failures = 0, rests = 0;
    std::string last_failure;
  };
  HttpReply request(const std::string& method, const std::string& path, const std::string& body,
                    const HttpAccept& accept);
  size_t pick_endpoint(std::chrono::steady_clock::time_point* wait_until);
  std::unique_ptr<Client> checkout(size_t e, bool* fresh);
  void checkin(size_t e, std::unique_ptr<Client> c);
  void record(size_t e, bool ok, double retry_after_s, const std::string& why = "");
  void worker_loop();

  HttpOptions opt_;
  std::string api_key_;
  mutable std::mutex mu_;  // endpoints_
  std::vector<EndpointState> endpoints_;
  std::atomic<uint64_t> rr_{0};
  std::mutex connect_mu_;
  std::condition_variable connect_cv_;
  int connecting_ = 0;
  std::atomic<uint64_t> jitter_{0x9E3779B97F4A7C15ull};
  std::atomic<int64_t> failed_in_a_row_{0};  // requests (after retries) failed since the last success
  std::string breaker_error_;                // the failure that opened the breaker (under mu_)

  // the worker threads and the one job they share
  std::mutex job_mu_, submit_mu_;
  std::condition_variable job_cv_, done_cv_;
  const std::function<void(size_t)>* job_fn_ = nullptr;
  size_t job_n_ = 0, job_next_ = 0, job_done_ = 0;
  uint64_t job_gen_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace phasescope
