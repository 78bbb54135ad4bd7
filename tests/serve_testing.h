// serve_testing.h — shared by the serve tests, built on testing.h (temp folders, the tiny preset): a tiny
// seeded-random checkpoint (untrained: the tests check exactness and plumbing, not accuracy), a server on
// a free loopback port, and JSON over HTTP with httplib::Client. (Includes libtorch through
// train/trainer.h, for train_write_init.)
#pragma once
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"
#include "serve/server.h"
#include "testing.h"
#include "train/trainer.h"

namespace phasescope {
namespace testing_serve {

using json = nlohmann::json;

// testutil::tiny_preset of w8s8-1kv with rows of 128 tokens (the evaluation's prompts of this preset are
// 106 tokens).
inline Preset tiny_preset() {
  Preset p = testutil::tiny_preset("w8s8-1kv");
  p.task.seq_len = 128;
  p.name = "tiny-w8s8";
  return preset_from_json(preset_to_json(p), "tiny preset");
}

// A step-0 checkpoint of the tiny preset in a fresh folder.
inline std::string tiny_checkpoint(const std::string& name) {
  const std::string dir = testutil::tmp_dir(name);
  train_write_init(tiny_preset(), dir);
  return dir;
}

inline ServeOptions local_options(const std::string& checkpoint) {
  ServeOptions o;
  o.checkpoint = checkpoint;
  o.port = 0;
  o.http_threads = 64;
  o.timeout_s = 10;
  return o;
}

struct Reply {
  int status = 0;  // 0 = no HTTP answer (connection refused, timeout)
  json body;       // parsed JSON (null when the body is not JSON)
  std::string raw;
};

inline std::unique_ptr<httplib::Client> client(int port) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_read_timeout(60, 0);
  c->set_tcp_nodelay(true);
  return c;
}

inline Reply finish(const httplib::Result& r) {
  Reply out;
  if (!r) return out;
  out.status = r->status;
  out.raw = r->body;
  out.body = json::parse(r->body, nullptr, false);
  if (out.body.is_discarded()) out.body = nullptr;
  return out;
}

inline Reply post(int port, const std::string& path, const std::string& body) {
  return finish(client(port)->Post(path.c_str(), body, "application/json"));
}
inline Reply post(int port, const std::string& path, const json& body) {
  return post(port, path, body.dump());
}
inline Reply get(int port, const std::string& path) { return finish(client(port)->Get(path.c_str())); }

// A raw connection that sends half a request (or the given bytes) and then nothing.
inline int stalled_connection(int port, std::string part = "") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return -1;
  if (part.empty())
    part = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"prompt\": ";
  if (::send(fd, part.data(), part.size(), 0) < 0) return -1;
  return fd;
}

}  // namespace testing_serve
}  // namespace phasescope
