// text_codec.cpp — see text_codec.h.
#include "serve/text_codec.h"

#include <fmt/format.h>

#include "core/check.h"

namespace phasescope {

namespace {

// "17" -> 17 when `digits` is a canonical decimal (no sign, no leading zero unless "0") below `limit`.
int parse_index(const std::string& digits, int limit) {
  if (digits.empty() || digits.size() > 6) return -1;
  if (digits.size() > 1 && digits[0] == '0') return -1;
  int n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    n = n * 10 + (c - '0');
  }
  return n < limit ? n : -1;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

bool text_token_valid(const Vocab& v, int id) { return id >= 0 && id < v.size(); }

int text_token_id(const Vocab& v, const std::string& word) {
  if (word == "bos") return v.bos();
  if (word.size() < 2) return -1;
  const std::string rest = word.substr(1);
  int i = -1;
  switch (word[0]) {
    case 'f':
      i = parse_index(rest, v.n_fillers);
      return i < 0 ? -1 : v.filler(i);
    case 'k':
      i = parse_index(rest, v.n_keys);
      return i < 0 ? -1 : v.key(i);
    case 'n':
      i = parse_index(rest, v.n_names);
      return i < 0 ? -1 : v.name(i);
    case 'b':
      i = v.bytes ? parse_index(rest, 256) : -1;
      return i < 0 ? -1 : v.byte(i);
    default:
      return -1;
  }
}

std::string text_token_name(const Vocab& v, int id) {
  return text_token_valid(v, id) ? vocab_token_name(v, id) : std::string();
}

std::string text_names_help(const Vocab& v) {
  std::string s = fmt::format("bos, f0..f{}, k0..k{}, n0..n{}", v.n_fillers - 1, v.n_keys - 1, v.n_names - 1);
  if (v.bytes) s += ", b0..b255";
  return s;
}

bool text_encode(const Vocab& v, const std::string& text, std::vector<int>* ids, std::string* error) {
  ids->clear();
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_space(text[i])) ++i;
    if (i == text.size()) break;
    size_t j = i;
    while (j < text.size() && !is_space(text[j])) ++j;
    const std::string word = text.substr(i, j - i);
    const int id = text_token_id(v, word);
    if (id < 0) {
      const std::string shown = word.size() > 40 ? word.substr(0, 40) + "..." : word;
      *error = fmt::format(
          "word {} of the text ('{}', at character {}) is not a token name of this model; a text prompt is "
          "token "
          "names separated by spaces ({}), e.g. \"bos k17 n3 k17\"; or send token ids",
          ids->size() + 1, shown, i, text_names_help(v));
      return false;
    }
    ids->push_back(id);
    i = j;
  }
  return true;
}

std::string text_piece(const Vocab& v, int id, bool first) {
  PS_ASSERT(text_token_valid(v, id), "text_piece: token id outside the vocabulary");
  return first ? vocab_token_name(v, id) : " " + vocab_token_name(v, id);
}

std::string text_decode(const Vocab& v, const std::vector<int>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += text_piece(v, ids[i], i == 0);
  return s;
}

}  // namespace phasescope
