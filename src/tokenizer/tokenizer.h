// tokenizer.h — a HuggingFace `tokenizer.json` byte-level BPE tokenizer (encode, decode, vocab).
// Is: the pipeline of the HF `tokenizers` library for the parts that byte-level BPE files use:
// added/special tokens split out first, normalizer (none, NFC/NFD/NFKC/NFKD, Sequence), the
// pre-tokenizer (Split with PCRE2 Unicode regexes, ByteLevel), BPE merges by rank, ByteLevel decoder.
// Is not: a trainer, a WordPiece/Unigram/SentencePiece model, a post-processor (encode adds no BOS or
// EOS: see bos_id/adds_bos), truncation or padding. An unsupported field is refused at load with an
// Error naming it. Load once (~1 s for a 150k vocab); the object is cheap to copy and its const
// methods are safe to call from several threads (the per-word cache is locked).
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace phasescope {

struct TokenizerImpl;  // tokenizer.cpp

class Tokenizer {
 public:
  // tokenizer.json; throws phasescope::Error naming file+field+fix. A tokenizer_config.json beside
  // it (as HF ships it) is read for bos_token / add_bos_token only.
  static Tokenizer load(const std::string& path);

  // UTF-8 text -> ids. No special tokens added (no BOS); added/special tokens written in the text
  // ARE recognised, as HF does with add_special_tokens=False. Invalid UTF-8 is an Error.
  std::vector<int> encode(const std::string& utf8) const;

  // ids -> text through the ByteLevel decoder, special tokens included; byte sequences that are
  // not valid UTF-8 (a cut multi-byte character) become U+FFFD, as HF does. Unknown id: Error.
  std::string decode(const std::vector<int>& ids) const;
  // the same bytes before the U+FFFD repair (for streaming: join pieces, then repair).
  std::string decode_bytes(const std::vector<int>& ids) const;

  int vocab_size() const;  // incl. added tokens: highest id + 1
  int token_to_id(
      const std::string& token) const;  // -1 if absent (raw token string, e.g. "<｜begin▁of▁sentence｜>")
  std::string id_to_token(int id) const;  // "" if absent
  bool is_special(int id) const;          // an added token marked "special"

  // BOS: from tokenizer_config.json beside the file, else the post_processor's template, else a
  // special added token with a well-known BOS spelling; -1 when none is known (Qwen has none).
  int bos_id() const;
  bool adds_bos() const;  // whether the HF Python tokenizer would prepend it (add_bos_token / template)

  std::string describe() const;  // one line: model type, vocab, normalizer, pre-tokenizer

 private:
  const TokenizerImpl& impl() const;  // asserts that load() made this object
  std::shared_ptr<const TokenizerImpl> impl_;
};

}  // namespace phasescope
