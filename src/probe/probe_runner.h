// probe_runner.h — the journaled scoring loop of the HTTP probes (needle, flip): samples are rendered
// on demand from their index (a 128K-token design is never held in memory at once), scored in batches
// through any Backend, and appended to the same journal format as `phasescope eval` (eval/journal.h),
// one line per sample as soon as its batch returns. An answer of several tokens is scored by teacher
// forcing (one request per token: prompt + the expected tokens before it). Resume rules are the
// journal's: scored samples are kept, failed and missing ones are scored, nothing is counted twice;
// a journal written by another design (model, layout fingerprint, prompt tokens) is refused.
// Not here: what the samples are (needle.h, flip.h) or their statistics.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "eval/backend.h"
#include "eval/journal.h"

namespace phasescope {

struct ProbeSample {
  JournalRecord rec;        // everything but the answer: id, positions, expected, model, layout, tokens_hash
  std::vector<int> prompt;  // (T) BOS first when the model has one
  std::vector<int> answer;  // (A >= 1) expected tokens; token i is scored on prompt + answer[:i]
};

struct ProbeRunOptions {
  std::string what = "probe";                // names the run in progress lines and errors
  std::ostream* log = nullptr;               // progress lines; nullptr = silent
  int max_failed_batches = 3;                // give up after this many consecutive batches with no answer
  int64_t max_batch_tokens = int64_t(1) << 24;  // prompt tokens handed to the backend at once
};

struct ProbeRunSummary {
  int64_t total = 0, resumed = 0, scored = 0, failed = 0;
  double wall_s = 0;
};

// Score samples 0..n-1 (render(i) must be deterministic: it is called again on resume to check the
// journal) into journal_path. Throws Error when the journal belongs to another design or the backend
// keeps failing (the journal is kept).
ProbeRunSummary probe_run_journal(Backend& backend, int64_t n, const std::function<ProbeSample(int64_t)>& render,
                                  const std::string& journal_path, const ProbeRunOptions& opt);

// Hex FNV-1a of a string (fingerprints of designs).
std::string probe_hash_hex(const std::string& s);

}  // namespace phasescope
