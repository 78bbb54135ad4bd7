// corpus.h — the language models' text corpus: built once from text Debian ships (corpus_build), then
// opened by training and evaluation (corpus_open) as memory-mapped token arrays.
// A corpus folder DIR holds
//   manifest.json   every document (path, sha256, bytes, licence, split), the sources, the tokenizer's
//                   and each shard's sha256, token counts, the lookup words, and its own FNV-1a hash;
//   tokenizer.json  a byte-level BPE trained on the train split with HF `tokenizers`
//   (tests/js/train_bpe.mjs); train.bin, val.bin  the splits' tokens as uint16 little-endian, each document
//   preceded by the boundary
//                   token: [EOT d1 ... EOT d2 ... EOT dN ...] (so a shard starts with EOT; as llm.c does).
// The split is by document, fixed by a hash of the document's path and the seed (never by order).
// Deterministic: the same sources, options and packages give byte-identical files.
// Not here: packing into training rows or the lookup layouts (the trainer and eval/ do that).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace phasescope {

// ---- building

struct CorpusBuildOptions {
  // the corpus folder, e.g. "runs/corpus" (created; its files replaced)
  std::string out;
  // BPE vocabulary, boundary token included (300 to 30000, the trainer's cap). 16384, not 8192: at 8192
  // the built-in corpus has only 19 single-token names for the lookup's 64 (docs/lm/corpus.md)
  int vocab_size = 16384;
  uint64_t seed = 20261207;    // mixed into the hash that splits documents
  double val_fraction = 0.02;  // share of documents held out, by that hash
  // built-in source names (corpus_builtin_sources) or files/folders; empty: all built-ins
  std::vector<std::string> sources;
  int lookup_words = 64;  // keys and names, each, to choose; fewer single-token words fails the build
  std::string js_dir;     // folder of train_bpe.mjs and its node_modules; "": the source tree's tests/js
};

// The built-in sources, in build order: "python-stdlib", "python-tests", "python-docs", "linux-docs",
// "bible-kjv", "fortunes" (their packages, licences and roots: docs/lm/corpus.md).
std::vector<std::string> corpus_builtin_sources();

// Gathers the documents, splits them, trains the tokenizer on the train split (node), tokenizes both
// splits with phasescope's own tokenizer, chooses the lookup words and writes DIR/manifest.json last.
// Progress lines go to `log` (may be null). Errors (a missing source, node or its modules, a split
// left empty, too few lookup words) name the file or option and the fix.
void corpus_build(const CorpusBuildOptions& opts, std::ostream* log);

// ---- opening

// One split's tokens, memory-mapped read-only: data[0 .. size).
struct CorpusTokens {
  const uint16_t* data = nullptr;
  size_t size = 0;
};

// A single-token word of the trained vocabulary (text with its leading space, e.g. " cat").
struct LookupWord {
  int id = -1;
  std::string text;
};

struct Corpus {
  std::string dir;
  std::string tokenizer_path;  // DIR/tokenizer.json (load it with Tokenizer::load)
  std::string manifest_hash;   // 16 hex digits (core/hash.h), the corpus's identity
  int vocab_size = 0;          // the tokenizer's, boundary token included
  int boundary_id = -1;        // "<|endoftext|>", before every document in the shards
  CorpusTokens train, val;
  std::vector<LookupWord> lookup_keys;  // animals, then common nouns (docs/lm/corpus.md)
  std::vector<LookupWord>
      lookup_names;                     // first names, then places and other proper nouns; disjoint from keys
  std::shared_ptr<const void> mapping;  // owns the mmaps; copies of a Corpus share them
};

// How much corpus_open checks. Sizes, the manifest's own hash and the tokenizer's sha256 always; the
// shards' sha256 with kHashes (~0.2 s per 50 MB of tokens here), the default.
enum class CorpusVerify { kSizes, kHashes };

// Verifies DIR/manifest.json (present, parses, its hash, the tokenizer's and each shard's size and
// sha256) and maps the shards. A missing manifest or a file that changed on disk is refused with an
// Error naming the file, the field and the fix ("run phasescope corpus build --out DIR again").
Corpus corpus_open(const std::string& dir, CorpusVerify verify = CorpusVerify::kHashes);

// What `phasescope corpus info DIR` prints after a full corpus_open: sources, sizes, token counts, tokens
// per byte, lookup words.
std::string corpus_describe(const std::string& dir);

// n passages of len consecutive tokens of `text` (a split), at seeded random starts, none holding the
// boundary token (inside one document). Error when the split has no such stretch after many draws.
std::vector<std::vector<int>> corpus_passages(const CorpusTokens& text, int boundary_id, int n, size_t len,
                                              uint64_t seed);

}  // namespace phasescope
