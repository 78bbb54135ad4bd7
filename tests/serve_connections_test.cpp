// serve_connections_test.cpp — `phasescope serve` against slow and hostile connections and at its edges:
// a whole request must arrive within --timeout-s, lengths are checked before bodies are read, half-sent
// requests do not starve /health, one connection over --http-threads gets 503 at once; start-up refuses a
// missing checkpoint and a busy port; shutdown finishes in-flight requests, in process and on SIGTERM in
// a child process that must exit 0. (The endpoints themselves: serve_test.cpp.)
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "data/tasks.h"
#include "serve_testing.h"

extern char** environ;

namespace phasescope {
namespace {

namespace ts = testing_serve;
using json = nlohmann::json;
using testutil::Clock;
using testutil::ms_since;

// ---- hostile and slow connections

// Send bytes on a fresh connection, then read until the server closes or a whole reply (head and
// Content-Length body) is in, or timeout_ms passes. status 0: no reply.
struct RawReply {
  int status = 0;
  std::string text;
  double ms = 0;
};
RawReply raw_exchange(int port, const std::string& bytes, int timeout_ms) {
  RawReply out;
  const auto t0 = Clock::now();
  const int fd = ts::stalled_connection(port, bytes);
  if (fd < 0) return out;
  char buf[4096];
  while (ms_since(t0) < timeout_ms) {
    timeval tv = {0, 50 * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) break;
    if (n > 0) out.text.append(buf, size_t(n));
    const size_t head = out.text.find("\r\n\r\n");
    const size_t cl = out.text.find("Content-Length: ");
    if (head != std::string::npos && cl != std::string::npos &&
        out.text.size() >= head + 4 + std::stoul(out.text.substr(cl + 16)))
      break;
  }
  out.ms = ms_since(t0);
  ::close(fd);
  if (out.text.rfind("HTTP/1.1 ", 0) == 0) out.status = std::stoi(out.text.substr(9, 3));
  return out;
}

TEST(ServeConnections, LengthsAreCheckedBeforeTheBodyIsRead) {
  const std::string dir = ts::tiny_checkpoint("serve_len");
  Server server(ts::local_options(dir));
  const std::string head = "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
  // no Content-Length, body follows and the client keeps the connection open: 411 at once
  RawReply r = raw_exchange(server.port(), head + "\r\n{\"content\": \"k1\"}", 5000);
  EXPECT_EQ(r.status, 411) << r.text;
  EXPECT_NE(r.text.find("length_required"), std::string::npos) << r.text;
  EXPECT_LT(r.ms, 2000.0);
  // an absurd length: 413 before any byte of it is read
  r = raw_exchange(server.port(), head + "Content-Length: 99999999999999\r\n\r\n{", 5000);
  EXPECT_EQ(r.status, 413) << r.text;
  EXPECT_NE(r.text.find("request_too_large"), std::string::npos) << r.text;
  EXPECT_LT(r.ms, 2000.0);
  // a length that is not a number
  r = raw_exchange(server.port(), head + "Content-Length: 12abc\r\n\r\n{}", 5000);
  EXPECT_EQ(r.status, 400) << r.text;
  EXPECT_LT(r.ms, 2000.0);
  // and a well-formed request still works on the same server
  EXPECT_EQ(ts::post(server.port(), "/tokenize", json{{"content", "k1"}}).status, 200);
  std::filesystem::remove_all(dir);
}

TEST(ServeConnections, ARequestMustArriveWholeWithinTheTimeout) {
  const std::string dir = ts::tiny_checkpoint("serve_slow");
  ServeOptions o = ts::local_options(dir);
  o.timeout_s = 2;
  Server server(o);
  // a body shorter than its Content-Length: 408 once the request's 2 s are over
  RawReply r = raw_exchange(server.port(),
                            "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"con", 8000);
  EXPECT_EQ(r.status, 408) << r.text;
  EXPECT_NE(r.text.find("request_timeout"), std::string::npos) << r.text;
  EXPECT_GE(r.ms, 1500.0);
  EXPECT_LT(r.ms, 5000.0);
  // a slowloris: one header line every 300 ms, each well within the per-read timeout; the whole
  // request's time still runs out and the connection is let go
  const int fd = ts::stalled_connection(server.port(), "GET /health HTTP/1.1\r\n");
  ASSERT_GE(fd, 0);
  const auto t0 = Clock::now();
  bool cut = false;
  for (int i = 0; i < 40 && !cut; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const std::string line = "X-Slow-" + std::to_string(i) + ": y\r\n";
    cut = ::send(fd, line.data(), line.size(), MSG_NOSIGNAL) < 0;
    char c;
    cut = cut || ::recv(fd, &c, 1, MSG_DONTWAIT) >= 0;  // a reply or the close
  }
  ::close(fd);
  EXPECT_TRUE(cut);
  EXPECT_LT(ms_since(t0), 6000.0);
  std::filesystem::remove_all(dir);
}

TEST(ServeConnections, AHundredHalfSentRequestsDoNotStarveHealth) {
  const std::string dir = ts::tiny_checkpoint("serve_storm");
  ServeOptions o = ts::local_options(dir);
  o.http_threads = 256;  // the default
  Server server(o);
  std::vector<int> held;
  for (int i = 0; i < 100; ++i)  // half with half a head, half with half a body
    held.push_back(ts::stalled_connection(server.port(), i % 2 ? "GET /health HTTP/1.1\r\nHost: x\r\n" : ""));
  for (int fd : held) ASSERT_GE(fd, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  double worst = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    EXPECT_EQ(ts::get(server.port(), "/health").status, 200);
    worst = std::max(worst, ms_since(t0));
  }
  std::printf("  /health with 100 half-sent requests open: slowest of 5 answers %.1f ms\n", worst);
  EXPECT_LT(worst, 1000.0);
  for (int fd : held) ::close(fd);
  std::filesystem::remove_all(dir);
}

TEST(ServeConnections, OneConnectionOverTheLimitGets503AtOnce) {
  const std::string dir = ts::tiny_checkpoint("serve_busy");
  ServeOptions o = ts::local_options(dir);
  o.http_threads = 4;
  Server server(o);
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) held.push_back(ts::stalled_connection(server.port()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const RawReply r = raw_exchange(server.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 5000);
  EXPECT_EQ(r.status, 503) << r.text;
  EXPECT_NE(r.text.find("server_busy"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("Retry-After: 1"), std::string::npos) << r.text;
  EXPECT_LT(r.ms, 2000.0);
  for (int fd : held) ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(ts::get(server.port(), "/health").status, 200);  // served again once they are gone
  std::filesystem::remove_all(dir);
}

// ---- start-up refusals

TEST(ServeStart, RefusesAMissingCheckpointAndABusyPort) {
  try {
    Server s(ts::local_options("/nonexistent/run"));
    FAIL() << "a missing checkpoint was served";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/run/checkpoint.safetensors"), std::string::npos)
        << e.what();
  }
  const std::string dir = ts::tiny_checkpoint("busy");
  Server first(ts::local_options(dir));
  ServeOptions o = ts::local_options(dir);
  o.port = first.port();
  try {
    Server second(o);
    FAIL() << "two servers on one port";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot listen on 127.0.0.1:" + std::to_string(first.port())),
              std::string::npos)
        << e.what();
  }
  o.port = 0;
  o.max_batch = 0;
  EXPECT_THROW(Server bad(o), Error);
  EXPECT_EQ(ts::get(first.port(), "/health").status, 200);  // the first one is unharmed
  first.shutdown();
  std::filesystem::remove_all(dir);
}

// ---- shutdown

TEST(ServeShutdown, InProcessFinishesInFlightRequestsThenRefusesConnections) {
  const std::string dir = ts::tiny_checkpoint("stop");
  Server server(ts::local_options(dir));
  const int port = server.port();
  ts::Reply in_flight;
  std::thread t([&] {
    in_flight = ts::post(port, "/v1/completions",
                         json{{"prompt", "bos k1"}, {"max_tokens", 100}, {"temperature", 0}});
  });
  // wait until the request is being generated, then shut down under it
  const auto t0 = Clock::now();
  while (server.stats().tokens_generated < 3 && ms_since(t0) < 20000)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int64_t generated_at_stop = server.stats().tokens_generated;
  ASSERT_GE(generated_at_stop, 3);
  server.shutdown();
  t.join();
  EXPECT_EQ(in_flight.status, 200) << in_flight.raw;
  EXPECT_EQ(in_flight.body["usage"]["completion_tokens"], 100);
  EXPECT_LT(generated_at_stop, 100);              // it was in flight when shutdown began
  EXPECT_EQ(ts::get(port, "/health").status, 0);  // nobody listens any more
  server.shutdown();                              // idempotent
  std::filesystem::remove_all(dir);
}

// The child of SigtermFinishesInFlightRequestsAndExitsZero: serve until a signal (skipped otherwise).
TEST(ServeShutdown, ChildServesUntilSignal) {
  const char* dir = std::getenv("PHASESCOPE_SERVE_TEST_CHILD");
  if (!dir) GTEST_SKIP() << "runs only as the child of SigtermFinishesInFlightRequestsAndExitsZero";
  std::ofstream log(std::string(dir) + "/serve.log");
  ServeOptions o = ts::local_options(dir);
  o.max_model_len = 1024;
  // an idle engine holds a first request this long before its first forward pass, so the parent's
  // request is surely in flight when its SIGTERM comes 1 s after sending it, however fast generation on
  // the KV cache is (the graceful stop lets the window run out, then generates all 400 tokens)
  o.batch_window_ms = 3000;
  EXPECT_EQ(serve_until_signal(o, log), 0);
}

TEST(ServeShutdown, SigtermFinishesInFlightRequestsAndExitsZero) {
  if (std::getenv("PHASESCOPE_SERVE_TEST_CHILD")) GTEST_SKIP();
  const std::string dir = ts::tiny_checkpoint("sigterm");
  // this test binary again, running only the child test above
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) env_s.push_back(*e);
  env_s.push_back("PHASESCOPE_SERVE_TEST_CHILD=" + dir);
  std::vector<char*> envp;
  for (std::string& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=ServeShutdown.ChildServesUntilSignal";
  char* argv[] = {self.data(), filter.data(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()), 0);

  // its port, from the line "listening on http://127.0.0.1:PORT ..."
  int port = 0;
  const auto t0 = Clock::now();
  while (port == 0 && ms_since(t0) < 60000) {
    const std::string s = testutil::slurp(dir + "/serve.log");
    const size_t at = s.find("listening on http://127.0.0.1:");
    if (at != std::string::npos) port = std::atoi(s.c_str() + at + 30);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GT(port, 0) << "the child server did not start";

  // a long request in flight, then SIGTERM
  ts::Reply in_flight;
  double replied_ms = 0;
  std::thread t([&] {
    in_flight = ts::post(port, "/v1/completions",
                         json{{"prompt", "bos k4"}, {"max_tokens", 400}, {"temperature", 0}});
    replied_ms = ms_since(t0);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const double kill_ms = ms_since(t0);
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  t.join();
  std::printf("  SIGTERM at %.0f ms, the in-flight reply at %.0f ms\n", kill_ms, replied_ms);
  EXPECT_GT(replied_ms, kill_ms);  // it was in flight when the signal came
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(in_flight.status, 200) << in_flight.raw;
  EXPECT_EQ(in_flight.body["usage"]["completion_tokens"], 400);
  const std::string log = testutil::slurp(dir + "/serve.log");
  EXPECT_NE(log.find("received SIGTERM"), std::string::npos) << log;
  EXPECT_NE(log.find("stopped after"), std::string::npos) << log;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace phasescope
