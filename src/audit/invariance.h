// invariance.h — the audit's engine checks (docs/audit.md): a serving engine must give a prompt the same
// answer whether it is scored alone or batched with prompts of other lengths (batch-invariance), and
// whether or not another prompt sharing a long prefix was served just before it (prefix-cache-invariance).
// The model is then whatever its phases make it; an engine that moves phases (padding pooled into a
// compressed block, a prefix cache handing out another prompt's entries) fails here.
// The probes are split in two independent sets (even and odd indices), one per check, so that a fault of one
// kind cannot show in the other check. Each probe scored alone = one request at a time.
//   batch-invariance (even probes):        alone, alone again (repeat noise), then all of them in one batch,
//                                           each after distractors of other lengths and other prefixes (an
//                                           HTTP backend sends a batch concurrently, so a batching engine
//                                           batches and pads them); compares batched with the first alone
//   prefix-cache-invariance (odd probes):  cold (before any prompt shares its prefix), sibling, warm,
//                                           sibling, warm again (repeat noise under the same condition);
//                                           compares warm with cold. A sibling has the probe's first
//                                           `shared` tokens, then other tokens.
// Difference of a probe between two passes: |answer log-prob| difference when both are finite, else 0 when
// the top-1 tokens agree and infinity when they do not.
// Tolerance = max(floor, noise_factor x the largest repeat-noise difference). Verdict per check:
//   inconclusive  fewer than min_samples probes scored in both passes, or repeat noise above max_noise
//   fail          at least max(2, fail_fraction x n) probes differ by more than the tolerance
//   inconclusive  exactly one probe does (one could be a transient; rerun)
//   pass          otherwise
// Not here: building probes from a tokenizer (the audit command), cards (eval/card.h).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/backend.h"

namespace phasescope {

struct InvarianceProbe {
  std::vector<int> prompt;   // token ids, BOS first
  int answer = -1;           // expected next token (-1: compare top-1 only)
  std::vector<int> sibling;  // same length, shares the prompt's first tokens, then differs
};

struct InvarianceOptions {
  double floor = 0.02;      // nats: the smallest tolerance (kernels of other batch shapes differ a little)
  double noise_factor = 4;  // tolerance = max(floor, noise_factor x the largest repeat difference)
  double max_noise = 0.5;   // repeat noise above this (nats): the server is too noisy to judge
  double fail_fraction = 0.05;  // fail when max(2, this x n) probes differ beyond the tolerance
  int min_samples = 8;
  int distractors = 2;  // prompts of other lengths around each probe in the batched pass
};

struct InvarianceCheck {
  std::string name;     // "batch-invariance" | "prefix-cache-invariance"
  std::string verdict;  // "pass" | "fail" | "inconclusive"
  std::string reason;   // one sentence: why this verdict
  int64_t n = 0;        // probes scored in both passes
  int64_t n_over = 0;   // of them, differing by more than the tolerance
  int64_t top1_changed = 0;
  double tolerance = 0, noise_max = 0, max_diff = 0, mean_diff = 0;  // mean over the finite differences
  std::vector<double> diffs;  // (probes) NaN where a pass failed for that probe
};

struct InvarianceReport {
  InvarianceCheck batch, prefix_cache;
};

// The rule above, as text (written into the card beside each check).
std::string invariance_rule();

// Distractors for the batched pass: prompts of other lengths whose prefixes differ from every probe's (the
// probe's tokens after its BOS rotated by a third, then shortened by 1..7 tokens or by a third),
// deterministic.
std::vector<std::vector<int>> invariance_distractors(const std::vector<InvarianceProbe>& probes, int count);

// Run the passes and judge both checks. Throws Error when the backend fails a whole pass.
InvarianceReport audit_invariance(Backend& backend, const std::vector<InvarianceProbe>& probes,
                                  const InvarianceOptions& opt);

// A check as the card's `checks` entry: {name, verdict, reason, rule, figures}.
nlohmann::json invariance_check_json(const InvarianceCheck& c);

}  // namespace phasescope
