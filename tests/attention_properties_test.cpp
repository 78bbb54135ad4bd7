// attention_properties_test.cpp — what must hold of every attention kind, checked on the batched
// module with the rules restated here independently of the implementation:
//   causality; exactly which compressed entries and raw tokens each query sees (first and last
//   token of a block included), in the module and in the reference; exact reductions (chunked
//   before its first entry == window attention; chunked W = S = 1 with shared payload maps and no
//   local window == full attention); and the shift controls of the paper: starting the stream at
//   a multiple of the stride changes nothing (RoPE is relative, the grouping is the same), full
//   attention is unchanged by any shift, and a shift by a non-multiple changes the compressed
//   kinds' outputs (the phase dependence is real, not zero).
// "Starting at pos0" is how a prepended prefix of pos0 tokens that are absent from the cache acts:
// positions and chunk boundaries move, content does not.
#include <set>

#include "attention_testing.h"

namespace phasescope::testing {
namespace {

class PropertyTest : public ::testing::TestWithParam<Variant> {};

TEST_P(PropertyTest, ChangingLaterTokensNeverChangesEarlierOutputs) {
  const AttnConfig& c = GetParam().cfg;
  Attention m = make_module(c, 21);
  const int T = 40, t0 = 23;
  torch::manual_seed(1);
  auto x = torch::randn({2, T, c.d_model}, torch::kFloat64);
  auto x2 = x.clone();
  x2.narrow(1, t0, T - t0).normal_();
  auto y = m->forward(x), y2 = m->forward(x2);
  EXPECT_LT(max_abs_diff(y.narrow(1, 0, t0), y2.narrow(1, 0, t0)), 1e-12);
  EXPECT_GT(max_abs_diff(y.narrow(1, t0, T - t0), y2.narrow(1, t0, T - t0)),
            1e-3);  // and later ones do change
}

// The last token of the entry whose first token (RoPE position) is `start`: a staggered grid's partial
// block [0, o) reports start 0 and ends at o - S + W - 1.
int64_t entry_last_token(const AttnConfig& c, int64_t start) {
  if (c.kind != AttnKind::Chunked) return start + c.ratio - 1;
  return start == 0 && c.grid_offset > 0 ? c.grid_offset - c.S + c.W - 1 : start + c.W - 1;
}

// The visibility rule, written out again: first-token positions of the entries a query at p may attend to.
std::set<int64_t> visible_entries(const AttnConfig& c, int64_t pos0, int T, int64_t p) {
  std::set<int64_t> out;
  if (c.kind == AttnKind::Chunked) {
    const int64_t o = c.grid_offset;
    for (int64_t s = o > 0 ? o - c.S : 0; s + c.W - 1 <= p; s += c.S) {
      const bool partial = s < 0;  // the block [0, o) at the stream start only
      if ((s >= pos0 || (partial && pos0 == 0)) && s + c.W - 1 <= pos0 + T - 1)
        out.insert(std::max<int64_t>(s, 0));
    }
  } else if (attn_is_ds(c) && c.ratio > 0) {  // dsv4-window (ratio 0) compresses nothing
    for (int64_t j = 0; j < (p + 1) / c.ratio; ++j)
      if (j * c.ratio >= pos0) out.insert(j * c.ratio);
  }
  return out;
}

// Raw tokens a query at p may attend to.
std::set<int64_t> visible_raw(const AttnConfig& c, int64_t pos0, int T, int64_t p) {
  std::set<int64_t> out;
  int64_t first = pos0;
  if (c.kind != AttnKind::Full) first = std::max<int64_t>(pos0, p - c.window + 1);
  if (c.kind == AttnKind::Chunked && c.uncompressed_tail) {
    auto e = visible_entries(c, pos0, T, p);
    first = e.empty() ? pos0 : entry_last_token(c, *e.rbegin()) + 1;
  }
  for (int64_t r = first; r <= p; ++r) out.insert(r);
  return out;
}

TEST_P(PropertyTest, EachQuerySeesExactlyTheVisibleEntriesAndRawTokens) {
  const AttnConfig& c = GetParam().cfg;
  Attention m = make_module(c, 22);
  const int T = 33;
  for (int64_t pos0 : {0, 5}) {
    torch::manual_seed(2);
    auto x = torch::randn({1, T, c.d_model}, torch::kFloat64);
    AttnTrace tr;
    m->forward(x, pos0, &tr);
    RefTrace rt;
    reference_attention(c, attention_export(*m), to_vec(x[0]), T, pos0, &rt);
    int boundary_checks = 0;
    for (int t = 0; t < T; ++t) {
      const int64_t p = pos0 + t;
      const auto expect_entries = visible_entries(c, pos0, T, p);
      for (int h = 0; h < c.n_heads; ++h) {
        std::set<int64_t> got_entries, got_raw;
        if (tr.entry_prob.defined())
          for (int64_t n = 0; n < tr.entry_prob.size(3); ++n)
            if (tr.entry_prob[0][h][t][n].item<double>() > 0)
              got_entries.insert(tr.entry_start[n].item<int64_t>());
        for (int64_t r = 0; r < T; ++r)
          if (tr.raw_prob[0][h][t][r].item<double>() > 0) got_raw.insert(pos0 + r);
        if (c.index_topk > 0) {
          // the indexer keeps min(k, visible) of the visible entries, the same ones as the reference
          EXPECT_EQ(got_entries.size(), std::min<size_t>(c.index_topk, expect_entries.size())) << "p=" << p;
          for (int64_t s : got_entries) EXPECT_TRUE(expect_entries.count(s)) << "p=" << p << " entry " << s;
        } else {
          EXPECT_EQ(got_entries, expect_entries) << "p=" << p << " head " << h;
        }
        EXPECT_EQ(got_raw, visible_raw(c, pos0, T, p)) << "p=" << p << " head " << h;
        EXPECT_EQ(std::vector<int64_t>(got_entries.begin(), got_entries.end()), rt.entries[t][h])
            << "p=" << p;
        EXPECT_EQ(std::vector<int64_t>(got_raw.begin(), got_raw.end()), rt.raw[t][h]) << "p=" << p;
      }
      // the block boundary itself: an entry appears exactly at the query that is its last token
      for (int64_t s : expect_entries)
        if (entry_last_token(c, s) == p) {
          EXPECT_FALSE(visible_entries(c, pos0, T, p - 1).count(s));
          ++boundary_checks;
        }
    }
    if (attn_is_compressed(c)) EXPECT_GT(boundary_checks, 0);
  }
}

// Whether outputs can depend on relative positions only. Two options leak absolute position by
// construction, as the paper defines them: tied K/V reuse the *rotated* compressed keys as values,
// and RoPE on fewer compressed-key dims than query dims leaves some query dims rotated alone.
bool relative_only(const AttnConfig& c) {
  if (c.kind != AttnKind::Chunked) return true;
  if (c.tied_kv && attn_comp_rope_dims(c) > 0) return false;
  return attn_comp_rope_dims(c) == attn_rope_dims(c);
}

TEST_P(PropertyTest, ShiftByMultipleOfStrideChangesNothingAndOtherShiftsDo) {
  const AttnConfig& c = GetParam().cfg;
  Attention m = make_module(c, 23);
  const int T = 36;
  torch::manual_seed(3);
  auto x = torch::randn({1, T, c.d_model}, torch::kFloat64);
  auto y0 = m->forward(x, 0);
  const int64_t stride = attn_is_compressed(c) ? attn_stride(c) : 1;
  // a staggered grid's stream start is special: at pos0 = 0 the block [0, o) is a partial entry, after a
  // shift it would need absent tokens and does not exist; shifts compare against pos0 = S there
  const bool staggered = c.kind == AttnKind::Chunked && c.grid_offset > 0;
  const auto base = staggered ? m->forward(x, stride) : y0;
  if (staggered) EXPECT_GT(max_abs_diff(base, y0), 1e-6) << "the partial first entry should matter";
  for (int64_t k : {1, 2, 5}) {
    if (staggered && k == 1) continue;
    const double diff = max_abs_diff(m->forward(x, k * stride), base);
    if (relative_only(c))
      EXPECT_LT(diff, 1e-9) << "shift " << k * stride;
    else
      EXPECT_GT(diff, 1e-6) << "shift " << k * stride << ": this option should leak absolute position";
  }
  if (attn_is_compressed(c) && stride > 1) {
    // a shift by a non-multiple regroups the tokens into entries: outputs move
    EXPECT_GT(max_abs_diff(m->forward(x, 1), y0), 1e-3);
  } else {
    EXPECT_LT(max_abs_diff(m->forward(x, 1), y0), 1e-9);  // full / window: flat across phases
  }
}

INSTANTIATE_TEST_SUITE_P(AllKinds, PropertyTest, ::testing::ValuesIn(attention_variants()), variant_name);

// Copy the shared projections of one module into another of a different kind.
void copy_params(AttentionImpl& from, AttentionImpl& to,
                 const std::vector<std::pair<std::string, std::string>>& names) {
  torch::NoGradGuard g;
  for (const auto& [a, b] : names) to.param(b).copy_(from.param(a).view(to.param(b).sizes()));
}

TEST(Reductions, ChunkedBeforeItsFirstEntryIsWindowAttention) {
  for (bool tail : {false, true}) {
    AttnConfig cc = zoo_config(AttnKind::Chunked);
    cc.W = 12;
    cc.S = 12;
    cc.window = 5;
    cc.uncompressed_tail = tail;
    AttnConfig wc = cc;
    wc.kind = AttnKind::Window;
    wc.window = tail ? 64 : 5;  // the tail, before any entry, is every token so far
    Attention chunked = make_module(cc, 31), window = make_module(wc, 32);
    copy_params(
        *chunked, *window,
        {{"wq", "wq"}, {"wk", "wk"}, {"wv", "wv"}, {"wo", "wo"}, {"q_norm", "q_norm"}, {"k_norm", "k_norm"}});
    torch::manual_seed(4);
    auto x = torch::randn({2, 11, cc.d_model}, torch::kFloat64);  // T = 11 < W: no entry is complete
    EXPECT_LT(max_abs_diff(chunked->forward(x), window->forward(x)), 1e-13) << "tail=" << tail;
    // one token more completes entry 0 and the outputs part
    auto x12 = torch::randn({2, 12, cc.d_model}, torch::kFloat64);
    EXPECT_GT(max_abs_diff(chunked->forward(x12), window->forward(x12)), 1e-4) << "tail=" << tail;
  }
}

TEST(Reductions, ChunkedW1S1SharedPayloadNoWindowIsFullAttention) {
  for (GateKind gate : {GateKind::Scalar, GateKind::Vector, GateKind::Uniform}) {
    AttnConfig cc = zoo_config(AttnKind::Chunked);
    cc.W = 1;
    cc.S = 1;
    cc.window = 0;
    cc.gate = gate;
    cc.per_offset_payload = false;
    AttnConfig fc = cc;
    fc.kind = AttnKind::Full;
    Attention chunked = make_module(cc, 33), full = make_module(fc, 34);
    copy_params(*full, *chunked,
                {{"wq", "wq"},
                 {"wo", "wo"},
                 {"q_norm", "q_norm"},
                 {"k_norm", "k_norm"},
                 {"wk", "ck_payload"},
                 {"wv", "cv_payload"}});
    torch::manual_seed(5);
    auto x = torch::randn({2, 29, cc.d_model}, torch::kFloat64);
    EXPECT_LT(max_abs_diff(chunked->forward(x), full->forward(x)), 1e-12) << gate_kind_name(gate);
  }
}

TEST(Reductions, WindowAsLongAsTheSequenceIsFullAttention) {
  AttnConfig fc = zoo_config(AttnKind::Full);
  AttnConfig wc = fc;
  wc.kind = AttnKind::Window;
  wc.window = 64;
  Attention full = make_module(fc, 35), window = make_module(wc, 35);
  torch::manual_seed(6);
  auto x = torch::randn({1, 50, fc.d_model}, torch::kFloat64);
  EXPECT_LT(max_abs_diff(full->forward(x), window->forward(x)), 1e-12);
}

TEST(Reductions, DeepSeekBeforeItsFirstBlockCompletesIsWindowOnly) {
  // with T < m no entry exists, so the output cannot depend on the compressor's weights
  AttnConfig c = zoo_config(AttnKind::DsHca);
  Attention a = make_module(c, 36), b = make_module(c, 36);
  {
    torch::NoGradGuard g;
    b->param("comp_wkv").normal_();
    b->param("comp_wgate").normal_();
  }
  torch::manual_seed(7);
  auto x = torch::randn({1, c.ratio - 1, c.d_model}, torch::kFloat64);
  EXPECT_LT(max_abs_diff(a->forward(x), b->forward(x)), 1e-14);
  auto x2 = torch::randn({1, c.ratio, c.d_model}, torch::kFloat64);
  EXPECT_GT(max_abs_diff(a->forward(x2), b->forward(x2)), 1e-4);
}

TEST(Sink, AddsOnlyToTheDenominator) {
  // a very negative sink is no sink; a very large one drives the output to zero
  AttnConfig c = zoo_config(AttnKind::Window);
  c.sink = true;
  AttnConfig nc = c;
  nc.sink = false;
  Attention with = make_module(c, 37), without = make_module(nc, 37);
  copy_params(
      *with, *without,
      {{"wq", "wq"}, {"wk", "wk"}, {"wv", "wv"}, {"wo", "wo"}, {"q_norm", "q_norm"}, {"k_norm", "k_norm"}});
  torch::manual_seed(8);
  auto x = torch::randn({1, 20, c.d_model}, torch::kFloat64);
  torch::NoGradGuard g;
  with->param("sink").fill_(-200.0);
  EXPECT_LT(max_abs_diff(with->forward(x), without->forward(x)), 1e-12);
  with->param("sink").fill_(200.0);
  EXPECT_LT(with->forward(x).abs().max().item<double>(), 1e-12);
}

}  // namespace
}  // namespace phasescope::testing
