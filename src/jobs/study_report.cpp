// study_report.cpp — see study_report.h.
#include "jobs/study_report.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "core/csv.h"
#include "core/format.h"
#include "core/io.h"
#include "report/document.h"
#include "report/html.h"
#include "report/phase_plot.h"

namespace phasescope {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The paper's published rows (prefix padding, final checkpoint; design doc 1.5), by preset and seed.
struct PaperRun {
  std::string preset;
  uint64_t seed;
  double val_loss, mean, worst, gap;  // percent
};
const std::vector<PaperRun>& paper_runs() {
  static const std::vector<PaperRun> r = {
      {"full-1kv", 42, 2.466, 18.8, 17.2, 3.1},  {"full-8kv", 42, 2.437, 61.1, 58.4, 4.3},
      {"w8s8-1kv", 42, 2.478, 50.6, 5.7, 75.3},  {"w8s8-8kv", 42, 2.431, 59.4, 9.9, 71.1},
      {"w8s4-1kv", 42, 2.467, 66.9, 46.2, 39.8}, {"w12s12-1kv", 42, 2.487, 33.0, 5.0, 63.2},
      {"no-rope", 42, 2.504, 29.4, 5.0, 40.9},   {"uniform", 42, 2.497, 12.5, 4.7, 19.2},
  };
  return r;
}

const std::vector<std::string> kProtocols = {"prefix", "in-sequence"};

double value(const json& x) { return x.is_number() ? x.get<double>() : std::nan(""); }

std::string phases_text(const std::vector<double>& folded) {
  std::string s;
  for (double v : folded) s += pct(v) + " ";
  return s;
}

std::string pct_ci(double x, const Interval& i) {
  return fmt::format("{} [{}, {}]", pct(x), pct(i.lo), pct(i.hi));
}

ReportSection findings_section(const json& study) {
  std::vector<std::vector<std::string>> t;
  for (const json& f : study["findings"])
    t.push_back({f["id"].get<std::string>(), f["claim"].get<std::string>(), f["verdict"].get<std::string>(),
                 f["rule"].get<std::string>()});
  return {"findings", "Findings, judged by code", html_table({"id", "claim", "verdict", "rule"}, t)};
}

ReportSection runs_section(const std::vector<StudyRow>& rows) {
  std::vector<std::vector<std::string>> t;
  for (const StudyRow& r : rows)
    for (const auto& [protocol, p] : r.protocols) {
      std::string paper;
      for (const PaperRun& pr : paper_runs())
        if (r.preset == pr.preset && r.tag.empty() && r.seed == pr.seed && protocol == "prefix")
          paper = fmt::format("{:.3f} / {:.1f} / {:.1f} / {:.1f}", pr.val_loss, pr.mean, pr.worst, pr.gap);
      t.push_back({r.id, protocol, fmt::format("{:.3f}", r.val_loss), pct_ci(p.mean, p.mean_ci), pct(p.worst),
                   pct_ci(p.gap, p.gap_ci), pct(p.gap_bc), std::to_string(p.period),
                   fmt::format("{:.0f}", r.kv_bytes_per_token), paper});
    }
  return {
      "runs", "Runs beside the paper",
      html_table({"run", "protocol", "val loss", "mean", "worst", "gap [simultaneous 95%]",
                  "gap, bias-corrected", "period", "KV B/token @128K", "paper: loss / mean / worst / gap"},
                 t)};
}

ReportSection phases_section(const std::vector<StudyRow>& rows, const std::string& out) {
  std::string html;
  std::map<std::string, std::vector<const StudyRow*>> by_family;
  for (const StudyRow& r : rows) by_family[r.family].push_back(&r);
  for (const auto& [family, rs] : by_family)
    for (const std::string& protocol : kProtocols) {
      std::vector<PhaseProfile> profiles;
      for (const StudyRow* r : rs)
        if (const StudyProtocol* p = r->protocol(protocol)) profiles.push_back({r->id, p->folded, {}, {}});
      if (profiles.empty()) continue;
      // a family name may hold any character: the file name keeps letters, digits and '-'
      std::string file = family + "-" + protocol;
      for (char& c : file)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '_';
      const std::string png = (fs::path(out) / "figures" / ("folded-" + file + ".png")).string();
      io_make_dirs((fs::path(out) / "figures").string());
      plot_phase_profiles(fmt::format("{} ({} padding): accuracy per phase t mod S", family, protocol),
                          "phase", profiles, png);
      html += html_png(png, family + " " + protocol);
    }
  return {"phases", "Per-phase accuracy by family (folded to t mod S)", html};
}

ReportSection reference_section(const std::vector<StudyRow>& rows) {
  std::vector<std::vector<std::string>> t;
  for (const StudyRow& r : rows)
    if (study_is_design(r, "w8s8-1kv"))
      for (const std::string& protocol : kProtocols)
        if (const StudyProtocol* p = r.protocol(protocol))
          t.push_back(
              {std::to_string(r.seed), protocol, phases_text(p->folded), std::to_string(p->weakest_phase)});
  return {"reference", "W8/S8 · 1 KV per seed: folded accuracy and the weakest phase",
          html_table({"seed", "protocol", "phase 0..7 (%)", "weakest"}, t)};
}

void add_ablation_sections(ReportDoc& doc, const json& study) {
  std::vector<std::vector<std::string>> t;
  auto with_ref = [](const std::string& x, const json& e, const char* key, bool percent) {
    if (!e.contains(key)) return x;
    return x + " (" + (percent ? pct(value(e[key])) : std::to_string(e[key].get<int>())) + ")";
  };
  for (const json& a : study["ablations"])
    for (const std::string& protocol : kProtocols) {
      if (!a.contains(protocol)) continue;
      const json& e = a[protocol];
      std::vector<double> folded;
      for (const json& v : e["folded"]) folded.push_back(value(v));
      t.push_back(
          {a["run"].get<std::string>(), a["reference"].is_null() ? "-" : a["reference"].get<std::string>(),
           protocol, with_ref(pct(value(e["mean"])), e, "reference_mean", true),
           with_ref(pct(value(e["gap"])), e, "reference_gap", true),
           with_ref(std::to_string(e["weakest_phase"].get<int>()), e, "reference_weakest_phase", false),
           phases_text(folded)});
    }
  if (!t.empty())
    report_add_section(
        doc, {"ablations", "Ablations: tagged runs beside their reference (in brackets)",
              html_table({"run", "reference", "protocol", "mean", "gap", "weakest phase", "phase 0..S-1 (%)"},
                         t)});
  std::vector<std::vector<std::string>> g;
  for (const json& r : study["gate_accuracy"])
    for (const json& x : r["gates"])
      g.push_back({r["run"].get<std::string>(),
                   fmt::format("L{} {} h{}", x["layer"].get<int>(), x["branch"].get<std::string>(),
                               x["kv_head"].get<int>()),
                   std::to_string(x["peak"].get<int>()), fmt::format("{:.2f}", value(x["r_same_offset"])),
                   fmt::format("{:.2f}", value(x["r_next_offset"]))});
  if (!g.empty())
    report_add_section(
        doc, {"gate-accuracy", "Static gates against the weak phases (W = S runs, prefix)",
              "<p>Pearson r between the folded accuracy at phase p and a gate's static profile at offset p "
              "(same) or p + 1 (the record's name, next offset), mod S.</p>" +
                  html_table({"run", "gate", "peak offset", "r (offset p)", "r (offset p+1)"}, g)});
}

void add_copy_loss_section(ReportDoc& doc, const std::vector<StudyRow>& rows) {
  std::vector<std::vector<std::string>> t;
  for (const StudyRow& r : rows) {
    if (!r.copy_loss) continue;
    std::string phases, first;
    for (double v : r.copy_loss->folded) phases += fmt::format("{:.3f} ", v);
    for (double v : r.copy_loss->first_copy) first += fmt::format("{:.3f} ", v);
    t.push_back({r.id, phases,
                 fmt::format("{:.3f} [{:.3f}, {:.3f}]", r.copy_loss->gap, r.copy_loss->gap_ci_percentile.lo,
                             r.copy_loss->gap_ci_percentile.hi),
                 std::to_string(r.copy_loss->worst_phase), first, r.deviation.empty() ? "-" : r.deviation});
  }
  if (!t.empty())
    report_add_section(
        doc, {"copy-loss", "Copy loss by phase (language models; nats per token of a repeated span)",
              "<p>Loss of each token of a span's second copy, by the phase of its first occurrence "
              "(src/eval/copy_loss.h), and the first copy's own loss by phase (no copy cue).</p>" +
                  html_table({"run", "copy loss, phase 0..S-1", "gap [bootstrap 95%]", "worst phase",
                              "first copy, phase 0..S-1", "deviation"},
                             t)});
}

void add_flip_section(ReportDoc& doc, const std::vector<StudyRow>& rows) {
  std::vector<std::vector<std::string>> t;
  for (const StudyRow& r : rows) {
    if (!r.flip) continue;
    const StudyFlip& f = *r.flip;
    std::string phases;
    for (double v : f.margin_folded) phases += fmt::format("{:+.3f} ", v);
    t.push_back({r.id, fmt::format("{} L {}..{}", f.template_name, f.L_min, f.L_max),
                 fmt::format("{}: {}", f.verdict, f.reason), phases,
                 fmt::format("{:.3f} (null q95 {:.3f}, p = {:.2g})", f.margin_share, f.margin_share_null_q95,
                             f.margin_p)});
  }
  if (!t.empty())
    report_add_section(
        doc,
        {"flip", "The padding flip on code (language models)",
         "<p>The paper's FP8 kernel completion, candidates '8' and '32', as a decorative line of '=' grows "
         "one token at a time (src/probe/flip.h); the winner judged by the audit's flip rule "
         "(src/audit/flip_check.h), and the margin log p(8) - log p(32), less its line in L, folded by L "
         "mod S: the share of its variance the phase explains against 2000 permutations.</p>" +
             html_table({"run", "sweep", "verdict (winner)", "margin by phase 0..S-1 (nats)",
                         "phase share of the margin"},
                        t)});
}

void add_explain_sections(ReportDoc& doc, const std::vector<StudyRow>& rows) {
  std::vector<std::vector<std::string>> ko, gates, cyc;
  for (const StudyRow& r : rows) {
    if (!r.explain) continue;
    for (const StudyKnockout& k : r.explain->knockouts) {
      std::string rel;
      for (double v : k.rel) rel += std::isfinite(v) ? fmt::format("{:.0f} ", v) : "n/a ";
      ko.push_back({r.id, k.label, rel});
    }
    for (const StudyGate& g : r.explain->gates)
      gates.push_back({r.id, fmt::format("L{} {} h{}", g.layer, g.branch, g.kv_head),
                       fmt::format("{:.2f}", g.static_conc), fmt::format("{:.2f}", g.window_conc),
                       std::to_string(g.peak)});
    for (const StudyCycling& c : r.explain->cycling)
      cyc.push_back({r.id, std::to_string(c.layer), std::to_string(c.delta), fmt::format("{:.2f}", c.r2),
                     fmt::format("{:.2f}", c.r2_no_boundary)});
  }
  report_add_section(doc, {"knockouts", "Knockouts: relative change per phase (%, prefix)",
                           html_table({"run", "knocked out", "phase 0..S-1"}, ko)});
  report_add_section(
      doc,
      {"gates", "Gate concentration (1 = one-hot .. W = uniform)",
       html_table({"run", "gate", "static exp(H(E[a]))", "per window E[exp(H(a))]", "peak phase"}, gates)});
  report_add_section(doc, {"cycling", "Gate cycling: R^2 of A_delta(r) vs A_0((r - delta) mod S)",
                           html_table({"run", "layer (-1 = all)", "delta", "R^2", "R^2 w/o boundary"}, cyc)});
}

}  // namespace

std::string study_runs_csv(const std::vector<StudyRow>& rows) {
  CsvTable t;
  t.header = {"run",          "preset",  "seed",     "family",
              "protocol",     "n",       "mean",     "mean_lo",
              "mean_hi",      "worst",   "best",     "gap",
              "gap_lo",       "gap_hi",  "gap_bc",   "gap_null_q95",
              "period",       "p_value", "val_loss", "kv_bytes_per_token",
              "weakest_phase"};
  for (const StudyRow& r : rows)
    for (const auto& [protocol, p] : r.protocols)
      t.rows.push_back({r.id,
                        r.preset,
                        std::to_string(r.seed),
                        r.family,
                        protocol,
                        std::to_string(p.n),
                        csv_num(p.mean, "{:.4f}"),
                        csv_num(p.mean_ci.lo, "{:.4f}"),
                        csv_num(p.mean_ci.hi, "{:.4f}"),
                        csv_num(p.worst, "{:.4f}"),
                        csv_num(p.best, "{:.4f}"),
                        csv_num(p.gap, "{:.4f}"),
                        csv_num(p.gap_ci.lo, "{:.4f}"),
                        csv_num(p.gap_ci.hi, "{:.4f}"),
                        csv_num(p.gap_bc, "{:.4f}"),
                        csv_num(p.gap_null_q95, "{:.4f}"),
                        std::to_string(p.period),
                        csv_num(p.p_value, "{:.3g}"),
                        csv_num(r.val_loss, "{:.4f}"),
                        csv_num(r.kv_bytes_per_token, "{:.1f}"),
                        std::to_string(p.weakest_phase)});
  return csv_text(t);
}

std::string study_phases_csv(const std::vector<StudyRow>& rows) {
  CsvTable t;
  t.header = {"run", "protocol", "S", "phase", "acc", "n"};
  for (const StudyRow& r : rows)
    for (const auto& [protocol, p] : r.protocols)
      for (size_t i = 0; i < p.folded.size(); ++i)
        t.rows.push_back({r.id, protocol, std::to_string(p.S), std::to_string(i),
                          csv_num(p.folded[i], "{:.4f}"),
                          i < p.folded_n.size() ? std::to_string(p.folded_n[i]) : ""});
  return csv_text(t);
}

void study_report(const json& study, const std::vector<StudyRow>& rows, const std::string& out) {
  ReportDoc doc;
  doc.title = "phasescope study: " + study["grid"].get<std::string>();
  doc.intro_html =
      "<p>" +
      html_escape(fmt::format(
          "{} runs with a row, {} missing. Command: {}. Accuracy in %, gap = best - worst "
          "residue (R = 24); intervals are 95% cluster-bootstrap, the gap's 95% simultaneous over residues "
          "(docs/results-schema.md), beside its bias-corrected value.",
          rows.size(), study["missing"].size(), study["command"].get<std::string>())) +
      "</p>";
  report_add_section(doc, findings_section(study));
  report_add_section(doc, runs_section(rows));
  report_add_section(doc, phases_section(rows, out));
  report_add_section(doc, reference_section(rows));
  add_ablation_sections(doc, study);
  add_copy_loss_section(doc, rows);
  add_flip_section(doc, rows);
  add_explain_sections(doc, rows);
  report_write(doc, (fs::path(out) / "report.html").string());
}

}  // namespace phasescope
