// query_phase.h — the audit's query-phase check, the pattern of vllm-project/vllm#55927 (a needle's last
// digit wrong whenever the prompt length was 3 mod 4): the needle stays where it is and 0..2S-1 neutral
// tokens are inserted just before the question, so the prompt length mod S takes every value twice while
// nothing the answer depends on moves. Accuracy (top-1 = answer) and the answer's mean log-prob are read by
// prompt length mod S.
// Verdict (accuracy): fail when the S groups differ (chi-square homogeneity p < 0.01) and the gap (best -
// worst group) is at least 10 points; pass when p >= 0.05 or the gap is below 5 points; else inconclusive;
// inconclusive also when fewer than 8 prompts per group were scored, or fewer than 5% of all answers are
// right (a model that cannot do the needle cannot show an engine's wrong answers). Not here: building the
// needle prompts (the audit command), engine invariance (invariance.h). The requests go through the one
// scoring engine (eval/scoring.h): journaled as they return, resumable, with progress lines.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/backend.h"

namespace phasescope {

struct QueryPhaseProbe {
  std::vector<int> prompt;  // token ids, BOS first
  int answer = -1;          // expected next token
  int64_t question_at = 0;  // index where the question begins: neutral tokens go right before it
};

struct QueryPhaseResult {
  int S = 0;
  std::string verdict, reason;
  std::vector<int64_t> n, correct;  // (S) per prompt length mod S
  std::vector<double> acc;          // (S) NaN when n = 0
  std::vector<double> logprob;      // (S) mean answer log-prob over the prompts where it is finite
  double gap = 0, p_value = 1;      // accuracy gap (best - worst group), chi-square homogeneity
  int worst = -1, best = -1;        // groups
};

std::string query_phase_rule();

struct QueryPhaseOptions {
  int S = 4;
  int neutral = -1;     // the token inserted
  std::string journal;  // the journal's path (its folder must exist)
  std::string model;    // the label in the journal
  bool fresh = false;   // start the journal over
  std::ostream* log = nullptr;
};

// Score (or resume) every probe with j = 0..2S-1 copies of `neutral` inserted before its question
// (sample id = probe * 2S + j) and judge. Throws Error for S < 2, an empty probe list, a question_at
// outside a prompt, or a journal of another run.
QueryPhaseResult audit_query_phase(Backend& backend, const std::vector<QueryPhaseProbe>& probes,
                                   const QueryPhaseOptions& opt);

// The check as the card's `checks` entry: {name "query-phase", verdict, reason, rule, figures}.
nlohmann::json query_phase_check_json(const QueryPhaseResult& r);

}  // namespace phasescope
