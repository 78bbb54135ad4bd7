// runner.cpp — see runner.h.
#include "eval/runner.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <exception>
#include <ostream>
#include <unordered_map>

#include "core/check.h"
#include "eval/eval_report.h"
#include "eval/journal.h"
#include "report/html.h"

namespace phasescope {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

// Every journaled line must belong to this run and to this exact design.
void check_journal(const JournalLoad& jl, const LayoutDesign& d, const EvalOptions& opt,
                   const std::string& path, const std::unordered_map<int64_t, const LayoutSample*>& by_id) {
  const std::string fp = layout_fingerprint(d.spec), proto = pad_protocol_name(d.spec.protocol);
  const std::string fix = "use a fresh --out folder for a different model or design, or delete " + path +
                          " to start this one over";
  for (const JournalRecord& r : jl.records) {
    if (r.model != opt.model || r.protocol != proto || r.layout != fp)
      fail(path,
           fmt::format(
               "sample {} was written by another run (model '{}', protocol '{}', layout '{}'); this run "
               "is model '{}', protocol '{}', layout '{}'",
               r.id, r.model, r.protocol, r.layout, opt.model, proto, fp),
           fix);
    auto it = by_id.find(r.id);
    if (it == by_id.end() || r.tokens_hash != journal_tokens_hash(it->second->tokens) ||
        r.target_pos != it->second->target_pos)
      fail(path,
           fmt::format("sample {} does not match the sample this design generates (different tokens)", r.id),
           fix);
  }
}

JournalRecord make_record(const LayoutSample& s, const EvalOptions& opt, const std::string& fp,
                          const std::string& proto) {
  JournalRecord r;
  r.id = s.id;
  r.seed = opt.layout.seed;
  r.base = s.base;
  r.cluster = hex64(s.mapping_id);
  r.R = opt.layout.R;
  r.residue = s.residue;
  r.target_pos = s.target_pos;
  r.query_pos = s.query_pos;
  r.prompt_len = s.prompt_len;
  r.shift = s.shift;
  r.expected = s.answer;
  r.protocol = proto;
  r.model = opt.model;
  r.layout = fp;
  r.tokens_hash = journal_tokens_hash(s.tokens);
  return r;
}

void write_outputs(const EvalResults& res, const EvalOptions& opt, const std::string& out_dir) {
  eval_write_outputs(res, opt.report, out_dir, "phasescope eval: " + res.meta.model + " · " + res.meta.protocol);
}

}  // namespace

void eval_write_outputs(const EvalResults& res, bool report, const std::string& out_dir, const std::string& title) {
  results_write_json(res, out_dir + "/results.json");
  report_write_text(out_dir + "/per_residue.csv", results_csv({res}));
  report_write_text(out_dir + "/table.txt", results_format_table(res));
  if (report) report_write(eval_report_doc({res}, out_dir, title), out_dir + "/report.html");
}

EvalResults eval_from_journal(const EvalOptions& opt, const LayoutDesign& design, const std::string& out_dir,
                              const std::string& backend_description, double wall_s) {
  const std::string path = out_dir + "/journal.jsonl";
  const JournalLoad jl = journal_load(path);
  std::unordered_map<int64_t, const LayoutSample*> by_id;
  for (const LayoutSample& s : design.samples) by_id[s.id] = &s;
  check_journal(jl, design, opt, path, by_id);
  StatsOptions so;
  so.S = opt.S;
  so.bootstrap = opt.bootstrap;
  so.seed = opt.bootstrap_seed;
  EvalResults res;
  res.stats = stats_compute(jl.records, so);
  EvalMeta& m = res.meta;
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
  return res;
}

EvalResults run_eval(Backend& backend, const EvalOptions& opt, const std::string& out_dir) {
  std::ostream* log = opt.log;
  const std::string proto = pad_protocol_name(opt.layout.protocol);

  // the design: every sample, with its measured positions; refused if the groups' moments differ
  report_make_dir(out_dir);
  const LayoutDesign design = layout_build(opt.layout);
  const std::string moments = layout_format_moments(design);
  report_write_text(out_dir + "/layout.txt", moments);
  if (log) *log << moments;

  // what the journal already holds
  const std::string path = out_dir + "/journal.jsonl";
  const std::string fp = layout_fingerprint(design.spec);
  std::unordered_map<int64_t, const LayoutSample*> by_id;
  for (const LayoutSample& s : design.samples) by_id[s.id] = &s;
  const JournalLoad jl = journal_load(path);
  check_journal(jl, design, opt, path, by_id);
  std::unordered_map<int64_t, bool> done;
  for (const JournalRecord& r : jl.records)
    if (r.scored()) done[r.id] = true;
  std::vector<const LayoutSample*> todo;
  for (const LayoutSample& s : design.samples)
    if (!done.count(s.id)) todo.push_back(&s);
  const int64_t total = static_cast<int64_t>(design.samples.size());
  const int64_t resumed = total - static_cast<int64_t>(todo.size());
  JournalWriter writer(path);
  if (log) {
    if (writer.torn_bytes_cut() > 0)
      *log << fmt::format("journal: cut a torn last line ({} bytes) left by an interrupted run\n",
                          writer.torn_bytes_cut());
    *log << fmt::format(
        "eval {} · {}: {} samples, {} already journaled, {} to score with {} (batches of {})\n", opt.model,
        proto, total, resumed, todo.size(), backend.describe(), backend.max_batch());
  }

  // score in batches; one journal line per sample as soon as its batch returns
  const size_t B = static_cast<size_t>(std::max(1, backend.max_batch()));
  const auto t0 = Clock::now();
  auto last_print = t0;
  int64_t scored = 0, failed = 0;
  int failed_batches = 0;
  std::string last_error;
  for (size_t start = 0; start < todo.size(); start += B) {
    const size_t end = std::min(todo.size(), start + B);
    std::vector<ScoreRequest> reqs;
    for (size_t i = start; i < end; ++i) reqs.push_back(ScoreRequest{todo[i]->tokens, todo[i]->answer});
    const auto tb = Clock::now();
    std::vector<ScoreResult> out;
    std::string batch_error;
    try {
      out = backend.score(reqs);
      if (out.size() != reqs.size())
        batch_error = fmt::format("backend returned {} results for {} requests", out.size(), reqs.size());
    } catch (const std::exception& e) {
      batch_error = e.what();
    }
    const double batch_ms = 1000 * seconds_since(tb);
    int64_t answered = 0;
    for (size_t i = start; i < end; ++i) {
      JournalRecord r = make_record(*todo[i], opt, fp, proto);
      if (!batch_error.empty()) {
        r.error = batch_error;
        r.ms = batch_ms / double(reqs.size());
      } else {
        const ScoreResult& s = out[i - start];
        r.answer = s.top1;
        r.logprob = s.answer_logprob;
        r.topk = s.topk;
        r.error = s.error;
        if (r.error.empty() && r.answer < 0) r.error = "backend returned no top-1 token";
        r.ms = s.ms > 0 ? s.ms : batch_ms / double(reqs.size());
      }
      if (r.scored()) {
        ++answered;
        ++scored;
      } else {
        ++failed;
        last_error = r.error;
      }
      writer.append(r);
    }
    writer.sync();
    failed_batches = answered == 0 ? failed_batches + 1 : 0;

    const bool last = end == todo.size();
    if (log && (last || seconds_since(last_print) >= 2.0)) {
      last_print = Clock::now();
      const double el = seconds_since(t0), rate = double(scored + failed) / std::max(el, 1e-9);
      *log << fmt::format(
          "  {}/{} scored ({} resumed), {} failed, {:.1f} samples/s, {:.0f} s elapsed, eta {:.0f} s\n",
          resumed + scored, total, resumed, failed, rate, el,
          double(todo.size() - end) / std::max(rate, 1e-9));
    }
    if (failed_batches >= opt.max_failed_batches)
      fail("eval " + opt.model + " (" + backend.describe() + ")",
           fmt::format("the backend failed on {} consecutive batches; last error: {}", failed_batches,
                       last_error),
           "check the backend, then rerun the same command: the " + std::to_string(resumed + scored) +
               " samples scored so far are kept in " + path);
  }
  const double wall_s = seconds_since(t0);

  // statistics of the whole journal, then the files
  EvalResults res = eval_from_journal(opt, design, out_dir, backend.describe(), wall_s);
  write_outputs(res, opt, out_dir);
  if (log && res.stats.n_errors > 0)
    *log << fmt::format("eval: {} samples failed and are left out (last error: {}); rerun to retry them\n",
                        res.stats.n_errors, last_error);
  return res;
}

std::vector<EvalResults> eval_combined_report(const std::vector<std::string>& results_paths,
                                              const std::string& out_dir, const std::string& title,
                                              const std::vector<ReportSection>& extra) {
  if (results_paths.empty()) fail("combined report", "no results.json files given", "pass at least one");
  std::vector<EvalResults> runs;
  for (const std::string& p : results_paths) runs.push_back(results_read(p));
  report_make_dir(out_dir);
  report_write_text(out_dir + "/results.csv", results_csv(runs));
  report_write_text(out_dir + "/compare.txt", results_format_compare(runs));
  ReportDoc doc = eval_report_doc(runs, out_dir, title);
  for (const ReportSection& s : extra) report_add_section(doc, s);
  report_write(doc, out_dir + "/report.html");
  return runs;
}

}  // namespace phasescope
