// probe_setup.h — one call from flags to a working HTTP backend: the pool of endpoints (retries,
// concurrency, API key from the environment), the token source (a local tokenizer.json when a path is
// given, else the server's /tokenize), the chat template's frame when one is given (http/chat_template.h:
// checked against the server's own chat tokenization where it has one) and the HttpBackend over all of
// them. Shared by `probe`, `audit` and `eval --base-url`. The model is --model, or the server's only model
// when --model is not given; a phasescope server also says its token space (ServedModel.token_space), so
// probes can speak it. Not here: the probes themselves.
#pragma once
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "http/chat_template.h"
#include "http/http_pool.h"
#include "http/openai_client.h"
#include "http/server_tokenizer.h"
#include "http/token_source.h"
#include "probe/needle.h"

namespace phasescope {

struct ProbeConnectOptions {
  HttpOptions http;
  OpenAIOptions api;
  std::string tokenizer_path;      // "" = the server's /tokenize
  std::string chat_template_path;  // chat: the model's template (http/chat_template.h); "" = the server's
                                   // /tokenize of a chat measures the frame
  TokenizeFlavor flavor = TokenizeFlavor::Auto;
  bool tokens = true;  // false: no token source (token-id prompts with ids in replies)
  // a phasescope server answers echo with prompt log-probs exactly: use it for the answer's
  // log-probability (exact even outside the top-k) when the server is one
  bool echo_on_phasescope = false;
};

struct ProbeConnection {
  ServedModel model;  // the model every request names (id), with what /v1/models says of it
  std::unique_ptr<HttpPool> pool;
  std::unique_ptr<TokenSource> tokens;  // null when not asked for
  std::unique_ptr<HttpBackend> backend;
  std::optional<ChatTemplate> chat_template;  // when --chat-template was given
};

ProbeConnection probe_connect(const ProbeConnectOptions& o);

// What the user set on the needle's spec (the rest may be fitted to the server).
struct NeedleGiven {
  bool context = false, filler = false, separator = false;
};

// The needle spec for a connected server: the context fitted to the server's (less the echoed answer and
// one token to generate) unless given, which is then an Error when it does not fit; a phasescope server's
// own token names (keys k*, values n*) unless words were given; a chat API's template tokens before the
// prompt as the position offset. One line per choice to `log`. Shared by `probe needle` and `audit`.
NeedleSpec needle_spec_for(const ProbeConnection& c, NeedleSpec spec, const NeedleGiven& given,
                           std::ostream* log);

}  // namespace phasescope
