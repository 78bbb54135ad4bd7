// lm_test.cpp — language models on a corpus (issue 32's path end to end at toy size): a tiny corpus the
// test writes and builds (prose over 24 animal words and 24 names, so the lookup finds single-token keys
// and names; vocab 448), then: packed corpus rows carry the boundary token and predict the next token
// everywhere; a 50-step language model's loss falls and 25 + 25 resumed steps are the 50 straight, bit
// for bit; the lookup layout speaks the corpus's tokens (keys and names at their recorded positions,
// decoded back to the words); the copy loss is computed per residue; a checkpoint is refused against a
// corpus of another vocabulary; and `study` over a two-layer language-model grid, in two shards merged,
// gives every row with the copy loss, and the mean-hides finding. The language model's loss without
// dense logits (linear_cross_entropy) equals cross_entropy of the product, values and gradients, and
// lm_loss_scored takes it at a language model's size. Needs node and tests/js/node_modules
// (scripts/js_reference.sh), as the corpus build does.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>

#include "core/io.h"
#include "data/corpus.h"
#include "data/tasks.h"
#include "eval/copy_loss.h"
#include "eval/layout.h"
#include "eval/model_backend.h"
#include "jobs/study.h"
#include "jobs/study_lm.h"
#include "model/linear_cross_entropy.h"
#include "model/load.h"
#include "model/model.h"
#include "testing.h"
#include "tokenizer/tokenizer.h"
#include "train/trainer.h"

namespace phasescope {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* kAnimals[] = {"cat",   "dog",  "horse", "cow",   "sheep",  "goat",  "pig",   "duck",
                          "mouse", "bear", "wolf",  "fox",   "lion",   "tiger", "deer",  "frog",
                          "bird",  "fish", "owl",   "snake", "rabbit", "camel", "whale", "eagle"};
const char* kNames[] = {"Alice",  "Bob",   "Carol", "David",  "Emma",   "Frank", "Grace", "Henry",
                        "Irene",  "Jack",  "Karen", "Louis",  "Maria",  "Nancy", "Oscar", "Peter",
                        "Rachel", "Simon", "Tina",  "Victor", "Walter", "Julia", "Laura", "Edward"};

// A tiny corpus, built once per test process: 40 documents of sentences over the animals and names.
const std::string& tiny_corpus() {
  static const std::string dir = [] {
    // the corpus splits documents by a hash of their paths, so the sources sit at a fixed path (every
    // process writes the same bytes there) and the corpus is the same in every run
    const std::string src = (fs::temp_directory_path() / "phasescope-lm-test-corpus-sources").string();
    const std::string out = testutil::tmp_dir("lm_corpus");
    io_make_dirs(src);
    std::mt19937 rng(11);
    for (int d = 0; d < 40; ++d) {
      std::string s;
      for (int i = 0; i < 60; ++i)
        s += std::string(kNames[rng() % 24]) + " feeds the " + kAnimals[rng() % 24] + ", and the " +
             kAnimals[rng() % 24] + " sees " + kNames[rng() % 24] + ".\n";
      io_write_atomic(src + "/doc" + std::to_string(d) + ".txt", s);
    }
    CorpusBuildOptions o;
    o.out = out;
    o.vocab_size = 448;  // all this text merges into (the BPE trainer says so when asked for more)
    o.sources = {src};
    o.val_fraction = 0.2;
    o.lookup_words = 16;
    corpus_build(o, nullptr);
    return out;
  }();
  return dir;
}

// lm-w8s8-1kv (or another LM preset) shrunk: 2 layers, d 32, 64-token rows of the tiny corpus.
Preset tiny_lm(const std::string& name) {
  Preset p = preset_load(name);
  p.model.d_model = 32;
  p.model.n_heads = 4;
  p.model.head_dim = 8;
  p.model.mlp_hidden = 64;
  p.model.layers.resize(2);
  p.model.n_layers = 2;
  p.task.corpus = tiny_corpus();
  p.task.seq_len = 64;
  p.task.n_records = 8;
  p.task.n_demos = 4;
  p.task.n_keys = p.task.n_names = 16;
  p.task.mqar_pairs = 8;
  p.train.steps = 50;
  p.train.batch = 4;
  p.train.warmup = 5;
  p.train.eval_every = 0;
  p.train.ckpt_every = 25;
  p.train.log_every = 10;
  return preset_from_json(preset_to_json(p), "tiny " + name);
}

TrainOptions quiet(const std::string& dir) {
  TrainOptions o;
  o.out_dir = dir;
  o.log = [](const std::string&) {};
  return o;
}

TEST(LanguageModel, ChunkedLinearCrossEntropyEqualsTheDenseLoss) {
  torch::manual_seed(5);
  const auto h0 = torch::randn({37, 16}), w0 = torch::randn({50, 16});  // N = 37 rows, V = 50, d = 16
  const auto targets = torch::randint(0, 50, {37}, torch::kInt64);
  auto h = h0.clone().requires_grad_(), w = w0.clone().requires_grad_();
  auto ref = torch::nn::functional::cross_entropy(torch::matmul(h, w.t()), targets);
  ref.backward();
  // chunks of 8 (the last one 5 rows), one chunk, one row at a time
  for (const int64_t chunk : {8, 64, 1}) {
    auto hc = h0.clone().requires_grad_(), wc = w0.clone().requires_grad_();
    auto loss = linear_cross_entropy(hc, wc, targets, chunk);
    EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-5) << chunk;
    (3 * loss).backward();  // the incoming gradient scales what the forward computed
    EXPECT_TRUE(torch::allclose(hc.grad(), 3 * h.grad(), 1e-4, 1e-6)) << chunk;
    EXPECT_TRUE(torch::allclose(wc.grad(), 3 * w.grad(), 1e-4, 1e-6)) << chunk;
  }
  {  // without gradients (validation), inputs that would want them: the value alone, nothing to backward
    torch::NoGradGuard no_grad;
    auto hc = h0.clone().requires_grad_(), wc = w0.clone().requires_grad_();
    const auto loss = linear_cross_entropy(hc, wc, targets, 8);
    EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-5);
    EXPECT_FALSE(loss.requires_grad());
  }
  {  // only the weight wants a gradient: it equals the reference's
    auto wc = w0.clone().requires_grad_();
    linear_cross_entropy(h0, wc, targets, 8).backward();
    EXPECT_TRUE(torch::allclose(wc.grad(), w.grad(), 1e-4, 1e-6));
  }
  EXPECT_FALSE(linear_cross_entropy_pays(544, 529));    // the lookup task's scored rows: dense, as before
  EXPECT_TRUE(linear_cross_entropy_pays(8192, 16384));  // docs/lm's step
}

TEST(LanguageModel, ScoredLossAtLanguageModelSizeTakesTheChunkedPath) {
  Preset p = testutil::tiny_preset("lm-w8s8-1kv");
  p.model.n_layers = 2;
  p.model.layers.resize(2);
  p.model.mlp_hidden = 24;
  p.model.vocab_size = 4096;
  model_config_sync(p.model, "lm");
  torch::manual_seed(6);
  Decoder m(p.model);
  const auto tokens = torch::randint(0, 4096, {3, 2048}, torch::kInt64);
  auto targets = torch::randint(0, 4096, {3, 2048}, torch::kInt64);
  targets.index_put_({0, torch::indexing::Slice(0, 7)}, -1);  // a few unscored positions
  ASSERT_TRUE(linear_cross_entropy_pays(targets.ge(0).sum().item<int64_t>(), 4096));  // the rows it scores
  auto dense = lm_loss(m->forward(tokens), targets);
  dense.backward();
  std::vector<torch::Tensor> g_dense;
  for (auto& q : m->parameters()) {
    g_dense.push_back(q.grad().clone());
    q.mutable_grad().zero_();
  }
  auto scored = lm_loss_scored(*m, tokens, targets);
  EXPECT_NEAR(scored.item<double>(), dense.item<double>(), 1e-5);
  scored.backward();
  size_t i = 0;
  for (auto& q : m->parameters()) {
    EXPECT_TRUE(torch::allclose(q.grad(), g_dense[i], 1e-3, 1e-6)) << "parameter " << i;
    ++i;
  }
}

TEST(LanguageModel, CorpusRowsArePackedNextTokenRows) {
  const Corpus c = corpus_open(tiny_corpus());
  TaskConfig t = tiny_lm("lm-w8s8-1kv").task;
  std::mt19937_64 rng(3);
  int boundaries = 0;
  for (int i = 0; i < 200; ++i) {
    const Example e = corpus_example(t, c.train, rng);
    ASSERT_EQ(e.tokens.size(), 64u);
    ASSERT_EQ(e.targets.size(), 64u);
    for (size_t k = 0; k + 1 < 64; ++k) EXPECT_EQ(e.targets[k], e.tokens[k + 1]);  // loss on every position
    for (int tok : e.tokens) boundaries += tok == c.boundary_id;
  }
  EXPECT_GT(boundaries, 0);  // documents of ~500 tokens: boundaries show up inside 64-token rows
  // the stream's vocabulary is the corpus's, with its words as lookup keys and names
  const Vocab v = task_vocab(t);
  EXPECT_TRUE(v.lm);
  EXPECT_EQ(v.size(), c.vocab_size);
  EXPECT_EQ(v.bos(), c.boundary_id);
  EXPECT_EQ(v.n_keys, int(c.lookup_keys.size()));
  EXPECT_GE(v.n_fillers, 1);
}

TEST(LanguageModel, RepeatedSpanRowsCopyTheirOwnText) {
  const Corpus c = corpus_open(tiny_corpus());
  TaskConfig t = tiny_lm("lm-w8s8-1kv").task;
  ASSERT_EQ(t.seq_len, 64);
  std::mt19937_64 rng(5), twin(5);
  for (int i = 0; i < 100; ++i) {
    const Example e = corpus_repeat_example(t, c.train, rng);
    ASSERT_EQ(e.tokens.size(), 64u);
    ASSERT_EQ(e.targets.size(), 64u);
    for (size_t k = 0; k + 1 < 64; ++k) EXPECT_EQ(e.targets[k], e.tokens[k + 1]);
    // some span of >= 8 tokens occurs twice, the second copy after the first ends
    std::vector<int> row = e.tokens;
    row.push_back(e.targets.back());
    bool found = false;
    for (size_t a = 0; a + 8 <= row.size() && !found; ++a)
      for (size_t b = a + 8; b + 8 <= row.size() && !found; ++b)
        found = std::equal(row.begin() + std::ptrdiff_t(a), row.begin() + std::ptrdiff_t(a + 8),
                           row.begin() + std::ptrdiff_t(b));
    EXPECT_TRUE(found) << "row " << i;
    EXPECT_EQ(corpus_repeat_example(t, c.train, twin).tokens, e.tokens);  // seeded
  }
  // the stream mixes them in only when asked: a pure LM's rows are untouched by the option's existence
  t.repeat_ratio = 0;
  TaskStream pure(t, 9);
  std::mt19937_64 direct(9);
  EXPECT_EQ(pure.next(0).tokens, corpus_example(t, c.train, direct).tokens);
}

TEST(LanguageModel, FiftyStepsLossFallsAndResumesBitwise) {
  const Preset p = tiny_lm("lm-w8s8-1kv");
  const std::string straight = testutil::tmp_dir("lm_straight"), staged = testutil::tmp_dir("lm_staged");
  train_run(p, quiet(straight));
  std::vector<double> losses;
  for (const std::string& line : [&] {
         std::vector<std::string> v;
         std::istringstream in(testutil::slurp(straight + "/metrics.jsonl"));
         for (std::string l; std::getline(in, l);) v.push_back(l);
         return v;
       }())
    if (json j = json::parse(line); j.contains("loss")) losses.push_back(j["loss"].get<double>());
  ASSERT_GE(losses.size(), 4u);
  EXPECT_LT(losses.back(), losses.front() - 0.5) << "the language model's loss falls";
  TrainOptions first = quiet(staged);
  first.stop_after = 25;
  train_run(p, first);
  EXPECT_TRUE(train_run(p, quiet(staged)).resumed);
  LoadedModel a = model_load(straight), b = model_load(staged);
  auto pa = a.model->named_parameters(), pb = b.model->named_parameters();
  for (const auto& item : pa) EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
  // the validation loss reads the held-out split
  const double val = heldout_loss(*a.model, a.preset, 8, 1);
  EXPECT_GT(val, 0.0);
  EXPECT_LT(val, std::log(double(a.preset.model.vocab_size)));
}

TEST(LanguageModel, LookupLayoutSpeaksTheCorpusTokens) {
  const Preset p = tiny_lm("lm-w8s8-1kv");
  const EvalOptions eo = eval_options_for(p, PadProtocol::Prefix, 48 * 24, 24, 1);
  const Corpus c = corpus_open(tiny_corpus());
  const Tokenizer tok = Tokenizer::load(c.tokenizer_path);
  const std::vector<LayoutSample> samples = layout_build(eo.layout).samples;
  ASSERT_FALSE(samples.empty());
  for (const LayoutSample& s : samples) {
    ASSERT_EQ(s.tokens[size_t(s.target_pos)], s.tokens.back());  // the query repeats the target key
    const int key = s.tokens[size_t(s.target_pos)];
    EXPECT_TRUE(eo.layout.task.vocab.is_key(key));
    EXPECT_EQ(s.tokens[size_t(s.target_pos) + 1], s.answer);  // the name follows its key directly
    EXPECT_TRUE(eo.layout.task.vocab.is_name(s.answer));
    // decoded, the key is one of the corpus's lookup words
    bool found = false;
    for (const LookupWord& w : c.lookup_keys) found = found || (w.id == key && tok.decode({key}) == w.text);
    EXPECT_TRUE(found) << tok.decode({key});
    EXPECT_EQ(s.target_pos % 24, s.residue);
  }
}

TEST(LanguageModel, CopyLossByPhaseAndVocabularyMismatchIsRefused) {
  Preset p = tiny_lm("lm-w8s8-1kv");
  p.train.steps = 4;
  const std::string dir = testutil::tmp_dir("lm_copy");
  train_run(p, quiet(dir));
  LoadedModel m = model_load(dir);
  const Corpus c = corpus_open(tiny_corpus());
  CopyLossOptions co;
  co.R = 8;
  co.S = 8;
  co.span = 8;
  co.gap = 8;
  co.spans = 3;
  const CopyLossResult r = copy_loss_by_phase(*m.model, c.val, c.boundary_id, co);
  ASSERT_EQ(r.per_residue.size(), 8u);
  EXPECT_EQ(r.tokens_per_residue, 3 * 7);  // every span's tokens but the first, once per residue
  for (double x : r.per_residue) EXPECT_GT(x, 0.0);
  EXPECT_GE(r.gap, 0.0);
  // a checkpoint evaluated against a corpus of another vocabulary is refused, naming the fix
  Preset other = m.preset;
  other.model.vocab_size = c.vocab_size + 7;
  const std::string err =
      testutil::error_of([&] { eval_options_for(other, PadProtocol::Prefix, 24, 24, 1); });
  EXPECT_NE(err.find("vocabulary"), std::string::npos) << err;
  EXPECT_NE(err.find("task.corpus"), std::string::npos) << err;
}

// `study` over a language-model grid at toy size (two layers), in two shards merged
// One token per byte, except " =" (the flip's filler unit), so L grows by one per unit; BOS = 1.
struct ByteTokens : TokenSource {
  std::string describe() const override { return "bytes"; }
  int bos_id() const override { return 1; }
  std::vector<int> encode(const std::string& s) const override {
    std::vector<int> out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s.compare(i, 2, " =") == 0) {
        out.push_back(2);
        ++i;
      } else {
        out.push_back(3 + static_cast<unsigned char>(s[i]));
      }
    }
    return out;
  }
  std::string decode(const std::vector<int>& t) const override {
    std::string s;
    for (int x : t) s += x == 2 ? std::string(" =") : x == 1 ? std::string() : std::string(1, char(x - 3));
    return s;
  }
};

size_t longest_flip_input(const FlipDesign& d) {
  size_t n = 0;
  for (const FlipPoint& p : d.points)
    for (const std::vector<int>& c : p.candidates) n = std::max(n, p.prompt.size() + c.size());
  return n;
}

// The LM flip's sweep: the paper's kernel where it fits (its window starting after a long docstring line),
// the short example in a small context, its long end cut to the context, and a refusal naming both
TEST(LanguageModel, FlipSweepFitsTheContext) {
  const ByteTokens ts;
  const std::string full = flip_fp8_example().template_text;
  const int before = int(full.find("{filler}")) + 1;  // the docstring line's bytes and BOS: past L = 24
  const StudyFlipDesign wide = study_flip_design(4096, 8, ts);
  EXPECT_EQ(wide.name, "fp8");
  ASSERT_EQ(wide.design.points.size(), 32u);  // 4S lengths, every one reachable
  EXPECT_EQ(wide.design.points.front().L, before);
  EXPECT_EQ(wide.design.points.back().L, before + 31);
  EXPECT_EQ(wide.design.spec.P_max, 16);  // 2S, as the audit's sweep
  const StudyFlipDesign toy = study_flip_design(128, 8, ts);
  EXPECT_EQ(toy.name, "fp8-short");
  EXPECT_EQ(toy.design.spec.L_min, 24);
  EXPECT_EQ(toy.design.spec.L_max, 55);
  EXPECT_LE(longest_flip_input(toy.design), 128u);
  const StudyFlipDesign tight = study_flip_design(90, 8, ts);  // the long end cut: the longest input fills it
  EXPECT_EQ(tight.name, "fp8-short");
  EXPECT_EQ(longest_flip_input(tight.design), 90u);
  EXPECT_GE(tight.design.points.size(), 16u);
  EXPECT_LT(tight.design.spec.L_max, 55);
  try {
    study_flip_design(50, 8, ts);
    ADD_FAILURE() << "a 50-token context was given a flip";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("fp8:"), std::string::npos) << what;
    EXPECT_NE(what.find("fp8-short:"), std::string::npos) << what;
    EXPECT_NE(what.find("seq_len"), std::string::npos) << what;
  }
}

TEST(LanguageModel, StudyGridInTwoShards) {
  const std::string dir = testutil::tmp_dir("lm_study");
  const json overrides = {
      {"model", {{"n_layers", 2}}},
      {"task",
       {{"corpus", tiny_corpus()}, {"seq_len", 128}, {"n_keys", 16}, {"n_names", 16}, {"mqar_pairs", 8}}}};
  json grid = {{"name", "lm-toy"}, {"toy", true}, {"runs", json::array()}};
  for (const char* preset : {"lm-full-1kv", "lm-w8s8-1kv"})
    grid["runs"].push_back({{"preset", preset}, {"seed", 42}, {"family", "lm"}, {"overrides", overrides}});
  io_write_atomic(dir + "/grid.json", grid.dump());
  StudyOptions o;
  o.grid = dir + "/grid.json";
  o.report = false;
  o.out = dir + "/a", o.shard_k = 1, o.shard_n = 2;
  const StudyResult a = study_run(o);
  o.out = dir + "/b", o.shard_k = 2;
  const StudyResult b = study_run(o);
  for (const StudyResult* r : {&a, &b})
    for (const auto& [id, error] : r->failed) ADD_FAILURE() << id << ": " << error;
  EXPECT_EQ(a.missing, std::vector<std::string>{"lm-w8s8-1kv@42"});  // the other shard's run
  StudyOptions m = o;
  m.out = dir + "/merged", m.run = false, m.merge = {dir + "/a", dir + "/b"};
  const StudyResult merged = study_run(m);
  EXPECT_TRUE(merged.missing.empty()) << merged.missing.size() << " missing";
  EXPECT_EQ(merged.study["runs"].size(), 6u);  // two runs, three protocols (prefix, in-sequence, needle)
  ASSERT_TRUE(merged.study.contains("copy_loss"));
  EXPECT_EQ(merged.study["copy_loss"].size(), 2u);
  std::map<std::string, json> findings;
  for (const json& f : merged.study["findings"]) findings[f["id"]] = f;
  EXPECT_TRUE(findings.count("mean-hides"));
  // (dense): the two runs are twins (same seed and KV heads), each with the copy loss and the flip
  ASSERT_TRUE(findings.count("dense"));
  ASSERT_EQ(findings["dense"]["figures"].size(), 1u);
  const json& pair = findings["dense"]["figures"][0];
  EXPECT_EQ(pair["compressed"], "lm-w8s8-1kv@42");
  EXPECT_EQ(pair["full"], "lm-full-1kv@42");
  EXPECT_NE(pair["copy"], "not measured");
  EXPECT_NE(pair["flip"], "not measured");
  const std::optional<StudyRow> row = study_row_read(study_row_path(m.out, "lm-w8s8-1kv@42"));
  ASSERT_TRUE(row.has_value());
  EXPECT_TRUE(row->copy_loss.has_value());
  const StudyProtocol* needle = row->protocol(kStudyNeedle);  // in natural-text filler, every residue
  ASSERT_NE(needle, nullptr);
  EXPECT_EQ(needle->n, 48 * 24);
  EXPECT_EQ(needle->per_residue.size(), 24u);
  EXPECT_EQ(row->strides, (std::vector<int>{8, 8}));
  EXPECT_GT(row->val_loss, 0.0);  // the language model's loss on the held-out split
  // the flip on code: the short FP8 example at a 128-token context, 4S lengths, its margin by phase
  ASSERT_TRUE(row->flip.has_value());
  EXPECT_EQ(row->flip->template_name, "fp8-short");
  EXPECT_EQ(row->flip->candidates, (std::vector<std::string>{"8", "32"}));
  EXPECT_EQ(row->flip->L_min, 24);
  EXPECT_EQ(row->flip->L.size(), row->flip->margin.size());
  EXPECT_GE(row->flip->L.size(), 16u);
  EXPECT_EQ(row->flip->S, 8);
  EXPECT_EQ(row->flip->margin_folded.size(), 8u);
  EXPECT_FALSE(row->flip->verdict.empty());
  EXPECT_GT(row->flip->margin_share_null_q95, 0.0);
  ASSERT_TRUE(merged.study.contains("flip"));
  EXPECT_EQ(merged.study["flip"].size(), 2u);

  // a row from before the flip gets it alone where its model is on disk; --no-train trains nothing else
  const std::string a_row = study_row_path(dir + "/a", "lm-full-1kv@42");
  const StudyRow with_flip = *study_row_read(a_row);
  StudyRow old_row = with_flip;
  old_row.flip.reset();
  study_row_write(a_row, old_row);
  StudyOptions u = o;
  u.out = dir + "/a", u.shard_k = 1, u.shard_n = 1, u.train = false;
  const StudyResult up = study_run(u);
  EXPECT_TRUE(up.failed.empty());
  EXPECT_EQ(up.missing, std::vector<std::string>{"lm-w8s8-1kv@42"});  // not trained here, and not now
  EXPECT_FALSE(fs::exists(fs::path(dir) / "a" / "runs" / "lm-w8s8-1kv@42"));
  const StudyRow again = *study_row_read(a_row);
  ASSERT_TRUE(again.flip.has_value());
  EXPECT_EQ(again.flip->L, with_flip.flip->L);  // its journal resumed: the same scores
  EXPECT_EQ(again.flip->margin, with_flip.flip->margin);
  EXPECT_EQ(again.train_seconds, with_flip.train_seconds);
  EXPECT_EQ(again.protocols.size(), with_flip.protocols.size());
  u.fresh = true;  // would delete every run and train none: refused
  EXPECT_THROW(study_run(u), Error);
  EXPECT_TRUE(fs::exists(a_row));
}

}  // namespace
}  // namespace phasescope
