// added_tokens.cpp — parsing "added_tokens", the byte trie, and HF's find_matches rules.
#include "tokenizer/added_tokens.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "tokenizer/text.h"

namespace phasescope {

// ---- trie

void TokenTrie::insert(std::string_view s, int token) {
  int node = 0;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    int child = -1;
    for (const auto& [k, n] : nodes[node].kids)
      if (k == c) child = n;
    if (child < 0) {
      child = static_cast<int>(nodes.size());
      nodes[node].kids.push_back({c, child});
      nodes.emplace_back();
    }
    node = child;
  }
  nodes[node].token = token;
  first_byte[static_cast<unsigned char>(s[0])] = true;
}

int TokenTrie::find(std::string_view text, size_t from, size_t& begin, size_t& end) const {
  for (size_t i = from; i < text.size(); ++i) {
    if (!first_byte[static_cast<unsigned char>(text[i])]) continue;
    int node = 0, best = -1;
    for (size_t j = i; j < text.size(); ++j) {
      const auto c = static_cast<unsigned char>(text[j]);
      int child = -1;
      for (const auto& [k, n] : nodes[node].kids)
        if (k == c) {
          child = n;
          break;
        }
      if (child < 0) break;
      node = child;
      if (nodes[node].token >= 0) {
        best = nodes[node].token;  // keep the longest
        end = j + 1;
      }
    }
    if (best >= 0) {
      begin = i;
      return best;
    }
  }
  return -1;
}

// ---- parsing

static bool flag(const nlohmann::json& t, const char* key, bool dflt, const std::string& where) {
  if (!t.contains(key) || t[key].is_null()) return dflt;
  if (!t[key].is_boolean())
    fail(where + "." + key, "expected true or false, got " + t[key].dump(), "write a boolean");
  return t[key].get<bool>();
}

AddedVocab added_vocab_from_json(const nlohmann::json& j, const std::string& where,
                                 const std::function<std::string(std::string_view)>& normalize_content) {
  AddedVocab v;
  if (j.is_null()) return v;
  if (!j.is_array())
    fail(where, "expected an array", "write \"added_tokens\": [{\"id\": ..., \"content\": ...}, ...]");
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string w = fmt::format("{}[{}]", where, i);
    const auto& t = j[i];
    if (!t.is_object()) fail(w, "expected an object", "write {\"id\": ..., \"content\": ...}");
    AddedToken a;
    if (!t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
        t["id"].get<int64_t>() > (1 << 30))
      fail(w + ".id", "missing or not a non-negative integer", "write the token's id");
    if (!t.contains("content") || !t["content"].is_string() || t["content"].get<std::string>().empty())
      fail(w + ".content", "missing, empty or not a string", "write the token's text");
    a.id = t["id"].get<int>();
    a.content = t["content"].get<std::string>();
    if (utf8_invalid_at(a.content) != std::string_view::npos)
      fail(w + ".content", "is not valid UTF-8", "write UTF-8");
    a.special = flag(t, "special", false, w);
    a.lstrip = flag(t, "lstrip", false, w);
    a.rstrip = flag(t, "rstrip", false, w);
    a.normalized = flag(t, "normalized", !a.special, w);  // HF's default: special tokens are not normalized
    a.single_word = flag(t, "single_word", false, w);
    // HF gives a repeated content the first one's id: the same id is a no-op, another is an error
    auto first = std::find_if(v.tokens.begin(), v.tokens.end(),
                              [&](const AddedToken& b) { return b.content == a.content; });
    if (first != v.tokens.end()) {
      if (first->id != a.id)
        fail(w + ".id",
             fmt::format("repeats the content of the token with id {} under id {}", first->id, a.id),
             "remove one of the two entries");
      continue;
    }
    v.tokens.push_back(std::move(a));
  }
  for (size_t k = 0; k < v.tokens.size(); ++k) {
    const AddedToken& a = v.tokens[k];
    if (a.normalized) {
      const std::string n = normalize_content(a.content);
      if (!n.empty()) v.normalized.insert(n, static_cast<int>(k));
      v.has_normalized = true;
    } else {
      v.raw.insert(a.content, static_cast<int>(k));
    }
  }
  return v;
}

// ---- splitting (HF find_matches)

static bool ends_with_word(std::string_view s, size_t end) {
  if (end == 0) return false;
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  int len = 0;
  return is_word_char(utf8_decode(s, i, len));
}

static bool starts_with_word(std::string_view s, size_t begin) {
  if (begin >= s.size()) return false;
  int len = 0;
  return is_word_char(utf8_decode(s, begin, len));
}

void added_split(const AddedVocab& v, const TokenTrie& trie, std::string_view text,
                 std::vector<TextPart>& out) {
  out.clear();
  size_t done = 0, from = 0, b = 0, e = 0;
  for (int k; from < text.size() && (k = trie.find(text, from, b, e)) >= 0;) {
    const AddedToken& a = v.tokens[k];
    from = e;  // matches never overlap, even a discarded one (aho-corasick's iteration)
    if (a.single_word && (ends_with_word(text, b) || starts_with_word(text, e))) continue;
    if (a.lstrip) {
      // take the whitespace before it, but not what an earlier match already took
      size_t nb = b;
      while (nb > done) {
        size_t i = nb - 1;
        while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
        int len = 0;
        if (!is_unicode_space(utf8_decode(text, i, len))) break;
        nb = i;
      }
      b = nb;
    }
    if (a.rstrip) {
      while (e < text.size()) {
        int len = 0;
        if (!is_unicode_space(utf8_decode(text, e, len))) break;
        e += len;
      }
      from = e;
    }
    if (b > done) out.push_back({-1, done, b});
    out.push_back({a.id, b, e});
    done = e;
  }
  if (done < text.size()) out.push_back({-1, done, text.size()});
}

}  // namespace phasescope
