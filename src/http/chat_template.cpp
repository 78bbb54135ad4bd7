// chat_template.cpp — reading the template, rendering it through python3's jinja2, and the frame
// (chat_template.h).
#include "http/chat_template.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include "core/check.h"
#include "core/io.h"
#include "core/json_fields.h"
#include "core/process.h"
#include "core/sha256.h"

namespace phasescope {

namespace {

// The renderer: one request as JSON on standard input, {"text"} or {"error"} or {"missing"} as JSON out.
// The environment is transformers' (chat_template_utils: _compile_jinja_template).
constexpr const char* kRenderScript = R"PY(
import json, sys
try:
    import jinja2, jinja2.ext, jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as e:
    print(json.dumps({"missing": str(e)}))
    sys.exit(3)
req = json.load(sys.stdin.buffer)
def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
def strftime_now(fmt):
    import datetime
    return datetime.datetime.now().strftime(fmt)
class Generation(jinja2.ext.Extension):
    # {% generation %}...{% endgeneration %} marks assistant text for masks; rendering keeps its body
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)
    def _body(self, caller):
        return caller()
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[Generation, jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now
try:
    out = env.from_string(req["template"]).render(messages=req["messages"], tools=None, documents=None,
        add_generation_prompt=req["add_generation_prompt"], **req["variables"])
except Exception as e:
    print(json.dumps({"error": type(e).__name__ + ": " + str(e)}))
    sys.exit(2)
print(json.dumps({"text": out}))
)PY";

// A special token as tokenizer_config.json writes it: a string, or {"content": ...} (an AddedToken).
std::string token_text(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string())
    return j["content"].get<std::string>();
  return "";
}

}  // namespace

ChatTemplate chat_template_load(const std::string& path) {
  ChatTemplate t;
  t.source = path;
  const std::string body = io_read_text(path,
                                        "pass the model's chat template: a .jinja file or its "
                                        "tokenizer_config.json");
  if (std::filesystem::path(path).extension() == ".json") {
    const nlohmann::json j =
        json_parse_or_fail(body, path, "pass the model's tokenizer_config.json as it is");
    if (!j.is_object() || !j.contains("chat_template"))
      fail(path, "no \"chat_template\" in this tokenizer_config.json",
           "pass the template itself (chat_template.jinja from the model's repository)");
    const nlohmann::json& ct = j["chat_template"];
    if (ct.is_string()) {
      t.text = ct.get<std::string>();
    } else if (ct.is_array()) {  // named templates: the default one
      std::string names;
      for (const auto& e : ct) {
        const std::string name =
            e.is_object() && e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "";
        names += (names.empty() ? "" : ", ") + name;
        if (name == "default" && e.contains("template") && e["template"].is_string())
          t.text = e["template"].get<std::string>();
      }
      if (t.text.empty())
        fail(path + ": chat_template",
             "a list of named templates without a \"default\" (names: " + names + ")",
             "save the one the server uses as a .jinja file and pass that");
    } else {
      fail(path + ": chat_template", "neither a string nor a list of named templates",
           "pass the template itself as a .jinja file");
    }
    for (const auto& [key, value] : j.items()) {
      const bool token = key.size() > 6 && key.compare(key.size() - 6, 6, "_token") == 0;
      if (token && (value.is_string() || value.is_object())) t.special[key] = token_text(value);
      if (token && value.is_null()) t.special[key] = nullptr;
    }
    if (j.contains("additional_special_tokens") && j["additional_special_tokens"].is_array()) {
      nlohmann::json extra = nlohmann::json::array();
      for (const auto& v : j["additional_special_tokens"]) extra.push_back(token_text(v));
      t.special["additional_special_tokens"] = extra;
    }
    if (t.special.contains("bos_token") && t.special["bos_token"].is_string())
      t.bos_token = t.special["bos_token"].get<std::string>();
    if (t.special.contains("eos_token") && t.special["eos_token"].is_string())
      t.eos_token = t.special["eos_token"].get<std::string>();
    t.from_config = true;
  } else {
    t.text = body;
  }
  if (t.text.empty()) fail(path, "the chat template is empty", "pass the model's chat template");
  t.sha256 = sha256_hex(t.text);
  t.kwargs = chat_template_reasoning_off(t.text);
  return t;
}

nlohmann::json chat_template_reasoning_off(const std::string& text) {
  nlohmann::json k = nlohmann::json::object();
  for (const char* name : {"enable_thinking", "thinking"})
    if (std::regex_search(text,
                          std::regex(std::string("(^|[^A-Za-z0-9_.'\"])") + name + "([^A-Za-z0-9_'\"]|$)")))
      k[name] = false;
  return k;
}

std::string chat_template_render(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, const std::string& bos_text) {
  nlohmann::json msgs = nlohmann::json::array();
  for (const ChatMessage& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  nlohmann::json vars = t.special;
  for (const auto& [k, v] : t.kwargs.items()) vars[k] = v;
  if (!t.from_config) {  // a bare template: the tokenizer's BOS; a config says its own (even null)
    vars["bos_token"] = bos_text;
    vars["eos_token"] = t.eos_token;
  }
  const nlohmann::json req = {{"template", t.text},
                              {"messages", msgs},
                              {"add_generation_prompt", add_generation_prompt},
                              {"variables", vars}};
  std::string body;
  try {
    body = req.dump();
  } catch (const nlohmann::json::exception&) {
    fail("chat template " + t.source, "the template or a message is not valid UTF-8",
         "pass the template as the model's repository has it (UTF-8)");
  }
  // the request through a temp file (a long prompt does not fit an argument), removed however this ends
  struct TempInput {  // removed (and closed) however this ends
    std::string path;
    int fd = -1;
    ~TempInput() {
      if (fd >= 0) ::close(fd);
      if (!path.empty()) std::remove(path.c_str());
    }
  } in;
  std::string name = (std::filesystem::temp_directory_path() / "phasescope-chat-XXXXXX").string();
  in.fd = ::mkstemp(name.data());
  if (in.fd < 0) fail("chat template " + t.source, "cannot create a temp file " + name, "check TMPDIR");
  in.path = name;
  io_write_all(in.fd, body.data(), body.size(), in.path);
  ::close(in.fd);
  in.fd = -1;
  // -I: isolated (no current folder, user site or PYTHON* variables between it and Debian's jinja2)
  const ProgramRun run = run_program({"python3", "-I", "-c", kRenderScript}, false, in.path);
  if (run.status == 127)
    fail("chat template " + t.source, "python3 is not installed; it renders chat templates with jinja2",
         "install python3 and python3-jinja2 (scripts/setup.sh does)");
  nlohmann::json out;
  try {
    out = json_parse_bounded(run.out);
  } catch (const JsonInputError&) {
    fail("chat template " + t.source,
         fmt::format("the renderer (python3 with jinja2) exited {} without an answer", run.status),
         "check that python3 runs; install python3-jinja2 (scripts/setup.sh does)");
  }
  if (out.contains("missing"))
    fail("chat template " + t.source, "jinja2 is not installed (" + out["missing"].get<std::string>() + ")",
         "install python3-jinja2 (scripts/setup.sh does)");
  if (out.contains("error"))
    fail("chat template " + t.source, "cannot be rendered: " + out["error"].get<std::string>(),
         "pass the template the server uses (its tokenizer_config.json or chat_template.jinja), or fix it");
  if (!out.is_object() || !out.contains("text") || !out["text"].is_string())
    fail("chat template " + t.source, "the renderer's answer has no text",
         "check that python3 runs jinja2 (scripts/setup.sh installs python3-jinja2)");
  return out["text"].get<std::string>();
}

const std::string& chat_frame_probe_text() {
  static const std::string probe = "Hello world";
  return probe;
}

ChatFrame chat_frame_of(const std::vector<int>& chat, const TokenSource& ts, const std::string& where) {
  const std::vector<int> c = ts.encode(chat_frame_probe_text());
  auto it = std::search(chat.begin(), chat.end(), c.begin(), c.end());
  if (c.empty() || it == chat.end())
    fail(where, "the user text's tokens do not appear inside the templated chat's tokens",
         "pass the template that renders the user's text as it is, or drop --chat-template and pass "
         "--template-offset N (the tokens the template puts before the user text)");
  return {int64_t(it - chat.begin()), int64_t(chat.size() - c.size())};
}

ChatFrame chat_template_frame(const ChatTemplate& t, const TokenSource& ts) {
  const int bos = ts.bos_id();
  const std::string bos_text = bos >= 0 ? ts.decode({bos}) : "";
  const std::string text = chat_template_render(t, {{"user", chat_frame_probe_text()}}, true, bos_text);
  return chat_frame_of(ts.encode(text), ts, "chat template " + t.source);
}

}  // namespace phasescope
