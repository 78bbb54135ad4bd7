// openai_client.cpp — see openai_client.h. Request bodies are assembled as text (a constant head and
// the token ids written with fmt) because a 128K-token prompt through nlohmann::json costs more than
// the request itself; replies are parsed with nlohmann::json.
#include "http/openai_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/check.h"
#include "core/json_fields.h"
#include "http/chat_template.h"
#include "http/server_tokenizer.h"

namespace phasescope {

namespace {

using json = nlohmann::json;

double lp_value(const json& v) {
  return v.is_number() ? v.get<double>() : std::nan("");  // null logprobs (first echoed token)
}

// One alternative of the chat form {token, logprob, id?} or a legacy (string, logprob) pair.
CompletionEntry entry_from(const std::string& tok, const json& lp, const json* id) {
  CompletionEntry e;
  e.token = tok;
  e.logprob = lp_value(lp);
  e.id = id && id->is_number_integer() ? id->get<int>() : token_id_from_string(tok);
  return e;
}

void sort_best_first(std::vector<CompletionEntry>* v) {
  std::stable_sort(v->begin(), v->end(), [](const CompletionEntry& a, const CompletionEntry& b) {
    const double x = std::isnan(a.logprob) ? -INFINITY : a.logprob,
                 y = std::isnan(b.logprob) ? -INFINITY : b.logprob;
    return x > y;
  });
}

}  // namespace

ApiKind api_kind_parse(const std::string& s, const std::string& where) {
  if (s == "completions") return ApiKind::Completions;
  if (s == "chat") return ApiKind::Chat;
  fail(where, "unknown API '" + s + "'", "use completions (/v1/completions) or chat (/v1/chat/completions)");
}

PromptForm prompt_form_parse(const std::string& s, const std::string& where) {
  if (s == "tokens") return PromptForm::Tokens;
  if (s == "text") return PromptForm::Text;
  fail(where, "unknown prompt form '" + s + "'",
       "use tokens (token ids, exact) or text (for servers without token-id prompts)");
}

int token_id_from_string(const std::string& s) {
  static const std::string p = "token_id:";
  if (s.size() <= p.size() || s.compare(0, p.size(), p) != 0) return -1;
  int v = 0;
  for (size_t i = p.size(); i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9' || v > 100'000'000) return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

CompletionChoice completion_reply_parse(const std::string& body) {
  const json j = json_parse_bounded(body);  // throws on malformed or truncated JSON
  if (!j.is_object()) throw std::runtime_error("the reply is not a JSON object");
  if (j.contains("error") && !j.contains("choices"))
    throw std::runtime_error("the server replied with an error: " + j["error"].dump());
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty())
    throw std::runtime_error("no \"choices\" in the reply");
  const json& c = j["choices"][0];
  if (!c.is_object()) throw std::runtime_error("choices[0] is not an object");
  CompletionChoice out;
  if (c.contains("text") && c["text"].is_string()) out.text = c["text"].get<std::string>();
  if (c.contains("message") && c["message"].is_object() && c["message"].contains("content") &&
      c["message"]["content"].is_string())
    out.text = c["message"]["content"].get<std::string>();
  if (c.contains("finish_reason") && c["finish_reason"].is_string())
    out.finish_reason = c["finish_reason"].get<std::string>();
  if (c.contains("token_ids") && c["token_ids"].is_array())
    for (const json& t : c["token_ids"]) out.token_ids.push_back(t.get<int>());

  // logprobs: the chat form {content: [...]} or the legacy form {tokens, token_logprobs, top_logprobs}
  if (c.contains("logprobs") && c["logprobs"].is_object()) {
    const json& lp = c["logprobs"];
    if (lp.contains("content") && lp["content"].is_array()) {
      for (const json& e : lp["content"]) {
        const json* id = e.contains("id") ? &e["id"] : nullptr;
        out.chosen.push_back(entry_from(e.value("token", std::string()), e.value("logprob", json()), id));
        std::vector<CompletionEntry> alts;
        if (e.contains("top_logprobs") && e["top_logprobs"].is_array())
          for (const json& a : e["top_logprobs"]) {
            const json* aid = a.contains("id") ? &a["id"] : nullptr;
            alts.push_back(entry_from(a.value("token", std::string()), a.value("logprob", json()), aid));
          }
        sort_best_first(&alts);
        out.top.push_back(std::move(alts));
      }
    } else if (lp.contains("tokens") && lp["tokens"].is_array()) {
      const json& toks = lp["tokens"];
      const json empty = json::array();
      const json& tlp =
          lp.contains("token_logprobs") && lp["token_logprobs"].is_array() ? lp["token_logprobs"] : empty;
      const json& tops =
          lp.contains("top_logprobs") && lp["top_logprobs"].is_array() ? lp["top_logprobs"] : empty;
      for (size_t p = 0; p < toks.size(); ++p) {
        out.chosen.push_back(
            entry_from(toks[p].get<std::string>(), p < tlp.size() ? tlp[p] : json(), nullptr));
        std::vector<CompletionEntry> alts;
        if (p < tops.size() && tops[p].is_object())
          for (auto it = tops[p].begin(); it != tops[p].end(); ++it)
            alts.push_back(entry_from(it.key(), it.value(), nullptr));
        sort_best_first(&alts);
        out.top.push_back(std::move(alts));
      }
    }
  }
  if (j.contains("usage") && j["usage"].is_object() && j["usage"].contains("prompt_tokens") &&
      j["usage"]["prompt_tokens"].is_number_integer())
    out.prompt_tokens = j["usage"]["prompt_tokens"].get<int64_t>();
  return out;
}

std::vector<ServedModel> served_models_parse(const std::string& body, bool* listed) {
  const json j = json_parse_bounded(body);
  std::vector<ServedModel> out;
  *listed = j.is_object() && j.contains("data") && j["data"].is_array();
  if (!*listed) return out;
  for (const json& m : j["data"]) {
    if (!m.is_object()) continue;
    ServedModel s;
    if (m.contains("id") && m["id"].is_string()) s.id = m["id"].get<std::string>();
    if (m.contains("max_model_len") && m["max_model_len"].is_number_integer())
      s.max_model_len = m["max_model_len"].get<int64_t>();
    if (m.contains("token_space") && m["token_space"].is_object()) {
      const json& t = m["token_space"];
      auto count = [&](const char* k) {
        return t.contains(k) && t[k].is_number_integer() ? std::max<int64_t>(0, t[k].get<int64_t>()) : 0;
      };
      s.token_space.fillers = int(std::min<int64_t>(count("fillers"), 1 << 20));
      s.token_space.keys = int(std::min<int64_t>(count("keys"), 1 << 20));
      s.token_space.names = int(std::min<int64_t>(count("names"), 1 << 20));
      s.token_space.present = s.token_space.fillers > 0 && s.token_space.keys > 0 && s.token_space.names > 0;
    }
    out.push_back(s);
  }
  return out;
}

std::vector<ServedModel> served_models(HttpPool& pool) {
  std::vector<ServedModel> out;
  bool listed = false;
  const HttpReply r = pool.get("/v1/models", [&](const std::string& body) {
    out = served_models_parse(body, &listed);
    if (!listed) throw std::runtime_error("the reply has no \"data\" list");
    out.erase(std::remove_if(out.begin(), out.end(), [](const ServedModel& m) { return m.id.empty(); }),
              out.end());  // a model without a name cannot be asked for
  });
  if (!r.ok || !listed)
    fail("GET /v1/models at " + pool.describe(), r.error,
         "pass --model NAME (the server's model name), or check that the server is up at --base-url");
  return out;
}

ServedModel served_model_choose(const std::vector<ServedModel>& models, const std::string& wanted,
                                const std::string& url) {
  std::string names;
  for (const ServedModel& m : models) names += (names.empty() ? "" : ", ") + m.id;
  if (!wanted.empty()) {
    for (const ServedModel& m : models)
      if (m.id == wanted) return m;
    ServedModel m;  // not listed: servers that alias names still answer; send what the user asked for
    m.id = wanted;
    return m;
  }
  if (models.size() == 1) return models[0];
  fail("--model",
       models.empty() ? "the server at " + url + " lists no model"
                      : fmt::format("the server at {} lists {} models ({})", url, models.size(), names),
       "pass --model NAME");
}

HttpBackend::HttpBackend(HttpPool& pool, OpenAIOptions opt, const TokenSource* tokens)
    : pool_(pool), opt_(std::move(opt)), tokens_(tokens) {
  if (opt_.model.empty())
    fail("--model", "no model name", "pass --model NAME (as the server lists it in /v1/models)");
  if (opt_.topk < 0 || opt_.topk > 20)
    fail("--topk", fmt::format("{} is outside 0..20", opt_.topk), "pass --topk 5");
  if (opt_.batch < 1) opt_.batch = 1;
  if (tokens_ == nullptr && (opt_.prompt == PromptForm::Text || opt_.api == ApiKind::Chat))
    fail("HTTP backend", "text and chat prompts need a tokenizer to turn the layout's tokens into text",
         "pass --tokenizer PATH or use the server's /tokenize (the default)");
  if (opt_.echo && (opt_.prompt == PromptForm::Text || opt_.api == ApiKind::Chat))
    fail("--echo", "echo scoring needs token-id prompts on /v1/completions",
         "drop --echo or use --prompt tokens --api completions");
  if (opt_.bos_id < 0 && tokens_ != nullptr) opt_.bos_id = tokens_->bos_id();

  // the constant head of every body; the prompt (or messages) is appended per request
  json head = {{"model", opt_.model}, {"max_tokens", 1}, {"temperature", 0}};
  if (opt_.api == ApiKind::Chat) {
    if (opt_.topk > 0) {
      head["logprobs"] = true;
      head["top_logprobs"] = opt_.topk;
    }
    if (!opt_.chat_template_kwargs.empty()) head["chat_template_kwargs"] = opt_.chat_template_kwargs;
  } else if (opt_.topk > 0) {
    head["logprobs"] = opt_.topk;
  }
  if (opt_.vllm_extras) head["return_tokens_as_token_ids"] = true;
  body_head_ = head.dump();
  body_head_.pop_back();  // drop the closing brace
}

std::string HttpBackend::describe() const {
  return fmt::format("OpenAI-compatible {} at {}, model {}, {} prompts, top-{} logprobs{}",
                     opt_.api == ApiKind::Chat ? "/v1/chat/completions" : "/v1/completions", pool_.describe(),
                     opt_.model, opt_.prompt == PromptForm::Tokens ? "token-id" : "text", opt_.topk,
                     opt_.echo ? ", answer logprob by echo" : "");
}

std::string HttpBackend::identity() const {
  const bool kwargs = opt_.api == ApiKind::Chat && !opt_.chat_template_kwargs.empty();
  return fmt::format(
      "http {} model '{}' {} prompts top-{}{}{}", opt_.api == ApiKind::Chat ? "chat" : "completions",
      opt_.model, opt_.prompt == PromptForm::Tokens ? "token-id" : "text", opt_.topk,
      opt_.echo ? " echo" : "", kwargs ? " chat_template_kwargs " + opt_.chat_template_kwargs.dump() : "");
}

int64_t HttpBackend::context_length() {
  std::lock_guard<std::mutex> g(mu_);
  if (context_known_) return context_;
  context_known_ = true;
  if (opt_.max_context != 0) {
    context_ = opt_.max_context;
    return context_;
  }
  // vLLM: /v1/models data[].max_model_len; llama-server: /props default_generation_settings.n_ctx
  int64_t found = -1;
  // (this model's entry, else the first that lists one)
  pool_.get("/v1/models", [&](const std::string& body) {
    bool has_list = false;
    for (const ServedModel& m : served_models_parse(body, &has_list))
      if (m.max_model_len > 0 && (found < 0 || m.id == opt_.model)) found = m.max_model_len;
  });
  if (found < 0)
    pool_.get("/props", [&](const std::string& body) {
      const json j = json_parse_bounded(body);
      if (j.contains("default_generation_settings") && j["default_generation_settings"].is_object() &&
          j["default_generation_settings"].contains("n_ctx") &&
          j["default_generation_settings"]["n_ctx"].is_number_integer())
        found = j["default_generation_settings"]["n_ctx"].get<int64_t>();
      else if (j.contains("n_ctx") && j["n_ctx"].is_number_integer())
        found = j["n_ctx"].get<int64_t>();
    });
  if (found < 0)
    if (const auto* st = dynamic_cast<const ServerTokenizer*>(tokens_); st && st->context_length() > 0)
      found = st->context_length();
  context_ = found;
  return context_;
}

std::pair<int64_t, int64_t> HttpBackend::chat_overhead() {
  std::lock_guard<std::mutex> g(mu_);
  if (chat_known_) return chat_;
  chat_known_ = true;
  const auto* st = dynamic_cast<const ServerTokenizer*>(tokens_);
  if (opt_.template_offset >= 0) {
    chat_ = {opt_.template_offset, opt_.template_total};  // a total of -1: usage is not checked
  } else if (st == nullptr) {
    fail("--api chat", "cannot measure the chat template's offset without the server's /tokenize",
         "pass --chat-template (the model's tokenizer_config.json or .jinja), drop --tokenizer (use the "
         "server's), or pass --template-offset N");
  } else {
    // the template around a probe text: where the text's tokens start, and how many surround them
    const ChatFrame f =
        chat_frame_of(st->encode_chat({{"user", chat_frame_probe_text()}}, true, opt_.chat_template_kwargs),
                      *st, "--api chat");
    chat_ = {f.offset, f.total};
  }
  return chat_;
}

int HttpBackend::token_id_of(const CompletionEntry& e) {
  if (e.id >= 0) return e.id;
  if (tokens_ == nullptr || e.token.empty()) return -1;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = id_cache_.find(e.token);
    if (it != id_cache_.end()) return it->second;
  }
  const std::vector<int> t = tokens_->encode(e.token);
  const int id = t.size() == 1 ? t[0] : -1;  // a token's text that does not encode back to one token: unknown
  std::lock_guard<std::mutex> g(mu_);
  id_cache_[e.token] = id;
  return id;
}

std::string HttpBackend::request_body(const std::vector<int>& prompt, const std::string& text,
                                      bool echo) const {
  std::string b = body_head_;
  b.reserve(b.size() + 32 + prompt.size() * 7 + text.size() * 2);
  if (opt_.api == ApiKind::Chat) {
    b += ",\"messages\":[{\"role\":\"user\",\"content\":";
    b += json(text).dump();
    b += "}]}";
    return b;
  }
  if (echo) b += ",\"echo\":true";
  b += ",\"prompt\":";
  if (opt_.prompt == PromptForm::Text) {
    b += json(text).dump();
  } else {
    b += '[';
    for (size_t i = 0; i < prompt.size(); ++i) {
      if (i) b += ',';
      b += fmt::format_int(prompt[i]).c_str();
    }
    b += ']';
  }
  b += '}';
  return b;
}

ScoreResult HttpBackend::score_one(const ScoreRequest& req) {
  const auto t0 = std::chrono::steady_clock::now();
  ScoreResult r;
  auto done = [&](std::string error) {
    r.error = pool_.scrub(std::move(error));
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return r;
  };
  const std::vector<int>& t = req.tokens;
  if (t.empty()) return done("empty prompt");
  const int bos = opt_.bos_id;
  const bool has_bos = bos >= 0 && t[0] == bos;
  if (has_bos && t.size() >= 2 && t[1] == bos)
    return done(
        "double BOS: the prompt starts with two BOS tokens; refused (the layout must put exactly one)");
  const bool echo = opt_.echo && req.answer >= 0;

  // the prompt as the server will see it, and the token count it must report
  std::vector<int> ids;
  std::string text;
  int64_t expect = static_cast<int64_t>(t.size()) + (echo ? 1 : 0);
  if (opt_.prompt == PromptForm::Text || opt_.api == ApiKind::Chat) {
    const std::vector<int> body(t.begin() + (has_bos ? 1 : 0), t.end());
    text = tokens_->decode(body);
    if (bos >= 0) {
      const std::string bos_text = tokens_->decode({bos});
      if (!bos_text.empty() && text.compare(0, bos_text.size(), bos_text) == 0)
        return done("double BOS: the prompt text starts with the BOS text '" + bos_text +
                    "' and the server adds its own; refused");
    }
    if (opt_.api == ApiKind::Chat) {
      const auto [offset, total] = chat_overhead();
      expect = total >= 0 ? static_cast<int64_t>(body.size()) + total : -1;
      if (total < 0) expect = -1;
      (void)offset;
    }
  } else {
    ids = t;
    if (echo) ids.push_back(req.answer);
  }
  const int64_t ctx = context_length();
  const int64_t need =
      (expect >= 0 ? expect : static_cast<int64_t>(t.size())) + 1;  // + the one generated token
  if (ctx > 0 && need > ctx)
    return done(
        fmt::format("prompt of {} tokens (+1 to generate) exceeds the server's context of {} tokens; refused "
                    "before sending (never truncated): for probe needle pass a smaller --context, or serve "
                    "the model with a "
                    "longer context (phasescope serve --max-model-len N)",
                    need - 1, ctx));

  // send it (retried inside the pool); the reply must parse
  CompletionChoice c;
  const std::string path = opt_.api == ApiKind::Chat ? "/v1/chat/completions" : "/v1/completions";
  HttpReply rep = pool_.post(path, request_body(ids, text, echo),
                             [&](const std::string& b) { c = completion_reply_parse(b); });
  if (!rep.ok) return done(rep.error);

  // positions verified: the server must have counted exactly the layout's tokens
  if (c.prompt_tokens >= 0 && expect >= 0 && c.prompt_tokens != expect)
    return done(
        fmt::format("positions not verified: the server counted {} prompt tokens where the prompt has {} "
                    "({}); sample refused. Check BOS handling (a server adding its own BOS counts one more)",
                    c.prompt_tokens, expect, c.prompt_tokens > expect ? "more" : "fewer"));
  if (c.prompt_tokens < 0 && opt_.require_usage)
    return done("the reply has no usage.prompt_tokens, so positions cannot be verified (--require-usage)");

  // top-1, top-k and the answer's log-probability at the prediction position
  size_t p = 0;
  if (echo) {
    p = t.size();  // the appended answer's position among the echoed prompt tokens
    if (c.chosen.size() <= p || c.top.size() <= p)
      return done(fmt::format(
          "echo reply has logprobs for {} positions, needed {}; the server ignores echo (drop --echo)",
          c.chosen.size(), p + 1));
  }
  std::vector<CompletionEntry> alts = p < c.top.size() ? c.top[p] : std::vector<CompletionEntry>{};
  for (const CompletionEntry& e : alts) {
    const int id = token_id_of(e);
    if (id < 0) continue;
    bool dup = false;
    for (const auto& [tok, lp] : r.topk) dup = dup || tok == id;
    if (!dup && static_cast<int>(r.topk.size()) < std::max(opt_.topk, 1)) r.topk.push_back({id, e.logprob});
  }
  if (echo) {
    r.top1 = r.topk.empty() ? -1 : r.topk[0].first;
    r.answer_logprob = c.chosen[p].logprob;
  } else {
    if (!c.token_ids.empty())
      r.top1 = c.token_ids[0];
    else if (!c.chosen.empty())
      r.top1 = token_id_of(c.chosen[0]);
    else if (!c.text.empty())
      r.top1 = token_id_of(CompletionEntry{c.text, -1, 0});
    if (r.top1 < 0)
      return done(
          "cannot tell which token the server predicted (no token_ids, no token_id:N logprobs, and its text "
          "'" +
          c.text + "' is not one token of the tokenizer)");
    if (!c.chosen.empty() && r.top1 == req.answer) r.answer_logprob = c.chosen[0].logprob;
    for (const auto& [tok, lp] : r.topk)
      if (tok == req.answer && std::isnan(r.answer_logprob)) r.answer_logprob = lp;
    if (r.topk.empty() && !c.chosen.empty()) r.topk.push_back({r.top1, c.chosen[0].logprob});
  }
  return done("");
}

std::vector<ScoreResult> HttpBackend::score(const std::vector<ScoreRequest>& batch) {
  context_length();  // ask once, before the workers do
  if (opt_.api == ApiKind::Chat) chat_overhead();
  std::vector<ScoreResult> out(batch.size());
  pool_.parallel_for(batch.size(), [&](size_t i) {
    try {
      out[i] = score_one(batch[i]);
    } catch (const std::exception& e) {  // a tokenizer failure inside one sample fails that sample only
      out[i].error = pool_.scrub(e.what());
    }
  });
  return out;
}

}  // namespace phasescope
