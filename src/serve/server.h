// server.h — `phasescope serve`: an OpenAI-compatible HTTP server over one checkpoint (cpp-httplib).
// Endpoints (shapes in api.h): POST /v1/completions, POST /v1/chat/completions, GET /v1/models,
// POST /tokenize, POST /detokenize, GET /health. Threads: one thread per connection (started as
// connections arrive, at most http_threads; one more gets 503 server_busy at once) parses and checks
// requests, hands them to the Engine (engine.h: the one thread that runs torch) and waits for the
// answer, so a slow or stalled client holds only its own connection thread, and only until its request
// has taken timeout_s (408); a POST without Content-Length is 411 and a body over 8 MiB 413 before any
// byte of it is read. Shutdown: stop accepting, finish every accepted request (queued ones included), stop
// the engine; serve_until_signal does this on SIGTERM or SIGINT and returns 0 (a second signal exits at
// once). Binds 127.0.0.1 unless told otherwise. Torch-free header.
#pragma once
#include <iosfwd>
#include <memory>
#include <string>

#include "serve/engine.h"

namespace phasescope {

struct ServeOptions {
  std::string checkpoint;          // run directory (checkpoint.safetensors) or a .safetensors file
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  int port = 8000;                 // 0 = any free port (Server::port() says which)
  std::string model_name;          // the name requests use; default: the checkpoint's preset name
  int max_model_len = 0;  // prompt + max_tokens limit; 0 = the length the preset trains on (task.seq_len)
  int max_batch = 32;     // sequences per forward pass (1 = unbatched)
  double batch_window_ms = 2.0;  // when idle, gather requests for this long after the first arrives
  bool kv_cache = true;          // generation on the KV cache (false: the whole forward per token)
  int http_threads = 256;        // connections open at once; one more is answered 503 server_busy
  int timeout_s = 30;            // a request must arrive whole within this; a write must progress within it
  std::ostream* log = nullptr;   // one line per request when set
  std::string align_card;        // --align-spans: a card.json; completions may then mark phasescope_spans
};

class Server {
 public:
  // Load the checkpoint, bind, start serving; returns once connections are accepted. Throws Error for a
  // bad checkpoint or option, or an address that cannot be bound.
  explicit Server(const ServeOptions& opt);
  ~Server();  // shutdown()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;
  std::string url() const;  // "http://127.0.0.1:8000"
  std::string model_id() const;
  int max_model_len() const;
  std::string describe() const;  // model, checkpoint step, batching
  EngineStats stats() const;

  // Stop accepting; every request already accepted is answered; then the engine stops. Idempotent.
  void shutdown();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Serve until SIGTERM or SIGINT, then shut down gracefully; progress lines go to `out`. Returns 0.
int serve_until_signal(const ServeOptions& opt, std::ostream& out);

}  // namespace phasescope
