// server_tokenizer.cpp — see server_tokenizer.h.
#include "http/server_tokenizer.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/check.h"
#include "core/json_fields.h"

namespace phasescope {

TokenizeFlavor tokenize_flavor_parse(const std::string& s, const std::string& where) {
  if (s == "auto") return TokenizeFlavor::Auto;
  if (s == "llama" || s == "llama-server" || s == "llama.cpp") return TokenizeFlavor::Llama;
  if (s == "vllm") return TokenizeFlavor::Vllm;
  fail(where, "unknown tokenize flavour '" + s + "'", "use auto, llama or vllm");
}

std::string tokenize_flavor_name(TokenizeFlavor f) {
  switch (f) {
    case TokenizeFlavor::Auto:
      return "auto";
    case TokenizeFlavor::Llama:
      return "llama";
    case TokenizeFlavor::Vllm:
      return "vllm";
  }
  return "?";
}

std::vector<int> tokenize_reply_parse(const std::string& body, int64_t* max_model_len) {
  const nlohmann::json j = json_parse_bounded(body);  // throws on malformed / truncated JSON
  if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array())
    throw std::runtime_error("no \"tokens\" array in the tokenize reply");
  std::vector<int> out;
  out.reserve(j["tokens"].size());
  for (const auto& t : j["tokens"]) {
    if (t.is_number_integer())
      out.push_back(t.get<int>());
    else if (t.is_object() && t.contains("id") && t["id"].is_number_integer())  // llama-server with_pieces
      out.push_back(t["id"].get<int>());
    else
      throw std::runtime_error("a token in the tokenize reply is not an id: " + t.dump());
  }
  if (max_model_len && j.contains("max_model_len") && j["max_model_len"].is_number_integer())
    *max_model_len = j["max_model_len"].get<int64_t>();
  return out;
}

ServerTokenizer::ServerTokenizer(HttpPool& pool, std::string model, TokenizeFlavor flavor)
    : pool_(pool), model_(std::move(model)), flavor_(flavor) {}

std::string ServerTokenizer::describe() const {
  return fmt::format("server tokenizer ({} /tokenize at {})", tokenize_flavor_name(flavor()),
                     pool_.options().base_urls.empty() ? std::string("?") : pool_.options().base_urls[0]);
}

TokenizeFlavor ServerTokenizer::flavor() const {
  std::lock_guard<std::mutex> g(mu_);
  return flavor_;
}

int64_t ServerTokenizer::context_length() const {
  std::lock_guard<std::mutex> g(mu_);
  return context_;
}

TokenizeFlavor ServerTokenizer::detect() const {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (flavor_ != TokenizeFlavor::Auto) return flavor_;
  }
  // vLLM's reply carries "count"; llama-server answers {content} requests with {tokens} only. The text
  // "a" first; a server whose tokens are not words (a phasescope server takes only its token names)
  // refuses it, so the empty text is tried next, which every tokenizer takes.
  TokenizeFlavor f = TokenizeFlavor::Auto;
  std::string errors;
  for (const char* text : {"a", ""}) {
    bool has_count = false;
    nlohmann::json vb = {{"model", model_}, {"prompt", text}, {"add_special_tokens", false}};
    HttpReply v = pool_.post("/tokenize", vb.dump(), [&](const std::string& body) {
      tokenize_reply_parse(body, nullptr);
      has_count = json_parse_bounded(body).contains("count");
    });
    if (!v.ok && v.status == 0)  // no HTTP answer at all: the shapes are not the question
      fail("tokenize at " + v.endpoint, v.error,
           "check that the server is up and listens at that URL (host, port, --base-url)");
    if (v.ok && has_count) {
      f = TokenizeFlavor::Vllm;
      break;
    }
    nlohmann::json lb = {{"content", text}, {"add_special", false}};
    HttpReply l = pool_.post("/tokenize", lb.dump(),
                             [&](const std::string& body) { tokenize_reply_parse(body, nullptr); });
    if (l.ok || v.ok) {
      f = l.ok ? TokenizeFlavor::Llama : TokenizeFlavor::Vllm;
      break;
    }
    if (errors.empty()) errors = "vLLM: " + v.error + "; llama-server: " + l.error;
  }
  if (f == TokenizeFlavor::Auto)
    fail("tokenize at " + pool_.describe(),
         "the server answers neither the vLLM nor the llama-server /tokenize shape (" + errors + ")",
         "serve the model with vLLM or llama-server, or pass --tokenizer PATH (a local tokenizer.json)");
  std::lock_guard<std::mutex> g(mu_);
  flavor_ = f;
  return f;
}

std::vector<int> ServerTokenizer::tokenize(const std::string& text, bool special) const {
  const TokenizeFlavor f = detect();
  nlohmann::json b;
  if (f == TokenizeFlavor::Vllm)
    b = {{"model", model_}, {"prompt", text}, {"add_special_tokens", special}};
  else
    b = {{"content", text}, {"add_special", special}};
  std::vector<int> out;
  int64_t ctx = 0;
  HttpReply r = pool_.post("/tokenize", b.dump(),
                           [&](const std::string& body) { out = tokenize_reply_parse(body, &ctx); });
  if (!r.ok)
    fail("tokenize at " + r.endpoint, r.error,
         "check that the server is up and serves /tokenize, or pass --tokenizer PATH");
  if (ctx > 0) {
    std::lock_guard<std::mutex> g(mu_);
    context_ = ctx;
  }
  return out;
}

std::vector<int> ServerTokenizer::encode(const std::string& text) const {
  std::vector<int> t = tokenize(text, false);
  // a server that adds BOS although asked not to: the contract here is "no BOS"
  const int bos = bos_id();
  if (bos >= 0 && !t.empty() && t[0] == bos && !text.empty()) {
    const std::vector<int> alone = tokenize("", false);
    if (!alone.empty() && alone[0] == bos) t.erase(t.begin());
  }
  return t;
}

std::vector<int> ServerTokenizer::encode_special(const std::string& text) const {
  return tokenize(text, true);
}

std::vector<std::vector<int>> ServerTokenizer::encode_many(const std::vector<std::string>& texts) const {
  detect();
  bos_id();
  std::vector<std::vector<int>> out(texts.size());
  std::vector<std::string> errors(texts.size());
  pool_.parallel_for(texts.size(), [&](size_t i) {
    try {
      out[i] = encode(texts[i]);
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
  });
  for (const std::string& e : errors)
    if (!e.empty()) throw Error(e);
  return out;
}

std::vector<std::string> ServerTokenizer::decode_many(const std::vector<std::vector<int>>& seqs) const {
  detect();
  std::vector<std::string> out(seqs.size()), errors(seqs.size());
  pool_.parallel_for(seqs.size(), [&](size_t i) {
    try {
      out[i] = decode(seqs[i]);
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
  });
  for (const std::string& e : errors)
    if (!e.empty()) throw Error(e);
  return out;
}

int ServerTokenizer::bos_id() const {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (bos_ != -2) return bos_;
  }
  const std::vector<int> t = tokenize("", true);
  std::lock_guard<std::mutex> g(mu_);
  bos_ = t.empty() ? -1 : t[0];
  return bos_;
}

std::string ServerTokenizer::decode(const std::vector<int>& tokens) const {
  const TokenizeFlavor f = detect();
  nlohmann::json b = {{"tokens", tokens}};
  if (f == TokenizeFlavor::Vllm) b["model"] = model_;
  std::string text;
  HttpReply r = pool_.post("/detokenize", b.dump(), [&](const std::string& body) {
    const nlohmann::json j = json_parse_bounded(body);
    const char* key = f == TokenizeFlavor::Vllm ? "prompt" : "content";
    if (!j.is_object() || !j.contains(key) || !j[key].is_string())
      throw std::runtime_error(std::string("no \"") + key + "\" string in the detokenize reply");
    text = j[key].get<std::string>();
  });
  if (!r.ok)
    fail("detokenize at " + r.endpoint, r.error,
         "check that the server serves /detokenize, or pass --tokenizer PATH");
  return text;
}

std::vector<int> ServerTokenizer::encode_chat(const std::vector<ChatMessage>& messages,
                                              bool add_generation_prompt,
                                              const nlohmann::json& kwargs) const {
  const TokenizeFlavor f = detect();
  nlohmann::json msgs = nlohmann::json::array();
  for (const ChatMessage& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  if (f == TokenizeFlavor::Vllm) {
    nlohmann::json b = {
        {"model", model_}, {"messages", msgs}, {"add_generation_prompt", add_generation_prompt}};
    if (!kwargs.empty()) b["chat_template_kwargs"] = kwargs;
    std::vector<int> out;
    HttpReply r = pool_.post("/tokenize", b.dump(),
                             [&](const std::string& body) { out = tokenize_reply_parse(body, nullptr); });
    if (!r.ok) fail("chat tokenize at " + r.endpoint, r.error, "pass --template-offset N instead");
    return out;
  }
  // llama-server: the template as text, then its tokens with special tokens parsed
  std::string prompt;
  nlohmann::json b = {{"messages", msgs}};
  if (!kwargs.empty()) b["chat_template_kwargs"] = kwargs;
  HttpReply r = pool_.post("/apply-template", b.dump(), [&](const std::string& body) {
    const nlohmann::json j = json_parse_bounded(body);
    if (!j.contains("prompt") || !j["prompt"].is_string())
      throw std::runtime_error("no \"prompt\" in the reply");
    prompt = j["prompt"].get<std::string>();
  });
  if (!r.ok) fail("apply-template at " + r.endpoint, r.error, "pass --template-offset N instead");
  nlohmann::json tb = {{"content", prompt}, {"add_special", true}, {"parse_special", true}};
  std::vector<int> out;
  HttpReply t = pool_.post("/tokenize", tb.dump(),
                           [&](const std::string& body) { out = tokenize_reply_parse(body, nullptr); });
  if (!t.ok) fail("tokenize at " + t.endpoint, t.error, "pass --template-offset N instead");
  return out;
}

}  // namespace phasescope
