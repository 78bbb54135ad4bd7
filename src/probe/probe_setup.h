// probe_setup.h — one call from flags to a working HTTP backend: the pool of endpoints (retries,
// concurrency, API key from the environment), the token source (a local tokenizer.json when a path is
// given, else the server's /tokenize) and the HttpBackend over both. Shared by `probe` and `eval
// --base-url`. Not here: the probes themselves.
#pragma once
#include <memory>
#include <string>

#include "http/http_pool.h"
#include "http/openai_client.h"
#include "http/server_tokenizer.h"
#include "http/token_source.h"

namespace phasescope {

struct ProbeConnectOptions {
  HttpOptions http;
  OpenAIOptions api;
  std::string tokenizer_path;  // "" = the server's /tokenize
  TokenizeFlavor flavor = TokenizeFlavor::Auto;
  bool tokens = true;  // false: no token source (token-id prompts with ids in replies)
};

struct ProbeConnection {
  std::unique_ptr<HttpPool> pool;
  std::unique_ptr<TokenSource> tokens;  // null when not asked for
  std::unique_ptr<HttpBackend> backend;
};

ProbeConnection probe_connect(const ProbeConnectOptions& o);

}  // namespace phasescope
