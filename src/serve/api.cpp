// api.cpp — see api.h. Field checks follow OpenAI: an unknown parameter, a wrong type or a value out of
// range is a 400 naming the parameter; null means "the default" for every optional field.
#include "serve/api.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/json_fields.h"
#include "serve/text_codec.h"

namespace phasescope {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;  // replies keep their fields in the documented order

namespace {

constexpr int kMaxChoices = 64;      // n
constexpr int kMaxSequences = 1024;  // prompts x n in one request
constexpr int kMaxStops = 16;

std::string error_type(int status) {
  if (status == 404) return "not_found_error";
  if (status == 503) return "service_unavailable";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

[[noreturn]] void bad(const std::string& param, const std::string& message,
                      const std::string& code = "invalid_value") {
  throw ApiError(400, message, param, code);
}

json parse_object(const std::string& body) {
  json j;
  try {
    j = json_parse_bounded(body);
  } catch (const JsonInputError& e) {
    throw ApiError(
        400,
        fmt::format("We could not parse the JSON body of your request ({}). Send one JSON object, e.g. "
                    "'{{\"prompt\": \"bos k1 n2 k1\", \"max_tokens\": 1}}'",
                    e.what()),
        "", "invalid_json");
  }
  if (!j.is_object())
    throw ApiError(400, fmt::format("The request body must be a JSON object, got {}", j.type_name()), "",
                   "invalid_json");
  return j;
}

void check_known(const json& j, const std::set<std::string>& known) {
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key())) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      bad(it.key(),
          fmt::format("Unrecognized request argument supplied: {} (this endpoint accepts: {})", it.key(),
                      list),
          "unknown_parameter");
    }
}

std::string show(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 60) + "..." : s;
}

// The optional request fields: absent or null -> the default. Types are tested by core/json_fields.h's
// json_is, like every JSON field phasescope reads; only the refusal differs, an OpenAI 400 naming the
// parameter (invalid_type, or invalid_value when out of range) instead of a phasescope::Error.
int64_t get_int(const json& j, const std::string& key, int64_t dflt, int64_t lo, int64_t hi) {
  if (!json_present(j, key)) return dflt;
  const json& v = j.at(key);
  if (!json_is<int64_t>(v))
    bad(key, fmt::format("'{}' must be an integer, got {}", key, show(v)), "invalid_type");
  const int64_t x =
      v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())
          ? std::numeric_limits<int64_t>::max()
          : v.get<int64_t>();
  if (x < lo || x > hi) bad(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, x));
  return x;
}

double get_number(const json& j, const std::string& key, double dflt, double lo, double hi) {
  if (!json_present(j, key)) return dflt;
  const json& v = j.at(key);
  if (!json_is<double>(v))
    bad(key, fmt::format("'{}' must be a number, got {}", key, show(v)), "invalid_type");
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) bad(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, x));
  return x;
}

bool get_bool(const json& j, const std::string& key, bool dflt) {
  if (!json_present(j, key)) return dflt;
  const json& v = j.at(key);
  if (!json_is<bool>(v))
    bad(key, fmt::format("'{}' must be a boolean, got {}", key, show(v)), "invalid_type");
  return v.get<bool>();
}

std::string get_string(const json& j, const std::string& key, const std::string& dflt) {
  if (!json_present(j, key)) return dflt;
  const json& v = j.at(key);
  if (!json_is<std::string>(v))
    bad(key, fmt::format("'{}' must be a string, got {}", key, show(v)), "invalid_type");
  return v.get<std::string>();
}

// The request's "model", when given, must be the served one (404 otherwise, as OpenAI and vLLM answer).
void check_model(const json& j, const ApiModel& m) {
  const std::string name = get_string(j, "model", m.id);
  if (name != m.id)
    throw ApiError(
        404,
        fmt::format("The model `{}` does not exist. This server serves `{}` (GET /v1/models)", name, m.id),
        "model", "model_not_found");
}

// Parameters that are accepted for compatibility only at their neutral value.
void check_neutral(const json& j) {
  for (const char* k : {"presence_penalty", "frequency_penalty"})
    if (json_present(j, k) && get_number(j, k, 0, -2, 2) != 0)
      bad(k, fmt::format("'{}' is not supported by this server; leave it out or send 0", k), "unsupported");
  if (get_bool(j, "stream", false))
    bad("stream", "streaming is not supported by this server; send \"stream\": false or leave it out",
        "unsupported");
  if (json_present(j, "best_of") && get_int(j, "best_of", 1, 1, 1) != 1) bad("best_of", "best_of must be 1");
  if (json_present(j, "logit_bias")) {
    const json& v = j.at("logit_bias");
    if (!v.is_object()) bad("logit_bias", "'logit_bias' must be an object", "invalid_type");
    if (!v.empty())
      bad("logit_bias", "'logit_bias' is not supported by this server; leave it out", "unsupported");
  }
  if (json_present(j, "suffix") && !get_string(j, "suffix", "").empty())
    bad("suffix", "'suffix' is not supported by this server; leave it out", "unsupported");
  if (json_present(j, "user")) get_string(j, "user", "");
}

std::vector<int> encode_text(const std::string& text, const ApiModel& m, const std::string& param) {
  std::vector<int> ids;
  std::string err;
  if (!text_encode(m.vocab, text, &ids, &err)) bad(param, err, "invalid_text");
  return ids;
}

std::vector<int> check_ids(const json& arr, const ApiModel& m, const std::string& param) {
  std::vector<int> ids;
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& v = arr[i];
    if (!v.is_number_integer())
      bad(param, fmt::format("'{}' token {} must be an integer id, got {}", param, i, show(v)),
          "invalid_type");
    const int64_t id =
        v.is_number_unsigned() ? int64_t(std::min<uint64_t>(v.get<uint64_t>(), 1u << 30)) : v.get<int64_t>();
    if (id < 0 || id >= m.vocab.size())
      bad(param,
          fmt::format("'{}' token {} is id {}, outside this model's vocabulary 0..{}", param, i, id,
                      m.vocab.size() - 1),
          "invalid_token");
    ids.push_back(int(id));
  }
  return ids;
}

// prompt: "text" | ["text", ...] | [ids] | [[ids], ...]
std::vector<std::vector<int>> parse_prompts(const json& j, const ApiModel& m) {
  if (!json_present(j, "prompt"))
    bad("prompt", "'prompt' is required: token-name text or token ids", "missing_parameter");
  const json& p = j.at("prompt");
  std::vector<std::vector<int>> out;
  if (p.is_string()) {
    out.push_back(encode_text(p.get<std::string>(), m, "prompt"));
  } else if (p.is_array()) {
    if (p.empty()) bad("prompt", "'prompt' is an empty list; give text or at least one token id");
    if (std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_number_integer(); })) {
      out.push_back(check_ids(p, m, "prompt"));
    } else if (std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_string(); })) {
      for (const json& x : p) out.push_back(encode_text(x.get<std::string>(), m, "prompt"));
    } else if (std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_array(); })) {
      for (const json& x : p) out.push_back(check_ids(x, m, "prompt"));
    } else {
      bad("prompt",
          "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of token ids",
          "invalid_type");
    }
  } else {
    bad("prompt", fmt::format("'prompt' must be a string or a list, got {}", show(p)), "invalid_type");
  }
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].empty())
      bad("prompt", fmt::format("prompt {} has no tokens; give at least one (the server adds no BOS: start "
                                "with \"bos\" or id 0)",
                                i));
  return out;
}

std::vector<std::string> parse_stop(const json& j) {
  std::vector<std::string> stops;
  if (!json_present(j, "stop")) return stops;
  const json& s = j.at("stop");
  if (s.is_string()) {
    stops.push_back(s.get<std::string>());
  } else if (s.is_array()) {
    for (const json& x : s) {
      if (!x.is_string())
        bad("stop", fmt::format("'stop' entries must be strings, got {}", show(x)), "invalid_type");
      stops.push_back(x.get<std::string>());
    }
  } else {
    bad("stop", fmt::format("'stop' must be a string or a list of strings, got {}", show(s)), "invalid_type");
  }
  if (int(stops.size()) > kMaxStops) bad("stop", fmt::format("at most {} stop strings", kMaxStops));
  for (const std::string& x : stops)
    if (x.empty()) bad("stop", "stop strings must not be empty");
  return stops;
}

std::vector<int> parse_stop_ids(const json& j, const ApiModel& m) {
  if (!json_present(j, "stop_token_ids")) return {};
  const json& s = j.at("stop_token_ids");
  if (!s.is_array()) bad("stop_token_ids", "'stop_token_ids' must be a list of token ids", "invalid_type");
  return check_ids(s, m, "stop_token_ids");
}

// The fields completions and chat share, into specs (prompts x n) with the context-length check.
// phasescope_spans: one list of spans for one prompt, or one per prompt; each span [begin, end(, anchor)].
std::vector<std::vector<AlignSpan>> parse_spans(const json& v, size_t prompts) {
  const char* p = "phasescope_spans";
  auto span_list = [&](const json& list) {
    std::vector<AlignSpan> out;
    if (!list.is_array()) bad(p, "'phasescope_spans' must be a list of [begin, end] or [begin, end, anchor]");
    for (const json& e : list) {
      if (!json_ok<std::vector<int>>(e) || (e.size() != 2 && e.size() != 3))
        bad(p, "each span is [begin, end] or [begin, end, anchor] (token indices of the prompt)");
      const std::vector<int> x = e.get<std::vector<int>>();
      out.push_back(AlignSpan{x[0], x[1], x.size() == 3 ? x[2] : 0});
    }
    return out;
  };
  const bool per_prompt =
      v.is_array() && !v.empty() && v[0].is_array() && !v[0].empty() && v[0][0].is_array();
  if (!per_prompt) {
    if (prompts != 1) bad(p, fmt::format("{} prompts: give one list of spans per prompt", prompts));
    return {span_list(v)};
  }
  if (v.size() != prompts) bad(p, fmt::format("{} lists of spans for {} prompts", v.size(), prompts));
  std::vector<std::vector<AlignSpan>> out;
  for (const json& list : v) out.push_back(span_list(list));
  return out;
}

// Align every prompt that marks spans (serve --align-spans): the prompt is replaced before prefill.
void align_prompts(const json& j, const ApiModel& m, CompletionJob* job) {
  if (!json_present(j, "phasescope_spans")) {
    if (json_present(j, "phasescope_align"))
      bad("phasescope_align", "'phasescope_align' needs phasescope_spans");
    return;
  }
  if (!m.align_card)
    bad("phasescope_spans", "this server aligns no spans: start it with --align-spans card.json",
        "unsupported_parameter");
  const PhaseCard& card = *m.align_card;
  AlignOptions o;
  o.phase_order = card.phase_order;
  for (int t : card.neutral_tokens)
    if (t >= 0 && t < m.vocab.size()) o.neutral.push_back(t);
  for (int i = 0; o.neutral.empty() && i < m.vocab.n_fillers; ++i) o.neutral.push_back(m.vocab.filler(i));
  o.context = m.max_model_len;
  if (json_present(j, "phasescope_align")) {
    const json& a = j.at("phasescope_align");
    if (!a.is_object()) bad("phasescope_align", "'phasescope_align' is {\"mode\": ..., \"copies\": K}");
    check_known(a, {"mode", "copies"});
    try {
      o.mode = align_mode_parse(json_get_or<std::string>(a, "mode", "align", "phasescope_align", "align"),
                                "phasescope_align.mode");
      o.copies = json_get_or<int>(a, "copies", 2, "phasescope_align", "e.g. 2");
    } catch (const Error& e) {
      bad("phasescope_align", e.what());
    }
  }
  const std::vector<std::vector<AlignSpan>> spans =
      parse_spans(j.at("phasescope_spans"), job->prompts.size());
  for (size_t i = 0; i < job->prompts.size(); ++i) {
    try {
      AlignedPrompt a = align_prompt(job->prompts[i], spans[i], card.grid, o);
      job->prompts[i] = a.tokens;
      job->alignment.push_back(std::move(a));
    } catch (const Error& e) {
      bad("phasescope_spans", fmt::format("prompt {}: {}", i, e.what()));
    }
  }
}

void fill_specs(const json& j, const ApiModel& m, uint64_t seed_default, int max_tokens, int logprobs,
                bool prompt_lp, CompletionJob* job) {
  const double temperature = get_number(j, "temperature", 1.0, 0, 100);
  const double top_p = get_number(j, "top_p", 1.0, 0, 1);
  if (top_p <= 0) bad("top_p", "'top_p' must be greater than 0");
  job->n = int(get_int(j, "n", 1, 1, kMaxChoices));
  const uint64_t seed = json_present(j, "seed")
                            ? uint64_t(get_int(j, "seed", 0, std::numeric_limits<int64_t>::min(),
                                               std::numeric_limits<int64_t>::max()))
                            : seed_default;
  const std::vector<std::string> stop = parse_stop(j);
  const std::vector<int> stop_ids = parse_stop_ids(j, m);
  if (int64_t(job->prompts.size()) * job->n > kMaxSequences)
    bad("n", fmt::format("{} prompts x n = {} sequences; at most {} per request", job->prompts.size(),
                         int64_t(job->prompts.size()) * job->n, kMaxSequences));
  for (size_t i = 0; i < job->prompts.size(); ++i) {
    const int64_t P = int64_t(job->prompts[i].size());
    if (P + max_tokens > m.max_model_len)
      throw ApiError(
          400,
          fmt::format(
              "This model's maximum context length is {} tokens. However, you requested {} tokens "
              "({} in the {}, {} for the completion). Please reduce the length of the {} or completion.",
              m.max_model_len, P + max_tokens, P, job->chat ? "messages" : "prompt", max_tokens,
              job->chat ? "messages" : "prompt"),
          job->chat ? "messages" : "prompt", "context_length_exceeded");
  }
  for (const std::vector<int>& p : job->prompts)
    for (int c = 0; c < job->n; ++c) {
      GenSpec s;
      s.prompt = p;
      s.max_tokens = max_tokens;
      // OpenAI's default temperature is 1; 0 (or a vanishing one) is greedy
      s.temperature = temperature < 1e-5 ? 0 : temperature;
      s.top_p = top_p;
      s.seed = seed + uint64_t(c);
      s.logprobs = logprobs;
      s.prompt_logprobs = prompt_lp;
      s.stop = stop;
      s.stop_token_ids = stop_ids;
      job->specs.push_back(std::move(s));
    }
}

// Chat template: BOS, then the tokens of every message's content, in order.
std::vector<int> chat_template(const json& messages, const ApiModel& m, const std::string& param) {
  if (!messages.is_array() || messages.empty())
    bad(param, "'messages' must be a non-empty list of {\"role\", \"content\"} objects",
        messages.is_array() ? "invalid_value" : "invalid_type");
  std::vector<int> ids = {m.vocab.bos()};
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& msg = messages[i];
    const std::string where = fmt::format("{}[{}]", param, i);
    if (!msg.is_object())
      bad(where, fmt::format("{} must be an object with role and content", where), "invalid_type");
    for (auto it = msg.begin(); it != msg.end(); ++it)
      if (it.key() != "role" && it.key() != "content" && it.key() != "name")
        bad(where + "." + it.key(),
            fmt::format("Unrecognized field {}.{} (a message has role, content, name)", where, it.key()),
            "unknown_parameter");
    const std::string role = get_string(msg, "role", "");
    if (role != "system" && role != "developer" && role != "user" && role != "assistant")
      bad(where + ".role",
          fmt::format("{}.role must be system, developer, user or assistant, got '{}'", where, role));
    if (!json_present(msg, "content")) continue;
    const json& c = msg.at("content");
    std::string text;
    if (c.is_string()) {
      text = c.get<std::string>();
    } else if (c.is_array()) {  // [{"type": "text", "text": "..."}]
      for (const json& part : c) {
        if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
            !part["text"].is_string())
          bad(where + ".content", "content parts must be {\"type\": \"text\", \"text\": \"...\"}",
              "invalid_type");
        text += " " + part["text"].get<std::string>();
      }
    } else {
      bad(where + ".content", fmt::format("{}.content must be a string, got {}", where, show(c)),
          "invalid_type");
    }
    const std::vector<int> t = encode_text(text, m, where + ".content");
    ids.insert(ids.end(), t.begin(), t.end());
  }
  return ids;
}

std::string token_string(const ApiModel& m, bool as_ids, int id, bool first) {
  return as_ids ? fmt::format("token_id:{}", id) : text_piece(m.vocab, id, first);
}

ojson logprob_value(double x) { return std::isnan(x) ? ojson(nullptr) : ojson(x); }

// {token string: logprob} of the best k, plus the chosen token when it is not among them (OpenAI: up to k +
// 1).
ojson top_object(const ApiModel& m, const TokenLogprob& e, int k, bool as_ids, bool first) {
  ojson o = ojson::object();
  bool has_chosen = false;
  for (int j = 0; j < k && j < int(e.top.size()); ++j) {
    o[token_string(m, as_ids, e.top[size_t(j)].first, first)] = e.top[size_t(j)].second;
    has_chosen = has_chosen || e.top[size_t(j)].first == e.token;
  }
  if (!has_chosen) o[token_string(m, as_ids, e.token, first)] = e.logprob;
  return o;
}

ojson usage_object(int64_t prompt_tokens, int64_t completion_tokens) {
  return ojson{{"prompt_tokens", prompt_tokens},
               {"completion_tokens", completion_tokens},
               {"total_tokens", prompt_tokens + completion_tokens}};
}

ojson completion_choice(const CompletionJob& job, size_t i, const GenOutput& out, const ApiModel& m) {
  const std::vector<int>& prompt = job.prompts[i / size_t(job.n)];
  std::string text = out.text;
  if (job.echo) text = text_decode(m.vocab, prompt) + text;
  ojson lp = nullptr;
  if (job.logprobs >= 0) {
    ojson tokens = ojson::array(), token_lp = ojson::array(), top = ojson::array(), offset = ojson::array();
    size_t at = 0;  // character offset of the next token in `text`
    auto add = [&](const TokenLogprob& e, bool first, bool no_logprob) {
      const std::string piece = text_piece(m.vocab, e.token, first);
      tokens.push_back(token_string(m, job.tokens_as_ids, e.token, first));
      token_lp.push_back(no_logprob ? ojson(nullptr) : logprob_value(e.logprob));
      top.push_back(no_logprob ? ojson(nullptr) : top_object(m, e, job.logprobs, job.tokens_as_ids, first));
      offset.push_back(at);
      at += piece.size();
    };
    if (job.echo)
      for (size_t t = 0; t < out.prompt_logprobs.size(); ++t) add(out.prompt_logprobs[t], t == 0, t == 0);
    for (const TokenLogprob& e : out.logprobs) add(e, false, false);
    lp = ojson{
        {"tokens", tokens}, {"token_logprobs", token_lp}, {"top_logprobs", top}, {"text_offset", offset}};
  }
  return ojson{{"index", i},
               {"text", text},
               {"logprobs", lp},
               {"finish_reason", out.finish_reason},
               {"token_ids", out.tokens}};
}

ojson chat_choice(const CompletionJob& job, size_t i, const GenOutput& out, const ApiModel& m) {
  // the reply's content is the generated tokens' text on its own (no leading space)
  std::string content = out.text;
  if (!content.empty() && content[0] == ' ') content.erase(0, 1);
  ojson lp = nullptr;
  if (job.logprobs >= 0) {
    ojson items = ojson::array();
    for (size_t t = 0; t < out.logprobs.size(); ++t) {
      const TokenLogprob& e = out.logprobs[t];
      auto entry = [&](int id, double x) {
        const std::string s = token_string(m, job.tokens_as_ids, id, t == 0);
        ojson bytes = ojson::array();
        for (unsigned char ch : s) bytes.push_back(int(ch));
        return ojson{{"token", s}, {"logprob", logprob_value(x)}, {"bytes", bytes}};
      };
      ojson item = entry(e.token, e.logprob);
      ojson alts = ojson::array();
      for (int j = 0; j < job.logprobs && j < int(e.top.size()); ++j)
        alts.push_back(entry(e.top[size_t(j)].first, e.top[size_t(j)].second));
      item["top_logprobs"] = alts;
      items.push_back(item);
    }
    lp = ojson{{"content", items}};
  }
  return ojson{{"index", i},
               {"message", ojson{{"role", "assistant"}, {"content", content}}},
               {"logprobs", lp},
               {"finish_reason", out.finish_reason},
               {"token_ids", out.tokens}};
}

}  // namespace

ApiError::ApiError(int status_, const std::string& message, const std::string& param_,
                   const std::string& code_)
    : std::runtime_error(message), status(status_), type(error_type(status_)), param(param_), code(code_) {}

std::string error_body(const ApiError& e) {
  ojson err{{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? ojson(nullptr) : ojson(e.param)},
            {"code", e.code.empty() ? ojson(nullptr) : ojson(e.code)}};
  return ojson{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

CompletionJob completion_parse(const std::string& body, const ApiModel& m, uint64_t seed) {
  const json j = parse_object(body);
  check_known(j, {"model",
                  "prompt",
                  "max_tokens",
                  "temperature",
                  "top_p",
                  "n",
                  "seed",
                  "stop",
                  "stop_token_ids",
                  "logprobs",
                  "echo",
                  "stream",
                  "user",
                  "presence_penalty",
                  "frequency_penalty",
                  "best_of",
                  "logit_bias",
                  "suffix",
                  "return_tokens_as_token_ids",
                  "phasescope_spans",
                  "phasescope_align"});
  check_model(j, m);
  check_neutral(j);
  CompletionJob job;
  job.chat = false;
  job.prompts = parse_prompts(j, m);
  align_prompts(j, m, &job);
  job.echo = get_bool(j, "echo", false);
  job.logprobs = int(get_int(j, "logprobs", -1, 0, m.max_logprobs));
  job.tokens_as_ids = get_bool(j, "return_tokens_as_token_ids", false);
  const int max_tokens = int(get_int(j, "max_tokens", 16, 0, m.max_model_len));
  fill_specs(j, m, seed, max_tokens, job.logprobs, job.echo && job.logprobs >= 0, &job);
  return job;
}

CompletionJob chat_parse(const std::string& body, const ApiModel& m, uint64_t seed) {
  const json j = parse_object(body);
  check_known(j, {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n",
                  "seed", "stop", "stop_token_ids", "logprobs", "top_logprobs", "stream", "user",
                  "presence_penalty", "frequency_penalty", "logit_bias", "return_tokens_as_token_ids"});
  check_model(j, m);
  check_neutral(j);
  CompletionJob job;
  job.chat = true;
  if (!json_present(j, "messages")) bad("messages", "'messages' is required", "missing_parameter");
  job.prompts.push_back(chat_template(j.at("messages"), m, "messages"));
  const bool logprobs = get_bool(j, "logprobs", false);
  const int top = int(get_int(j, "top_logprobs", 0, 0, m.max_logprobs));
  if (json_present(j, "top_logprobs") && !logprobs)
    bad("top_logprobs", "'top_logprobs' needs \"logprobs\": true");
  job.logprobs = logprobs ? top : -1;
  job.tokens_as_ids = get_bool(j, "return_tokens_as_token_ids", false);
  const int64_t mt = json_present(j, "max_completion_tokens")
                         ? get_int(j, "max_completion_tokens", 16, 0, m.max_model_len)
                         : get_int(j, "max_tokens", 16, 0, m.max_model_len);
  fill_specs(j, m, seed, int(mt), job.logprobs, false, &job);
  return job;
}

std::string completion_reply(const CompletionJob& job, const std::vector<GenOutput>& outs, const ApiModel& m,
                             const std::string& id, int64_t created) {
  ojson choices = ojson::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (const std::vector<int>& p : job.prompts) prompt_tokens += int64_t(p.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    choices.push_back(job.chat ? chat_choice(job, i, outs[i], m) : completion_choice(job, i, outs[i], m));
    completion_tokens += int64_t(outs[i].tokens.size());
  }
  ojson r{{"id", id},           {"object", job.chat ? "chat.completion" : "text_completion"},
          {"created", created}, {"model", m.id},
          {"choices", choices}, {"usage", usage_object(prompt_tokens, completion_tokens)}};
  if (!job.alignment.empty()) {
    ojson al = ojson::array();
    for (const AlignedPrompt& a : job.alignment) {
      ojson sp = ojson::array();
      for (const AlignSpan& s : a.spans) sp.push_back({s.begin, s.end});
      al.push_back({{"added", a.added}, {"spans", sp}, {"anchors", a.anchors}, {"phases", a.phases}});
    }
    r["phasescope_alignment"] = al;
  }
  return r.dump();
}

std::string tokenize_reply(const std::string& body, const ApiModel& m) {
  const json j = parse_object(body);
  check_known(j, {"model", "content", "prompt", "messages", "add_special", "add_special_tokens",
                  "with_pieces", "return_token_strs", "add_generation_prompt"});
  check_model(j, m);
  const int shapes =
      int(json_present(j, "content")) + int(json_present(j, "prompt")) + int(json_present(j, "messages"));
  if (shapes != 1)
    bad("content",
        "send exactly one of \"content\" (llama-server shape), \"prompt\" or \"messages\" (vLLM shape)",
        shapes == 0 ? "missing_parameter" : "invalid_value");
  const bool add_bos = get_bool(j, "add_special", false) || get_bool(j, "add_special_tokens", false);
  get_bool(j, "add_generation_prompt", true);  // accepted; the template has no generation prompt
  std::vector<int> ids;
  if (json_present(j, "messages")) {
    ids = chat_template(j.at("messages"), m, "messages");
  } else {
    const std::string key = json_present(j, "content") ? "content" : "prompt";
    ids = encode_text(get_string(j, key, ""), m, key);
    if (add_bos) ids.insert(ids.begin(), m.vocab.bos());
  }
  if (json_present(j, "content")) {  // llama-server: {"tokens": [ids]} or, with_pieces, [{"id", "piece"}]
    ojson tokens = ojson::array();
    const bool pieces = get_bool(j, "with_pieces", false);
    for (size_t i = 0; i < ids.size(); ++i)
      tokens.push_back(pieces ? ojson{{"id", ids[i]}, {"piece", text_piece(m.vocab, ids[i], i == 0)}}
                              : ojson(ids[i]));
    return ojson{{"tokens", tokens}}.dump();
  }
  ojson strs = nullptr;  // vLLM: {"count", "max_model_len", "tokens", "token_strs"}
  if (get_bool(j, "return_token_strs", false)) {
    strs = ojson::array();
    for (size_t i = 0; i < ids.size(); ++i) strs.push_back(text_piece(m.vocab, ids[i], i == 0));
  }
  return ojson{
      {"count", ids.size()}, {"max_model_len", m.max_model_len}, {"tokens", ids}, {"token_strs", strs}}
      .dump();
}

std::string detokenize_reply(const std::string& body, const ApiModel& m) {
  const json j = parse_object(body);
  check_known(j, {"model", "tokens"});
  check_model(j, m);
  if (!json_present(j, "tokens"))
    bad("tokens", "'tokens' is required: a list of token ids", "missing_parameter");
  if (!j.at("tokens").is_array()) bad("tokens", "'tokens' must be a list of token ids", "invalid_type");
  const size_t max_ids = size_t(16) * size_t(m.max_model_len);  // bounds the work one request can ask for
  if (j.at("tokens").size() > max_ids)
    bad("tokens",
        fmt::format("{} token ids is more than this server detokenizes at once ({} = 16 x max_model_len)",
                    j.at("tokens").size(), max_ids),
        "too_many_tokens");
  const std::string text = text_decode(m.vocab, check_ids(j.at("tokens"), m, "tokens"));
  return ojson{{"prompt", text}, {"content", text}}.dump();
}

std::string models_reply(const ApiModel& m) {
  ojson card{{"id", m.id},           {"object", "model"},
             {"created", m.created}, {"owned_by", "phasescope"},
             {"root", m.root},       {"max_model_len", m.max_model_len}};
  // an extension field (clients that do not know it ignore it): the token names a text prompt may use,
  // so a probe can write its prompts in this model's own token space (text_codec.h)
  card["token_space"] = ojson{{"bos", "bos"},
                              {"fillers", m.vocab.n_fillers},
                              {"keys", m.vocab.n_keys},
                              {"names", m.vocab.n_names},
                              {"bytes", m.vocab.bytes ? 256 : 0}};
  return ojson{{"object", "list"}, {"data", ojson::array({card})}}.dump();
}

}  // namespace phasescope
