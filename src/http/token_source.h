// token_source.h — where token ids come from when phasescope talks to a real model: text -> ids
// (never adding BOS or other special tokens), ids -> text, and the model's BOS id. Two kinds: the
// server's own tokenizer over HTTP (server_tokenizer.h: POST /tokenize, /detokenize) and a local
// HuggingFace tokenizer.json (probe/local_tokenizer_source.h). The probes build prompts in token
// space from these, so positions are counted in the model's own tokens.
// Not here: BOS handling of prompts (the probes put BOS first when bos_id() >= 0).
#pragma once
#include <string>
#include <vector>

namespace phasescope {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual std::string describe() const = 0;
  virtual std::vector<int> encode(const std::string& text) const = 0;  // no BOS, no special tokens
  virtual std::string decode(const std::vector<int>& tokens) const = 0;
  virtual int bos_id() const = 0;  // -1: the model has no BOS
  // Many texts at once; servers answer them concurrently. Same order as `texts`.
  virtual std::vector<std::vector<int>> encode_many(const std::vector<std::string>& texts) const {
    std::vector<std::vector<int>> out;
    out.reserve(texts.size());
    for (const std::string& t : texts) out.push_back(encode(t));
    return out;
  }
  virtual std::vector<std::string> decode_many(const std::vector<std::vector<int>>& seqs) const {
    std::vector<std::string> out;
    out.reserve(seqs.size());
    for (const std::vector<int>& t : seqs) out.push_back(decode(t));
    return out;
  }
};

// The tokens that `piece` adds after `before`: encode(before + piece) minus encode(before), which
// must be a prefix of it (else the two merge across the boundary: returns false). This is how a word
// is tokenized "in context" (after a newline, after a separator) rather than alone.
bool token_source_tokens_after(const TokenSource& ts, const std::string& before, const std::string& piece,
                               std::vector<int>* out);

}  // namespace phasescope
