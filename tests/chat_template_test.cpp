// chat_template_test.cpp — a model's chat template (http/chat_template.h): read from a .jinja file or a
// tokenizer_config.json, rendered by jinja2 exactly as the fake server templates a chat
// (tests/data/chat/fake_template.jinja is its template in Jinja), reasoning turned off where the template
// reads it (and sent with every request), unrenderable templates refused with the file and jinja2's
// message, and the frame in tokens: equal to the server's own chat tokenization, refused when another
// template is given, and the only source of positions on a chat-only server, where every reply's
// usage.prompt_tokens verifies it.
#include "http/chat_template.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "core/check.h"
#include "core/io.h"
#include "fake_openai_server.h"
#include "http/openai_client.h"
#include "probe/probe_setup.h"
#include "testing.h"

namespace phasescope {
namespace {

const std::string kChat = std::string(PHASESCOPE_SOURCE_DIR) + "/tests/data/chat/";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplate, LoadsJinjaFilesAndTokenizerConfigs) {
  const ChatTemplate bare = chat_template_load(kChat + "fake_template.jinja");
  EXPECT_EQ(bare.bos_token, "");
  EXPECT_EQ(bare.sha256.size(), 64u);
  EXPECT_TRUE(bare.kwargs.empty());
  const ChatTemplate cfg = chat_template_load(kChat + "tokenizer_config.json");
  EXPECT_EQ(cfg.text, bare.text);  // the same template inside the config
  EXPECT_EQ(cfg.sha256, bare.sha256);
  EXPECT_EQ(cfg.bos_token, "<s>");  // an AddedToken {content}
  EXPECT_EQ(cfg.eos_token, "</s>");
  // a list of named templates: the default one; it reads enable_thinking, so reasoning goes off
  const ChatTemplate named = chat_template_load(kChat + "thinking_tokenizer_config.json");
  EXPECT_NE(named.text.find("enable_thinking"), std::string::npos);
  EXPECT_EQ(named.kwargs, (nlohmann::json{{"enable_thinking", false}}));
  // no template in the file: the file and the fix are named
  const std::string dir = testutil::tmp_dir("chat_template");
  io_write_atomic(dir + "/tokenizer_config.json", R"({"bos_token": "<s>"})");
  const std::string e = error_of([&] { chat_template_load(dir + "/tokenizer_config.json"); });
  EXPECT_NE(e.find("no \"chat_template\""), std::string::npos) << e;
  EXPECT_NE(e.find(".jinja"), std::string::npos) << e;
  io_write_atomic(dir + "/tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  EXPECT_NE(error_of([&] { chat_template_load(dir + "/tokenizer_config.json"); }).find("names: rag"),
            std::string::npos);
  EXPECT_NE(error_of([&] { chat_template_load(dir + "/missing.jinja"); }).find("missing.jinja"),
            std::string::npos);
}

TEST(ChatTemplate, ReasoningGoesOffOnlyWhereTheTemplateReadsIt) {
  EXPECT_EQ(chat_template_reasoning_off("{% if enable_thinking %}<think>{% endif %}"),
            (nlohmann::json{{"enable_thinking", false}}));
  EXPECT_EQ(chat_template_reasoning_off("{%- if not thinking is defined %}{% set thinking = false %}"),
            (nlohmann::json{{"thinking", false}}));
  // a message's own field, a string, another variable: not a switch of the template
  for (const char* t : {"{{ message.thinking }}", "{{ m['thinking'] }}", "{{ thinking_budget }}", "plain"})
    EXPECT_TRUE(chat_template_reasoning_off(t).empty()) << t;
}

TEST(ChatTemplate, RendersAsTheServerTemplatesAndRefusesWhatCannotRender) {
  fake::Server s;
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "alpha: one"}};
  nlohmann::json j = nlohmann::json::array();
  for (const ChatMessage& m : msgs) j.push_back({{"role", m.role}, {"content", m.content}});
  const ChatTemplate t = chat_template_load(kChat + "tokenizer_config.json");
  EXPECT_EQ(chat_template_render(t, msgs, true), s.templated(j));
  EXPECT_EQ(chat_template_render(t, msgs, false), s.templated(j).substr(0, s.templated(j).size() - 14));
  // reasoning off renders the template's no-thinking branch
  const ChatTemplate think = chat_template_load(kChat + "thinking_tokenizer_config.json");
  EXPECT_EQ(chat_template_render(think, {{"user", "hi"}}, true),
            "<s><|user|>\nhi\n<|assistant|>\n<think></think>\n");
  // raise_exception and a syntax error: the file and jinja2's message
  const std::string e1 =
      error_of([&] { chat_template_render(chat_template_load(kChat + "broken.jinja"), msgs, true); });
  EXPECT_NE(e1.find("broken.jinja"), std::string::npos) << e1;
  EXPECT_NE(e1.find("Conversation roles must alternate"), std::string::npos) << e1;
  const std::string e2 =
      error_of([&] { chat_template_render(chat_template_load(kChat + "unclosed.jinja"), msgs, true); });
  EXPECT_NE(e2.find("unclosed.jinja"), std::string::npos) << e2;
  EXPECT_NE(e2.find("cannot be rendered: TemplateSyntaxError"), std::string::npos) << e2;
}

// What transformers hands every template: tools and documents none, every special token of the config, the
// {% generation %} tag (its body rendered); a bare template file gets the tokenizer's BOS.
TEST(ChatTemplate, RendersWithWhatTransformersHandsTheTemplate) {
  const std::string dir = testutil::tmp_dir("chat_env");
  const nlohmann::json cfg = {
      {"bos_token", "<s>"},
      {"unk_token", {{"content", "<unk>"}, {"special", true}}},
      {"additional_special_tokens", {"[INST]", "[/INST]"}},
      {"chat_template",
       "{% if tools is not none %}[TOOLS]{% endif %}{% if documents is not none %}[DOCS]{% endif %}"
       "{{ bos_token }}{{ unk_token }}{{ additional_special_tokens[0] }}"
       "{% for m in messages %}{% generation %}{{ m['content'] }}{% endgeneration %}{% endfor %}"
       "{{ additional_special_tokens[1] }}"}};
  io_write_atomic(dir + "/tokenizer_config.json", cfg.dump());
  const ChatTemplate t = chat_template_load(dir + "/tokenizer_config.json");
  EXPECT_EQ(chat_template_render(t, {{"user", "hi"}}, true, "<ignored>"), "<s><unk>[INST]hi[/INST]");
  io_write_atomic(dir + "/bare.jinja", "{{ bos_token }}{{ messages[0]['content'] }}");
  EXPECT_EQ(chat_template_render(chat_template_load(dir + "/bare.jinja"), {{"user", "hi"}}, true, "<bos>"),
            "<bos>hi");
}

// A chat-only server: /v1/completions and the chat forms of /tokenize and /apply-template answer 404; the
// plain /tokenize stays (the token source). Every chat request body is kept.
struct ChatOnly {
  fake::Server s;
  std::mutex mu;
  std::vector<nlohmann::json> bodies;
  ChatOnly() {
    const int one = s.tok.encode(" one")[0];  // the model answers " one" (the chat's tail is the template's)
    s.model = [one](const std::vector<int>&) { return fake::Dist{{one, -0.05}, {fake::kBos, -3.5}}; };
    s.fault = [this](const httplib::Request& q, httplib::Response& r) {
      const bool chat_tokenize = q.path == "/tokenize" && q.body.find("\"messages\"") != std::string::npos;
      if (q.path == "/v1/completions" || q.path == "/apply-template" || chat_tokenize) {
        r.status = 404;
        r.set_content("{\"error\":\"not found\"}", "application/json");
        return true;
      }
      if (q.path == "/v1/chat/completions") {
        std::lock_guard<std::mutex> g(mu);
        bodies.push_back(nlohmann::json::parse(q.body));
      }
      return false;
    };
  }
  ProbeConnectOptions options(const std::string& tpl) {
    ProbeConnectOptions co;
    co.http.base_urls = {s.url()};
    co.http.api_key_env = "";
    co.http.retries = 1;
    co.http.backoff_s = 0.01;
    co.api.model = "fake-model";
    co.api.api = ApiKind::Chat;
    co.chat_template_path = tpl;
    return co;
  }
};

TEST(ChatTemplate, TheFrameIsTheServersAndVerifiesEveryReplyOnAChatOnlyServer) {
  {  // a server that tokenizes chats: the template's frame equals its own; another template is refused
    fake::Server s;
    ProbeConnectOptions co;
    co.http.base_urls = {s.url()};
    co.http.api_key_env = "";
    co.api.model = "fake-model";
    co.api.api = ApiKind::Chat;
    co.chat_template_path = kChat + "fake_template.jinja";
    ProbeConnection c = probe_connect(co);
    const auto [offset, total] = c.backend->chat_overhead();
    EXPECT_EQ(offset, 1 + int64_t(s.tok.encode("<|user|>\n").size()));
    EXPECT_EQ(total, 1 + int64_t(s.tok.encode("<|user|>\n\n<|assistant|>\n").size()));
    co.chat_template_path = kChat + "system_prompt.jinja";
    const std::string e = error_of([&] { probe_connect(co); });
    EXPECT_NE(e.find("not the template the server uses"), std::string::npos) << e;
    EXPECT_NE(e.find("system_prompt.jinja"), std::string::npos) << e;
  }
  // chat-only: the template alone places the prompt, and usage.prompt_tokens verifies each reply
  ChatOnly good;
  ProbeConnection c = probe_connect(good.options(kChat + "tokenizer_config.json"));
  std::vector<int> t{fake::kBos};
  for (int id : good.s.tok.encode("\nalpha: one\nbeta: two\nalpha:")) t.push_back(id);
  const int answer = good.s.tok.encode(" one")[0];
  const ScoreResult r = c.backend->score({{t, answer}})[0];
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.top1, answer);
  // the wrong template on a chat-only server: nothing to compare with at connect time, so every reply's
  // count refuses the sample
  ChatOnly bad;
  ProbeConnection w = probe_connect(bad.options(kChat + "system_prompt.jinja"));
  const ScoreResult rw = w.backend->score({{t, answer}})[0];
  EXPECT_NE(rw.error.find("positions not verified"), std::string::npos) << rw.error;
  // reasoning off travels with every request of a template that reads it
  ChatOnly think;
  ProbeConnection k = probe_connect(think.options(kChat + "thinking_tokenizer_config.json"));
  k.backend->score({{t, answer}});
  std::lock_guard<std::mutex> g(think.mu);
  ASSERT_FALSE(think.bodies.empty());
  EXPECT_EQ(think.bodies.back()["chat_template_kwargs"], (nlohmann::json{{"enable_thinking", false}}));
  EXPECT_NE(k.backend->identity().find("enable_thinking"), std::string::npos);
  // and --chat-template with completions is refused
  ProbeConnectOptions co = good.options(kChat + "fake_template.jinja");
  co.api.api = ApiKind::Completions;
  EXPECT_NE(error_of([&] { probe_connect(co); }).find("add --api chat"), std::string::npos);
}

}  // namespace
}  // namespace phasescope
