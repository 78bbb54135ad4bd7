// invariance.cpp — the passes and verdicts of invariance.h.
#include "audit/invariance.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "core/json_fields.h"
#include "eval/card.h"

namespace phasescope {

namespace {

struct Pass {
  std::vector<double> logprob;  // (probes) NaN when failed or unknown
  std::vector<int> top1;        // (probes) -1 when failed
};

void put(Pass* p, size_t i, const ScoreResult& r) {
  if (!r.error.empty()) return;
  p->logprob[i] = r.answer_logprob;
  p->top1[i] = r.top1;
}

Pass empty_pass(size_t n) { return Pass{std::vector<double>(n, std::nan("")), std::vector<int>(n, -1)}; }

// every request alone, one after another
Pass alone(Backend& b, const std::vector<ScoreRequest>& reqs) {
  Pass p = empty_pass(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::vector<ScoreResult> r = b.score({reqs[i]});
    if (r.size() == 1) put(&p, i, r[0]);
  }
  return p;
}

double difference(const Pass& a, const Pass& b, size_t i) {
  if (a.top1[i] < 0 || b.top1[i] < 0) return std::nan("");
  if (std::isfinite(a.logprob[i]) && std::isfinite(b.logprob[i]))
    return std::fabs(a.logprob[i] - b.logprob[i]);
  return a.top1[i] == b.top1[i] ? 0.0 : std::numeric_limits<double>::infinity();
}

InvarianceCheck judge(const std::string& name, const Pass& a, const Pass& b, double tolerance,
                      double noise_max, const InvarianceOptions& opt) {
  InvarianceCheck c;
  c.name = name;
  c.tolerance = tolerance;
  c.noise_max = noise_max;
  double sum = 0;
  int64_t finite = 0;
  for (size_t i = 0; i < a.top1.size(); ++i) {
    const double d = difference(a, b, i);
    c.diffs.push_back(d);
    if (std::isnan(d)) continue;
    ++c.n;
    if (d > tolerance) ++c.n_over;
    if (a.top1[i] != b.top1[i]) ++c.top1_changed;
    c.max_diff = std::max(c.max_diff, d);
    if (std::isfinite(d)) sum += d, ++finite;
  }
  c.mean_diff = finite > 0 ? sum / double(finite) : std::nan("");  // over the finite differences
  const int64_t need = std::max<int64_t>(2, int64_t(std::ceil(opt.fail_fraction * double(c.n))));
  if (c.n < opt.min_samples) {
    c.verdict = "inconclusive";
    c.reason = fmt::format("{} probes scored in both passes, fewer than {}", c.n, opt.min_samples);
  } else if (noise_max > opt.max_noise) {
    c.verdict = "inconclusive";
    c.reason = fmt::format("the server's repeat noise ({:.3g} nats) is above {} nats: too noisy to judge",
                           noise_max, opt.max_noise);
  } else if (c.n_over >= need) {
    c.verdict = "fail";
    c.reason =
        fmt::format("{} of {} probes differ by more than {:.3g} nats (largest {:.3g}; top-1 changed in {})",
                    c.n_over, c.n, tolerance, c.max_diff, c.top1_changed);
  } else if (c.n_over == 1) {
    c.verdict = "inconclusive";
    c.reason =
        fmt::format("one probe of {} differs by {:.3g} nats (> {:.3g}); rerun to see whether it repeats", c.n,
                    c.max_diff, tolerance);
  } else {
    c.verdict = "pass";
    c.reason = fmt::format("all {} probes within {:.3g} nats (largest difference {:.3g})", c.n, tolerance,
                           c.max_diff);
  }
  return c;
}

}  // namespace

std::string invariance_rule() {
  return "Each probe is scored alone cold, then after a sibling prompt sharing its prefix, then alone twice "
         "more "
         "(repeat noise), then batched among prompts of other lengths. Difference: |answer log-prob| change "
         "(top-1 change = infinite when log-probs are unknown). Tolerance = max(floor, noise_factor x the "
         "largest "
         "repeat difference). fail: at least max(2, fail_fraction x n) probes beyond the tolerance; "
         "inconclusive: "
         "exactly one, fewer than min_samples probes, or repeat noise above max_noise; else pass.";
}

std::vector<std::vector<int>> invariance_distractors(const std::vector<InvarianceProbe>& probes, int count) {
  std::vector<std::vector<int>> out;
  for (size_t i = 0; i < probes.size(); ++i) {
    const std::vector<int>& p = probes[i].prompt;
    std::vector<int> rot(p);
    if (p.size() > 2)
      std::rotate(rot.begin() + 1, rot.begin() + 1 + std::ptrdiff_t((p.size() - 1) / 3), rot.end());
    for (int k = 0; k < count; ++k) {
      const size_t cut = k % 2 == 0 ? 1 + (i + size_t(k)) % 7 : p.size() / 3;
      const size_t len = rot.size() > cut + 1 ? rot.size() - cut : rot.size();
      out.emplace_back(rot.begin(), rot.begin() + std::ptrdiff_t(len));
    }
  }
  return out;
}

double noise_of(const Pass& a, const Pass& b) {
  double m = 0;
  for (size_t i = 0; i < a.top1.size(); ++i) {
    const double d = difference(a, b, i);
    if (!std::isnan(d)) m = std::max(m, d);
  }
  return m;
}

InvarianceReport audit_invariance(Backend& backend, const std::vector<InvarianceProbe>& probes,
                                  const InvarianceOptions& opt) {
  std::vector<InvarianceProbe> even, odd;
  for (size_t i = 0; i < probes.size(); ++i) (i % 2 == 0 ? even : odd).push_back(probes[i]);
  auto requests = [](const std::vector<InvarianceProbe>& ps, bool siblings) {
    std::vector<ScoreRequest> r;
    for (const InvarianceProbe& p : ps)
      r.push_back(siblings ? ScoreRequest{p.sibling, -1} : ScoreRequest{p.prompt, p.answer});
    return r;
  };
  InvarianceReport rep;

  // batch-invariance: alone twice, then batched among distractors
  {
    const std::vector<ScoreRequest> reqs = requests(even, false);
    const Pass first = alone(backend, reqs), second = alone(backend, reqs);
    const std::vector<std::vector<int>> dis = invariance_distractors(even, opt.distractors);
    std::vector<ScoreRequest> batch;
    std::vector<size_t> where;  // (probes) index of the probe in the batch
    for (size_t i = 0; i < even.size(); ++i) {
      for (int k = 0; k < opt.distractors; ++k)
        batch.push_back({dis[i * size_t(opt.distractors) + size_t(k)], -1});
      where.push_back(batch.size());
      batch.push_back(reqs[i]);
    }
    const std::vector<ScoreResult> br = backend.score(batch);
    if (br.size() != batch.size())
      fail("audit batched pass",
           fmt::format("the backend returned {} results for {}", br.size(), batch.size()),
           "this is a backend bug; report it");
    Pass batched = empty_pass(even.size());
    for (size_t i = 0; i < even.size(); ++i) put(&batched, i, br[where[i]]);
    const double noise = noise_of(first, second);
    rep.batch =
        judge("batch-invariance", first, batched, std::max(opt.floor, opt.noise_factor * noise), noise, opt);
  }

  // prefix-cache-invariance: cold, then warm after a sibling, twice
  {
    const std::vector<ScoreRequest> reqs = requests(odd, false), sibs = requests(odd, true);
    const Pass cold = alone(backend, reqs);
    alone(backend, sibs);
    const Pass warm = alone(backend, reqs);
    alone(backend, sibs);
    const Pass again = alone(backend, reqs);
    const double noise = noise_of(warm, again);
    rep.prefix_cache = judge("prefix-cache-invariance", cold, warm,
                             std::max(opt.floor, opt.noise_factor * noise), noise, opt);
  }
  return rep;
}

nlohmann::json invariance_check_json(const InvarianceCheck& c) {
  return card_check_json(c.name, c.verdict, c.reason, invariance_rule(),
                         {{"n", c.n},
                          {"n_over", c.n_over},
                          {"top1_changed", c.top1_changed},
                          {"tolerance", json_number_or_null(c.tolerance)},
                          {"noise_max", json_number_or_null(c.noise_max)},
                          {"max_diff", json_number_or_null(c.max_diff)},
                          {"mean_diff", json_number_or_null(c.mean_diff)}});
}

}  // namespace phasescope
