// document.h — a report as an ordered list of sections, rendered into one self-contained HTML page
// (a table of contents, then each section under its own heading and anchor). Modules add sections:
// the evaluation adds its summary, plots and tables (eval/eval_report.h); an "explain" section and a
// "theory" section append theirs to the same ReportDoc before it is written.
// Not a template engine: a section's body is HTML built with html.h (html_table, html_png, html_escape).
#pragma once
#include <string>
#include <vector>

namespace phasescope {

struct ReportSection {
  std::string id;     // anchor: letters, digits, '-' and '_'; unique within a document
  std::string title;  // heading, plain text (escaped when rendered)
  std::string html;   // body, already HTML
};

struct ReportDoc {
  std::string title;       // page title and top heading, plain text
  std::string intro_html;  // before the table of contents ("" = none)
  std::vector<ReportSection> sections;
};

// Append a section; throws Error when the id is empty, malformed, or already used.
void report_add_section(ReportDoc& doc, const ReportSection& section);

// The whole page (html_page with a table of contents when there are two or more sections).
std::string report_render(const ReportDoc& doc);

// Render and write atomically to path (its folder must exist).
void report_write(const ReportDoc& doc, const std::string& path);

}  // namespace phasescope
