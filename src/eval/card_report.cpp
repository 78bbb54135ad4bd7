// card_report.cpp — see card_report.h.
#include "eval/card_report.h"

#include <fmt/format.h>

#include <cmath>

#include "report/html.h"

namespace phasescope {

namespace {

std::string pct_or_dash(double x) { return std::isfinite(x) ? fmt::format("{:.1f}%", 100 * x) : "-"; }

// A horizontal bar of width acc (a fraction), its interval drawn as a thin line.
std::string bar(const CardPhase& p) {
  if (!std::isfinite(p.acc)) return "";
  return fmt::format(
      "<div style=\"position:relative;width:240px;height:12px;background:#eee\">"
      "<div style=\"position:absolute;left:0;top:0;height:12px;width:{:.1f}px;background:#4a7ab0\"></div>"
      "<div "
      "style=\"position:absolute;left:{:.1f}px;top:5px;height:2px;width:{:.1f}px;background:#222\"></div>"
      "</div>",
      240 * p.acc, 240 * p.ci_low, 240 * std::max(0.0, p.ci_high - p.ci_low));
}

std::string phase_table(const std::vector<CardPhase>& rows, const char* index, const PhaseCard& card) {
  std::vector<std::vector<std::string>> cells;
  for (const CardPhase& p : rows) {
    std::string mark;
    if (std::string(index) == "phase" && p.phase == card.weakest_phase) mark = " (weakest)";
    if (std::string(index) == "phase" && p.phase == card.strongest_phase) mark = " (strongest)";
    cells.push_back(
        {std::to_string(p.phase) + mark, std::to_string(p.n), std::to_string(p.correct), pct_or_dash(p.acc),
         html_escape(fmt::format("[{}, {}]", pct_or_dash(p.ci_low), pct_or_dash(p.ci_high))), bar(p)});
  }
  return html_table({index, "n", "correct", "accuracy", "95% interval", ""}, cells, false);
}

std::string verdict_style(const std::string& v) {
  const char* color = v == "pass" ? "#2a7a2a" : v == "fail" ? "#b02a2a" : "#8a6d00";
  return fmt::format("<b style=\"color:{}\">{}</b>", color, html_escape(v));
}

}  // namespace

ReportDoc card_report(const PhaseCard& card) {
  ReportDoc doc;
  doc.title = "Phase card: " + card.model;
  doc.intro_html = fmt::format(
      "<p>{} of <b>{}</b> ({} task{}, {} prompts, seed {}): mean {}, worst residue {}, best {}, gap {} "
      "points; "
      "period detected: {}.</p>",
      html_escape(card.source), html_escape(card.model), html_escape(card.task),
      card.protocol.empty() ? "" : ", " + html_escape(card.protocol) + " protocol", card.n_samples, card.seed,
      pct_or_dash(card.mean), pct_or_dash(card.worst), pct_or_dash(card.best),
      std::isfinite(card.gap) ? fmt::format("{:.1f}", 100 * card.gap) : "-",
      card.detected_period > 0 ? std::to_string(card.detected_period) : "none");

  if (!card.checks.empty()) {
    std::vector<std::vector<std::string>> rows;
    std::string rules;
    for (const auto& c : card.checks) {
      rows.push_back({html_escape(c.value("name", "")), verdict_style(c.value("verdict", "")),
                      html_escape(c.value("reason", ""))});
      rules += fmt::format("<h3>{}</h3><p>{}</p><pre>{}</pre>", html_escape(c.value("name", "")),
                           html_escape(c.value("rule", "")),
                           html_escape(c.contains("figures") ? c["figures"].dump(1) : std::string("{}")));
    }
    report_add_section(doc, {"checks", "Checks",
                             html_table({"check", "verdict", "reason"}, rows, false) +
                                 "<h3>Rules and figures</h3>" + rules});
  }
  report_add_section(doc, {"phases",
                           fmt::format("Accuracy by phase (period {}; the weakest is {}, the strongest {})",
                                       card.grid.period, card.weakest_phase, card.strongest_phase),
                           phase_table(card.folded, "phase", card)});
  report_add_section(doc, {"residues", fmt::format("Accuracy by residue (R = {})", card.R),
                           phase_table(card.per_residue, "residue", card)});
  report_add_section(
      doc, {"grid", "Where the grid starts",
            fmt::format(
                "<p>Absolute position p has phase (p - {}) mod {}. A prompt's token i sits at absolute "
                "position {} + i.</p><p>{}</p>",
                card.grid.origin, card.grid.period, card.grid.prompt_offset, html_escape(card.grid.note))});
  nlohmann::json prov = card.provenance;
  if (!card.tokenizer_sha256.empty()) prov["tokenizer_sha256"] = card.tokenizer_sha256;
  prov["commit"] = card.commit;
  report_add_section(doc, {"provenance", "Provenance", "<pre>" + html_escape(prov.dump(1)) + "</pre>"});
  return doc;
}

void card_write_html(const PhaseCard& card, const std::string& path) {
  report_write(card_report(card), path);
}

}  // namespace phasescope
