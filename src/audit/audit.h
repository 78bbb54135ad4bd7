// audit.h — `phasescope audit`: a served model and its engine in one card. Over one connection
// (probe/probe_setup.h) it builds the position-matched needle in the model's own tokens (probe/needle.h, up
// to the server's context less 2S for the query-phase insertions) and runs, in order:
//   needle-phase             the needle by the target key's residue (resumable journal in out/needle);
//                            inconclusive when its mean is below 5%; fail when the independence test gives
//                            p < 0.01 and the gap is >= 10 points, pass when p >= 0.05, else inconclusive
//   batch-invariance,
//   prefix-cache-invariance  audit/invariance.h, on needle prompts (siblings: the first three quarters,
//                            then the design's filler)
//   query-phase              audit/query_phase.h, on needle prompts, the filler inserted before the question
//                            (resumable journal in out/query-phase)
//   flip                     audit/flip_check.h: the padding-flip sweep (resumable journal in out/flip)
// and writes out/card.json (and the same card as a page, out/card.html: eval/card_report.h): the needle's
// per-residue card (eval/card.h; grid period S, prompt_offset the chat template's tokens) with every check,
// and `provenance` (the /v1/models entry, the tokenizer's sha256 when a file was given, the sha256 of every
// probe prompt's ids, phasescope's commit). Not here: the checks' rules (their own headers), the HTTP client.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>

#include "eval/card.h"
#include "probe/probe_setup.h"

namespace phasescope {

struct AuditOptions {
  std::string out;
  int S = 4;                   // the engine's compression stride
  NeedleSpec needle;           // context, samples_per_group, seed, words...
  NeedleGiven given;           // what the user set on it
  int invariance_probes = 32;  // needle prompts per invariance check pair (half each)
  int query_probes = 24;       // needle prompts for query-phase (x 2S lengths)
  std::string tokenizer_path;  // recorded (sha256) when given
  bool fresh = false;
  std::ostream* log = nullptr;
};

// Run every check and write out/card.json; returns the card. Throws Error (the server, the context, the
// tokenizer) with nothing computed lost: the needle's journal resumes.
PhaseCard audit_run(ProbeConnection& c, const AuditOptions& opt);

// The terminal summary: one line per check (name, verdict, reason) and the needle's table.
std::string audit_summary(const PhaseCard& card);

}  // namespace phasescope
