// copy_loss.cpp — see copy_loss.h.
#include "eval/copy_loss.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/check.h"
#include "model/forward.h"

namespace phasescope {

namespace {

// The folded per-phase mean losses from per-span sums (sums[s][p], counts[s][p]) over the spans `pick`.
std::vector<double> fold_means(const std::vector<std::vector<double>>& sums,
                               const std::vector<std::vector<int64_t>>& counts,
                               const std::vector<size_t>& pick, int S) {
  std::vector<double> sum(size_t(S), 0);
  std::vector<int64_t> n(size_t(S), 0);
  for (size_t s : pick)
    for (int p = 0; p < S; ++p) {
      sum[size_t(p)] += sums[s][size_t(p)];
      n[size_t(p)] += counts[s][size_t(p)];
    }
  for (int p = 0; p < S; ++p)
    sum[size_t(p)] = n[size_t(p)] ? sum[size_t(p)] / double(n[size_t(p)]) : std::nan("");
  return sum;
}

double spread(const std::vector<double>& v) {
  return *std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end());
}

}  // namespace

CopyLossResult copy_loss_by_phase(DecoderImpl& model, const CorpusTokens& text, int bos,
                                  const CopyLossOptions& o) {
  PS_ASSERT(o.R > 0 && o.S > 0 && o.R % o.S == 0 && o.span >= 2 && o.gap >= 0 && o.spans > 0,
            "copy_loss_by_phase: bad options");
  const size_t need = size_t(o.R + o.span + o.gap);  // prefix (up to R - 1), span, gap
  if (text.size < need + 1)
    fail("copy loss",
         "the text split has " + std::to_string(text.size) + " tokens, fewer than one prompt needs",
         "build a larger corpus or shorten the span and gap");
  torch::NoGradGuard no_grad;
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<size_t> start(0, text.size - need - 1);
  std::vector<double> res_sum(size_t(o.R), 0), first_sum(size_t(o.S), 0);
  std::vector<int64_t> res_n(size_t(o.R), 0), first_n(size_t(o.S), 0);
  std::vector<std::vector<double>> span_sum(size_t(o.spans), std::vector<double>(size_t(o.S), 0));
  std::vector<std::vector<int64_t>> span_n(size_t(o.spans), std::vector<int64_t>(size_t(o.S), 0));
  for (int s = 0; s < o.spans; ++s) {
    // natural text: R prefix tokens, the span, the gap (consecutive, so the gap reads as text)
    const size_t a = start(rng);
    const std::vector<int> prefix(text.data + a, text.data + a + o.R);
    const std::vector<int> span(text.data + a + o.R, text.data + a + o.R + o.span);
    const std::vector<int> gap(text.data + a + o.R + o.span, text.data + a + need);
    std::vector<std::vector<int>> prompts;  // [R] one per shift k
    for (int k = 0; k < o.R; ++k) {
      std::vector<int> p = {bos};
      p.insert(p.end(), prefix.end() - k, prefix.end());
      p.insert(p.end(), span.begin(), span.end());
      p.insert(p.end(), gap.begin(), gap.end());
      p.insert(p.end(), span.begin(), span.end());
      prompts.push_back(std::move(p));
    }
    std::vector<const std::vector<int>*> ptrs;
    for (const auto& p : prompts) ptrs.push_back(&p);
    const std::vector<std::vector<double>> lp = model_next_token_logprobs(model, ptrs);
    for (int k = 0; k < o.R; ++k) {
      const int first = 1 + k, second = first + o.span + o.gap;  // positions of the two copies' first tokens
      for (int i = 0; i < o.span; ++i) {
        // token i of a copy at position t is predicted at t - 1; the second copy's first token has no
        // copy cue yet (its predecessor is gap text), so its loss is not a copy loss: skipped
        const int r = (first + i) % o.R, ph = (first + i) % o.S;
        if (i > 0) {
          const double loss = -lp[size_t(k)][size_t(second + i - 1)];
          res_sum[size_t(r)] += loss;
          ++res_n[size_t(r)];
          span_sum[size_t(s)][size_t(ph)] += loss;
          ++span_n[size_t(s)][size_t(ph)];
        }
        first_sum[size_t(ph)] += -lp[size_t(k)][size_t(first + i - 1)];
        ++first_n[size_t(ph)];
      }
    }
  }
  CopyLossResult out;
  for (int r = 0; r < o.R; ++r)
    out.per_residue.push_back(res_sum[size_t(r)] / double(std::max<int64_t>(1, res_n[size_t(r)])));
  out.tokens_per_residue = res_n[0];
  std::vector<size_t> all(size_t(o.spans));
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  out.folded = fold_means(span_sum, span_n, all, o.S);
  for (int p = 0; p < o.S; ++p)
    out.first_copy.push_back(first_sum[size_t(p)] / double(std::max<int64_t>(1, first_n[size_t(p)])));
  double m = 0;
  for (double x : out.per_residue) m += x;
  out.mean = m / o.R;
  out.worst_phase = int(std::max_element(out.folded.begin(), out.folded.end()) - out.folded.begin());
  out.worst = out.folded[size_t(out.worst_phase)];
  out.gap = spread(out.folded);
  // bootstrap over spans
  std::mt19937_64 brng(o.seed ^ 0x5bd1e995ull);
  std::uniform_int_distribution<size_t> pick(0, size_t(o.spans) - 1);
  std::vector<double> gaps;
  for (int b = 0; b < 500; ++b) {
    std::vector<size_t> idx(size_t(o.spans));
    for (size_t& i : idx) i = pick(brng);
    gaps.push_back(spread(fold_means(span_sum, span_n, idx, o.S)));
  }
  out.gap_ci_percentile = {quantile(gaps, 0.025), quantile(gaps, 0.975)};
  return out;
}

}  // namespace phasescope
