// eval_report.h — the evaluation's part of the HTML report: a summary table of every run, per
// protocol a per-residue bar plot (one series per model, Wilson error bars) and a folded plot, and per
// run the per-residue, folded, period and layout tables. Built from EvalResults alone, so the report of
// one `eval` and the combined report of `reproduce` (several models x protocols) are the same code.
// Other modules append their own sections to the ReportDoc (report/document.h) before it is written.
// Not here: statistics (stats.h) or plotting machinery (report/phase_plot.h, report/gnuplot.h).
#pragma once
#include <string>
#include <vector>

#include "eval/results.h"
#include "report/document.h"

namespace phasescope {

// Render the PNGs into fig_dir (created if needed; file names start with `id_prefix`) and append the
// sections, with ids starting with `id_prefix`, to doc.
void eval_report_add_sections(ReportDoc& doc, const std::vector<EvalResults>& runs,
                              const std::string& fig_dir, const std::string& id_prefix = "eval");

// A whole document: title, a one-paragraph intro, then the sections above.
ReportDoc eval_report_doc(const std::vector<EvalResults>& runs, const std::string& fig_dir,
                          const std::string& title);

}  // namespace phasescope
