// card.h — the phase card: the one summary of a model's phase behaviour, written by `eval --card`, the
// probes and the audit, read by `align`, `serve --align-spans` and `gate`. JSON schema
// "phasescope.card", version 1 (docs/card.md). It holds the per-residue accuracy with Wilson intervals,
// the accuracy folded to the grid's period, the detected period, the strongest and weakest phases, and
// where the grid starts:
//   absolute position p (0-based in the token sequence the model sees) has phase (p - grid.origin) mod
//   grid.period; a user's prompt token i sits at absolute position grid.prompt_offset + i (the tokens a
//   server or chat template puts first: BOS, system prompt, header).
// Accuracies are fractions in [0, 1]. Reading a card without grid.origin, grid.period or the folded
// phases is refused: a card that cannot place a phase cannot steer alignment.
// Not here: computing statistics (stats.h) or aligning prompts (align/align.h).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/results.h"

namespace phasescope {

constexpr const char* kCardSchema = "phasescope.card";
constexpr int kCardVersion = 1;

struct CardGrid {
  int period = 0;             // phases are taken mod this (the model's stride S, or the lcm of its strides)
  int64_t origin = 0;         // absolute position that phase 0 refers to (0: compressed blocks start
                              // at the sequence's first token, BOS included)
  int64_t prompt_offset = 0;  // tokens before a user's prompt (BOS, system prompt, template header)
  std::string note;           // how origin and prompt_offset were established
};

struct CardPhase {
  int phase = 0;  // a residue r = p mod R (per_residue) or a phase (p - origin) mod period (folded)
  int64_t n = 0, correct = 0;
  double acc = 0;                  // NaN when n = 0
  double ci_low = 0, ci_high = 1;  // 95% Wilson interval
};

struct PhaseCard {
  std::string model;     // the model's name
  std::string source;    // what measured it: "eval", "probe needle", "audit"
  std::string task;      // "lookup" | "needle"
  std::string protocol;  // "prefix" | "in-sequence" | ""
  uint64_t seed = 0;     // the prompts' seed: judge an alignment on other seeds than its card's
  int64_t n_samples = 0;
  CardGrid grid;
  int R = 0;                           // residues of per_residue (a multiple of grid.period)
  int detected_period = 0;             // the period detector's P (0 = no phase dependence detected)
  std::vector<CardPhase> per_residue;  // (R)
  std::vector<CardPhase> folded;       // (grid.period) pooled over residues r with r mod period = phase
  double mean = 0, worst = 0, best = 0, gap = 0;  // over residues
  Interval mean_ci, gap_ci;
  int strongest_phase = 0, weakest_phase = 0;            // of folded, ties to the lower phase
  std::vector<int> phase_order;                          // (grid.period) folded phases, strongest first
  std::vector<int> neutral_tokens;                       // tokens the card calls safe filler (may be empty)
  std::string tokenizer_sha256;                          // "" when the model's vocabulary is phasescope's own
  std::string commit;                                    // phasescope's commit that wrote the card
  nlohmann::json checks = nlohmann::json::array();       // the audit's checks (docs/audit.md); [] otherwise
  nlohmann::json provenance = nlohmann::json::object();  // the audit's: server entry, prompt hashes, ...
};

// The card of one evaluation: per-residue and folded accuracies from its statistics (folded to
// r.stats.S, which must divide R), phases ranked by folded accuracy (ties to the lower phase).
PhaseCard card_from_results(const EvalResults& r, const CardGrid& grid, uint64_t seed);

// The ranking of a card's folded phases, strongest first (fills strongest/weakest_phase and phase_order).
void card_rank_phases(PhaseCard* card);

// Phase of absolute position p under the card's grid, in [0, period).
int card_phase(const CardGrid& g, int64_t p);

// One entry of a card's `checks` (docs/audit.md): {name, verdict ("pass" | "fail" | "inconclusive"), reason,
// rule (the text of what the code computes), figures}. The one writer every audit check goes through.
nlohmann::json card_check_json(const std::string& name, const std::string& verdict, const std::string& reason,
                               const std::string& rule, nlohmann::json figures);

nlohmann::json card_to_json(const PhaseCard& c);
PhaseCard card_from_json(const nlohmann::json& j, const std::string& where);  // throws Error
PhaseCard card_read(const std::string& path);                                 // throws Error
void card_write(const PhaseCard& c, const std::string& path);                 // atomic

}  // namespace phasescope
