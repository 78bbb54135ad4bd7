// http_flags.h — the flags every HTTP-backed subcommand shares (`probe needle|flip`, `eval --base-url`)
// and their translation into ProbeConnectOptions. Flags only: the behaviour is in probe/probe_setup.h.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "probe/probe_setup.h"

namespace phasescope {

struct HttpArgs {
  std::vector<std::string> base_urls;
  std::string model;
  std::string api_key_env = "OPENAI_API_KEY";
  int concurrency = 64;
  double timeout_s = 120;
  int retries = 4;
  std::string api = "completions", prompt = "tokens";
  int topk = 5;
  bool echo = false;
  int64_t max_context = 0;
  bool require_usage = false;
  bool no_vllm_extras = false;
  int template_offset = -1;
  std::string chat_template;
  int batch = 0;
  std::string tokenizer, tokenize = "auto";
};

// required_url: --base-url is required (probe) or optional (eval, where it selects the HTTP backend).
inline void add_http_flags(CLI::App* cmd, HttpArgs& a, bool required_url) {
  auto* u = cmd->add_option(
      "--base-url", a.base_urls,
      "server base URL, e.g. http://127.0.0.1:8000 (repeat it for several servers: requests are "
      "spread over them, failing ones rested)");
  if (required_url) u->required();
  cmd->add_option("--model", a.model,
                  "model name sent with every request (default: the server's only model in /v1/models)");
  cmd->add_option("--api-key-env", a.api_key_env,
                  "environment variable holding the API key (never written anywhere)");
  cmd->add_option("--concurrency", a.concurrency, "requests in flight at most");
  cmd->add_option("--timeout-s", a.timeout_s, "per-request timeout in seconds");
  cmd->add_option("--retries", a.retries,
                  "retries of a failed request (backoff; Retry-After honoured on 429/5xx)");
  cmd->add_option("--api", a.api, "completions (/v1/completions) | chat (/v1/chat/completions)")
      ->check(CLI::IsMember({"completions", "chat"}));
  cmd->add_option("--prompt", a.prompt,
                  "tokens (token-id prompts, exact) | text (decoded; for servers without token ids)")
      ->check(CLI::IsMember({"tokens", "text"}));
  cmd->add_option("--topk", a.topk, "top-k log-probabilities requested (0..20)");
  cmd->add_flag("--echo", a.echo, "answer log-probability via echo (exact even outside the top-k; vLLM)");
  cmd->add_option("--max-context", a.max_context,
                  "the server's context in tokens (0: ask /v1/models or /props; longer prompts are refused "
                  "before sending)");
  cmd->add_flag("--require-usage", a.require_usage, "refuse replies without usage.prompt_tokens");
  cmd->add_flag("--no-vllm-extras", a.no_vllm_extras,
                "do not send return_tokens_as_token_ids (strict OpenAI servers)");
  cmd->add_option(
      "--template-offset", a.template_offset,
      "chat: tokens the chat template puts before the user text (default: measured via /tokenize)");
  cmd->add_option("--chat-template", a.chat_template,
                  "chat: the model's chat template (its tokenizer_config.json or a .jinja file), rendered "
                  "here to place the prompt in tokens; reasoning is turned off where the template allows");
  cmd->add_option(
      "--batch", a.batch,
      "requests handed to the backend (and journaled) at once (default: 4 x concurrency, so a slow "
      "server's results reach the journal and the progress line as they come)");
  cmd->add_option("--tokenizer", a.tokenizer, "local tokenizer.json (default: the server's /tokenize)");
  cmd->add_option("--tokenize", a.tokenize, "server /tokenize shape: auto | llama | vllm")
      ->check(CLI::IsMember({"auto", "llama", "vllm"}));
}

inline ProbeConnectOptions http_connect_options(const HttpArgs& a) {
  ProbeConnectOptions o;
  o.http.base_urls = a.base_urls;
  o.http.api_key_env = a.api_key_env;
  o.http.concurrency = a.concurrency;
  o.http.timeout_s = a.timeout_s;
  o.http.retries = a.retries;
  o.api.model = a.model;
  o.api.api = api_kind_parse(a.api, "--api");
  o.api.prompt = prompt_form_parse(a.prompt, "--prompt");
  o.api.topk = a.topk;
  o.api.echo = a.echo;
  o.api.max_context = a.max_context;
  o.api.require_usage = a.require_usage;
  o.api.vllm_extras = !a.no_vllm_extras;
  o.api.template_offset = a.template_offset;
  o.api.batch = a.batch > 0 ? a.batch : 4 * a.concurrency;
  o.tokenizer_path = a.tokenizer;
  o.chat_template_path = a.chat_template;
  o.flavor = tokenize_flavor_parse(a.tokenize, "--tokenize");
  return o;
}

}  // namespace phasescope
