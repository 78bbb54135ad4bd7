// probe_setup.cpp — see probe_setup.h.
#include "probe/probe_setup.h"

#include <fmt/format.h>

#include "core/check.h"
#include "probe/local_tokenizer_source.h"

namespace phasescope {

namespace {

// The template's frame, measured here; the server's too when it tokenizes chats (vLLM, llama-server), and
// then both must agree. A chat-only server (no /tokenize of a chat) has the template's frame alone, which
// every reply's usage.prompt_tokens then verifies (*verified_by_usage: replies without usage are refused).
ChatFrame chat_template_frame_checked(const ChatTemplate& t, const OpenAIOptions& api, const TokenSource* ts,
                                      HttpPool& pool, TokenizeFlavor flavor, bool* verified_by_usage) {
  const std::string flag = "--chat-template " + t.source;
  if (api.api != ApiKind::Chat)
    fail(flag, "a chat template is for chat requests", "add --api chat (or drop --chat-template)");
  if (api.template_offset >= 0)
    fail(flag, "--template-offset is given too", "pass one of them: the template's frame is measured");
  if (ts == nullptr)
    fail(flag, "measuring the template needs a tokenizer", "pass --tokenizer tokenizer.json");
  const ChatFrame f = chat_template_frame(t, *ts);
  // the server's own chat tokens (a local tokenizer was checked against its /tokenize already)
  std::vector<int> chat;
  try {
    chat = ServerTokenizer(pool, api.model, flavor)
               .encode_chat({{"user", chat_frame_probe_text()}}, true, api.chat_template_kwargs);
  } catch (const Error&) {  // the server does not tokenize chats: the template's frame alone
    *verified_by_usage = true;
    return f;
  }
  const std::string mismatch = "this is not the template the server uses";
  const std::string fix =
      "pass the server's template (the tokenizer_config.json it loaded), or drop --chat-template";
  ChatFrame server;
  try {
    server = chat_frame_of(chat, *ts, "the server's chat tokenize");
  } catch (const Error&) {
    fail(flag, "the server's own chat tokens do not hold the user's text as its own tokens: " + mismatch,
         fix);
  }
  if (server.offset != f.offset || server.total != f.total)
    fail(
        flag,
        fmt::format("puts the user's text at token {} with {} template tokens in all, where the server's own "
                    "chat tokenization puts it at {} with {}: {}",
                    f.offset, f.total, server.offset, server.total, mismatch),
        fix);
  return f;
}

// A local tokenizer must be the server's: where the server tokenizes, one text must give the same ids
// both ways (token-id prompts in another tokenizer's ids would be another text to the model).
void check_local_tokenizer(const TokenSource& local, HttpPool& pool, const std::string& model,
                           TokenizeFlavor flavor, const std::string& path) {
  const std::string text =
      "Phase check: the quick brown fox jumps over 12345 lazy dogs; naïve café.\n  x = 0";
  std::vector<int> theirs;
  try {
    theirs = ServerTokenizer(pool, model, flavor).encode(text);
  } catch (const Error&) {  // no /tokenize: nothing to compare with (replies' usage still counts tokens)
    return;
  }
  const std::vector<int> ours = local.encode(text);
  if (ours == theirs) return;
  size_t i = 0;
  while (i < ours.size() && i < theirs.size() && ours[i] == theirs[i]) ++i;
  fail(
      "--tokenizer " + path,
      fmt::format("does not match the server's /tokenize: a check text is {} tokens here and {} there, first "
                  "differing at token {} ({} here, {} there)",
                  ours.size(), theirs.size(), i, i < ours.size() ? std::to_string(ours[i]) : "end",
                  i < theirs.size() ? std::to_string(theirs[i]) : "end"),
      "pass the tokenizer.json the server loaded (from the model's repository), or drop --tokenizer to use "
      "the server's /tokenize");
}

}  // namespace

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
  if (!o.tokenizer_path.empty()) {
    c.tokens = local_tokenizer_open(o.tokenizer_path);
    check_local_tokenizer(*c.tokens, *c.pool, api.model, o.flavor, o.tokenizer_path);
  } else if (o.tokens) {
    c.tokens = std::make_unique<ServerTokenizer>(*c.pool, api.model, o.flavor);
  }
  if (!o.chat_template_path.empty()) {
    c.chat_template = chat_template_load(o.chat_template_path);
    api.chat_template_kwargs = c.chat_template->kwargs;
    bool by_usage = false;
    const ChatFrame f =
        chat_template_frame_checked(*c.chat_template, api, c.tokens.get(), *c.pool, o.flavor, &by_usage);
    api.template_offset = int(f.offset);
    api.template_total = int(f.total);
    if (by_usage) api.require_usage = true;  // nothing else verifies positions on a chat-only server
  }
  c.backend = std::make_unique<HttpBackend>(*c.pool, api, c.tokens.get());
  return c;
}

NeedleSpec needle_spec_for(const ProbeConnection& c, NeedleSpec spec, const NeedleGiven& given,
                           std::ostream* log) {
  const int64_t ctx = c.backend->context_length();
  if (log)
    *log << fmt::format("server context: {}\n",
                        ctx > 0 ? std::to_string(ctx) + " tokens" : std::string("unknown"));
  // beside the prompt: one token to generate, the echoed answer, the chat template's tokens around it
  const bool echo = c.backend->options().echo;
  const int64_t around =
      c.backend->options().api == ApiKind::Chat
          ? std::max<int64_t>(0, c.backend->chat_overhead().second - (c.tokens->bos_id() >= 0 ? 1 : 0))
          : 0;
  const int64_t extra = (echo ? 2 : 1) + around;
  const std::string beside = fmt::format("{}one to generate{}", echo ? "the echoed answer, " : "",
                                         around > 0 ? fmt::format(", the chat template's {}", around) : "");
  if (ctx > 0 && spec.context + extra > ctx && !given.context) {
    spec.context = ctx - extra;  // the default does not fit: the longest prompt that does
    if (log)
      *log << fmt::format("context: {} tokens (the server's context less {}; --context sets it)\n",
                          spec.context, beside);
  }
  if (ctx > 0 && spec.context + extra > ctx)
    fail("--context " + std::to_string(spec.context),
         fmt::format("prompts of {} tokens (+{}: {}) do not fit the server's context of {} tokens; nothing "
                     "was sent (prompts are never truncated)",
                     spec.context, extra, beside, ctx),
         fmt::format("pass --context {} or less, or serve the model with a longer context", ctx - extra));
  const ServedTokenSpace& space = c.model.token_space;
  if (space.present) {
    NeedleSpec words = needle_token_space_spec(spec, space.fillers, space.keys, space.names);
    if (given.filler) words.filler = spec.filler;
    if (given.separator) words.separator = spec.separator;
    spec = words;
    if (log)
      *log << "words: this phasescope server's token names (keys k*, values n*, filler f0; --filler, "
              "--separator, --keys-file, --values-file override)\n";
  }
  if (c.backend->options().api == ApiKind::Chat)
    spec.position_offset = c.backend->chat_overhead().first - (c.tokens->bos_id() >= 0 ? 1 : 0);
  return spec;
}

}  // namespace phasescope
