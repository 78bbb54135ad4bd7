// probe_setup.cpp — see probe_setup.h.
#include "probe/probe_setup.h"

#include "core/check.h"
#include "probe/local_tokenizer_source.h"

namespace phasescope {

ProbeConnection probe_connect(const ProbeConnectOptions& o) {
  ProbeConnection c;
  c.pool = std::make_unique<HttpPool>(o.http);
  // the model: --model, or the only one the server lists (a server without /v1/models needs --model)
  std::vector<ServedModel> listed;
  if (o.api.model.empty()) {
    listed = served_models(*c.pool);
  } else {
    try {
      listed = served_models(*c.pool);
    } catch (const Error&) {  // not every server lists models; the name given is used as it is
    }
  }
  c.model = served_model_choose(listed, o.api.model, c.pool->describe());
  OpenAIOptions api = o.api;
  api.model = c.model.id;
  // the context the listing already gave (the backend would GET /v1/models again for it)
  if (api.max_context == 0 && c.model.max_model_len > 0) api.max_context = c.model.max_model_len;
  if (o.echo_on_phasescope && c.model.token_space.present) api.echo = true;
  if (!o.tokenizer_path.empty())
    c.tokens = local_tokenizer_open(o.tokenizer_path);
  else if (o.tokens)
    c.tokens = std::make_unique<ServerTokenizer>(*c.pool, api.model, o.flavor);
  c.backend = std::make_unique<HttpBackend>(*c.pool, api, c.tokens.get());
  return c;
}

}  // namespace phasescope
