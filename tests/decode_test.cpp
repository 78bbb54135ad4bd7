// decode_test.cpp — the decode path against the whole-sequence forward: for every variant of
// the attention tests (full, window, chunked with each option: overlap, tied K/V, vector and uniform
// gates, no gate bias, shared payload, uncompressed tail, sink, partial RoPE, several KV heads; DeepSeek
// CSA with its indexer and overlap, HCA, V4.1 CSA2, window-only), on random weights, prefill T0 tokens
// (T0 below W or m, at and off multiples of S), then decode one token at a time through steps where an
// entry completes, where the window slides past an entry, and before any entry exists: every step
// equals the forward's row at that position (fp64 within 1e-10, fp32 within 1e-5), and the
// cache holds exactly the values attn_kv_memory counts. The decoder end to end: prefill + decode
// logits equal forward's (fp64 1e-10, fp32 1e-4).
#include <gtest/gtest.h>

#include <set>

#include "attention/kv_memory.h"
#include "attention/zoo.h"
#include "attention_testing.h"
#include "core/check.h"
#include "model/config.h"
#include "model/generate.h"
#include "model/model.h"

namespace phasescope {
namespace {

using testing::attention_variants;
using testing::max_abs_diff;

TEST(Decode, EveryVariantEqualsTheForward) {
  int checked = 0, variants = 0;
  for (const auto& variant : attention_variants()) {
    ++variants;
    for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
      const double tol = dtype == torch::kFloat64 ? 1e-10 : 1e-5;
      for (int64_t T0 : {1, 5, 8, 13, 16}) {
        torch::manual_seed(7);
        Attention a(variant.cfg);
        a->to(torch::kFloat64);
        attention_randomize(*a);
        a->to(dtype);
        const int64_t T = T0 + 27, B = 2;
        auto x = torch::randn({B, T, variant.cfg.d_model}, torch::kFloat64).to(dtype);
        torch::NoGradGuard ng;
        const auto full = a->forward(x, 0);  // [B, T, d]
        AttnCache cache;
        const auto pre = a->prefill(x.narrow(1, 0, T0), &cache);
        EXPECT_LE(max_abs_diff(pre, full.narrow(1, 0, T0)), tol) << variant.name << " prefill " << T0;
        EXPECT_EQ(cache.values(), attn_kv_memory(variant.cfg, T0).total()) << variant.name << " T0 " << T0;
        for (int64_t t = T0; t < T; ++t) {
          const auto y = a->decode(x.narrow(1, t, 1), &cache);  // [B, 1, d]
          ASSERT_LE(max_abs_diff(y, full.narrow(1, t, 1)), tol)
              << variant.name << " " << dtype << " T0 " << T0 << " step " << t;
          ASSERT_EQ(cache.values(), attn_kv_memory(variant.cfg, t + 1).total())
              << variant.name << " at " << t + 1;
          ASSERT_EQ(cache.pos, t + 1);
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 2 * 5 * variants);  // every variant (DeepSeek CSA with indexer and overlap, HCA,
                                         // V4.1 CSA2, window-only included), both dtypes
}

// The indexer's selection (a partial top-k plus ties in entry order) is the trace's sorted picks: the
// entries a query attends to are exactly those it lists, ties at the k-th score included (ReLU makes
// many scores exactly 0 on random weights).
TEST(Decode, IndexerSelectionIsTheSortedTopK) {
  int64_t ties = 0;
  for (const auto& variant : attention_variants()) {
    if (!attn_is_ds(variant.cfg) || variant.cfg.index_topk <= 0) continue;
    torch::manual_seed(11);
    Attention a(variant.cfg);
    a->to(torch::kFloat64);
    attention_randomize(*a);
    torch::NoGradGuard ng;
    const int64_t B = 2, T = 64;
    AttnTrace tr;
    a->forward(torch::randn({B, T, variant.cfg.d_model}, torch::kFloat64), 0, &tr);
    ASSERT_TRUE(tr.index_topk.defined() && tr.entry_prob.defined()) << variant.name;
    const int64_t N = tr.entry_prob.size(3);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        std::set<int64_t> picked, attended;
        for (int64_t i = 0; i < tr.index_topk.size(2); ++i)
          if (tr.index_topk[b][t][i].item<int64_t>() >= 0)
            picked.insert(tr.index_topk[b][t][i].item<int64_t>());
        for (int64_t j = 0; j < N; ++j)
          if (tr.entry_prob[b][0][t][j].item<double>() > 0)
            attended.insert(j + tr.entry_start[0].item<int64_t>() / variant.cfg.ratio);
        ASSERT_EQ(picked, attended) << variant.name << " b " << b << " t " << t;
        auto sc = tr.index_score[b][t];
        const int64_t kk = int64_t(picked.size());
        if (kk > 0 && kk < N) {
          auto top = std::get<0>(sc.topk(kk + 1));
          ties += top[kk - 1].item<double>() == top[kk].item<double>();
        }
      }
  }
  EXPECT_GT(ties, 0) << "no tie at the k-th score was exercised";
  // every score tied (indexer weights zero): the earliest visible entries are taken
  AttnConfig c = zoo_config(AttnKind::DsCsa);
  c.index_topk = 3;
  torch::manual_seed(12);
  Attention a(c);
  a->to(torch::kFloat64);
  {
    torch::NoGradGuard ng;
    a->param("idx_ww").zero_();
    AttnTrace tr;
    a->forward(torch::randn({1, 40, c.d_model}, torch::kFloat64), 0, &tr);
    for (int64_t t = 0; t < 40; ++t) {
      const int64_t visible = (t + 1) / c.ratio;  // entry j is visible once token (j+1)*m - 1 arrived
      for (int64_t j = 0; j < tr.entry_prob.size(3); ++j)
        EXPECT_EQ(tr.entry_prob[0][0][t][j].item<double>() > 0, j < std::min<int64_t>(visible, 3))
            << t << " " << j;
    }
  }
}

// Long inputs select in blocks of queries, each against the entries it can see; the traced forward selects
// in one shot. Both must give the same output (T = 4096: four blocks of 1024 queries).
TEST(Decode, BlockedIndexerSelectionEqualsOneShot) {
  AttnConfig c = zoo_config(AttnKind::DsCsa);
  c.index_topk = 5;
  torch::manual_seed(13);
  Attention a(c);
  a->to(torch::kFloat64);
  attention_randomize(*a);
  torch::NoGradGuard ng;
  auto x = torch::randn({1, 4096, c.d_model}, torch::kFloat64);
  AttnTrace tr;
  tr.probs = false;
  EXPECT_LE(max_abs_diff(a->forward(x, 0), a->forward(x, 0, &tr)), 1e-12);
}

// A preset's model at test size, synced: vocabulary 64, d = 32, head dim 8 (DeepSeek-style layers keep
// theirs: they rotate 16 dims), and the MLP width given (-1: the preset's).
ModelConfig small_model(const std::string& preset, int mlp_hidden = -1) {
  ModelConfig m = preset_load(preset).model;
  m.vocab_size = 64;
  m.d_model = 32;
  if (!attn_is_ds(m.layers.at(0))) m.head_dim = 8;
  if (mlp_hidden >= 0) m.mlp_hidden = mlp_hidden;
  model_config_sync(m, preset);
  return m;
}

TEST(Decode, DecoderLogitsEqualTheForward) {
  for (const char* preset :
       {"w8s8-1kv", "full-1kv", "w8s4-1kv", "uncompressed-tail", "tied-kv", "dsv4-csa", "hca", "v41-csa2"}) {
    const ModelConfig mc = small_model(preset, 48);
    ASSERT_TRUE(decoder_can_decode(mc)) << preset;
    for (torch::Dtype dt : {torch::kFloat64, torch::kFloat32}) {
      torch::manual_seed(3);
      Decoder m(mc);
      m->to(dt);
      torch::NoGradGuard ng;
      const int64_t T0 = 11, T = 72;  // dsv4-csa: 18 entries, more than its top-16
      auto tokens = torch::randint(0, 64, {3, T}, torch::kInt64);
      const auto full = m->forward(tokens);  // [3, T, V]
      std::vector<AttnCache> caches;
      auto logits = m->prefill(tokens.narrow(1, 0, T0), &caches);
      double worst = max_abs_diff(logits, full.narrow(1, 0, T0));
      for (int64_t t = T0; t < T; ++t)
        worst =
            std::max(worst, max_abs_diff(m->decode(tokens.narrow(1, t, 1), &caches), full.narrow(1, t, 1)));
      EXPECT_LE(worst, dt == torch::kFloat64 ? 1e-10 : 1e-4) << preset;
    }
  }
}

// sequences of different lengths decode together (each over its own cache) and one can leave midway
TEST(Decode, RaggedBatchEqualsEachSequencesForward) {
  for (const char* preset : {"w8s8-1kv", "dsv4-csa"}) {
    const ModelConfig mc = small_model(preset);
    torch::manual_seed(4);
    Decoder m(mc);
    m->to(torch::kFloat64);
    torch::NoGradGuard ng;
    const std::vector<int64_t> prompt_len = {5, 12, 20};
    const int64_t steps = 30;
    std::vector<torch::Tensor> seqs, full;
    std::vector<std::vector<AttnCache>> caches(3);
    for (size_t i = 0; i < 3; ++i) {
      seqs.push_back(torch::randint(0, 64, {1, prompt_len[i] + steps}, torch::kInt64));
      full.push_back(m->forward(seqs[i]));  // [1, T, V]
      m->prefill(seqs[i].narrow(1, 0, prompt_len[i]), &caches[i]);
    }
    double worst = 0;
    for (int64_t s = 0; s < steps; ++s) {
      std::vector<size_t> live = s < 12 ? std::vector<size_t>{0, 1, 2} : std::vector<size_t>{0, 2};
      if (s == 12) caches[1].clear();  // sequence 1 finished: its cache is freed, the others go on
      std::vector<int64_t> toks;
      std::vector<std::vector<AttnCache>*> cs;
      for (size_t i : live) {
        toks.push_back(seqs[i][0][prompt_len[i] + s].item<int64_t>());
        cs.push_back(&caches[i]);
      }
      auto logits = m->decode_ragged(torch::tensor(toks).view({int64_t(live.size()), 1}), cs);  // [B', 1, V]
      for (size_t r = 0; r < live.size(); ++r) {
        const size_t i = live[r];
        worst = std::max(worst, max_abs_diff(logits[int64_t(r)], full[i][0].narrow(0, prompt_len[i] + s, 1)));
      }
    }
    EXPECT_LE(worst, 1e-10) << preset;
    EXPECT_TRUE(caches[1].empty());
  }
}

// generation with the cache gives the tokens and log-probs of generation without it
TEST(Decode, CachedGenerationEqualsUncached) {
  const ModelConfig mc = small_model("w8s8-1kv");
  torch::manual_seed(5);
  Decoder m(mc);
  std::vector<int> prompt;
  for (int i = 0; i < 21; ++i) prompt.push_back((i * 7) % 64);
  const GenerateResult a = generate_greedy(*m, prompt, 30, true), b = generate_greedy(*m, prompt, 30, false);
  EXPECT_EQ(a.tokens, b.tokens);
  for (size_t i = 0; i < a.logprobs.size(); ++i) EXPECT_NEAR(a.logprobs[i], b.logprobs[i], 1e-4) << i;
  EXPECT_THROW(generate_greedy(*m, {}, 3, true), Error);
}

}  // namespace
}  // namespace phasescope
