// corpus.cpp — see corpus.h. Build: sources -> documents -> split -> tokenizer (node) -> shards ->
// lookup words -> manifest (written last, so a build that stopped half-way leaves no manifest and
// corpus_open refuses the folder). Open: manifest checks, then mmap.
#include "data/corpus.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "core/check.h"
#include "core/hash.h"
#include "core/io.h"
#include "core/json_fields.h"
#include "core/process.h"
#include "core/sha256.h"
#include "data/corpus_sources.h"
#include "data/corpus_words.h"
#include "tokenizer/tokenizer.h"

#ifndef PHASESCOPE_JS_DIR
#define PHASESCOPE_JS_DIR "tests/js"
#endif

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the shards are uint16 little-endian, written raw");

namespace phasescope {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "phasescope-corpus-1";
constexpr const char* kBoundaryToken = "<|endoftext|>";
constexpr const char* kSplitNames[2] = {"train", "val"};

std::string rebuild_fix(const std::string& dir) {
  return "run phasescope corpus build --out " + dir + " again";
}

// A number in [0, 1) from a hash: its top 53 bits.
double unit_of(uint64_t h) { return double(h >> 11) * (1.0 / 9007199254740992.0); }

// ---- building

struct Doc {
  const CorpusSource* source = nullptr;
  const CorpusDocument* doc = nullptr;
  int split = 0;       // 0 train, 1 val
  uint64_t order = 0;  // position key inside its split's shard (a seeded shuffle)
  int64_t offset = 0;  // index of its boundary token in the shard
  int64_t tokens = 0;  // its tokens, the boundary token not counted
};

void check_options(const CorpusBuildOptions& o) {
  if (o.out.empty()) fail("--out", "is empty", "pass the corpus folder, e.g. --out runs/corpus");
  if (o.vocab_size < 300 || o.vocab_size > 30000)
    fail("--vocab", fmt::format("is {}", o.vocab_size),
         "pass 300 to 30000 (the trainer's cap; the shards hold uint16 ids)");
  if (!(o.val_fraction > 0.0 && o.val_fraction <= 0.5))
    fail("--val-fraction", fmt::format("is {}", o.val_fraction), "pass a share in (0, 0.5], e.g. 0.02");
  if (o.lookup_words < 0 || o.lookup_words > 1000)
    fail("--lookup-words", fmt::format("is {}", o.lookup_words), "pass 0 to 1000");
}

// train_bpe.mjs on the train split's text -> DIR/tokenizer.json
void train_tokenizer(const CorpusBuildOptions& o, const std::vector<Doc*>& train,
                     const std::string& tokenizer_path, std::ostream* log) {
  // the script and its library
  const std::string js_dir = o.js_dir.empty() ? PHASESCOPE_JS_DIR : o.js_dir;
  const std::string script = js_dir + "/train_bpe.mjs";
  if (!fs::is_regular_file(script))
    fail(script, "missing", "pass the source tree's tests/js folder (it holds train_bpe.mjs)");
  if (!fs::is_directory(js_dir + "/node_modules/tokenizers"))
    fail(js_dir + "/node_modules/tokenizers", "missing (HF tokenizers' Node binding, which trains the BPE)",
         "run scripts/js_reference.sh (npm ci in tests/js)");

  // the train split as one text file: documents in shard order, each ending in a newline (the trainer
  // reads lines, so no line joins two documents)
  const std::string text_path = fs::path(o.out) / ".bpe-train.txt";
  io_write_atomic_with(text_path, [&](int fd, const std::string& tmp) {
    for (const Doc* d : train) {
      const std::string& t = d->doc->text;
      io_write_all(fd, t.data(), t.size(), tmp);
      if (t.back() != '\n') io_write_all(fd, "\n", 1, tmp);
    }
  });

  // node
  const ProgramRun run =
      run_program({"node", script, "--input", text_path, "--vocab", std::to_string(o.vocab_size), "--special",
                   kBoundaryToken, "--out", tokenizer_path},
                  true);
  const int status = run.status;
  const std::string& out = run.out;
  fs::remove(text_path);
  if (status == 127) fail("node", "not found", "install nodejs (scripts/setup.sh does)");
  std::string last = out.size() > 2000 ? out.substr(out.size() - 2000) : out;
  while (!last.empty() && (last.back() == '\n' || last.back() == ' ')) last.pop_back();
  const size_t first = last.find_first_not_of("\n ");
  last = first == std::string::npos ? "" : last.substr(first);
  if (status == 3)  // the script's own verdict: the text is too small for the vocabulary
    fail("--vocab", last, "pass a smaller --vocab (the message says the largest that fits), or add text");
  if (status != 0)
    fail(script, fmt::format("exit status {}: {}", status, last),
         "check node and its packages (scripts/js_reference.sh installs them)");
  if (log != nullptr) *log << "corpus: " << last.substr(last.rfind('\n') + 1) << "\n";
}

// the split's documents as [EOT d1 EOT d2 ...], each document's offset and token count filled in
std::vector<uint16_t> tokenize_split(const Tokenizer& tok, int boundary, std::vector<Doc*>& docs) {
  std::vector<uint16_t> out;
  for (Doc* d : docs) {
    d->offset = int64_t(out.size());
    out.push_back(uint16_t(boundary));
    const std::vector<int> ids = tok.encode(d->doc->text);
    for (int id : ids) {
      PS_ASSERT(id >= 0 && id < 65536, "token id beyond uint16");
      out.push_back(uint16_t(id));
    }
    d->tokens = int64_t(ids.size());
  }
  return out;
}

nlohmann::json words_json(const std::vector<LookupWord>& words) {
  nlohmann::json a = nlohmann::json::array();
  for (const LookupWord& w : words) a.push_back({{"id", w.id}, {"text", w.text}});
  return a;
}

// the manifest's identity: FNV-1a of its compact dump without the hash field (keys sorted by nlohmann)
std::string manifest_hash_of(nlohmann::json j) {
  j.erase("manifest_hash");
  return hash_hex(fnv1a(j.dump()));
}

// ---- opening

struct Mapping {
  void* addr[2] = {nullptr, nullptr};
  size_t len[2] = {0, 0};
  ~Mapping() {
    for (int s = 0; s < 2; ++s)
      if (addr[s] != nullptr) ::munmap(addr[s], len[s]);
  }
};

// a required field of the manifest, with the error a hand-edited or truncated manifest gets
const nlohmann::json& field(const nlohmann::json& j, const std::string& key, const std::string& path,
                            const std::string& where, const std::string& dir) {
  if (!j.is_object() || !j.contains(key)) fail(path + " field " + where + key, "missing", rebuild_fix(dir));
  return j[key];
}

}  // namespace

std::vector<std::string> corpus_builtin_sources() { return corpus_source_names(); }

void corpus_build(const CorpusBuildOptions& o, std::ostream* log) {
  const auto t0 = std::chrono::steady_clock::now();
  check_options(o);
  const std::string manifest_path = (fs::path(o.out) / "manifest.json").string();
  const std::string tokenizer_path = (fs::path(o.out) / "tokenizer.json").string();

  // the folder: the old manifest goes first, so a build that stops half-way leaves a folder that
  // corpus_open refuses instead of a manifest describing files that are being replaced
  io_make_dirs(o.out);
  io_remove_stale_temps(o.out);
  fs::remove(manifest_path);

  // the documents, source by source
  const std::vector<std::string> specs = o.sources.empty() ? corpus_builtin_sources() : o.sources;
  std::vector<CorpusSource> sources;
  sources.reserve(specs.size());
  for (const std::string& spec : specs) sources.push_back(corpus_source_read(spec, kBoundaryToken, log));

  // the split: by a seeded hash of each document's path; inside a split, documents in the order of a
  // second hash, so a reader going through a shard sees the sources mixed
  std::vector<Doc> docs;
  std::vector<std::string> paths;
  for (const CorpusSource& s : sources)
    for (const CorpusDocument& d : s.documents) {
      const uint64_t h = fnv1a(d.path, fnv1a(&o.seed, sizeof o.seed));
      docs.push_back({&s, &d, unit_of(h) < o.val_fraction ? 1 : 0, fnv1a(d.path, h), 0, 0});
      paths.push_back(d.path);
    }
  std::sort(paths.begin(), paths.end());
  const auto dup = std::adjacent_find(paths.begin(), paths.end());
  if (dup != paths.end())
    fail(*dup, "is read twice (two --sources overlap)", "pass each file or folder once");
  std::vector<Doc*> split_docs[2];
  for (Doc& d : docs) split_docs[d.split].push_back(&d);
  for (int s = 0; s < 2; ++s) {
    if (split_docs[s].empty())
      fail("--val-fraction",
           fmt::format("leaves the {} split empty ({} documents in all)", kSplitNames[s], docs.size()),
           "add documents, or change --val-fraction or --seed");
    std::sort(split_docs[s].begin(), split_docs[s].end(), [](const Doc* a, const Doc* b) {
      return a->order != b->order ? a->order < b->order : a->doc->path < b->doc->path;
    });
  }

  // the tokenizer, trained on the train split
  train_tokenizer(o, split_docs[0], tokenizer_path, log);
  const Tokenizer tok = Tokenizer::load(tokenizer_path);
  const int boundary = tok.token_to_id(kBoundaryToken);
  if (tok.vocab_size() != o.vocab_size || boundary != o.vocab_size - 1)
    fail(tokenizer_path,
         fmt::format("has {} tokens and {} = {}, expected {} and {}", tok.vocab_size(), kBoundaryToken,
                     boundary, o.vocab_size, o.vocab_size - 1),
         "check tests/js/train_bpe.mjs");

  // the shards, tokenized by phasescope's own tokenizer
  nlohmann::json splits = nlohmann::json::object();
  std::vector<int64_t> counts(size_t(tok.vocab_size()), 0);
  for (int s = 0; s < 2; ++s) {
    const auto ts = std::chrono::steady_clock::now();
    const std::vector<uint16_t> tokens = tokenize_split(tok, boundary, split_docs[s]);
    const std::string file = std::string(kSplitNames[s]) + ".bin";
    const size_t nbytes = tokens.size() * sizeof(uint16_t);
    io_write_atomic_with((fs::path(o.out) / file).string(), [&](int fd, const std::string& tmp) {
      io_write_all(fd, reinterpret_cast<const char*>(tokens.data()), nbytes, tmp);
    });
    if (s == 0)
      for (uint16_t t : tokens) ++counts[t];
    int64_t text_bytes = 0;
    for (const Doc* d : split_docs[s]) text_bytes += int64_t(d->doc->text.size());
    splits[kSplitNames[s]] = {
        {"file", file},        {"dtype", "uint16le"},     {"documents", split_docs[s].size()},
        {"bytes", text_bytes}, {"tokens", tokens.size()}, {"sha256", sha256_hex(tokens.data(), nbytes)}};
    if (log != nullptr)
      *log << fmt::format("corpus: {}: {} documents, {} bytes -> {} tokens ({:.3f} tokens/byte, {:.1f} s)\n",
                          kSplitNames[s], split_docs[s].size(), text_bytes, tokens.size(),
                          double(tokens.size()) / double(std::max<int64_t>(text_bytes, 1)),
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count());
  }

  // the lookup words
  const LookupChoice words = corpus_choose_lookup_words(tok, counts, o.lookup_words);
  if (int(words.keys.size()) < o.lookup_words || int(words.names.size()) < o.lookup_words)
    fail(tokenizer_path,
         fmt::format(
             "has {} single-token keys and {} names used >= {} times in the train split, {} of each are "
             "needed",
             words.keys.size(), words.names.size(), kLookupMinCount, o.lookup_words),
         "raise --vocab, lower --lookup-words, or add text with more animal words and names");

  // the manifest: sources, documents, tokenizer, splits, words; its hash; written last
  nlohmann::json j;
  j["format"] = kFormat;
  j["options"] = {{"vocab_size", o.vocab_size},
                  {"seed", o.seed},
                  {"val_fraction", o.val_fraction},
                  {"sources", specs},
                  {"lookup_words", o.lookup_words}};
  j["sources"] = nlohmann::json::array();
  for (const CorpusSource& s : sources) {
    int64_t bytes = 0;
    for (const CorpusDocument& d : s.documents) bytes += int64_t(d.text.size());
    j["sources"].push_back({{"name", s.name},
                            {"packages", s.packages},
                            {"versions", s.versions},
                            {"licence", s.licence},
                            {"root", s.root},
                            {"documents", s.documents.size()},
                            {"bytes", bytes},
                            {"files_left_out", s.skipped}});
  }
  j["documents"] = nlohmann::json::array();
  for (const Doc& d : docs)
    j["documents"].push_back({{"path", d.doc->path},
                              {"source", d.source->name},
                              {"licence", d.doc->licence},
                              {"sha256", sha256_hex(d.doc->text)},
                              {"bytes", d.doc->text.size()},
                              {"split", kSplitNames[d.split]},
                              {"offset", d.offset},
                              {"tokens", d.tokens}});
  j["tokenizer"] = {
      {"file", "tokenizer.json"},
      {"sha256", sha256_file(tokenizer_path)},
      {"vocab_size", tok.vocab_size()},
      {"trainer", "HF tokenizers 0.23.2 (npm, tests/js/package.json) via tests/js/train_bpe.mjs"}};
  j["boundary_token"] = kBoundaryToken;
  j["boundary_id"] = boundary;
  j["splits"] = splits;
  j["lookup_keys"] = words_json(words.keys);
  j["lookup_names"] = words_json(words.names);
  j["lookup_keys_animals"] = words.animal_keys;
  j["lookup_names_people"] = words.people_names;
  j["lookup_names_places"] = words.place_names;
  j["lookup_min_count"] = kLookupMinCount;
  j["manifest_hash"] = manifest_hash_of(j);
  io_write_atomic(manifest_path, j.dump(1) + "\n");
  if (log != nullptr)
    *log << fmt::format("corpus: {} written, manifest hash {}, {:.1f} s\n", manifest_path,
                        j["manifest_hash"].get<std::string>(),
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

Corpus corpus_open(const std::string& dir, CorpusVerify verify) {
  const std::string fix = rebuild_fix(dir);
  const std::string path = (fs::path(dir) / "manifest.json").string();

  // the manifest: there, JSON, of this format, and unchanged (its own hash)
  if (!fs::is_directory(dir))
    fail(dir, "no such folder", "build the corpus: phasescope corpus build --out " + dir);
  if (!fs::is_regular_file(path))
    fail(path, "missing: " + dir + " is not a corpus, or its build did not finish", fix);
  const nlohmann::json j = json_parse_or_fail(io_read_text(path, fix), path, fix);
  const std::string format =
      field(j, "format", path, "", dir).is_string() ? j["format"].get<std::string>() : "";
  if (format != kFormat)
    fail(path + " field format", "is \"" + format + "\", this phasescope reads \"" + kFormat + "\"", fix);
  const nlohmann::json& stated_hash = field(j, "manifest_hash", path, "", dir);
  const std::string actual_hash = manifest_hash_of(j);
  if (!stated_hash.is_string() || stated_hash.get<std::string>() != actual_hash)
    fail(path + " field manifest_hash",
         fmt::format("is {} but the manifest's content hashes to {} (the manifest was edited)",
                     stated_hash.dump(), actual_hash),
         fix);

  Corpus c;
  c.dir = dir;
  c.manifest_hash = actual_hash;
  try {
    // the tokenizer: unchanged
    const nlohmann::json& t = field(j, "tokenizer", path, "", dir);
    c.tokenizer_path =
        (fs::path(dir) / field(t, "file", path, "tokenizer.", dir).get<std::string>()).string();
    const std::string tok_sha = sha256_file(c.tokenizer_path, fix);
    if (tok_sha != field(t, "sha256", path, "tokenizer.", dir).get<std::string>())
      fail(c.tokenizer_path,
           "changed since the build: its sha256 is " + tok_sha + ", " + path +
               " field tokenizer.sha256 says " + t["sha256"].get<std::string>(),
           fix);
    c.vocab_size = field(t, "vocab_size", path, "tokenizer.", dir).get<int>();
    c.boundary_id = field(j, "boundary_id", path, "", dir).get<int>();
    for (const auto& w : field(j, "lookup_keys", path, "", dir))
      c.lookup_keys.push_back({w.at("id").get<int>(), w.at("text").get<std::string>()});
    for (const auto& w : field(j, "lookup_names", path, "", dir))
      c.lookup_names.push_back({w.at("id").get<int>(), w.at("text").get<std::string>()});

    // the shards: sizes always, sha256 with kHashes; then mapped read-only
    auto mapping = std::make_shared<Mapping>();
    const nlohmann::json& splits = field(j, "splits", path, "", dir);
    for (int s = 0; s < 2; ++s) {
      const std::string where = std::string("splits.") + kSplitNames[s] + ".";
      const nlohmann::json& sp = field(splits, kSplitNames[s], path, "splits.", dir);
      const std::string file =
          (fs::path(dir) / field(sp, "file", path, where, dir).get<std::string>()).string();
      const int64_t tokens = field(sp, "tokens", path, where, dir).get<int64_t>();
      const size_t want = size_t(tokens) * sizeof(uint16_t);
      const int fd = ::open(file.c_str(), O_RDONLY);
      if (fd < 0) fail(file, std::string("cannot open: ") + std::strerror(errno), fix);
      struct stat st {};
      ::fstat(fd, &st);
      if (size_t(st.st_size) != want || want == 0) {
        ::close(fd);
        fail(file,
             fmt::format(
                 "has {} bytes, but {} field {}tokens says {} tokens ({} bytes): it changed since the build",
                 st.st_size, path, where, tokens, want),
             fix);
      }
      void* addr = ::mmap(nullptr, want, PROT_READ, MAP_SHARED, fd, 0);
      ::close(fd);
      if (addr == MAP_FAILED)
        fail(file, std::string("mmap failed: ") + std::strerror(errno), "check free memory");
      mapping->addr[s] = addr;
      mapping->len[s] = want;
      if (verify == CorpusVerify::kHashes) {
        const std::string sha = sha256_hex(addr, want);
        if (sha != field(sp, "sha256", path, where, dir).get<std::string>())
          fail(file,
               "changed since the build: its sha256 is " + sha + ", " + path + " field " + where +
                   "sha256 says " + sp["sha256"].get<std::string>(),
               fix);
      }
      CorpusTokens& tk = s == 0 ? c.train : c.val;
      tk.data = static_cast<const uint16_t*>(addr);
      tk.size = size_t(tokens);
      if (tk.data[0] != c.boundary_id)
        fail(file, fmt::format("starts with token {}, not the boundary token {}", tk.data[0], c.boundary_id),
             fix);
    }
    c.mapping = mapping;
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("a field has the wrong type (") + e.what() + ")", fix);
  }
  return c;
}

std::string corpus_describe(const std::string& dir) {
  const Corpus c = corpus_open(dir, CorpusVerify::kHashes);
  const nlohmann::json j = nlohmann::json::parse(io_read_text((fs::path(dir) / "manifest.json").string()));
  std::string out =
      fmt::format("corpus {}: manifest hash {}, vocab {}, boundary {} = {}\n", dir, c.manifest_hash,
                  c.vocab_size, j["boundary_token"].get<std::string>(), c.boundary_id);
  out += "sources:\n";
  for (const auto& s : j["sources"])
    out += fmt::format("  {:<14} {:>6} documents {:>11} bytes  {}  [{}]\n", s["name"].get<std::string>(),
                       s["documents"].get<int64_t>(), s["bytes"].get<int64_t>(),
                       s["versions"].get<std::string>(), s["licence"].get<std::string>());
  out += "splits:\n";
  for (const char* name : kSplitNames) {
    const auto& sp = j["splits"][name];
    out += fmt::format(
        "  {:<5} {:>6} documents {:>11} bytes {:>11} tokens  {:.3f} tokens/byte  {}\n", name,
        sp["documents"].get<int64_t>(), sp["bytes"].get<int64_t>(), sp["tokens"].get<int64_t>(),
        double(sp["tokens"].get<int64_t>()) / double(std::max<int64_t>(sp["bytes"].get<int64_t>(), 1)),
        sp["file"].get<std::string>());
  }
  auto list = [](const std::vector<LookupWord>& words) {  // as JSON strings, so the leading spaces show
    nlohmann::json a = nlohmann::json::array();
    for (const LookupWord& w : words) a.push_back(w.text);
    return a.dump();
  };
  out += fmt::format("lookup keys ({}, {} animals): {}\n", c.lookup_keys.size(),
                     j["lookup_keys_animals"].get<int>(), list(c.lookup_keys));
  out += fmt::format("lookup names ({}, {} people, {} places): {}\n", c.lookup_names.size(),
                     j["lookup_names_people"].get<int>(), j["lookup_names_places"].get<int>(),
                     list(c.lookup_names));
  return out;
}

std::vector<std::vector<int>> corpus_passages(const CorpusTokens& text, int boundary_id, int n, size_t len,
                                              uint64_t seed) {
  if (text.size < len + 1)
    fail("corpus passages",
         fmt::format("the split has {} tokens, fewer than one passage of {}", text.size, len),
         "build a larger corpus or ask for shorter passages");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> start(0, text.size - len);
  std::vector<std::vector<int>> out;
  for (int tries = 0; int(out.size()) < n; ++tries) {
    if (tries >= 100 * n)
      fail("corpus passages",
           fmt::format("{} draws found only {} of {} passages without a document boundary (documents are "
                       "mostly shorter than {} tokens)",
                       tries, out.size(), n, len),
           "ask for shorter passages");
    const size_t a = start(rng);
    std::vector<int> p(text.data + a, text.data + a + len);
    if (std::find(p.begin(), p.end(), boundary_id) == p.end()) out.push_back(std::move(p));
  }
  return out;
}

}  // namespace phasescope
