// fake_openai_server.h — a small OpenAI-compatible server on 127.0.0.1 (an ephemeral port, its own
// thread) for the HTTP tests and the probe benchmark. Its tokenizer is word-level (a run of letters, up to 3
// digits, or one other character, each with an optional leading space, is one token; BOS = 1),
// and its "model" is a rule over token ids: by default an induction head (the token that followed the
// longest earlier match of the prompt's suffix), so needle and lookup prompts are answered from their
// records. Reply shapes: vLLM (legacy logprobs; "token_id:N" when asked), phasescope serve (adds
// token_ids), text-only (token strings only) and llama-server (chat-form logprobs with ids).
// Fault injection: a hook sees every request first and may answer it itself (429, 500, slow, broken).
// Not a real server: no sampling, no batching; it counts what it saw so tests can assert on it.
#pragma once
#include <httplib.h>

#include <atomic>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace phasescope {
namespace fake {

constexpr int kBos = 1;

// ---- the word-level tokenizer

class WordTokenizer {
 public:
  std::vector<int> encode(const std::string& s) {
    std::vector<int> out;
    size_t i = 0;
    while (i < s.size()) {
      if (s.compare(i, 3, "<s>") == 0) {  // the BOS text is the special token (parsed, as HF does)
        out.push_back(kBos);
        i += 3;
        continue;
      }
      size_t j = i;
      if (s[j] == ' ' && j + 1 < s.size() && s[j + 1] != ' ' && s[j + 1] != '\n')
        ++j;  // a leading space joins
      if (std::isalpha(static_cast<unsigned char>(s[j]))) {
        while (j < s.size() && std::isalpha(static_cast<unsigned char>(s[j]))) ++j;
      } else if (std::isdigit(static_cast<unsigned char>(s[j]))) {  // up to 3 digits, as GPT-4-style regexes
        const size_t start = j;
        while (j < s.size() && j < start + 3 && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      } else {
        ++j;
      }
      out.push_back(id_of(s.substr(i, j - i)));
      i = j;
    }
    return out;
  }
  std::string decode(const std::vector<int>& t) {
    std::lock_guard<std::mutex> g(mu_);
    std::string s;
    for (int id : t) {
      if (id == kBos) {
        s += "<s>";
        continue;
      }
      auto it = pieces_.find(id);
      s += it == pieces_.end() ? "<?>" : it->second;
    }
    return s;
  }
  int id_of(const std::string& piece) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = ids_.find(piece);
    if (it != ids_.end()) return it->second;
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : piece) h = (h ^ c) * 1099511628211ull;
    int id = 1000 + static_cast<int>(h % (1u << 20));
    while (pieces_.count(id)) ++id;  // a collision: the next free id
    ids_[piece] = id;
    pieces_[id] = piece;
    return id;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, int> ids_;
  std::unordered_map<int, std::string> pieces_;
};

// ---- the "model"

using Dist = std::vector<std::pair<int, double>>;  // (token, logprob), best first

// Induction: the token after the longest earlier occurrence of the prompt's suffix (latest on ties,
// up to 16 tokens of match). *pred_pos = that token's position (-1 when nothing matches).
inline int induction_next(const std::vector<int>& t, int64_t* pred_pos) {
  const int64_t T = static_cast<int64_t>(t.size());
  int64_t best = -1, best_len = 0;
  for (int64_t q = 1; q < T; ++q) {  // predict t[q] from the match ending at q-1 against the end
    int64_t m = 0;
    while (m < 16 && q - 1 - m >= 0 && t[q - 1 - m] == t[T - 1 - m]) ++m;
    if (m > 0 && m >= best_len) {
      best_len = m;
      best = q;
    }
  }
  if (pred_pos) *pred_pos = best;
  return best >= 0 ? t[best] : -1;
}

struct Server {
  // the rule: prompt ids -> distribution of the next token. Default: induction, logprob -0.05 for the
  // prediction and -3.5 for BOS as the runner-up.
  std::function<Dist(const std::vector<int>&)> model = [](const std::vector<int>& t) {
    const int p = induction_next(t, nullptr);
    return p >= 0 ? Dist{{p, -0.05}, {kBos, -3.5}} : Dist{{kBos, -0.1}};
  };
  // fault injection: return true after filling `res` to answer the request yourself
  std::function<bool(const httplib::Request&, httplib::Response&)> fault;
  std::string format = "vllm";  // vllm | serve | text | llama
  std::string model_name = "fake-model";
  int64_t max_model_len = 0;  // listed in /v1/models when > 0
  int usage_delta = 0;        // added to usage.prompt_tokens (a server that counts differently)
  bool usage = true;
  bool instant = false;  // skip the model and the tokenizer: a canned reply (the benchmark)

  WordTokenizer tok;
  std::atomic<int64_t> completions{0}, tokenizes{0}, max_prompt_seen{0};
  std::mutex mu;
  std::vector<std::string> auth;            // Authorization headers seen
  std::map<std::string, int> prompts_seen;  // prompt hash -> count (completions)

  httplib::Server srv;
  std::thread th;
  int port = -1;
  int listen_fd = -1;

  // backlog: the listen queue (0 = httplib's compiled-in 5, which overflows under a burst of connects)
  explicit Server(int threads = 16, int backlog = 1024) {
    srv.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    srv.set_keep_alive_max_count(1000000);
    srv.set_keep_alive_timeout(5);
    srv.set_tcp_nodelay(true);
    srv.Post("/v1/completions",
             [this](const httplib::Request& q, httplib::Response& r) { handle(q, r, false); });
    srv.Post("/v1/chat/completions",
             [this](const httplib::Request& q, httplib::Response& r) { handle(q, r, true); });
    srv.Post("/tokenize", [this](const httplib::Request& q, httplib::Response& r) { tokenize(q, r); });
    srv.Post("/detokenize", [this](const httplib::Request& q, httplib::Response& r) { detokenize(q, r); });
    srv.Post("/apply-template", [this](const httplib::Request& q, httplib::Response& r) {
      if (faulted(q, r)) return;
      auto j = nlohmann::json::parse(q.body);
      // llama-server's shape: the template's text without BOS, which its /tokenize then adds
      r.set_content(nlohmann::json{{"prompt", templated(j["messages"]).substr(3)}}.dump(),
                    "application/json");
    });
    srv.Get("/v1/models", [this](const httplib::Request& q, httplib::Response& r) {
      if (faulted(q, r)) return;
      nlohmann::json m = {{"id", model_name}, {"object", "model"}};
      if (max_model_len > 0) m["max_model_len"] = max_model_len;
      r.set_content(nlohmann::json{{"object", "list"}, {"data", {m}}}.dump(), "application/json");
    });
    // httplib listens with a backlog of 5 (compiled into Debian's library): 64 clients connecting at
    // once overflow it (SYN cookies, dropped ACKs, reset connections). Listening again on the same
    // socket raises the backlog; a real server (uvicorn: 2048) does not have this problem.
    srv.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_fd = sock;
    });
    port = srv.bind_to_any_port("127.0.0.1");
    if (listen_fd >= 0 && backlog > 0) ::listen(listen_fd, backlog);
    th = std::thread([this] { srv.listen_after_bind(); });
    while (!srv.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Server() {
    srv.stop();
    th.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }

  // the chat template: BOS, then "<|user|>\n" + content + "\n" per message, then "<|assistant|>\n"
  // (tests/data/chat/fake_template.jinja is the same in Jinja)
  std::string templated(const nlohmann::json& messages) {
    std::string s = "<s>";
    for (const auto& m : messages)
      s += "<|" + m["role"].get<std::string>() + "|>\n" + m["content"].get<std::string>() + "\n";
    return s + "<|assistant|>\n";
  }

 private:
  bool faulted(const httplib::Request& q, httplib::Response& r) {
    {
      std::lock_guard<std::mutex> g(mu);
      if (q.has_header("Authorization")) auth.push_back(q.get_header_value("Authorization"));
    }
    return fault && fault(q, r);
  }

  void tokenize(const httplib::Request& q, httplib::Response& r) {
    ++tokenizes;
    if (faulted(q, r)) return;
    auto j = nlohmann::json::parse(q.body);
    if (j.contains("messages")) {  // vLLM chat form
      const std::vector<int> t = tok.encode(templated(j["messages"]));
      r.set_content(
          nlohmann::json{{"tokens", t}, {"count", t.size()}, {"max_model_len", max_model_len}}.dump(),
          "application/json");
      return;
    }
    const bool vllm = j.contains("prompt");
    if (!vllm && !j.contains("content")) {
      r.status = 400;
      r.set_content("{\"error\":\"no content\"}", "application/json");
      return;
    }
    const std::string text = j[vllm ? "prompt" : "content"].get<std::string>();
    const bool special = vllm ? j.value("add_special_tokens", true) : j.value("add_special", false);
    std::vector<int> t;
    if (special) t.push_back(kBos);
    for (int id : tok.encode(text)) t.push_back(id);
    nlohmann::json out = {{"tokens", t}};
    if (vllm) {
      out["count"] = t.size();
      out["max_model_len"] = max_model_len;
    }
    r.set_content(out.dump(), "application/json");
  }

  void detokenize(const httplib::Request& q, httplib::Response& r) {
    if (faulted(q, r)) return;
    auto j = nlohmann::json::parse(q.body);
    const std::string text = tok.decode(j["tokens"].get<std::vector<int>>());
    r.set_content(nlohmann::json{{j.contains("model") ? "prompt" : "content", text}}.dump(),
                  "application/json");
  }

  std::string tok_str(int id, bool as_ids) {
    return as_ids ? "token_id:" + std::to_string(id) : tok.decode({id});
  }

  void handle(const httplib::Request& q, httplib::Response& r, bool chat) {
    ++completions;
    if (faulted(q, r)) return;
    if (instant) {  // the benchmark: no parsing beyond the prompt's length
      const size_t a = q.body.find("\"prompt\":["), b = q.body.find(']', a);
      int64_t n = 1;
      for (size_t i = a; i < b; ++i) n += q.body[i] == ',';
      r.set_content(
          "{\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" "
          "x\",\"logprobs\":{\"tokens\":[\"token_id:7\"],"
          "\"token_logprobs\":[-0.05],\"top_logprobs\":[{\"token_id:7\":-0.05,\"token_id:1\":-3.5}]},"
          "\"finish_reason\":\"length\"}],"
          "\"usage\":{\"prompt_tokens\":" +
              std::to_string(n) + ",\"completion_tokens\":1,\"total_tokens\":" + std::to_string(n + 1) + "}}",
          "application/json");
      return;
    }
    auto j = nlohmann::json::parse(q.body);
    std::vector<int> prompt;
    if (chat) {
      prompt = tok.encode(templated(j["messages"]));
    } else if (j["prompt"].is_string()) {
      prompt.push_back(kBos);  // a text prompt gets the server's BOS
      for (int id : tok.encode(j["prompt"].get<std::string>())) prompt.push_back(id);
    } else {
      prompt = j["prompt"].get<std::vector<int>>();
    }
    {
      std::lock_guard<std::mutex> g(mu);
      uint64_t h = 1469598103934665603ull;
      for (int t : prompt) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
      prompts_seen[std::to_string(h)]++;
    }
    int64_t seen = max_prompt_seen.load();
    while (static_cast<int64_t>(prompt.size()) > seen &&
           !max_prompt_seen.compare_exchange_weak(seen, prompt.size())) {
    }
    if (max_model_len > 0 && static_cast<int64_t>(prompt.size()) + 1 > max_model_len) {
      r.status = 400;
      r.set_content("{\"error\":{\"message\":\"maximum context length exceeded\"}}", "application/json");
      return;
    }
    const bool echo = j.value("echo", false);
    const bool as_ids = j.value("return_tokens_as_token_ids", false) && format != "text" && format != "serve";
    const Dist d = model(prompt);
    const int pred = d.empty() ? kBos : d[0].first;

    nlohmann::json choice = {{"index", 0}, {"finish_reason", "length"}};
    const std::string text = tok.decode({pred});
    if (chat)
      choice["message"] = {{"role", "assistant"}, {"content", text}};
    else
      choice["text"] = echo ? tok.decode(prompt) + text : text;
    if (format == "serve") choice["token_ids"] = {pred};
    if (format == "llama" || chat) {
      nlohmann::json alts = nlohmann::json::array();
      for (const auto& [id, lp] : d) {
        nlohmann::json a = {{"token", tok_str(id, as_ids)}, {"logprob", lp}};
        if (format == "llama") a["id"] = id;
        alts.push_back(a);
      }
      nlohmann::json e = {{"token", tok_str(pred, as_ids)},
                          {"logprob", d.empty() ? 0.0 : d[0].second},
                          {"top_logprobs", alts}};
      if (format == "llama") e["id"] = pred;
      choice["logprobs"] = {{"content", {e}}};
    } else {
      nlohmann::json toks = nlohmann::json::array(), lps = nlohmann::json::array(),
                     tops = nlohmann::json::array();
      if (echo) {  // prompt positions: only the last one carries a distribution (what the tests read)
        for (size_t p = 0; p < prompt.size(); ++p) {
          toks.push_back(tok_str(prompt[p], as_ids));
          if (p + 1 < prompt.size() || p == 0) {
            lps.push_back(p == 0 ? nlohmann::json(nullptr) : nlohmann::json(0.0));
            tops.push_back(nullptr);
            continue;
          }
          const std::vector<int> before(prompt.begin(), prompt.end() - 1);
          const Dist db = model(before);
          double lp = -30.0;
          nlohmann::json top = nlohmann::json::object();
          for (const auto& [id, l] : db) {
            top[tok_str(id, as_ids)] = l;
            if (id == prompt[p]) lp = l;
          }
          top[tok_str(prompt[p], as_ids)] = lp;  // vLLM lists the actual token too
          lps.push_back(lp);
          tops.push_back(top);
        }
      }
      toks.push_back(tok_str(pred, as_ids));
      lps.push_back(d.empty() ? 0.0 : d[0].second);
      nlohmann::json top = nlohmann::json::object();
      for (const auto& [id, lp] : d) top[tok_str(id, as_ids)] = lp;
      tops.push_back(top);
      choice["logprobs"] = {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}};
    }
    nlohmann::json out = {{"object", chat ? "chat.completion" : "text_completion"},
                          {"model", model_name},
                          {"choices", {choice}}};
    if (usage) {
      const int64_t n = static_cast<int64_t>(prompt.size()) + usage_delta;
      out["usage"] = {{"prompt_tokens", n}, {"completion_tokens", 1}, {"total_tokens", n + 1}};
    }
    r.set_content(out.dump(), "application/json");
  }
};

}  // namespace fake
}  // namespace phasescope
