// added_tokens.h — the "added_tokens" of a tokenizer.json and the split that takes them out of the
// text before normalization and BPE, as HF's AddedVocabulary does: leftmost-longest matches,
// first of the tokens with normalized=false on the raw text, then of the normalized=true ones on
// each normalized remainder; single_word, lstrip and rstrip as in HF (Rust regex `\w`, `\s`).
// Not: adding tokens at run time, or skipping special tokens (HF's split_special_tokens=false holds:
// a special token written in the text is always that token).
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace phasescope {

struct AddedToken {
  int id = -1;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, normalized = true, single_word = false;
};

// A byte trie over token contents; finds the leftmost-longest match.
struct TokenTrie {
  struct Node {
    std::vector<std::pair<unsigned char, int>> kids;  // byte -> node
    int token = -1;                                   // index into the token list when a content ends here
  };
  std::vector<Node> nodes{Node{}};
  bool first_byte[256] = {};
  void insert(std::string_view s, int token);
  // leftmost-longest match at or after `from`: sets [begin, end) and returns the token index, or -1
  int find(std::string_view text, size_t from, size_t& begin, size_t& end) const;
};

// One part of a text after the split: an added token, or a run of text for the model.
struct TextPart {
  int token_id = -1;  // >= 0: this part is that added token
  size_t begin = 0, end = 0;
};

struct AddedVocab {
  std::vector<AddedToken> tokens;  // as in the file
  TokenTrie raw, normalized;       // normalized=false on raw text; normalized=true (normalized contents)
  bool has_normalized = false;
};

// Parse "added_tokens"; `normalize_content` maps a normalized=true token's content through the
// file's normalizer (HF matches those on normalized text).
AddedVocab added_vocab_from_json(const nlohmann::json& j, const std::string& where,
                                 const std::function<std::string(std::string_view)>& normalize_content);

// Split `text` with `trie` (raw or normalized set) into parts covering it, in order.
void added_split(const AddedVocab& v, const TokenTrie& trie, std::string_view text,
                 std::vector<TextPart>& out);

}  // namespace phasescope
