// openai_client.h — the HTTP Backend: scores token-id prompts on an OpenAI-compatible server (vLLM,
// llama-server, `phasescope serve`) with POST /v1/completions {prompt: [ids], max_tokens: 1,
// temperature: 0, logprobs: k}, or /v1/chat/completions with the prompt as one user message. A whole
// batch is sent concurrently through an HttpPool (bounded in flight, retried, spread over endpoints).
// Positions are verified, not assumed: a reply whose usage.prompt_tokens differs from the prompt's
// length refuses the sample (an error, retried on resume, never scored as wrong); a prompt longer
// than the server's context is refused before sending; a prompt with two BOS in front is refused.
// Reply token ids come from, in order: the choice's "token_ids" (phasescope serve), vLLM's
// "token_id:N" strings (return_tokens_as_token_ids), "id" fields, else the TokenSource re-tokenizing
// the token text. Not here: layouts, journals (probe/, eval/), the retry machinery (http_pool.h).
#pragma once
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "eval/backend.h"
#include "http/http_pool.h"
#include "http/token_source.h"

namespace phasescope {

enum class ApiKind { Completions, Chat };
enum class PromptForm { Tokens, Text };
ApiKind api_kind_parse(const std::string& s, const std::string& where);        // completions|chat
PromptForm prompt_form_parse(const std::string& s, const std::string& where);  // tokens|text

struct OpenAIOptions {
  std::string model;  // "model" of every request
  ApiKind api = ApiKind::Completions;
  PromptForm prompt = PromptForm::Tokens;  // Text: the prompt decoded through the TokenSource (BOS left
                                           // to the server, which must count the same tokens)
  int topk = 5;                            // logprobs / top_logprobs requested
  bool echo = false;                       // answer logprob through echo: prompt + [answer] with echo
                                           // true, read at the answer's position (exact even when the
                                           // answer is outside the top-k; vLLM)
  int64_t max_context = 0;                 // tokens; 0 = ask the server (GET /v1/models max_model_len,
                                           // /props n_ctx), -1 = never check
  bool require_usage = false;              // refuse replies without usage.prompt_tokens
  bool vllm_extras = true;                 // send return_tokens_as_token_ids: true
  int bos_id = -1;                         // the model's BOS (double-BOS guard); -1 = from the TokenSource
  int template_offset = -1;                // chat: template tokens before the user text (-1 = measure)
  int template_total = -1;                 // chat: template tokens around it, with template_offset (-1:
                                           // unknown, usage is then not checked)
  nlohmann::json chat_template_kwargs = nlohmann::json::object();  // chat: sent with every request
                                                                   // (reasoning off; {} = not sent)
  int batch = 256;  // max_batch(): requests handed over at once
};

// One completion choice, flattened. Per logprob position p: the chosen token (string and id, -1 when
// unknown), its logprob (NaN when null) and the alternatives. Echo replies start with prompt positions.
struct CompletionEntry {
  std::string token;
  int id = -1;
  double logprob = 0;
};
struct CompletionChoice {
  std::string text;
  std::vector<int> token_ids;                     // generated ids, when the reply gave them
  std::vector<CompletionEntry> chosen;            // (P) per logprob position
  std::vector<std::vector<CompletionEntry>> top;  // (P, k) alternatives, best first
  int64_t prompt_tokens = -1;                     // usage.prompt_tokens, -1 when absent
  std::string finish_reason;
};
// Parse a /v1/completions or /v1/chat/completions reply (legacy logprobs {tokens, token_logprobs,
// top_logprobs} or the chat form {content: [{token, logprob, top_logprobs}]}). Throws
// std::runtime_error naming what is missing (malformed or truncated replies are retried).
CompletionChoice completion_reply_parse(const std::string& body);
// "token_id:123" -> 123, anything else -> -1.
int token_id_from_string(const std::string& s);

// A model as GET /v1/models lists it. token_space: a phasescope server's token names (serve/api.cpp
// models_reply: "bos", f0..f{fillers-1}, k0.., n0.., b0..); absent for other servers.
struct ServedTokenSpace {
  bool present = false;
  int fillers = 0, keys = 0, names = 0;
};
struct ServedModel {
  std::string id;
  int64_t max_model_len = 0;  // 0: not listed (llama-server)
  ServedTokenSpace token_space;
};
// A /v1/models reply body -> its models (id "" where an entry has none); *listed = whether it holds a
// "data" list at all. Throws
// JsonInputError when the body is not JSON.
std::vector<ServedModel> served_models_parse(const std::string& body, bool* listed);
// GET /v1/models. Throws Error (naming the URL) when the server does not answer it with a list.
std::vector<ServedModel> served_models(HttpPool& pool);
// The model to probe: `wanted` when given (and listed, if the server lists models), else the server's
// only model. Throws Error naming the listed models when the choice is not clear.
ServedModel served_model_choose(const std::vector<ServedModel>& models, const std::string& wanted,
                                const std::string& url);

class HttpBackend : public Backend {
 public:
  // tokens may be null (then reply tokens must come with ids, and Text / Chat prompts are unavailable).
  HttpBackend(HttpPool& pool, OpenAIOptions opt, const TokenSource* tokens);
  std::string describe() const override;
  // the served model's name and what changes scores (API, prompt form, top-k, echo); not the URLs
  std::string identity() const override;
  std::vector<ScoreResult> score(const std::vector<ScoreRequest>& batch) override;
  int max_batch() const override { return opt_.batch; }

  ScoreResult score_one(const ScoreRequest& req);  // thread-safe
  // The server's context length as used for refusals (asks once when max_context is 0); -1 unknown.
  int64_t context_length();
  // Chat: tokens the template puts before the user text, and in total around it (measured once).
  std::pair<int64_t, int64_t> chat_overhead();
  const OpenAIOptions& options() const { return opt_; }

 private:
  int token_id_of(const CompletionEntry& e);  // id, or the TokenSource's single token for its text
  std::string request_body(const std::vector<int>& prompt, const std::string& text, bool echo) const;

  HttpPool& pool_;
  OpenAIOptions opt_;
  const TokenSource* tokens_;
  std::string body_head_;  // the constant part of every request body
  std::mutex mu_;
  bool context_known_ = false;
  int64_t context_ = -1;
  bool chat_known_ = false;
  std::pair<int64_t, int64_t> chat_{0, 0};
  std::unordered_map<std::string, int> id_cache_;  // token text -> id (TokenSource)
};

}  // namespace phasescope
