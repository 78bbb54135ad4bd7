// query_phase.cpp — the prompts, the groups by length mod S, and the verdict of query_phase.h.
#include "audit/query_phase.h"

#include <fmt/format.h>

#include <cmath>

#include "core/check.h"
#include "core/json_fields.h"
#include "eval/stats.h"

namespace phasescope {

std::string query_phase_rule() {
  return "Each needle prompt is scored with 0..2S-1 neutral tokens inserted before its question; accuracy is "
         "grouped by prompt length mod S. fail: chi-square homogeneity p < 0.01 and gap >= 10 points; pass: "
         "p >= 0.05 or gap < 5 points; inconclusive otherwise, with fewer than 8 prompts in a group, or when "
         "fewer than 5% of all answers are right.";
}

QueryPhaseResult audit_query_phase(Backend& backend, const std::vector<QueryPhaseProbe>& probes, int S,
                                   int neutral) {
  if (S < 2) fail("audit --stride", "must be at least 2", "use the engine's compression stride, e.g. 4");
  if (probes.empty()) fail("audit query-phase", "no needle prompts", "ask for more samples");
  std::vector<ScoreRequest> reqs;
  std::vector<int> group;
  for (size_t i = 0; i < probes.size(); ++i) {
    const QueryPhaseProbe& p = probes[i];
    if (p.question_at < 1 || p.question_at > int64_t(p.prompt.size()))
      fail("audit query-phase",
           fmt::format("probe {} has its question at {}, outside its {} tokens", i, p.question_at,
                       p.prompt.size()),
           "this is a bug in the prompt builder; report it");
    for (int j = 0; j < 2 * S; ++j) {
      ScoreRequest r;
      r.tokens.assign(p.prompt.begin(), p.prompt.begin() + std::ptrdiff_t(p.question_at));
      r.tokens.insert(r.tokens.end(), size_t(j), neutral);
      r.tokens.insert(r.tokens.end(), p.prompt.begin() + std::ptrdiff_t(p.question_at), p.prompt.end());
      r.answer = p.answer;
      group.push_back(int(r.tokens.size() % size_t(S)));
      reqs.push_back(std::move(r));
    }
  }
  const std::vector<ScoreResult> res = backend.score(reqs);
  if (res.size() != reqs.size())
    fail("audit query-phase", fmt::format("the backend returned {} results for {}", res.size(), reqs.size()),
         "this is a backend bug; report it");
  QueryPhaseResult q;
  q.S = S;
  q.n.assign(size_t(S), 0);
  q.correct.assign(size_t(S), 0);
  std::vector<double> lp_sum(size_t(S), 0);
  std::vector<int64_t> lp_n(size_t(S), 0);
  for (size_t i = 0; i < res.size(); ++i) {
    if (!res[i].error.empty()) continue;
    const size_t g = size_t(group[i]);
    ++q.n[g];
    q.correct[g] += res[i].top1 == reqs[i].answer;
    if (std::isfinite(res[i].answer_logprob)) lp_sum[g] += res[i].answer_logprob, ++lp_n[g];
  }
  int64_t min_n = q.n[0];
  for (int g = 0; g < S; ++g) {
    q.acc.push_back(q.n[size_t(g)] ? double(q.correct[size_t(g)]) / double(q.n[size_t(g)]) : std::nan(""));
    q.logprob.push_back(lp_n[size_t(g)] ? lp_sum[size_t(g)] / double(lp_n[size_t(g)]) : std::nan(""));
    min_n = std::min(min_n, q.n[size_t(g)]);
    if (!std::isfinite(q.acc.back())) continue;
    if (q.worst < 0 || q.acc.back() < q.acc[size_t(q.worst)]) q.worst = g;
    if (q.best < 0 || q.acc.back() > q.acc[size_t(q.best)]) q.best = g;
  }
  q.gap = q.best >= 0 ? q.acc[size_t(q.best)] - q.acc[size_t(q.worst)] : std::nan("");
  q.p_value = chi2_homogeneity(q.correct, q.n).p_value;
  int64_t all_n = 0, all_correct = 0;
  for (int g = 0; g < S; ++g) all_n += q.n[size_t(g)], all_correct += q.correct[size_t(g)];
  const double overall = all_n ? double(all_correct) / double(all_n) : 0;
  if (min_n < 8) {
    q.verdict = "inconclusive";
    q.reason = fmt::format("a length group has {} scored prompts, fewer than 8", min_n);
  } else if (overall < 0.05) {
    q.verdict = "inconclusive";
    q.reason = fmt::format("the model answers {:.1f}% of the needles: too few for wrong answers to show",
                           100 * overall);
  } else if (q.p_value < 0.01 && q.gap >= 0.10) {
    q.verdict = "fail";
    q.reason = fmt::format(
        "accuracy depends on the prompt length mod {}: {:.1f}% at {} vs {:.1f}% at {} (p = {:.2g})", S,
        100 * q.acc[size_t(q.worst)], q.worst, 100 * q.acc[size_t(q.best)], q.best, q.p_value);
  } else if (q.p_value >= 0.05 || q.gap < 0.05) {
    q.verdict = "pass";
    q.reason =
        fmt::format("accuracy does not depend on the prompt length mod {} (gap {:.1f} points, p = {:.2g})", S,
                    100 * q.gap, q.p_value);
  } else {
    q.verdict = "inconclusive";
    q.reason = fmt::format("gap {:.1f} points with p = {:.2g}: between the pass and fail thresholds",
                           100 * q.gap, q.p_value);
  }
  return q;
}

nlohmann::json query_phase_check_json(const QueryPhaseResult& r) {
  nlohmann::json acc = nlohmann::json::array(), lp = nlohmann::json::array();
  for (double a : r.acc) acc.push_back(json_number_or_null(a));
  for (double l : r.logprob) lp.push_back(json_number_or_null(l));
  return {{"name", "query-phase"},
          {"verdict", r.verdict},
          {"reason", r.reason},
          {"rule", query_phase_rule()},
          {"figures",
           {{"S", r.S},
            {"n", r.n},
            {"correct", r.correct},
            {"acc_by_length_mod_S", acc},
            {"logprob_by_length_mod_S", lp},
            {"gap", json_number_or_null(r.gap)},
            {"p_value", json_number_or_null(r.p_value)},
            {"worst", r.worst},
            {"best", r.best}}}};
}

}  // namespace phasescope
