// html.cpp — see html.h.
#include "report/html.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/io.h"

namespace phasescope {

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string base64_encode(const std::string& bytes) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {  // whole groups of 3 bytes -> 4 characters
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += alphabet[v & 63];
  }
  const size_t rest = bytes.size() - i;  // 0, 1 or 2 bytes left: pad with '='
  if (rest > 0) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (rest == 2) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += rest == 2 ? alphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string html_png(const std::string& png_path, const std::string& alt) {
  const std::string png = io_read_text(png_path, "check that the plot was rendered (gnuplot-nox installed)");
  return "<img alt=\"" + html_escape(alt) + "\" src=\"data:image/png;base64," + base64_encode(png) + "\">";
}

std::string html_table(const std::vector<std::string>& header,
                       const std::vector<std::vector<std::string>>& rows, bool escape_cells) {
  std::string out = "<table>\n<tr>";
  for (const auto& h : header) out += "<th>" + html_escape(h) + "</th>";
  out += "</tr>\n";
  for (const auto& row : rows) {
    out += "<tr>";
    for (const auto& cell : row) out += "<td>" + (escape_cells ? html_escape(cell) : cell) + "</td>";
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string html_page(const std::string& title, const std::string& body_html) {
  return "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
         html_escape(title) +
         "</title>\n<style>\n"
         "body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; "
         "}\n"
         "table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }\n"
         "th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }\n"
         "th { background: #f0f0f0; }\n"
         "img { max-width: 100%; display: block; margin: 1em 0; }\n"
         "code, pre { background: #f6f6f6; padding: 0.1em 0.3em; }\n"
         "</style>\n</head>\n<body>\n<h1>" +
         html_escape(title) + "</h1>\n" + body_html + "</body>\n</html>\n";
}

}  // namespace phasescope
