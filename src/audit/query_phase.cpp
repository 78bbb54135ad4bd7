// query_phase.cpp — the prompts, the groups by length mod S, and the verdict of query_phase.h.
#include "audit/query_phase.h"

#include <fmt/format.h>

#include <cmath>

#include "core/check.h"
#include "core/hash.h"
#include "core/json_fields.h"
#include "eval/card.h"
#include "eval/scoring.h"
#include "eval/stats.h"

namespace phasescope {

std::string query_phase_rule() {
  return "Each needle prompt is scored with 0..2S-1 neutral tokens inserted before its question; accuracy is "
         "grouped by prompt length mod S. fail: chi-square homogeneity p < 0.01 and gap >= 10 points; pass: "
         "p >= 0.05 or gap < 5 points; inconclusive otherwise, with fewer than 8 prompts in a group, or when "
         "fewer than 5% of all answers are right.";
}

QueryPhaseResult audit_query_phase(Backend& backend, const std::vector<QueryPhaseProbe>& probes,
                                   const QueryPhaseOptions& opt) {
  const int S = opt.S;
  if (S < 2) fail("audit --stride", "must be at least 2", "use the engine's compression stride, e.g. 4");
  if (probes.empty()) fail("audit query-phase", "no needle prompts", "ask for more samples");
  std::vector<int> all;  // every probe's tokens, for the design's fingerprint
  for (size_t i = 0; i < probes.size(); ++i) {
    const QueryPhaseProbe& p = probes[i];
    if (p.question_at < 1 || p.question_at > int64_t(p.prompt.size()))
      fail("audit query-phase",
           fmt::format("probe {} has its question at {}, outside its {} tokens", i, p.question_at,
                       p.prompt.size()),
           "this is a bug in the prompt builder; report it");
    all.insert(all.end(), p.prompt.begin(), p.prompt.end());
    all.insert(all.end(), {-1, p.answer, int(p.question_at), -1});
  }
  const std::string layout = fmt::format("query-phase S={} neutral={} probes={} {}", S, opt.neutral,
                                         probes.size(), hash_tokens_hex(all));
  auto render = [&](int64_t i) {
    const QueryPhaseProbe& p = probes[size_t(i / (2 * S))];
    const int j = int(i % (2 * S));
    ScoringSample s;
    s.prompt.assign(p.prompt.begin(), p.prompt.begin() + std::ptrdiff_t(p.question_at));
    s.prompt.insert(s.prompt.end(), size_t(j), opt.neutral);
    s.prompt.insert(s.prompt.end(), p.prompt.begin() + std::ptrdiff_t(p.question_at), p.prompt.end());
    s.answer = {p.answer};
    JournalRecord& r = s.rec;
    r.id = i;
    r.base = int(i / (2 * S));
    r.R = S;
    r.residue = int(s.prompt.size() % size_t(S));  // the group: prompt length mod S
    r.prompt_len = int64_t(s.prompt.size());
    r.query_pos = r.prompt_len - 1;
    r.target_pos = r.prompt_len;  // the answer's position: its residue is the sample's group
    r.shift = j;                  // neutral tokens inserted
    r.expected = p.answer;
    r.protocol = "in-sequence";
    r.model = opt.model;
    r.layout = layout;
    r.tokens_hash = hash_tokens_hex(s.prompt);
    return s;
  };
  ScoringOptions so;
  so.what = "audit query-phase " + opt.model;
  so.identity = scoring_identity(opt.model, backend, layout, "query-phase");
  so.fresh = opt.fresh;
  so.log = opt.log;
  scoring_run(backend, int64_t(probes.size()) * 2 * S, render, opt.journal, so);

  QueryPhaseResult q;
  q.S = S;
  q.n.assign(size_t(S), 0);
  q.correct.assign(size_t(S), 0);
  std::vector<double> lp_sum(size_t(S), 0);
  std::vector<int64_t> lp_n(size_t(S), 0);
  for (const JournalRecord& r : journal_load(opt.journal).records) {
    if (!r.scored()) continue;
    const size_t g = size_t(r.residue);
    ++q.n[g];
    q.correct[g] += r.correct();
    if (std::isfinite(r.logprob)) lp_sum[g] += r.logprob, ++lp_n[g];
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
  return card_check_json("query-phase", r.verdict, r.reason, query_phase_rule(),
                         {{"S", r.S},
                          {"n", r.n},
                          {"correct", r.correct},
                          {"acc_by_length_mod_S", acc},
                          {"logprob_by_length_mod_S", lp},
                          {"gap", json_number_or_null(r.gap)},
                          {"p_value", json_number_or_null(r.p_value)},
                          {"worst", r.worst},
                          {"best", r.best}});
}

}  // namespace phasescope
