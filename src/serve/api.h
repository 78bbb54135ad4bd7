// api.h — the JSON of the HTTP API, torch-free: requests in the OpenAI / vLLM / llama-server shapes are
// checked and turned into GenSpecs (engine.h); engine outputs are rendered as replies; every refusal is an
// ApiError that the server sends as an OpenAI-style error object {"error": {message, type, param, code}}.
//   POST /v1/completions       prompt: text | [text] | [ids] | [[ids]]; vLLM-style choices[].text and
//                              choices[].logprobs {tokens, token_logprobs, top_logprobs, text_offset}, plus
//                              choices[].token_ids (the generated ids) and usage.
//   POST /v1/chat/completions  template: BOS, then every message's content tokens in order (roles carry no
//                              tokens: the in-process vocabulary has none); the reply is the generated
//                              tokens.
//   POST /tokenize             {"content"} (llama-server) -> {tokens}; {"prompt"|"messages"} (vLLM) ->
//                              {count, max_model_len, tokens, token_strs}
//   POST /detokenize           {"tokens"} -> {"prompt" (vLLM), "content" (llama-server)}: both keys, same
//   text
//   phasescope_spans (completions, with `serve --align-spans card.json`): [[begin, end(, anchor)], ...] token
//                              indices of the prompt (a list of such lists, one per prompt, for several
//                              prompts); phasescope_align {"mode": "align"|"repeat"|"both", "copies": K}.
//                              The prompt is aligned (align/align.h) before prefill; the reply's
//                              phasescope_alignment gives each prompt's added tokens, spans, anchors, phases.
// Text is the token-name text of serve/text_codec.h. The server adds no BOS to any prompt (the chat template
// and add_special[_tokens]: true on /tokenize are the only places a BOS is added).
// Not here: sockets and threads (server.h), the model (engine.h).
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "align/align.h"
#include "data/vocab.h"
#include "serve/engine.h"

namespace phasescope {

// A refused request: HTTP status, OpenAI error type ("invalid_request_error", "not_found_error",
// "server_error", "service_unavailable"), the offending parameter (or ""), and a short code.
struct ApiError : std::runtime_error {
  int status;
  std::string type, param, code;
  ApiError(int status_, const std::string& message, const std::string& param_ = "",
           const std::string& code_ = "");
};

// What the server serves, as requests see it.
struct ApiModel {
  std::string id;  // the model name requests must use (when they name one) and replies carry
  Vocab vocab;
  int max_model_len = 256;              // prompt + max_tokens must fit (refused, never truncated)
  int max_logprobs = 20;                // the most alternatives per position
  int64_t created = 0;                  // unix time the server started
  std::string root;                     // the checkpoint path (informational, /v1/models)
  std::optional<PhaseCard> align_card;  // serve --align-spans: completions may mark phasescope_spans
};

// A checked completions or chat request.
struct CompletionJob {
  bool chat = false;
  std::vector<std::vector<int>> prompts;  // (prompts) token ids after the text codec / chat template
  int n = 1;                              // choices per prompt
  std::vector<GenSpec> specs;             // (prompts x n), prompt-major: choice index = prompt * n + j
  bool echo = false;                      // completions: prefix text and log-probs with the prompt's
  int logprobs = -1;                      // alternatives per position; -1 = no log-probs in the reply
  bool tokens_as_ids = false;             // vLLM's return_tokens_as_token_ids: tokens as "token_id:17"
  std::vector<AlignedPrompt> alignment;   // (prompts) when the request marked phasescope_spans, else empty
};

// Parse and check a request body. `seed` is used when the request gives none (sample j of every prompt
// is seeded with seed + j). Throws ApiError (400 bad JSON / field / value / context length, 404 model).
CompletionJob completion_parse(const std::string& body, const ApiModel& m, uint64_t seed);
CompletionJob chat_parse(const std::string& body, const ApiModel& m, uint64_t seed);

// The reply to a job: one GenOutput per spec. `id` is the reply's id, `created` its unix time.
std::string completion_reply(const CompletionJob& job, const std::vector<GenOutput>& outs, const ApiModel& m,
                             const std::string& id, int64_t created);

// /tokenize, /detokenize and /v1/models replies (throw ApiError for bad requests).
std::string tokenize_reply(const std::string& body, const ApiModel& m);
std::string detokenize_reply(const std::string& body, const ApiModel& m);
std::string models_reply(const ApiModel& m);

// {"error": {"message", "type", "param", "code"}}
std::string error_body(const ApiError& e);

}  // namespace phasescope
