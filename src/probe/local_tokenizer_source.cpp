// local_tokenizer_source.cpp — see local_tokenizer_source.h. Written against the tokenizer module's
// API (class Tokenizer: static load(path), encode(text) without BOS, decode(ids), bos_id(), adds_bos());
// compiled in only when that header exists, so this file builds before and after the module is merged.
// BOS: a prompt starts with one only when the HF tokenizer would prepend it (adds_bos), as the server's
// own tokenization of a text prompt would.
#include "probe/local_tokenizer_source.h"

#include "core/check.h"

#if __has_include("tokenizer/tokenizer.h")
#include "tokenizer/tokenizer.h"
#define PHASESCOPE_HAS_LOCAL_TOKENIZER 1
#else
#define PHASESCOPE_HAS_LOCAL_TOKENIZER 0
#endif

namespace phasescope {

#if PHASESCOPE_HAS_LOCAL_TOKENIZER

namespace {

class LocalTokenizer : public TokenSource {
 public:
  LocalTokenizer(Tokenizer tok, std::string path) : tok_(std::move(tok)), path_(std::move(path)) {}
  std::string describe() const override { return "local tokenizer " + path_ + " (" + tok_.describe() + ")"; }
  std::vector<int> encode(const std::string& text) const override { return tok_.encode(text); }
  std::string decode(const std::vector<int>& tokens) const override { return tok_.decode(tokens); }
  int bos_id() const override { return tok_.adds_bos() ? tok_.bos_id() : -1; }

 private:
  Tokenizer tok_;
  std::string path_;
};

}  // namespace

bool local_tokenizer_available() { return true; }

std::unique_ptr<TokenSource> local_tokenizer_open(const std::string& path) {
  return std::make_unique<LocalTokenizer>(Tokenizer::load(path), path);
}

#else

bool local_tokenizer_available() { return false; }

std::unique_ptr<TokenSource> local_tokenizer_open(const std::string& path) {
  fail("--tokenizer " + path, "this build has no local tokenizer (the tokenizer module is not merged yet)",
       "drop --tokenizer: the server's /tokenize is used instead");
}

#endif

}  // namespace phasescope
