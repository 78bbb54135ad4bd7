// flip_check.h — the audit's flip check: the padding-flip probe (probe/flip.h) as a verdict. The probe
// sweeps a filler one token at a time and fits, per period P, the majority winner per class L mod P; the
// best P always fits at least as well as P = 1 (no flip), and a long P fits noise, so the verdict asks
// how often winners shuffled at random over the same lengths fit that well.
// Rule (flip_rule() is the card's text): inconclusive when the sweep cannot be built in the server's
// tokens (flip_check_unbuilt_json) or fewer than 8 points (lengths, pooled over families) have a known winner
// (a candidate's log-prob outside the server's top-k is unknown); pass when the same candidate wins at
// every scored length; otherwise D = follows(best P) - follows(P = 1) is compared with D over 2000
// seeded permutations of the winners among each family's scored lengths (the same periods tried):
// p = (1 + #{D_perm >= D}) / 2001; fail when p < 0.01, pass when p >= 0.05, else inconclusive.
// Not here: scoring (probe/flip.h flip_run), the other checks.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "http/openai_client.h"
#include "probe/flip.h"

namespace phasescope {

struct FlipCheck {
  std::string verdict, reason;
  int excess = 0;        // D: follows of the best period less those of P = 1
  double p_value = 1;    // the permutation p (1 when not computed)
  int permutations = 0;  // 0 when the rule decided before the test
};

std::string flip_rule();

// The audit's sweep for stride S: a phasescope server's token-space example, else the FP8 example; max(16,
// 4S) lengths from L = 24 (at most 256), periods 2 to min(2S, half the lengths) (at least 8), so that even
// the longest period's classes hold two lengths each (a period of one length per class fits anything).
FlipSpec audit_flip_spec(const ServedTokenSpace& space, int S);

// Judge a flip result (pure; seeded).
FlipCheck flip_check(const FlipResult& r, uint64_t seed, int permutations = 2000);

// The check as the card's `checks` entry: {name "flip", verdict, reason, rule, figures}.
nlohmann::json flip_check_json(const FlipResult& r, const FlipCheck& c, int S);

// The check when the sweep cannot be built in the server's tokens: inconclusive, with the reason.
nlohmann::json flip_check_unbuilt_json(const std::string& why);

}  // namespace phasescope
