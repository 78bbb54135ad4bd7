// corpus_test.cpp — the language models' corpus (data/corpus.h) on a tiny corpus the tests write: ~24
// seeded documents (prose with animal words and names, Python-like code, a gzip-compressed file, a nested
// folder, and two files the build must leave out), vocab 400, a quarter held out. The real build reads
// ~75 MB and takes ~50 s, so it is not run here (docs/lm/corpus.md has its numbers).
// Checked: two builds give byte-identical files (same manifest hash); phasescope's tokenizer gives the ids
// of HF's own library (npm `tokenizers`, tests/js/encode_hf.mjs) on the held-out split, shard and all;
// document boundaries and offsets in the shards; the lookup words; corpus_open refusing a folder without a
// manifest, a changed shard, tokenizer or manifest (naming the file, the field and the fix); bad build
// options; and the pieces (SHA-256 known answers, the bible read as 66 books, running a program). Needs node
// and tests/js/node_modules (scripts/js_reference.sh).
#include "data/corpus.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/io.h"
#include "core/process.h"
#include "core/sha256.h"
#include "data/corpus_sources.h"
#include "testing.h"
#include "tokenizer/tokenizer.h"

namespace phasescope {
namespace {

namespace fs = std::filesystem;
using testutil::error_of;
using testutil::slurp;
using testutil::tmp_dir;

const std::string kSource = PHASESCOPE_SOURCE_DIR;

// ---- the tiny corpus

// prose: sentences about cats and dogs and the people who have them
std::string prose(std::mt19937& rng) {
  const char* names[] = {"Alice", "Bob"};
  const char* animals[] = {"cat", "dog"};
  const char* verbs[] = {"has", "feeds", "likes", "walks"};
  std::string s;
  for (int i = 0; i < 24; ++i) {
    s += std::string(names[rng() % 2]) + " " + verbs[rng() % 4] + " a " + animals[rng() % 2] + ". The " +
         animals[rng() % 2] + " sees " + names[rng() % 2] + ".\n";
    if (rng() % 6 == 0) s += "\n";
  }
  // and words of random letters, so the text has more pairs than a 400-token vocabulary merges
  for (int i = 0; i < 40; ++i) {
    std::string w = " ";
    for (int n = 3 + int(rng() % 6); n > 0; --n) w += char('a' + rng() % 26);
    s += w;
  }
  return s + "\nNaïve café, 東京 — ok.\n";
}

// code: small Python functions
std::string code(std::mt19937& rng) {
  std::string s;
  for (int i = 0; i < 8; ++i)
    s += "def f" + std::to_string(rng() % 100) + "(x, cat):\n    return x + " + std::to_string(rng() % 1000) +
         "  # the dog\n\n";
  return s;
}

void write_gz(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), unsigned(text.size())), int(text.size()));
  gzclose(f);
}

// the folder of sources: 12 prose files, 8 code files in a subfolder, one .gz, and two to be left out
std::string write_sources() {
  const std::string dir = tmp_dir("corpus-src");
  std::mt19937 rng(7);
  for (int i = 0; i < 12; ++i) io_write_atomic(dir + "/story" + std::to_string(i) + ".txt", prose(rng));
  io_make_dirs(dir + "/lib");
  for (int i = 0; i < 8; ++i) io_write_atomic(dir + "/lib/mod" + std::to_string(i) + ".py", code(rng));
  write_gz(dir + "/notes.rst.gz", prose(rng));
  io_write_atomic(dir + "/latin1.txt", "caf\xe9 is not UTF-8\n");                // left out: not UTF-8
  io_write_atomic(dir + "/eot.txt", "a file that says <|endoftext|> itself\n");  // left out: the boundary
  return dir;
}

CorpusBuildOptions tiny_options(const std::string& sources, const std::string& out) {
  CorpusBuildOptions o;
  o.out = out;
  o.vocab_size = 400;
  o.val_fraction = 0.25;
  o.sources = {sources};
  o.lookup_words = 2;
  return o;
}

// one tiny corpus, built once per process (node takes ~0.5 s a build)
struct Tiny {
  std::string sources, dir;
  std::string log;
};
const Tiny& tiny() {
  static Tiny t = [] {
    Tiny t;
    t.sources = write_sources();
    t.dir = tmp_dir("corpus") + "/c";
    std::ostringstream log;
    corpus_build(tiny_options(t.sources, t.dir), &log);
    t.log = log.str();
    return t;
  }();
  return t;
}

nlohmann::json manifest(const std::string& dir) {
  return nlohmann::json::parse(slurp(dir + "/manifest.json"));
}

// a copy of the tiny corpus that a test may damage
std::string copy_of_tiny(const std::string& name) {
  const std::string dir = tmp_dir(name) + "/c";
  fs::copy(tiny().dir, dir, fs::copy_options::recursive);
  return dir;
}

// ---- building

TEST(CorpusBuild, SameInputsGiveByteIdenticalFiles) {
  // a second build of the same sources into another folder
  const std::string again = tmp_dir("corpus-again") + "/c";
  corpus_build(tiny_options(tiny().sources, again), nullptr);
  for (const char* f : {"manifest.json", "tokenizer.json", "train.bin", "val.bin"})
    EXPECT_EQ(slurp(tiny().dir + "/" + f), slurp(again + "/" + f)) << f << " differs between two builds";
  EXPECT_EQ(corpus_open(tiny().dir).manifest_hash, corpus_open(again).manifest_hash);

  // a different seed moves documents between the splits, and so changes the hash
  CorpusBuildOptions o = tiny_options(tiny().sources, tmp_dir("corpus-seed") + "/c");
  o.seed = 5;
  corpus_build(o, nullptr);
  EXPECT_NE(corpus_open(o.out).manifest_hash, corpus_open(tiny().dir).manifest_hash);
}

TEST(CorpusBuild, ManifestListsEveryDocumentWithItsSplitAndSha256) {
  const nlohmann::json m = manifest(tiny().dir);
  // 12 prose + 8 code + 1 gzip; the Latin-1 file and the one spelling the boundary token left out
  ASSERT_EQ(m["documents"].size(), 21u) << tiny().log;
  EXPECT_EQ(m["sources"][0]["files_left_out"], 2);
  int val = 0;
  for (const auto& d : m["documents"]) {
    const std::string path = d["path"];
    EXPECT_EQ(path.rfind(tiny().sources + "/", 0), 0u) << path;
    val += d["split"] == "val";
    if (path.size() < 3 || path.substr(path.size() - 3) != ".gz")  // a plain file: sha256sum's value
      EXPECT_EQ(d["sha256"], sha256_hex(slurp(path))) << path;
    EXPECT_FALSE(d["licence"].get<std::string>().empty());
  }
  EXPECT_GT(val, 0);
  EXPECT_LT(val, 21);
  EXPECT_EQ(m["splits"]["val"]["documents"], val);
  EXPECT_EQ(m["tokenizer"]["sha256"], sha256_hex(slurp(tiny().dir + "/tokenizer.json")));
  EXPECT_EQ(m["boundary_token"], "<|endoftext|>");
  EXPECT_EQ(m["boundary_id"], 399);
}

// ---- the tokenizer

TEST(CorpusTokenizer, MatchesHfLibraryOnHeldOutSplit) {
  const Corpus c = corpus_open(tiny().dir);
  const Tokenizer tok = Tokenizer::load(c.tokenizer_path);
  ASSERT_EQ(tok.vocab_size(), 400);
  ASSERT_TRUE(tok.is_special(c.boundary_id));

  // the held-out documents' texts, in shard order
  const nlohmann::json m = manifest(tiny().dir);
  std::vector<std::pair<int64_t, std::string>> held_out;  // (offset, text)
  for (const auto& d : m["documents"])
    if (d["split"] == "val") {
      const std::string path = d["path"];
      held_out.push_back({d["offset"], path.substr(path.size() - 3) == ".gz" ? "" : slurp(path)});
    }
  std::sort(held_out.begin(), held_out.end());
  nlohmann::json texts = nlohmann::json::array();
  for (auto& [offset, text] : held_out)
    if (!text.empty()) texts.push_back(text);
  texts.push_back("unseen: ÆØÅ \t\ttabs,  two  spaces\r\n\n\nzebra_case 12345 <|endoftext|> end");
  const std::string texts_path = tmp_dir("corpus-hf") + "/texts.json";
  io_write_atomic(texts_path, texts.dump());

  // HF's ids (its Rust core through npm), then phasescope's
  const ProgramRun run =
      run_program({"node", kSource + "/tests/js/encode_hf.mjs", c.tokenizer_path, texts_path}, false);
  const std::string& out = run.out;
  ASSERT_EQ(run.status, 0) << out << " (needs node and tests/js/node_modules: scripts/js_reference.sh)";
  const nlohmann::json hf = nlohmann::json::parse(out);
  ASSERT_EQ(hf.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i)
    EXPECT_EQ(tok.encode(texts[i].get<std::string>()), hf[i].get<std::vector<int>>())
        << "text " << i << ": " << texts[i].dump();

  // the val shard is exactly [EOT hf(doc1) EOT hf(doc2) ...] for the plain-file documents
  size_t k = 0;
  for (auto& [offset, text] : held_out) {
    if (text.empty()) continue;
    ASSERT_EQ(c.val.data[offset], c.boundary_id);
    const std::vector<int> want = hf[k++].get<std::vector<int>>();
    ASSERT_LE(size_t(offset) + 1 + want.size(), c.val.size);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(c.val.data[offset + 1 + i], want[i]) << "offset " << offset;
  }
  EXPECT_GT(k, 0u);
}

// ---- the shards

TEST(CorpusShards, EveryDocumentFollowsOneBoundaryToken) {
  const Corpus c = corpus_open(tiny().dir);
  const Tokenizer tok = Tokenizer::load(c.tokenizer_path);
  const nlohmann::json m = manifest(tiny().dir);
  for (const char* split : {"train", "val"}) {
    const CorpusTokens& t = std::string(split) == "train" ? c.train : c.val;
    ASSERT_EQ(int64_t(t.size), m["splits"][split]["tokens"].get<int64_t>());
    // one boundary per document, the first at 0
    int64_t boundaries = 0;
    for (size_t i = 0; i < t.size; ++i) boundaries += t.data[i] == c.boundary_id;
    EXPECT_EQ(boundaries, m["splits"][split]["documents"].get<int64_t>()) << split;
    EXPECT_EQ(t.data[0], c.boundary_id);
    // each document's tokens, from its offset, decode to its text
    for (const auto& d : m["documents"]) {
      if (d["split"] != split) continue;
      const int64_t offset = d["offset"], n = d["tokens"];
      ASSERT_EQ(t.data[offset], c.boundary_id);
      ASSERT_TRUE(size_t(offset + 1 + n) == t.size || t.data[offset + 1 + n] == c.boundary_id);
      const std::vector<int> ids(t.data + offset + 1, t.data + offset + 1 + n);
      const std::string path = d["path"];
      if (path.substr(path.size() - 3) != ".gz") EXPECT_EQ(tok.decode(ids), slurp(path)) << path;
      EXPECT_EQ(int64_t(tok.decode(ids).size()), d["bytes"].get<int64_t>()) << path;
    }
  }
}

TEST(CorpusShards, LookupWordsAreSingleTokensAndDisjoint) {
  const Corpus c = corpus_open(tiny().dir);
  const Tokenizer tok = Tokenizer::load(c.tokenizer_path);
  ASSERT_EQ(c.lookup_keys.size(), 2u);
  ASSERT_EQ(c.lookup_names.size(), 2u);
  EXPECT_EQ(c.lookup_keys[0].text, " cat");  // animals, in the list's order
  EXPECT_EQ(c.lookup_keys[1].text, " dog");
  EXPECT_EQ(c.lookup_names[0].text, " Alice");
  EXPECT_EQ(c.lookup_names[1].text, " Bob");
  for (const auto* list : {&c.lookup_keys, &c.lookup_names})
    for (const LookupWord& w : *list) {
      EXPECT_EQ(tok.encode(w.text), std::vector<int>{w.id}) << w.text;
      EXPECT_EQ(tok.decode({w.id}), w.text);
    }
  EXPECT_NE(c.lookup_keys[0].id, c.lookup_names[0].id);

  // asking for more than the vocabulary has fails the build, saying what to do
  CorpusBuildOptions o = tiny_options(tiny().sources, tmp_dir("corpus-words") + "/c");
  o.lookup_words = 64;
  const std::string e = error_of([&] { corpus_build(o, nullptr); });
  EXPECT_NE(e.find("single-token keys"), std::string::npos) << e;
  EXPECT_NE(e.find("raise --vocab"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(o.out + "/manifest.json"));  // no manifest for a failed build
}

// ---- opening: what is refused

TEST(CorpusOpen, RefusesFolderWithoutManifest) {
  const std::string dir = tmp_dir("corpus-empty");
  const std::string e = error_of([&] { corpus_open(dir); });
  EXPECT_NE(e.find(dir + "/manifest.json: missing"), std::string::npos) << e;
  EXPECT_NE(e.find("Fix: run phasescope corpus build --out " + dir + " again"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { corpus_open(dir + "/nope"); }).find("no such folder"), std::string::npos);
}

TEST(CorpusOpen, RefusesModifiedShard) {
  const std::string dir = copy_of_tiny("corpus-shard");
  ASSERT_NO_THROW(corpus_open(dir));

  // one token changed, the size kept: the sha256 check names the file, the field and the fix
  {
    std::fstream f(dir + "/train.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    const char two[2] = {3, 0};
    f.write(two, 2);
  }
  const std::string e = error_of([&] { corpus_open(dir); });
  EXPECT_NE(e.find(dir + "/train.bin: changed since the build"), std::string::npos) << e;
  EXPECT_NE(e.find("field splits.train.sha256"), std::string::npos) << e;
  EXPECT_NE(e.find("Fix: run phasescope corpus build --out " + dir + " again"), std::string::npos) << e;
  EXPECT_NO_THROW(corpus_open(dir, CorpusVerify::kSizes));  // sizes alone do not see it

  // a shorter shard is seen by the size check too
  fs::resize_file(dir + "/val.bin", fs::file_size(dir + "/val.bin") - 2);
  const std::string s = error_of([&] { corpus_open(dir, CorpusVerify::kSizes); });
  EXPECT_NE(s.find(dir + "/val.bin: has"), std::string::npos) << s;
  EXPECT_NE(s.find("field splits.val.tokens"), std::string::npos) << s;
}

TEST(CorpusOpen, RefusesModifiedTokenizerOrManifest) {
  // the tokenizer
  const std::string dir = copy_of_tiny("corpus-tok");
  std::string tok = slurp(dir + "/tokenizer.json");
  tok.replace(tok.find("\"special\": true"), 15, "\"special\":true ");
  io_write_atomic(dir + "/tokenizer.json", tok);
  const std::string e = error_of([&] { corpus_open(dir); });
  EXPECT_NE(e.find(dir + "/tokenizer.json: changed since the build"), std::string::npos) << e;
  EXPECT_NE(e.find("field tokenizer.sha256"), std::string::npos) << e;

  // the manifest (a hand edit of a count): its own hash no longer matches
  const std::string dir2 = copy_of_tiny("corpus-man");
  nlohmann::json m = manifest(dir2);
  m["splits"]["train"]["documents"] = 1;
  io_write_atomic(dir2 + "/manifest.json", m.dump(1));
  const std::string e2 = error_of([&] { corpus_open(dir2); });
  EXPECT_NE(e2.find(dir2 + "/manifest.json field manifest_hash"), std::string::npos) << e2;
  EXPECT_NE(e2.find("the manifest was edited"), std::string::npos) << e2;
  EXPECT_NE(e2.find("corpus build --out " + dir2 + " again"), std::string::npos) << e2;

  // not JSON at all
  io_write_atomic(dir2 + "/manifest.json", "{\"format\": ");
  EXPECT_NE(error_of([&] { corpus_open(dir2); }).find("not valid JSON"), std::string::npos);
}

// ---- the pieces: SHA-256, the bible's books, running a program

TEST(CorpusPieces, Sha256KnownAnswers) {
  // FIPS 180-4 examples, and a text across the 64-byte block boundary, fed in odd pieces
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(sha256_hex(two_blocks), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 s;
  for (size_t i = 0; i < two_blocks.size(); i += 7)
    s.update(two_blocks.data() + i, std::min<size_t>(7, two_blocks.size() - i));
  EXPECT_EQ(s.hex(), sha256_hex(two_blocks));
}

TEST(CorpusPieces, BibleIsSixtySixBooks) {
  // the one source read through a program (bible-kjv, which scripts/setup.sh installs)
  const CorpusSource s = corpus_source_read("bible-kjv", "<|endoftext|>", nullptr);
  ASSERT_EQ(s.documents.size(), 66u);
  const auto genesis = std::find_if(s.documents.begin(), s.documents.end(), [](const CorpusDocument& d) {
    return d.path == "/usr/lib/bible.data#Genesis";
  });
  ASSERT_NE(genesis, s.documents.end());
  EXPECT_EQ(
      genesis->text.rfind("Genesis 1\n\n  1 In the beginning God created the heaven and the earth.\n", 0),
      0u);
  EXPECT_EQ(genesis->text.substr(genesis->text.size() - 30), "was put in a coffin in Egypt.\n");
  EXPECT_NE(s.versions.find("bible-kjv-text="), std::string::npos) << s.versions;
}

TEST(CorpusPieces, MissingProgramIsStatus127) {
  EXPECT_EQ(run_program({"phasescope-no-such-program"}, true).status, 127);
  const ProgramRun r = run_program({"sh", "-c", "echo out; echo err >&2; exit 3"}, true);
  EXPECT_EQ(r.status, 3);
  EXPECT_EQ(r.out, "out\nerr\n");
  // standard input from a file
  const std::string in = tmp_dir("process") + "/in.txt";
  io_write_atomic(in, "from the file\n");
  EXPECT_EQ(run_program({"cat"}, false, in).out, "from the file\n");
}

// ---- building: bad options

TEST(CorpusBuild, RefusesBadOptions) {
  const std::string out = tmp_dir("corpus-bad") + "/c";
  CorpusBuildOptions o = tiny_options(tiny().sources, out);

  // a source that is not there, by path and by built-in name
  o.sources = {out + "/nowhere"};
  EXPECT_NE(error_of([&] { corpus_build(o, nullptr); }).find(out + "/nowhere: no such file or folder"),
            std::string::npos);
  o.sources = {tiny().sources, tiny().sources + "/lib"};
  EXPECT_NE(error_of([&] { corpus_build(o, nullptr); }).find("is read twice"), std::string::npos);

  // a vocabulary the text cannot fill, the uint16 range, an empty split
  o = tiny_options(tiny().sources, out);
  o.vocab_size = 20000;
  const std::string e = error_of([&] { corpus_build(o, nullptr); });
  EXPECT_NE(e.find("--vocab: train_bpe: the training text gives only"), std::string::npos) << e;
  EXPECT_NE(e.find("Fix: pass a smaller --vocab"), std::string::npos) << e;
  o.vocab_size = 70000;
  EXPECT_NE(error_of([&] { corpus_build(o, nullptr); }).find("--vocab: is 70000"), std::string::npos);
  o = tiny_options(tiny().sources + "/lib/mod0.py", out);
  EXPECT_NE(error_of([&] { corpus_build(o, nullptr); }).find("split empty"), std::string::npos);
}

}  // namespace
}  // namespace phasescope
