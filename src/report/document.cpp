// document.cpp — see document.h.
#include "report/document.h"

#include "core/check.h"
#include "core/io.h"
#include "report/html.h"

namespace phasescope {

void report_add_section(ReportDoc& doc, const ReportSection& section) {
  bool ok = !section.id.empty();
  for (char c : section.id)
    ok = ok &&
         ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_');
  if (!ok)
    fail("report section '" + section.title + "'", "id '" + section.id + "' is not a valid anchor",
         "use letters, digits, '-' and '_' only");
  for (const ReportSection& s : doc.sections)
    if (s.id == section.id)
      fail("report section '" + section.title + "'", "id '" + section.id + "' is already used",
           "give each section a unique id (prefix it with the module name)");
  doc.sections.push_back(section);
}

std::string report_render(const ReportDoc& doc) {
  std::string body = doc.intro_html;
  if (doc.sections.size() >= 2) {
    body += "<nav><h2>Contents</h2>\n<ul>\n";
    for (const ReportSection& s : doc.sections)
      body += "<li><a href=\"#" + s.id + "\">" + html_escape(s.title) + "</a></li>\n";
    body += "</ul></nav>\n";
  }
  for (const ReportSection& s : doc.sections)
    body +=
        "<section id=\"" + s.id + "\">\n<h2>" + html_escape(s.title) + "</h2>\n" + s.html + "</section>\n";
  return html_page(doc.title, body);
}

void report_write(const ReportDoc& doc, const std::string& path) {
  io_write_atomic(path, report_render(doc));
}

}  // namespace phasescope
