// tokenizer.cpp — loading a tokenizer.json (every field checked or refused by name) and the encode
// pipeline: added tokens -> normalizer -> normalized added tokens -> pre-tokenizer -> BPE; decode
// through the ByteLevel table. See tokenizer.h for the contract.
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/check.h"
#include "core/io.h"
#include "core/json_fields.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/text.h"

namespace phasescope {

struct TokenizerImpl {
  std::string path;
  std::vector<NormalForm> normalizer;  // applied in order; empty: none
  AddedVocab added;
  PreTokenizer pre;
  BpeModel bpe;
  BpeCache cache;

  std::vector<std::string> id_token;               // id -> token string (vocab, then added tokens over it)
  std::vector<std::string> id_bytes;               // id -> decoded bytes (ByteLevel table, or raw UTF-8)
  std::vector<char> id_special;                    // id -> added token marked special
  std::unordered_map<std::string, int> added_ids;  // added token content -> id (looked up first)

  int bos = -1;
  bool adds_bos = false;
  std::string bos_source = "none known";
  std::string describe;
};

// ---- loading pieces

static void add_normal_forms(std::vector<NormalForm>& out, const nlohmann::json& j,
                             const std::string& where) {
  if (j.is_null()) return;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    fail(where, "expected null or an object with a \"type\"", "write e.g. {\"type\": \"NFC\"}");
  const std::string type = j["type"];
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      fail(where + ".normalizers", "missing or not an array", "write \"normalizers\": [...]");
    for (size_t i = 0; i < j["normalizers"].size(); ++i)
      add_normal_forms(out, j["normalizers"][i], fmt::format("{}.normalizers[{}]", where, i));
  } else if (type == "NFC") {
    out.push_back(NormalForm::NFC);
  } else if (type == "NFD") {
    out.push_back(NormalForm::NFD);
  } else if (type == "NFKC") {
    out.push_back(NormalForm::NFKC);
  } else if (type == "NFKD") {
    out.push_back(NormalForm::NFKD);
  } else {
    fail(where + ".type", "normalizer " + type + " is not supported",
         "phasescope supports null, NFC, NFD, NFKC, NFKD and a Sequence of them");
  }
}

static std::string apply_normalizer(const std::vector<NormalForm>& forms, std::string_view s) {
  std::string out(s);
  for (NormalForm f : forms) out = normalize(out, f);
  return out;
}

static void check_decoder(const nlohmann::json& j, const std::string& where) {
  if (j.is_object() && j.value("type", std::string()) == "ByteLevel") return;
  if (j.is_object() && j.value("type", std::string()) == "Sequence" && j.contains("decoders") &&
      j["decoders"].is_array() && j["decoders"].size() == 1) {
    check_decoder(j["decoders"][0], where + ".decoders[0]");
    return;
  }
  fail(where, "decoder " + (j.is_object() ? j.value("type", j.dump()) : j.dump()) + " is not supported",
       "a byte-level BPE file decodes with {\"type\": \"ByteLevel\"}");
}

// The BOS token as the HF Python tokenizer knows it: tokenizer_config.json beside the file, else the
// post_processor's template, else a well-known spelling among the special added tokens.
static void find_bos(TokenizerImpl& t, const nlohmann::json& root,
                     const std::function<int(const std::string&)>& token_to_id) {
  namespace fs = std::filesystem;
  const fs::path config = fs::path(t.path).parent_path() / "tokenizer_config.json";
  if (fs::exists(config)) {
    const std::string where = config.string();
    const auto c =
        json_parse_or_fail(io_read_text(where, "check the file's permissions"), where,
                           "fix the file or remove it (only bos_token and add_bos_token are read)");
    if (c.is_object() && c.contains("bos_token") && !c["bos_token"].is_null()) {
      const auto& b = c["bos_token"];
      const std::string content = b.is_string()   ? b.get<std::string>()
                                  : b.is_object() ? b.value("content", std::string())
                                                  : "";
      t.bos = token_to_id(content);
      if (t.bos < 0)
        fail(where + " field 'bos_token'", "\"" + content + "\" is not a token of " + t.path,
             "write the BOS token's exact text, or null");
      t.bos_source = "tokenizer_config.json";
    }
    if (c.is_object() && c.contains("add_bos_token") && c["add_bos_token"].is_boolean())
      t.adds_bos = c["add_bos_token"].get<bool>() && t.bos >= 0;
    if (t.bos >= 0 || (c.is_object() && c.contains("bos_token"))) return;  // the config said it
  }
  // TemplateProcessing: {"single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": ...}]}
  const auto& pp = root.value("post_processor", nlohmann::json());
  if (pp.is_object() && pp.value("type", std::string()) == "TemplateProcessing" && pp.contains("single") &&
      pp["single"].is_array() && !pp["single"].empty() && pp["single"][0].contains("SpecialToken")) {
    const auto& st = pp["single"][0]["SpecialToken"];
    if (st.contains("id") && st["id"].is_string() && token_to_id(st["id"].get<std::string>()) >= 0) {
      t.bos = token_to_id(st["id"].get<std::string>());
      t.adds_bos = true;
      t.bos_source = "post_processor";
      return;
    }
  }
  for (const char* s : {"<s>", "<|begin_of_text|>", "<｜begin▁of▁sentence｜>", "<bos>", "<|startoftext|>"})
    for (const AddedToken& a : t.added.tokens)
      if (a.special && a.content == s) {
        t.bos = a.id;
        t.bos_source = "added token name";
        return;
      }
}

Tokenizer Tokenizer::load(const std::string& path) {
  auto t = std::make_shared<TokenizerImpl>();
  t->path = path;

  // the file
  const std::string fix_missing =
      "pass the path of a HuggingFace tokenizer.json (the tests' copies: npm ci --prefix tests/js)";
  if (!std::filesystem::is_regular_file(path)) fail(path, "no such file", fix_missing);
  const auto root =
      json_parse_or_fail(io_read_text(path, fix_missing), path, "pass an intact tokenizer.json");
  if (!root.is_object()) fail(path, "is not a JSON object", "pass a HuggingFace tokenizer.json");
  auto where = [&](const std::string& field) {
    return path + " field " + field;
  };  // nested: "field model.vocab"

  // settings that would change what encode returns and that phasescope does not apply
  for (const char* key : {"truncation", "padding"})
    if (root.contains(key) && !root[key].is_null())
      fail(where(key), "is set; phasescope encodes whole texts without truncation or padding",
           "set it to null");

  // the pipeline, field by field
  add_normal_forms(t->normalizer, root.value("normalizer", nlohmann::json()), where("normalizer"));
  t->pre = pretokenizer_from_json(root.value("pre_tokenizer", nlohmann::json()), where("pre_tokenizer"));
  if (!root.contains("model")) fail(where("model"), "missing", "a tokenizer.json has a \"model\" object");
  t->bpe = bpe_from_json(root["model"], where("model"));
  if (!root.contains("decoder"))
    fail(where("decoder"), "missing", "write \"decoder\": {\"type\": \"ByteLevel\"}");
  check_decoder(root["decoder"], where("decoder"));
  const auto forms = t->normalizer;
  t->added = added_vocab_from_json(root.value("added_tokens", nlohmann::json()), where("added_tokens"),
                                   [&forms](std::string_view s) { return apply_normalizer(forms, s); });

  // HF does not take an added token's "id" from the file: it gives the model's id of the same text,
  // else the next free one (after the vocab, or after the highest added id), and only warns when
  // the file says otherwise. Both real files agree with that; a file that does not is refused.
  {
    const int model_size = static_cast<int>(t->bpe.vocab.size());
    int max_added = -1;
    for (size_t k = 0; k < t->added.tokens.size(); ++k) {
      const AddedToken& a = t->added.tokens[k];
      auto v = t->bpe.vocab.find(a.content);
      const int hf_id = v != t->bpe.vocab.end()                                         ? v->second
                        : (max_added < 0 || (max_added < model_size && model_size > 0)) ? model_size
                                                                                        : max_added + 1;
      if (a.id != hf_id)
        fail(where(fmt::format("added_tokens (\"{}\").id", a.content)),
             fmt::format("is {}, but HF's tokenizers library gives this token id {} ({})", a.id, hf_id,
                         v != t->bpe.vocab.end() ? "its id in model.vocab" : "the next free id"),
             fmt::format("write \"id\": {} (ids follow the model's vocabulary, in file order)", hf_id));
      max_added = std::max(max_added, hf_id);
    }
  }

  // id tables: the vocabulary, with the added tokens over it
  int max_id = t->bpe.max_id;
  for (const AddedToken& a : t->added.tokens) max_id = std::max(max_id, a.id);
  t->id_token.assign(max_id + 1, std::string());
  t->id_special.assign(max_id + 1, 0);
  for (const auto& [tok, id] : t->bpe.vocab) t->id_token[id] = tok;
  for (const AddedToken& a : t->added.tokens) {
    t->id_token[a.id] = a.content;
    t->id_special[a.id] = a.special;
    t->added_ids[a.content] = a.id;
  }
  // what each id decodes to: its bytes when every character is a ByteLevel stand-in, else its
  // UTF-8 as written (HF's ByteLevel decoder; added tokens like "<｜User｜>" take the second way)
  t->id_bytes.resize(t->id_token.size());
  for (size_t id = 0; id < t->id_token.size(); ++id)
    if (!byte_level_to_bytes(t->id_token[id], t->id_bytes[id])) t->id_bytes[id] = t->id_token[id];

  // BOS, and the one-line description
  const TokenizerImpl* self = t.get();
  find_bos(*t, root, [self](const std::string& s) {
    auto a = self->added_ids.find(s);
    if (a != self->added_ids.end()) return a->second;
    auto v = self->bpe.vocab.find(s);
    return v == self->bpe.vocab.end() ? -1 : v->second;
  });
  std::string norm;
  for (NormalForm f : t->normalizer) norm += (norm.empty() ? "" : "+") + std::string(normal_form_name(f));
  t->describe = fmt::format(
      "BPE (byte-level) vocab={} (model {}, added {}), merges={}, normalizer={}, pre-tokenizer={}, bos={}",
      max_id + 1, t->bpe.vocab.size(), t->added.tokens.size(), t->bpe.merges.size(),
      norm.empty() ? "none" : norm, pretokenizer_describe(t->pre),
      t->bos < 0 ? std::string("none")
                 : fmt::format("{} ({}, from {}{})", t->id_token[t->bos], t->bos, t->bos_source,
                               t->adds_bos ? ", HF adds it" : ""));

  Tokenizer out;
  out.impl_ = std::move(t);
  return out;
}

const TokenizerImpl& Tokenizer::impl() const {
  PS_ASSERT(impl_ != nullptr, "a Tokenizer used before Tokenizer::load");
  return *impl_;
}

// ---- encode

// BPE over every pre-tokenized piece of one normalized run of text.
static void encode_run(const TokenizerImpl& t, std::string_view run, std::vector<int>& ids) {
  thread_local std::string buffer;
  thread_local std::vector<Piece> pieces;
  pretokenize(t.pre, run, buffer, pieces);
  for (const Piece& p : pieces) {
    const std::string_view piece(buffer.data() + p.begin, p.end - p.begin);
    if (t.cache.get(piece, ids)) continue;
    const size_t before = ids.size();
    bpe_encode_piece(t.bpe, piece, ids);
    t.cache.put(piece, ids.data() + before, ids.size() - before);
  }
}

std::vector<int> Tokenizer::encode(const std::string& utf8) const {
  const TokenizerImpl& t = impl();
  const size_t bad = utf8_invalid_at(utf8);
  if (bad != std::string::npos)
    fail("tokenizer encode", fmt::format("the text is not valid UTF-8 (byte {} of {})", bad, utf8.size()),
         "convert the text to UTF-8 before tokenizing");

  std::vector<int> ids;
  std::vector<TextPart> raw_parts, norm_parts;
  // 1. added tokens with normalized=false, on the raw text
  added_split(t.added, t.added.raw, utf8, raw_parts);
  for (const TextPart& rp : raw_parts) {
    if (rp.token_id >= 0) {
      ids.push_back(rp.token_id);
      continue;
    }
    // 2. the normalizer, then added tokens with normalized=true, on each remaining run
    const std::string_view raw(utf8.data() + rp.begin, rp.end - rp.begin);
    std::string normalized;
    std::string_view run = raw;
    if (!t.normalizer.empty()) {
      normalized = apply_normalizer(t.normalizer, raw);
      run = normalized;
    }
    if (!t.added.has_normalized) {
      encode_run(t, run, ids);
      continue;
    }
    added_split(t.added, t.added.normalized, run, norm_parts);
    // 3. pre-tokenizer and BPE on what is left
    for (const TextPart& np : norm_parts) {
      if (np.token_id >= 0)
        ids.push_back(np.token_id);
      else
        encode_run(t, run.substr(np.begin, np.end - np.begin), ids);
    }
  }
  return ids;
}

// ---- decode and lookups

std::string Tokenizer::decode_bytes(const std::vector<int>& ids) const {
  const TokenizerImpl& t = impl();
  std::string out;
  for (int id : ids) {
    if (id < 0 || id >= static_cast<int>(t.id_bytes.size()) || (t.id_token[id].empty()))
      fail("tokenizer decode", fmt::format("id {} is not a token of {}", id, t.path),
           fmt::format("pass ids in [0, {}) produced by this tokenizer", t.id_bytes.size()));
    out += t.id_bytes[id];
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const { return utf8_lossy(decode_bytes(ids)); }

int Tokenizer::vocab_size() const { return static_cast<int>(impl().id_token.size()); }

int Tokenizer::token_to_id(const std::string& token) const {
  auto a = impl().added_ids.find(token);
  if (a != impl().added_ids.end()) return a->second;
  auto v = impl().bpe.vocab.find(token);
  return v == impl().bpe.vocab.end() ? -1 : v->second;
}

std::string Tokenizer::id_to_token(int id) const {
  if (id < 0 || id >= static_cast<int>(impl().id_token.size())) return "";
  return impl().id_token[id];
}

bool Tokenizer::is_special(int id) const {
  return id >= 0 && id < static_cast<int>(impl().id_special.size()) && impl().id_special[id];
}

int Tokenizer::bos_id() const { return impl().bos; }
bool Tokenizer::adds_bos() const { return impl().adds_bos; }
std::string Tokenizer::describe() const { return impl().describe; }

}  // namespace phasescope
