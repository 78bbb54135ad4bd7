// scoring.h — the one scoring engine: every measurement phasescope makes (eval, probe needle, probe
// flip, explain's clean and knocked-out runs) is samples -> backend -> journal through scoring_run.
//   sample source: render(i) for i = 0..n-1, deterministic (called again on resume to check the journal);
//     a 128K-token design is never held in memory at once;
//   backend: any Backend (in-process model, HTTP server), in batches of its max_batch() requests;
//   journal: one line per sample as soon as its batch returns (eval/journal.h), first line the run's
//     identity; an answer of several tokens is scored by teacher forcing (one request per token:
//     prompt + the expected tokens before it).
// The identity rule: a journal is bound to the exact model (its content hash), backend, layout and
// scoring options it was created with. Resuming with any of them different is refused, naming the
// field, both values and the fix (another --out, or --fresh). A journal from before identities
// existed is refused the same way. Inside a matching journal, each line must also be a sample of this
// design (same id, prompt tokens and target position). Scored samples are kept, failed and missing
// ones scored, nothing counted twice.
// Not here: what the samples are (layout.h, probe/), their statistics (stats.h, results.h).
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "eval/backend.h"
#include "eval/journal.h"

namespace phasescope {

struct ScoringSample {
  JournalRecord rec;        // everything but the answer: id, positions, expected, model, layout, tokens_hash
  std::vector<int> prompt;  // (T) BOS first when the model has one
  std::vector<int> answer;  // (A >= 1) expected tokens; token i is scored on prompt + answer[:i]
};

struct ScoringOptions {
  std::string what = "eval";                    // names the run in progress lines and errors
  JournalIdentity identity;                     // the run's identity (scoring_identity() helps build it)
  bool fresh = false;                           // start the journal over (the old one is removed)
  std::ostream* log = nullptr;                  // progress lines; nullptr = silent
  int max_failed_batches = 3;                   // give up after this many consecutive batches with no answer
  int64_t max_batch_tokens = int64_t(1) << 24;  // prompt tokens handed to the backend at once
};

struct ScoringSummary {
  int64_t total = 0, resumed = 0, scored = 0, failed = 0;
  double wall_s = 0;
  std::string last_error;  // of the last failed sample, "" if none failed
};

// The identity of a run: model name, the backend's identity (Backend::identity(): kind, weights hash
// or server model, options that change answers), the layout fingerprint and the scoring options.
JournalIdentity scoring_identity(const std::string& model, const Backend& backend, const std::string& layout,
                                 const std::string& scoring);

// Refuses (Error) a journal whose identity differs from `want`, or that holds samples but no identity.
void scoring_check_identity(const JournalLoad& jl, const JournalIdentity& want,
                            const std::string& journal_path);

// Score samples 0..n-1 into journal_path (its folder must exist). Throws Error when the journal belongs
// to another run or design, or the backend keeps failing (the journal is kept).
ScoringSummary scoring_run(Backend& backend, int64_t n, const std::function<ScoringSample(int64_t)>& render,
                           const std::string& journal_path, const ScoringOptions& opt);

}  // namespace phasescope
