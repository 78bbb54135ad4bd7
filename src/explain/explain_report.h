// explain_report.h — what explain writes and shows: explain.json, knockout.csv, gates.csv,
// cycling.csv; the PNGs (knockout heatmap, gate profiles, cycling) and report.html; the report section
// `reproduce` embeds; the terminal summary. Not here: running the instruments (explain.h).
#pragma once
#include <string>

#include "explain/explain.h"
#include "report/document.h"

namespace phasescope {

// explain.json, knockout.csv, gates.csv, cycling.csv into out_dir.
void explain_write_outputs(const ExplainResults& r, const std::string& out_dir);

// The PNGs and out_dir/report.html (needs gnuplot).
void explain_write_report(const ExplainResults& r, const std::string& out_dir);

// The report section, PNGs embedded; out_dir holds the PNGs written by explain_run.
ReportSection explain_report_section(const ExplainResults& r, const std::string& out_dir,
                                     const std::string& id = "explain");
std::string explain_summary(const ExplainResults& r);  // the text table printed at the end

}  // namespace phasescope
