// probe_setup.cpp — see probe_setup.h.
#include "probe/probe_setup.h"

#include "probe/local_tokenizer_source.h"

namespace phasescope {

ProbeConnection probe_connect(const ProbeConnectOptions& o) {
  ProbeConnection c;
  c.pool = std::make_unique<HttpPool>(o.http);
  if (!o.tokenizer_path.empty())
    c.tokens = local_tokenizer_open(o.tokenizer_path);
  else if (o.tokens)
    c.tokens = std::make_unique<ServerTokenizer>(*c.pool, o.api.model, o.flavor);
  c.backend = std::make_unique<HttpBackend>(*c.pool, o.api, c.tokens.get());
  return c;
}

}  // namespace phasescope
