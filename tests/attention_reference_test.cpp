// attention_reference_test.cpp — the batched libtorch zoo against the fp64 loop reference, for
// every variant: outputs (fp64 to 1e-10 relative, fp32 to 1e-4 relative, several batch rows and
// start positions) and gradients (autograd of the batched module vs central finite differences
// of the reference, to 1e-6 relative); full attention past one causal query block; and the fast
// kernels (gathered products, the indexer's selection, RMSNorm and RoPE, causal query blocks) against
// their plain tensor-op forms.
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "attention/attention_blocks.h"
#include "attention/gathered.h"
#include "attention/rowwise.h"
#include "attention_testing.h"

namespace phasescope::testing {
namespace {

class ReferenceTest : public ::testing::TestWithParam<Variant> {};

constexpr int kT = 37;  // not a multiple of any stride or window in the variants

TEST_P(ReferenceTest, Fp64MatchesReferenceAtSeveralStartPositions) {
  const AttnConfig& c = GetParam().cfg;
  Attention m = make_module(c, 11);
  RefParams P = attention_export(*m);
  for (int64_t pos0 : {0, 3, 8, 13}) {
    torch::manual_seed(100 + pos0);
    auto x = torch::randn({3, kT, c.d_model}, torch::kFloat64);  // B = 3: rows must not mix
    auto y = m->forward(x, pos0);
    for (int b = 0; b < 3; ++b) {
      auto ref = reference_attention(c, P, to_vec(x[b]), kT, pos0);
      EXPECT_LT(rel_err(to_vec(y[b]), ref), 1e-10) << "pos0=" << pos0 << " row " << b;
    }
  }
}

TEST_P(ReferenceTest, Fp32MatchesReference) {
  const AttnConfig& c = GetParam().cfg;
  Attention m = make_module(c, 12, torch::kFloat32);
  RefParams P = attention_export(*m);
  torch::manual_seed(5);
  auto x = torch::randn({1, kT, c.d_model});
  auto ref = reference_attention(c, P, to_vec(x[0]), kT, 0);
  EXPECT_LT(rel_err(to_vec(m->forward(x)[0]), ref), 1e-4);
}

// L = sum(y * R): autograd on the batched module vs central differences on the reference.
TEST_P(ReferenceTest, GradientsMatchFiniteDifferencesOfReference) {
  const AttnConfig& c = GetParam().cfg;
  const int T = 19;
  const int64_t pos0 = 2;
  Attention m = make_module(c, 13);
  RefParams P = attention_export(*m);
  torch::manual_seed(6);
  auto x = torch::randn({1, T, c.d_model}, torch::kFloat64).requires_grad_(true);
  auto R = torch::randn({1, T, c.d_model}, torch::kFloat64);
  (m->forward(x, pos0) * R).sum().backward();
  const std::vector<double> rv = to_vec(R);
  auto loss = [&](const RefParams& p, const std::vector<double>& xv) {
    auto y = reference_attention(c, p, xv, T, pos0);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += y[i] * rv[i];
    return s;
  };
  const double h = 1e-5;
  std::mt19937 rng(7);
  auto check = [&](const std::string& what, double analytic, double plus, double minus) {
    const double fd = (plus - minus) / (2 * h);
    EXPECT_NEAR(analytic, fd, 1e-6 * std::max(1.0, std::abs(fd))) << what;
  };

  // input coordinates
  std::vector<double> xv = to_vec(x);
  auto gx = to_vec(x.grad());
  for (int k = 0; k < 12; ++k) {
    size_t i = rng() % xv.size();
    auto xp = xv, xm = xv;
    xp[i] += h;
    xm[i] -= h;
    check("x[" + std::to_string(i) + "]", gx[i], loss(P, xp), loss(P, xm));
  }
  // a few coordinates of every parameter (the indexer's get no gradient from the output: its
  // selection is discrete, and finite differences agree unless a step flips a selection)
  for (auto& item : m->named_parameters()) {
    auto g = item.value().grad();
    std::vector<double> gv = g.defined() ? to_vec(g) : std::vector<double>(item.value().numel(), 0.0);
    const std::string name = item.key();
    for (int k = 0; k < 4; ++k) {
      size_t i = rng() % gv.size();
      RefParams pp = P, pm = P;
      pp[name].data[i] += h;
      pm[name].data[i] -= h;
      check(name + "[" + std::to_string(i) + "]", gv[i], loss(pp, xv), loss(pm, xv));
    }
  }
}

// Full attention longer than one causal query block (kCausalQueryBlock) takes causal_attention: the
// module against the loop reference at T = 2 blocks + 45, at two start positions, with GQA and MHA.
TEST(CausalBlocks, FullAttentionPastOneBlockMatchesTheReference) {
  const int64_t T = 2 * attention_blocks::kCausalQueryBlock + 45;
  AttnConfig mha = zoo_config(AttnKind::Full);
  mha.n_kv_heads = mha.n_heads;
  for (const AttnConfig& c : {zoo_config(AttnKind::Full), mha}) {
    Attention m = make_module(c, 21);
    RefParams P = attention_export(*m);
    for (int64_t pos0 : {0, 7}) {
      torch::manual_seed(30 + pos0);
      auto x = torch::randn({2, T, c.d_model}, torch::kFloat64);
      auto y = m->forward(x, pos0);
      for (int b = 0; b < 2; ++b)
        EXPECT_LT(rel_err(to_vec(y[b]), reference_attention(c, P, to_vec(x[b]), T, pos0)), 1e-10)
            << "kv heads " << c.n_kv_heads << " pos0 " << pos0 << " row " << b;
    }
  }
}

// causal_attention's blocks (one query, a few, one that does not divide T, all T at once) against one
// masked T x T softmax written out, values and the gradients of q, k and v, in fp64 with GQA.
TEST(CausalBlocks, BlocksEqualOneMaskedSoftmaxWithGradients) {
  const int64_t B = 2, T = 37, H = 6, Hkv = 2, D = 4;
  torch::manual_seed(8);
  auto opt = torch::TensorOptions().dtype(torch::kFloat64);
  auto q = torch::randn({B, T, H, D}, opt), k = torch::randn({B, T, Hkv, D}, opt),
       v = torch::randn({B, T, Hkv, D}, opt), g = torch::randn({B, T, H, D}, opt);
  auto grads_of = [&](const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&,
                                                        const torch::Tensor&)>& f) {
    auto q1 = q.clone().requires_grad_(true), k1 = k.clone().requires_grad_(true),
         v1 = v.clone().requires_grad_(true);
    auto y = f(q1, k1, v1);
    (y * g).sum().backward();
    return std::vector<torch::Tensor>{y.detach(), q1.grad(), k1.grad(), v1.grad()};
  };
  auto dense = [&](const torch::Tensor& q1, const torch::Tensor& k1, const torch::Tensor& v1) {
    auto kr = k1.repeat_interleave(H / Hkv, 2), vr = v1.repeat_interleave(H / Hkv, 2);  // [B, T, H, D]
    auto s = torch::einsum("bthd,bshd->bhts", {q1, kr});
    auto future = torch::ones({T, T}, torch::kBool).triu(1);
    auto p = torch::softmax(s.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
    return torch::einsum("bhts,bshd->bthd", {p, vr});
  };
  const auto want = grads_of(dense);
  const char* names[] = {"value", "dq", "dk", "dv"};
  for (int64_t block : {int64_t(1), int64_t(5), int64_t(16), T, int64_t(64)}) {
    const auto got = grads_of([&](const torch::Tensor& q1, const torch::Tensor& k1, const torch::Tensor& v1) {
      return attention_blocks::causal_attention(q1, k1, v1, block);
    });
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_LT(max_abs_diff(got[i], want[i]), 1e-12) << "block " << block << " " << names[i];
  }
}

// The gathered products (DeepSeek CSA's per-query top-k entries) against gather-then-matmul: values and
// the gradients of q / p and the entries, with picks that repeat within a query and across queries (the
// scatter back to entries must add them), in fp64 and fp32.
TEST(GatheredProducts, FastPathEqualsGatherThenMatmulWithItsGradients) {
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-5;
    torch::manual_seed(5);
    const int64_t B = 2, T = 9, H = 3, K = 5, D = 7, N = 4;
    auto opt = torch::TensorOptions().dtype(dtype);
    auto idx = torch::randint(0, N, {B, T, K}, torch::kInt64);  // K > N: repeats in every row
    auto q = torch::randn({B, T, H, D}, opt), p = torch::randn({B, T, H, K}, opt);
    auto e = torch::randn({B, N, D}, opt);
    auto gs = torch::randn({B, T, H, K}, opt), gm = torch::randn({B, T, H, D}, opt);
    auto run = [&](bool fast) {
      auto q1 = q.clone().requires_grad_(true), p1 = p.clone().requires_grad_(true);
      auto e1 = e.clone().requires_grad_(true);
      auto s = fast ? gathered_scores(q1, e1, idx) : gathered_scores_reference(q1, e1, idx);
      auto o = fast ? gathered_mix(p1, e1, idx) : gathered_mix_reference(p1, e1, idx);
      ((s * gs).sum() + (o * gm).sum()).backward();
      return std::vector<torch::Tensor>{s.detach(), o.detach(), q1.grad(), p1.grad(), e1.grad()};
    };
    auto fast = run(true), ref = run(false);
    const char* names[] = {"scores", "mix", "dq", "dp", "de"};
    for (size_t i = 0; i < fast.size(); ++i)
      EXPECT_LT((fast[i] - ref[i]).abs().max().item<double>(), tol) << names[i] << " " << dtype;
  }
}

// The indexer's one-pass selection against scores-then-top-k: the same picks (as sets: both are in no
// particular order) for rows that see no entry, fewer than k, and more; with half the query heads
// negative, so that ReLU zeroes whole rows of scores and exact ties at the k-th place are common (they
// must go to the earlier entry), in fp64 and fp32.
TEST(IndexerSelection, OnePassEqualsScoresThenTopK) {
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    torch::manual_seed(7);
    const int64_t B = 2, T = 23, HI = 3, DI = 5, N = 17;
    auto opt = torch::TensorOptions().dtype(dtype);
    auto q = torch::randn({B, T, HI, DI}, opt), w = torch::rand({B, T, HI}, opt);
    auto kI = torch::randn({B, N, DI}, opt);
    kI.narrow(1, 0, 6).fill_(0);  // entries 0-5 score exactly 0 for every query: ties
    auto n_vis = (torch::arange(T, torch::kInt64) - 3).clamp(0, N);  // 0 for the first rows, N at the end
    // k = 4: the fast path bounds the k-th score by its groups' maxima; k = 5 (more than the groups of 8
    // entries): every visible entry is a candidate
    for (int64_t kk : {4, 5}) {
      auto fast = index_select_topk(q, w, kI, n_vis, kk),
           ref = index_select_topk_reference(q, w, kI, n_vis, kk);
      ASSERT_EQ(fast.sizes(), ref.sizes());
      EXPECT_TRUE(torch::equal(std::get<0>(fast.sort(-1)), std::get<0>(ref.sort(-1))))
          << dtype << " k " << kk;
    }
    const int64_t k = 4;
    int64_t tied_rows = 0;  // rows whose k-th place is an exact tie (the test's point), at least a few
    auto score = index_scores(q, w, kI);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = n_vis[t].item<int64_t>();
      if (n <= k) continue;
      auto s = std::get<0>(score[0][t].narrow(0, 0, n).sort(0, /*descending=*/true));
      tied_rows += s[k - 1].item<double>() == s[k].item<double>();
    }
    EXPECT_GE(tied_rows, 2) << dtype;
  }
}

// RMSNorm and RoPE (attention/rowwise.h): the fast loops against the readable tensor-op references,
// values and the gradients of x (and of the norm's weight), fp64 and fp32; RMSNorm with and without a
// weight on a non-contiguous input, RoPE on all and on part of the head dims, rotating forward and back
// at positions that do not start at 0.
TEST(RowwiseKernels, FastPathsEqualTheReferencesWithTheirGradients) {
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-5;
    torch::manual_seed(6);
    auto opt = torch::TensorOptions().dtype(dtype);
    const int64_t B = 2, T = 11, H = 3, D = 12;
    auto x = torch::randn({B, H, T, D}, opt).transpose(1, 2);  // [B, T, H, D], not contiguous
    auto g = torch::randn({B, T, H, D}, opt);
    auto w = torch::randn({D}, opt);
    auto pos = torch::arange(5, 5 + T, torch::kInt64);
    auto grads_of = [&](const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>& f) {
      auto x1 = x.detach().clone().requires_grad_(true), w1 = w.clone().requires_grad_(true);
      auto y = f(x1, w1);
      (y * g).sum().backward();
      return std::vector<torch::Tensor>{y.detach(), x1.grad(),
                                        w1.grad().defined() ? w1.grad() : torch::zeros_like(w)};
    };
    auto expect_equal = [&](const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                            const std::string& what) {
      const char* names[] = {"value", "dx", "dw"};
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_LT((a[i] - b[i]).abs().max().item<double>(), tol) << what << " " << names[i] << " " << dtype;
    };
    for (bool weighted : {true, false}) {
      auto wt = [&](const torch::Tensor& w1) { return weighted ? w1 : torch::Tensor(); };
      expect_equal(grads_of([&](const torch::Tensor& a, const torch::Tensor& w1) {
                     return rms_norm(a, wt(w1), 1e-6);
                   }),
                   grads_of([&](const torch::Tensor& a, const torch::Tensor& w1) {
                     return rms_norm_reference(a, wt(w1), 1e-6);
                   }),
                   weighted ? "rms_norm with weight" : "rms_norm");
    }
    for (int half : {2, 6})
      for (int sign : {1, -1}) {
        std::vector<double> inv;
        for (int i = 0; i < half; ++i) inv.push_back(std::pow(10000.0, -2.0 * i / (2 * half)));
        const std::string what = "rope " + std::to_string(2 * half) + " dims, sign " + std::to_string(sign);
        expect_equal(grads_of([&](const torch::Tensor& a, const torch::Tensor&) {
                       return rope_apply(a, pos, inv, sign);
                     }),
                     grads_of([&](const torch::Tensor& a, const torch::Tensor&) {
                       return rope_apply_reference(a, pos, inv, sign);
                     }),
                     what);
      }
  }
}

INSTANTIATE_TEST_SUITE_P(AllKinds, ReferenceTest, ::testing::ValuesIn(attention_variants()), variant_name);

}  // namespace
}  // namespace phasescope::testing
