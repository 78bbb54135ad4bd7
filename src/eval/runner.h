// runner.h — one phase-stratified evaluation, end to end, and the combined report of several:
//   layout (layout.h) -> the scoring engine (scoring.h: skip samples already in out_dir/journal.jsonl,
//   which must be this run's, backend.score in batches, one journal line per answer) -> statistics of
//   the whole journal (results_from_journal) ->
//   out_dir/{results.json, per_residue.csv, table.txt, layout.txt, eval_*.png, report.html}.
// Kill it at any point and run the same call again: scored samples are kept, failed and missing ones
// are scored, nothing is counted twice. Not here: which model answers (backend.h) or the CLI.
#pragma once
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "align/align_layout.h"
#include "eval/backend.h"
#include "eval/layout.h"
#include "eval/results.h"
#include "eval/scoring.h"
#include "report/document.h"

namespace phasescope {

struct EvalOptions {
  LayoutSpec layout;            // task, protocol, R, n_base (see layout_base_count), pad, seed, tolerances
  std::string model = "model";  // preset / run name, recorded in every journal line and in results.json
  int S = 8;                    // the model's stride: accuracy is also shown folded to r % S
  int bootstrap = 2000;         // cluster-bootstrap replicates
  uint64_t bootstrap_seed = 1;
  bool report = true;                // render the plots and report.html (needs gnuplot)
  int max_failed_batches = 3;        // give up after this many consecutive batches with no answer at all
  bool fresh = false;                // start the journal over instead of resuming it (eval/scoring.h)
  std::optional<LayoutAlign> align;  // align every prompt's target record first (align/align_layout.h)
  bool log_layout = true;            // the per-residue position table (false: its one-line summary)
  std::ostream* log = nullptr;       // layout moments and progress lines; nullptr = silent
};

// Run (or resume) the evaluation into out_dir (created if needed). Throws Error when the layout is
// refused, the journal belongs to another run (model weights, backend, layout or protocol differ), or
// the backend keeps failing (the journal is kept).
EvalResults run_eval(Backend& backend, const EvalOptions& opt, const std::string& out_dir);

// Sample i of a layout as the scoring engine's sample (journal record without the answer, prompt,
// answer token); `fingerprint` = layout_fingerprint(d.spec).
ScoringSample eval_engine_sample(const LayoutDesign& d, size_t i, const std::string& model,
                                 const std::string& fingerprint);

// Score (or resume) every sample of a layout into journal_path through the engine, the journal bound
// to (model, backend identity, layout, scoring). run_eval and explain's conditions use it.
ScoringSummary eval_score_layout(Backend& backend, const LayoutDesign& d, const std::string& model,
                                 const std::string& scoring, const std::string& journal_path, bool fresh,
                                 std::ostream* log, int max_failed_batches = 3);

// The statistics of out_dir/journal.jsonl alone (no backend call), with the run's metadata.
EvalResults eval_from_journal(const EvalOptions& opt, const LayoutDesign& design, const std::string& out_dir,
                              const std::string& backend_description, double wall_s);

// The evaluator's flags for prompt length and alignment: pad > 0 sets the filler per prompt (else the
// design's default); a non-empty card_path aligns every prompt's target record with that card in `mode`
// ("align" | "repeat" | "both", `copies` positions for the last two; weakest = the control that targets the
// card's weakest phases instead). Throws Error when the pad is too
// small for the shifts or for the alignment (the message gives the pad that fits).
void eval_set_pad_and_align(EvalOptions* opt, int pad, const std::string& card_path, const std::string& mode,
                            int copies, bool weakest = false);

// The phase card of an evaluation (eval/card.h): grid period = the design's stride S when it divides R
// (else R), origin 0 at the BOS, prompt_offset 0; written atomically to `path`. An aligned evaluation
// describes the remedy, not the model: no card is written for it (returns false).
bool eval_write_card(const EvalResults& r, const EvalOptions& opt, const std::string& path);

// Write results.json, per_residue.csv, table.txt and (report = true) the plots and report.html of one
// run into out_dir. Used by run_eval and by the HTTP probes (probe/needle.h) so their outputs match.
void eval_write_outputs(const EvalResults& res, bool report, const std::string& out_dir,
                        const std::string& title);

// Read several results.json files (e.g. models x protocols for `reproduce`) and write, into out_dir,
// report.html (one figure per protocol with a series per model), results.csv and compare.txt.
// Returns the runs in the order given.
// `extra` sections (e.g. explain/) are appended after the evaluation's own.
std::vector<EvalResults> eval_combined_report(const std::vector<std::string>& results_paths,
                                              const std::string& out_dir, const std::string& title,
                                              const std::vector<ReportSection>& extra = {});

}  // namespace phasescope
