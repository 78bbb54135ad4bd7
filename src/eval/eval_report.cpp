// eval_report.cpp — see eval_report.h.
#include "eval/eval_report.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "core/check.h"
#include "core/format.h"
#include "core/io.h"
#include "report/html.h"
#include "report/phase_plot.h"

namespace phasescope {

namespace {

std::string with_ci(double v, const Interval& i) {
  return pct(v) + " [" + pct(i.lo) + ", " + pct(i.hi) + "]";
}
std::string pval(double p) { return std::isfinite(p) ? fmt::format("{:.3g}", p) : "-"; }

std::string period_text(const PeriodResult& p, int R) {
  if (p.P == 0) return "none";
  if (p.P == R) return fmt::format("none shorter than {}", R);
  return fmt::format("{} (explains {:.0f}%)", p.P, 100 * p.explained);
}

std::string run_label(const EvalResults& r) { return r.meta.model + " · " + r.meta.protocol; }

// A safe piece of a file name / anchor.
std::string slug(const std::string& s) {
  std::string out;
  for (char c : s)
    out += ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-') ? c : '_';
  return out.empty() ? "x" : out;
}

PhaseProfile profile(const std::string& name, const std::vector<ResidueStat>& rows) {
  PhaseProfile p;
  p.name = name;
  for (const ResidueStat& s : rows) {
    p.acc.push_back(s.acc);
    p.lo.push_back(s.ci_low);
    p.hi.push_back(s.ci_high);
  }
  return p;
}

std::string residue_table(const EvalResults& r) {
  std::vector<std::vector<std::string>> rows;
  const Stats& s = r.stats;
  for (size_t k = 0; k < s.per_residue.size(); ++k) {
    const ResidueStat& p = s.per_residue[k];
    rows.push_back({std::to_string(p.residue), std::to_string(p.n), std::to_string(p.correct), pct(p.acc),
                    "[" + pct(p.ci_low) + ", " + pct(p.ci_high) + "]",
                    k < s.pos_mean.size() ? fmt::format("{:.2f}", s.pos_mean[k]) : "-",
                    k < s.pos_var.size() ? fmt::format("{:.2f}", std::sqrt(s.pos_var[k])) : "-"});
  }
  return html_table({"residue r", "n", "correct", "acc %", "95% Wilson", "target pos mean", "target pos SD"},
                    rows);
}

std::string folded_table(const EvalResults& r) {
  std::vector<std::string> head{"phase r mod " + std::to_string(r.stats.S)};
  std::vector<std::string> acc{"acc %"}, ci{"95% Wilson"}, n{"n"};
  for (const ResidueStat& f : r.stats.folded) {
    head.push_back(std::to_string(f.residue));
    acc.push_back(pct(f.acc));
    ci.push_back(pct(f.ci_low) + "–" + pct(f.ci_high));
    n.push_back(std::to_string(f.n));
  }
  return html_table(head, {acc, ci, n});
}

std::string period_table(const EvalResults& r) {
  std::vector<std::vector<std::string>> rows;
  for (const PeriodCandidate& c : r.stats.period.candidates)
    rows.push_back({std::to_string(c.P), fmt::format("{:.1f}", 100 * c.explained), pval(c.p_between),
                    pval(c.p_residual)});
  return html_table(
      {"period P (divisor of R)", "explained %", "p (classes differ)", "p (residual within class)"}, rows);
}

}  // namespace

void eval_report_add_sections(ReportDoc& doc, const std::vector<EvalResults>& runs,
                              const std::string& fig_dir, const std::string& id_prefix) {
  PS_ASSERT(!runs.empty(), "eval report: no runs");
  io_make_dirs(fig_dir);

  // summary of every run
  std::vector<std::vector<std::string>> rows;
  for (const EvalResults& r : runs) {
    const Stats& s = r.stats;
    rows.push_back(
        {r.meta.model, r.meta.protocol, std::to_string(s.n_scored), std::to_string(s.n_errors),
         with_ci(s.mean, s.mean_ci), with_ci(s.worst, s.worst_ci) + " r=" + std::to_string(s.worst_residue),
         with_ci(s.best, s.best_ci) + " r=" + std::to_string(s.best_residue), with_ci(s.gap, s.gap_ci),
         pct(s.gap_null_mean) + " / " + pct(s.gap_null_q95), pct(s.mean_abs_diff_S),
         period_text(s.period, s.R), (s.independence.name == "cochran_q" ? "Q " : "χ² ") + pval(s.p_value)});
  }
  const EvalResults& first = runs.front();
  std::string summary =
      "<p>Top-1 accuracy over the full vocabulary, grouped by the target key's residue r = position mod " +
      std::to_string(first.stats.R) +
      ". Mean is the mean of the per-residue accuracies; gap = best − worst residue. Brackets: 95% "
      "cluster-bootstrap "
      "intervals over key–name mappings (" +
      std::to_string(first.stats.bootstrap) +
      " replicates). |A(r)−A(r+S)|: mean absolute difference of residues one stride apart (the periodicity "
      "check). "
      "Noise gap: the gap sampling noise alone gives if every residue had the pooled accuracy (its mean and "
      "95th "
      "percentile): with few samples per residue a flat model's gap is not zero. "
      "p: test of phase independence (Cochran's Q for the paired design).</p>\n";
  summary += html_table({"model", "protocol", "scored", "failed", "mean %", "worst %", "best %",
                         "gap (points)", "noise gap mean / 95%", "|A(r)−A(r+S)|", "period", "p"},
                        rows);
  report_add_section(doc, {id_prefix + "-summary", "Phase-stratified accuracy: summary", summary});

  // per protocol: one figure with a series per model, and the folded figure
  std::map<std::string, std::vector<const EvalResults*>> by_protocol;
  for (const EvalResults& r : runs) by_protocol[r.meta.protocol].push_back(&r);
  for (const auto& [protocol, list] : by_protocol) {
    std::vector<PhaseProfile> per, fold;
    for (const EvalResults* r : list) {
      per.push_back(profile(r->meta.model, r->stats.per_residue));
      fold.push_back(profile(r->meta.model + " (mod " + std::to_string(r->stats.S) + ")", r->stats.folded));
    }
    const std::string base = id_prefix + "_" + slug(protocol);
    const std::string per_png = fig_dir + "/" + base + "_per_residue.png";
    const std::string fold_png = fig_dir + "/" + base + "_folded.png";
    plot_phase_profiles("accuracy per residue r = target position mod " + std::to_string(list[0]->stats.R) +
                            " (" + protocol + " padding; 95% Wilson intervals)",
                        "residue r", per, per_png);
    plot_phase_profiles("folded to phase r mod S (" + protocol + " padding)", "phase", fold, fold_png, 800,
                        380);
    std::string body = html_png(per_png, "per-residue accuracy, " + protocol + " padding") +
                       html_png(fold_png, "folded accuracy, " + protocol + " padding");
    report_add_section(
        doc, {id_prefix + "-" + slug(protocol), "Per-residue accuracy: " + protocol + " padding", body});
  }

  // per run: the tables
  for (size_t i = 0; i < runs.size(); ++i) {
    const EvalResults& r = runs[i];
    const Stats& s = r.stats;
    std::string body =
        "<p>" +
        html_escape(fmt::format(
            "{} samples ({} scored, {} failed and left out), {} clusters, {} design; prompts of {} "
            "tokens, query at position {}; backend: {}.",
            s.n_samples, s.n_scored, s.n_errors, s.n_clusters, s.design, r.meta.prompt_len, r.meta.query_pos,
            r.meta.backend)) +
        "</p>\n";
    body += "<p>" +
            html_escape(fmt::format("Independence: {} = {:.2f}, df {}, p = {}. Period: {}. {}",
                                    s.independence.name == "cochran_q" ? "Cochran's Q" : "chi-square",
                                    s.independence.statistic, s.independence.df, pval(s.p_value),
                                    period_text(s.period, s.R), s.period.note)) +
            "</p>\n";
    body += "<p>" +
            html_escape(fmt::format(
                "Target position across residue groups: means span {:.3f} tokens, SDs span "
                "{:.3f} tokens (layout tolerances {} / {}). Layout: {}.",
                s.pos_mean_range, s.pos_sd_range, r.meta.tol_mean, r.meta.tol_sd, r.meta.layout)) +
            "</p>\n";
    body += "<h3>Per residue</h3>\n" + residue_table(r) + "<h3>Folded</h3>\n" + folded_table(r) +
            "<h3>Period detector</h3>\n" + period_table(r);
    report_add_section(doc, {id_prefix + "-run-" + std::to_string(i), "Run: " + run_label(r), body});
  }
}

ReportDoc eval_report_doc(const std::vector<EvalResults>& runs, const std::string& fig_dir,
                          const std::string& title) {
  ReportDoc doc;
  doc.title = title;
  doc.intro_html =
      "<p>Written by phasescope. Every number below is recomputed from the sample journals "
      "(journal.jsonl next to each results.json).</p>\n";
  eval_report_add_sections(doc, runs, fig_dir);
  return doc;
}

}  // namespace phasescope
