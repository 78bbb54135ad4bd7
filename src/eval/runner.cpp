// runner.cpp — see runner.h.
#include "eval/runner.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <exception>
#include <ostream>
#include <unordered_map>

#include "core/check.h"
#include "core/hash.h"
#include "core/io.h"
#include "eval/eval_report.h"
#include "eval/journal.h"
#include "eval/scoring.h"
#include "report/html.h"

namespace phasescope {

namespace {

void write_outputs(const EvalResults& res, const EvalOptions& opt, const std::string& out_dir) {
  eval_write_outputs(res, opt.report, out_dir,
                     "phasescope eval: " + res.meta.model + " · " + res.meta.protocol);
}

}  // namespace

ScoringSample eval_engine_sample(const LayoutDesign& d, size_t i, const std::string& model,
                                 const std::string& fingerprint) {
  const LayoutSample& s = d.samples[i];
  ScoringSample e;
  JournalRecord& r = e.rec;
  r.id = s.id;
  r.seed = d.spec.seed;
  r.base = s.base;
  r.cluster = hash_hex(s.mapping_id);
  r.R = d.spec.R;
  r.residue = s.residue;
  r.target_pos = s.target_pos;
  r.query_pos = s.query_pos;
  r.prompt_len = s.prompt_len;
  r.shift = s.shift;
  r.expected = s.answer;
  r.protocol = pad_protocol_name(d.spec.protocol);
  r.model = model;
  r.layout = fingerprint;
  r.tokens_hash = hash_tokens_hex(s.tokens);
  e.prompt = s.tokens;
  e.answer = {s.answer};
  return e;
}

ScoringSummary eval_score_layout(Backend& backend, const LayoutDesign& d, const std::string& model,
                                 const std::string& scoring, const std::string& journal_path, bool fresh,
                                 std::ostream* log, int max_failed_batches) {
  const std::string fp = layout_fingerprint(d.spec);
  ScoringOptions eo;
  eo.what = fmt::format("{} · {}", model, scoring);
  eo.identity = scoring_identity(model, backend, fp, scoring);
  eo.fresh = fresh;
  eo.log = log;
  eo.max_failed_batches = max_failed_batches;
  return scoring_run(
      backend, int64_t(d.samples.size()),
      [&](int64_t i) { return eval_engine_sample(d, size_t(i), model, fp); }, journal_path, eo);
}

void eval_write_outputs(const EvalResults& res, bool report, const std::string& out_dir,
                        const std::string& title) {
  results_write_json(res, out_dir + "/results.json");
  io_write_atomic(out_dir + "/per_residue.csv", results_csv({res}));
  io_write_atomic(out_dir + "/table.txt", results_format_table(res));
  if (report) report_write(eval_report_doc({res}, out_dir, title), out_dir + "/report.html");
}

EvalResults eval_from_journal(const EvalOptions& opt, const LayoutDesign& design, const std::string& out_dir,
                              const std::string& backend_description, double wall_s) {
  const StatsOptions so{opt.S, opt.bootstrap, opt.bootstrap_seed};
  EvalMeta m;
  m.model = opt.model;
  m.protocol = pad_protocol_name(design.spec.protocol);
  m.backend = backend_description;
  m.layout = layout_fingerprint(design.spec);
  m.n_base = design.spec.n_base;
  m.pad = design.spec.pad;
  m.prompt_len = design.prompt_len;
  m.query_pos = design.query_pos;
  m.tol_mean = design.spec.tol_mean;
  m.tol_sd = design.spec.tol_sd;
  m.wall_s = wall_s;
  m.align = design.spec.align;
  m.added_mean = layout_added_mean(design);
  return results_from_journal(out_dir + "/journal.jsonl", so, m);
}

void eval_set_pad_and_align(EvalOptions* opt, int pad, const std::string& card_path, const std::string& mode,
                            int copies, bool weakest) {
  const int min_pad = 2 * opt->layout.R - 1;
  if (pad > 0) {
    if (pad < min_pad)
      fail("eval --pad", fmt::format("{} is below 2R - 1 = {}, the room every shift needs", pad, min_pad),
           fmt::format("pass --pad {} or more", min_pad));
    opt->layout.pad = pad;
  }
  if (card_path.empty()) return;
  LayoutAlign a;
  a.card = card_read(card_path);
  a.opt.mode = align_mode_parse(mode, "eval --align-mode");
  a.opt.copies = copies;
  a.weakest = weakest;
  const int need = layout_align_pad(opt->layout.R, a.card.grid.period, copies);
  if (opt->layout.pad < need)
    fail("eval --pad",
         fmt::format("is {}; aligning at equal length needs {} fillers per prompt", opt->layout.pad, need),
         fmt::format("pass --pad {} to this run and to the runs it is compared with", need));
  opt->align = a;
}

bool eval_write_card(const EvalResults& r, const EvalOptions& opt, const std::string& path) {
  if (opt.align) return false;
  CardGrid g;
  g.period = opt.layout.R % opt.S == 0 ? opt.S : opt.layout.R;
  g.note = "phasescope eval: prompts start with the BOS at position 0, compressed blocks from position 0";
  PhaseCard c = card_from_results(r, g, opt.layout.seed);
  const Vocab& v = opt.layout.task.vocab;
  for (int i = 0; i < v.n_fillers; ++i) c.neutral_tokens.push_back(v.filler(i));
  card_write(c, path);
  return true;
}

EvalResults run_eval(Backend& backend, const EvalOptions& opt, const std::string& out_dir) {
  std::ostream* log = opt.log;
  const std::string proto = pad_protocol_name(opt.layout.protocol);

  // the design: every sample, with its measured positions; refused if the groups' moments differ
  io_make_dirs(out_dir);
  LayoutDesign design = layout_build(opt.layout);
  if (opt.align) layout_align(&design, *opt.align);
  const std::string moments = layout_format_moments(design);
  io_write_atomic(out_dir + "/layout.txt", moments);
  if (log && opt.log_layout) {
    *log << moments << std::flush;
  } else if (log) {  // its last line: the spread of the groups' position moments
    const size_t end = moments.find_last_not_of('\n'), start = moments.rfind('\n', end);
    *log << moments.substr(start == std::string::npos ? 0 : start + 1) << std::flush;
  }

  // score (or resume) every sample through the engine, bound to this model, backend and design
  const ScoringSummary sum =
      eval_score_layout(backend, design, opt.model, "protocol " + proto, out_dir + "/journal.jsonl",
                        opt.fresh, log, opt.max_failed_batches);

  // statistics of the whole journal, then the files
  EvalResults res = eval_from_journal(opt, design, out_dir, backend.describe(), sum.wall_s);
  write_outputs(res, opt, out_dir);
  if (log && res.stats.n_errors > 0)
    *log << fmt::format("eval: {} samples failed and are left out (last error: {}); rerun to retry them\n",
                        res.stats.n_errors, sum.last_error)
         << std::flush;
  return res;
}

std::vector<EvalResults> eval_combined_report(const std::vector<std::string>& results_paths,
                                              const std::string& out_dir, const std::string& title,
                                              const std::vector<ReportSection>& extra) {
  if (results_paths.empty()) fail("combined report", "no results.json files given", "pass at least one");
  std::vector<EvalResults> runs;
  for (const std::string& p : results_paths) runs.push_back(results_read(p));
  io_make_dirs(out_dir);
  io_write_atomic(out_dir + "/results.csv", results_csv(runs));
  io_write_atomic(out_dir + "/compare.txt", results_format_compare(runs));
  ReportDoc doc = eval_report_doc(runs, out_dir, title);
  for (const ReportSection& s : extra) report_add_section(doc, s);
  report_write(doc, out_dir + "/report.html");
  return runs;
}

}  // namespace phasescope
