// text_codec.h — the text form of phasescope's in-process token space, for the server's text prompts,
// /tokenize and /detokenize. A text is token names separated by single spaces, exactly the names of
// vocab_token_name: "bos", fillers "f0".."f15", keys "k0".."k127", names "n0".."n127", bytes "b0".."b255"
// (ranges from the checkpoint's vocabulary), e.g. "bos k17 n3 f2 k17". No BOS is ever added.
// Round trips are exact: encode(decode(ids)) == ids for any valid ids, and decode(encode(text)) == text
// for a text in this canonical form (any run of whitespace is accepted between names on input).
// A word that is not a name is refused (never spelled as bytes: a typo must not silently become bytes).
// Torch-free. Not a tokenizer for real text (see probe/ for HuggingFace tokenizers).
#pragma once
#include <string>
#include <vector>

#include "data/vocab.h"

namespace phasescope {

// The id of one name ("k17"), or -1 when `word` is not a canonical name in this vocabulary.
int text_token_id(const Vocab& v, const std::string& word);

// The name of one id ("k17"); ids outside the vocabulary give "" (callers check text_token_valid).
std::string text_token_name(const Vocab& v, int id);
bool text_token_valid(const Vocab& v, int id);

// Names -> ids. Returns false and sets *error (which word, and what would be accepted) on the first
// word that is not a name. An empty or all-whitespace text gives no ids.
bool text_encode(const Vocab& v, const std::string& text, std::vector<int>* ids, std::string* error);

// Ids -> names joined by single spaces. Every id must be valid (text_token_valid).
std::string text_decode(const Vocab& v, const std::vector<int>& ids);

// The piece one token adds to a text that already holds `preceding` tokens: " k17", or "k17" for the
// first token. Concatenated pieces equal text_decode, so a completion's text is the pieces of its
// tokens (each after at least the prompt's first token) and prompt text + completion text is the text
// of the whole sequence.
std::string text_piece(const Vocab& v, int id, bool first);

// One line naming the accepted names, e.g. "bos, f0..f15, k0..k127, n0..n127, b0..b255".
std::string text_names_help(const Vocab& v);

}  // namespace phasescope
