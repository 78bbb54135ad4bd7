// chat_template.h — a model's chat template, rendered as HF transformers' apply_chat_template renders it,
// for servers that take only chat requests: the template is read from a file (a .jinja file, or the
// "chat_template" of a tokenizer_config.json, with its bos_token and eos_token), rendered by jinja2 itself
// (Debian's python3-jinja2 in an isolated child python3: the sandboxed environment with trim_blocks and
// lstrip_blocks, loop controls, the {% generation %} tag, raise_exception, strftime_now and a tojson that
// keeps non-ASCII, rendered with tools and documents none and every special token of the config, as
// transformers sets it up), and measured in tokens: where a user message's text starts in the rendered
// chat and how many tokens the template adds around it. Reasoning is turned off where the template allows:
// a template that reads `enable_thinking` (Qwen3, GLM) or `thinking` (DeepSeek V3.1 and later) gets it
// false, both when rendered here and in every request (chat_template_kwargs, as vLLM and SGLang take it).
// Not here: sending requests (openai_client.h), the server's own /tokenize of a chat (server_tokenizer.h).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "http/server_tokenizer.h"
#include "http/token_source.h"

namespace phasescope {

struct ChatTemplate {
  std::string source;                // the file it was read from
  std::string text;                  // the Jinja source
  std::string bos_token, eos_token;  // tokenizer_config.json's ("" from a bare template file)
  nlohmann::json special = nlohmann::json::object();  // every *_token and additional_special_tokens of
                                                      // tokenizer_config.json, as the template sees them
  bool from_config = false;                           // read from a tokenizer_config.json
  std::string sha256;                                 // of text
  nlohmann::json kwargs = nlohmann::json::object();   // reasoning off where the template reads it
};

// A .json file is a tokenizer_config.json: "chat_template" (a string, or a list of {name, template} whose
// "default" is taken), "bos_token" and "eos_token" (strings or {content}). Any other file is the template.
// Throws Error naming the file and the fix when there is no template in it.
ChatTemplate chat_template_load(const std::string& path);

// {"enable_thinking": false} and/or {"thinking": false} for the names the template reads; {} otherwise.
nlohmann::json chat_template_reasoning_off(const std::string& text);

// The rendered chat (add_generation_prompt: the assistant's header is appended). bos_token is the
// config's; a bare template file gets `bos_text` (the tokenizer's BOS). Throws Error naming the template file
// and jinja2's message when it cannot be rendered, and the package to install when python3 or jinja2 is
// missing.
std::string chat_template_render(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, const std::string& bos_text = "");

// Where one user message's tokens sit in the rendered chat (with the generation prompt), measured with the
// token source: offset = tokens before the user's text, total = tokens of the chat that are not the user's.
struct ChatFrame {
  int64_t offset = 0, total = 0;
};
// Throws Error when the user's text does not come out of the template as its own tokens (a template that
// rewrites the content, or tokens that merge across its edges): positions could not be verified.
ChatFrame chat_template_frame(const ChatTemplate& t, const TokenSource& ts);

// The frame of the same probe text in a chat the server tokenized (vLLM /tokenize {messages}).
ChatFrame chat_frame_of(const std::vector<int>& chat_tokens, const TokenSource& ts, const std::string& where);
// The probe text both frames are measured with.
const std::string& chat_frame_probe_text();

}  // namespace phasescope
