// server_tokenizer.h — the server's tokenizer as a TokenSource: llama-server
// (POST /tokenize {content, add_special} -> {tokens}; POST /detokenize {tokens} -> {content}) and
// vLLM (POST /tokenize {model, prompt, add_special_tokens} -> {tokens, count, max_model_len};
// POST /tokenize {model, messages, add_generation_prompt} for chat templates;
// POST /detokenize {model, tokens} -> {prompt}). The flavour is detected on first use (vLLM's reply
// has "count") or forced. BOS is what the server adds to an empty text with special tokens on.
// Not here: completions (openai_client.h).
#pragma once
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "http/http_pool.h"
#include "http/token_source.h"

namespace phasescope {

enum class TokenizeFlavor { Auto, Llama, Vllm };
TokenizeFlavor tokenize_flavor_parse(const std::string& s, const std::string& where);  // auto|llama|vllm
std::string tokenize_flavor_name(TokenizeFlavor f);

struct ChatMessage {
  std::string role, content;
};

class ServerTokenizer : public TokenSource {
 public:
  ServerTokenizer(HttpPool& pool, std::string model, TokenizeFlavor flavor = TokenizeFlavor::Auto);
  std::string describe() const override;
  std::vector<int> encode(const std::string& text) const override;  // throws Error when the server fails
  std::string decode(const std::vector<int>& tokens) const override;
  int bos_id() const override;
  std::vector<std::vector<int>> encode_many(const std::vector<std::string>& texts) const override;
  std::vector<std::string> decode_many(const std::vector<std::vector<int>>& seqs) const override;

  // The server's tokens for text with its special tokens (BOS) added, as a text completion would.
  std::vector<int> encode_special(const std::string& text) const;
  // The tokens of a templated chat (vLLM: /tokenize {messages}; llama-server: /apply-template, then
  // /tokenize with special tokens parsed). add_generation_prompt: the assistant header is appended;
  // kwargs: chat_template_kwargs sent along when not empty.
  std::vector<int> encode_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                               const nlohmann::json& kwargs = nlohmann::json::object()) const;
  // max_model_len when the server's tokenize reply gave one (vLLM), else 0.
  int64_t context_length() const;
  TokenizeFlavor flavor() const;

 private:
  std::vector<int> tokenize(const std::string& text, bool special) const;
  TokenizeFlavor detect() const;

  HttpPool& pool_;
  std::string model_;
  mutable std::mutex mu_;
  mutable TokenizeFlavor flavor_;
  mutable int bos_ = -2;  // -2: not asked yet
  mutable int64_t context_ = 0;
};

// Parse a /tokenize reply: {"tokens": [ids]} or llama-server's {"tokens": [{"id": N, "piece": ...}]}.
// Sets *max_model_len when present. Throws std::runtime_error on anything else.
std::vector<int> tokenize_reply_parse(const std::string& body, int64_t* max_model_len);

}  // namespace phasescope
