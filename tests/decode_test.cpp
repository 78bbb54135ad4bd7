// decode_test.cpp — the decode path (issue 17) against the whole-sequence forward: for every decodable
// variant of the attention tests (full, window, chunked with each option: overlap, tied K/V, vector and
// uniform gates, no gate bias, shared payload, uncompressed tail, sink, partial RoPE, several KV heads),
// on random fp64 weights, prefill T0 tokens (T0 below W, at and off multiples of S), then decode one
// token at a time through steps where an entry completes, where the window slides past an entry, and
// before any entry exists: every step equals the forward's row at that position within 1e-10, and the
// cache holds exactly the values attn_kv_memory counts. The decoder end to end: prefill + decode
// logits equal forward's (fp64 1e-10, fp32 1e-4).
#include <gtest/gtest.h>

#include "attention/kv_memory.h"
#include "attention_testing.h"
#include "core/check.h"
#include "model/config.h"
#include "model/generate.h"
#include "model/model.h"

namespace phasescope {
namespace {

using testing::attention_variants;
using testing::max_abs_diff;

TEST(Decode, EveryDecodableVariantEqualsTheForward) {
  int checked = 0;
  for (const auto& variant : attention_variants()) {
    if (!attn_can_decode(variant.cfg)) continue;
    for (int64_t T0 : {1, 5, 8, 13, 16}) {
      torch::manual_seed(7);
      Attention a(variant.cfg);
      a->to(torch::kFloat64);
      attention_randomize(*a);
      const int64_t T = T0 + 27, B = 2;
      auto x = torch::randn({B, T, variant.cfg.d_model}, torch::kFloat64);
      torch::NoGradGuard ng;
      const auto full = a->forward(x, 0);  // [B, T, d]
      AttnCache cache;
      const auto pre = a->prefill(x.narrow(1, 0, T0), &cache);
      EXPECT_LE(max_abs_diff(pre, full.narrow(1, 0, T0)), 1e-10) << variant.name << " prefill " << T0;
      EXPECT_EQ(cache.values(), attn_kv_memory(variant.cfg, T0).total()) << variant.name << " T0 " << T0;
      for (int64_t t = T0; t < T; ++t) {
        const auto y = a->decode(x.narrow(1, t, 1), &cache);  // [B, 1, d]
        ASSERT_LE(max_abs_diff(y, full.narrow(1, t, 1)), 1e-10)
            << variant.name << " T0 " << T0 << " step " << t;
        ASSERT_EQ(cache.values(), attn_kv_memory(variant.cfg, t + 1).total())
            << variant.name << " at " << t + 1;
        ASSERT_EQ(cache.pos, t + 1);
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 5 * 10);  // at least ten variants decode
}

TEST(Decode, DecoderLogitsEqualTheForward) {
  for (const char* preset : {"w8s8-1kv", "full-1kv", "w8s4-1kv", "uncompressed-tail", "tied-kv"}) {
    Preset p = preset_load(preset);
    p.model.vocab_size = 64;
    p.model.d_model = 32;
    p.model.head_dim = 8;
    p.model.mlp_hidden = 48;
    model_config_sync(p.model, preset);
    ASSERT_TRUE(decoder_can_decode(p.model)) << preset;
    for (torch::Dtype dt : {torch::kFloat64, torch::kFloat32}) {
      torch::manual_seed(3);
      Decoder m(p.model);
      m->to(dt);
      torch::NoGradGuard ng;
      const int64_t T0 = 11, T = 40;
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

// generation with the cache gives the tokens and log-probs of generation without it
TEST(Decode, CachedGenerationEqualsUncached) {
  Preset p = preset_load("w8s8-1kv");
  p.model.vocab_size = 64;
  p.model.d_model = 32;
  p.model.head_dim = 8;
  model_config_sync(p.model, "w8s8-1kv");
  torch::manual_seed(5);
  Decoder m(p.model);
  std::vector<int> prompt;
  for (int i = 0; i < 21; ++i) prompt.push_back((i * 7) % 64);
  const GenerateResult a = generate_greedy(*m, prompt, 30, true), b = generate_greedy(*m, prompt, 30, false);
  EXPECT_EQ(a.tokens, b.tokens);
  for (size_t i = 0; i < a.logprobs.size(); ++i) EXPECT_NEAR(a.logprobs[i], b.logprobs[i], 1e-4) << i;
  EXPECT_THROW(generate_greedy(*m, {}, 3, true), Error);
}

}  // namespace
}  // namespace phasescope
