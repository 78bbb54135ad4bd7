// html.h — the pieces of a self-contained HTML report: escaping, tables, PNGs embedded as base64
// data URIs (so report.html opens anywhere without its folder), a page wrapper with a little CSS,
// and the checked, atomic text write that report writers share.
// Not a template engine and not a plotting tool (gnuplot.h draws the PNGs). Torch-free.
#pragma once
#include <string>
#include <vector>

namespace phasescope {

std::string html_escape(const std::string& text);  // & < > " '

// RFC 4648 base64 of arbitrary bytes.
std::string base64_encode(const std::string& bytes);

// <img> whose src is the PNG at png_path as a data URI; throws Error naming the file if unreadable.
std::string html_png(const std::string& png_path, const std::string& alt);

// <table> with a header row; cells are escaped, unless escape_cells is false (cells already HTML).
std::string html_table(const std::vector<std::string>& header,
                       const std::vector<std::vector<std::string>>& rows, bool escape_cells = true);

// A whole page: <!doctype html>, <title>, a small inline stylesheet, then `body_html` as is.
std::string html_page(const std::string& title, const std::string& body_html);

}  // namespace phasescope
