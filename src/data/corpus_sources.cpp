// corpus_sources.cpp — see corpus_sources.h.
#include "data/corpus_sources.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/io.h"
#include "core/process.h"
#include "tokenizer/text.h"

namespace phasescope {

namespace fs = std::filesystem;

namespace {

// ---- the built-in sources

struct BuiltinSource {
  const char* name;
  const char* packages;  // space-separated; each is in scripts/setup.sh
  const char* licence;
  const char* root;                   // the packages' files under it are read (for the bible: its data file)
  std::vector<std::string> suffixes;  // a file is read when its name ends with one ("": no dot in the name)
};

// The files come from the packages' own file lists (dpkg-query -L), so a machine with more packages
// installed under the same folders builds the same corpus.
const std::vector<BuiltinSource>& builtin_sources() {
  static const std::vector<BuiltinSource> sources = {
      {"python-stdlib",
       "libpython3.11-minimal libpython3.11-stdlib",
       "PSF-2.0 (a few modules under their own permissive terms: "
       "/usr/share/doc/libpython3.11-stdlib/copyright)",
       "/usr/lib/python3.11",
       {".py"}},
      {"python-tests",
       "libpython3.11-testsuite",
       "PSF-2.0 (/usr/share/doc/libpython3.11-testsuite/copyright)",
       "/usr/lib/python3.11",
       {".py"}},
      {"python-docs",
       "python3.11-doc",
       "PSF-2.0 (/usr/share/doc/python3.11-doc/copyright)",
       "/usr/share/doc/python3.11/html/_sources",
       {".rst.txt"}},
      {"linux-docs",
       "linux-doc-6.1",
       "GPL-2.0 unless the file's SPDX line says otherwise (/usr/share/doc/linux-doc-6.1/copyright)",
       "/usr/share/doc/linux-doc-6.1/Documentation",
       {".rst.gz", ".txt.gz"}},
      {"bible-kjv",
       "bible-kjv bible-kjv-text",
       "public domain (the 1611 King James text; /usr/share/doc/bible-kjv-text/copyright)",
       "/usr/lib/bible.data",
       {}},
      {"fortunes",
       "fortunes fortunes-min",
       "BSD-3-Clause (fortune-mod's terms: /usr/share/doc/fortunes/copyright)",
       "/usr/share/games/fortunes",
       {""}},
  };
  return sources;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> split_on(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t b = 0;
  while (b < s.size()) {
    size_t e = s.find(sep, b);
    if (e == std::string::npos) e = s.size();
    if (e > b) parts.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return parts;
}
std::vector<std::string> split_words(const std::string& s) { return split_on(s, ' '); }
std::vector<std::string> split_lines(const std::string& s) { return split_on(s, '\n'); }

// ---- reading one file

// the whole file, gunzipped when its name ends in .gz
std::string read_file(const std::string& path) {
  if (!ends_with(path, ".gz")) return io_read_text(path);
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) fail(path, std::string("cannot open: ") + std::strerror(errno), "check its permissions");
  std::string text;
  char piece[1 << 16];
  int n = 0;
  while ((n = gzread(f, piece, sizeof piece)) > 0) text.append(piece, size_t(n));
  int err = Z_OK;
  const std::string why = n < 0 ? gzerror(f, &err) : "";
  gzclose(f);
  if (n < 0) fail(path, "not a readable gzip file (" + why + ")", "reinstall the package that ships it");
  return text;
}

// "SPDX-License-Identifier: GPL-2.0" in the first lines, else ""
std::string spdx_of(const std::string& text) {
  const std::string key = "SPDX-License-Identifier:";
  const size_t at = text.find(key);
  if (at == std::string::npos || at > 400) return "";
  size_t b = at + key.size(), e = text.find('\n', b);
  if (e == std::string::npos) e = text.size();
  while (b < e && text[b] == ' ') ++b;
  while (e > b && (text[e - 1] == ' ' || text[e - 1] == '\r')) --e;
  return text.substr(b, e - b);
}

// whether a document is kept; counts the ones left out
bool keep(const std::string& text, const std::string& boundary_token, int& skipped) {
  const bool ok = !text.empty() && utf8_invalid_at(text) == std::string::npos &&
                  text.find(boundary_token) == std::string::npos;
  if (!ok) ++skipped;
  return ok;
}

// every regular file under root (or root itself), sorted; links are not followed
std::vector<std::string> list_files(const std::string& root) {
  if (fs::is_regular_file(fs::symlink_status(root))) return {root};
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (fs::is_regular_file(e.symlink_status())) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// the packages' regular files under b.root with one of b.suffixes, sorted
std::vector<std::string> package_files(const BuiltinSource& b) {
  std::vector<std::string> files;
  for (const std::string& pkg : split_words(b.packages)) {
    const ProgramRun run = run_program({"dpkg-query", "-L", pkg}, false);
    const std::string& list = run.out;
    if (run.status != 0)
      fail(b.name, "package " + pkg + " is not installed (dpkg-query -L " + pkg + ")",
           "install it (scripts/setup.sh does), or leave " + std::string(b.name) + " out of --sources");
    for (const std::string& path : split_lines(list)) {
      if (path.rfind(std::string(b.root) + "/", 0) != 0 || !fs::is_regular_file(fs::symlink_status(path)))
        continue;
      const std::string name = fs::path(path).filename().string();
      bool wanted = false;
      for (const std::string& s : b.suffixes)
        wanted = wanted || (s.empty() ? name.find('.') == std::string::npos : ends_with(name, s));
      if (wanted) files.push_back(path);
    }
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

// installed versions of the packages, "pkg=version ..." ("" without dpkg)
std::string package_versions(const std::string& packages) {
  std::string out;
  for (const std::string& pkg : split_words(packages)) {
    const ProgramRun v = run_program({"dpkg-query", "-W", "-f=${Version}", pkg}, false);
    if (v.status == 0 && !v.out.empty()) out += (out.empty() ? "" : " ") + pkg + "=" + v.out;
  }
  return out;
}

// ---- the bible: one document per book, through the `bible` program

void read_bible(CorpusSource& s, const std::string& boundary_token) {
  // the whole text, one verse per line (-l1000: no verse is longer), chapters headed "Book N"
  const ProgramRun run = run_program({"bible", "-l1000", "Gen1:1-Rev22:21"}, false);
  const int status = run.status;
  const std::string& text = run.out;
  if (status != 0 || text.size() < 1000000)
    fail(s.root,
         "the `bible` program did not print the King James text (exit status " + std::to_string(status) + ")",
         "install bible-kjv and bible-kjv-text (scripts/setup.sh does), or leave bible-kjv out of --sources");

  // split at the headings: a line "<book> <chapter>" after an empty line; a book starts at chapter 1
  std::vector<std::pair<std::string, std::string>> books;  // (book, its text)
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    const size_t sp = line.rfind(' ');
    const bool heading = !line.empty() && line[0] != ' ' && sp != std::string::npos && sp + 1 < line.size() &&
                         line.find_first_not_of("0123456789", sp + 1) == std::string::npos;
    if (heading && line.substr(sp + 1) == "1") books.push_back({line.substr(0, sp), ""});
    if (!books.empty() && !(books.back().second.empty() && line.empty())) books.back().second += line + "\n";
    pos = nl + 1;
  }
  if (books.size() != 66)
    fail(s.root, "the `bible` program's text has " + std::to_string(books.size()) + " books, not 66",
         "reinstall bible-kjv-text, or leave bible-kjv out of --sources");
  for (auto& [book, body] : books) {
    while (body.size() >= 2 && body[body.size() - 1] == '\n' && body[body.size() - 2] == '\n')
      body.pop_back();
    if (keep(body, boundary_token, s.skipped)) s.documents.push_back({s.root + "#" + book, s.licence, body});
  }
  std::sort(s.documents.begin(), s.documents.end(),
            [](const CorpusDocument& a, const CorpusDocument& b) { return a.path < b.path; });
}

}  // namespace

std::vector<std::string> corpus_source_names() {
  std::vector<std::string> names;
  for (const BuiltinSource& b : builtin_sources()) names.push_back(b.name);
  return names;
}

CorpusSource corpus_source_read(const std::string& spec, const std::string& boundary_token,
                                std::ostream* log) {
  // which source: a built-in name, else a path
  const BuiltinSource* builtin = nullptr;
  for (const BuiltinSource& b : builtin_sources())
    if (spec == b.name) builtin = &b;
  CorpusSource s;
  s.name = spec;
  s.root = builtin != nullptr ? builtin->root : spec;
  s.packages = builtin != nullptr ? builtin->packages : "";
  s.licence = builtin != nullptr ? builtin->licence : "not stated (a folder given to --sources)";
  if (!fs::exists(fs::symlink_status(s.root))) {
    std::string names;
    for (const std::string& n : corpus_source_names()) names += (names.empty() ? "" : ", ") + n;
    fail(s.root, builtin != nullptr ? "missing (source " + spec + ")" : "no such file or folder",
         builtin != nullptr
             ? "install " + s.packages + " (scripts/setup.sh does), or leave " + spec + " out of --sources"
             : "pass an existing file or folder, or a built-in source: " + names);
  }
  s.versions = builtin != nullptr ? package_versions(s.packages) : "";

  // the documents
  if (builtin != nullptr && spec == "bible-kjv") {
    read_bible(s, boundary_token);
  } else {
    for (const std::string& path : builtin != nullptr ? package_files(*builtin) : list_files(s.root)) {
      std::string text = read_file(path);
      if (!keep(text, boundary_token, s.skipped)) continue;
      const std::string spdx = spdx_of(text);
      s.documents.push_back({path, spdx.empty() ? s.licence : spdx, std::move(text)});
    }
  }
  if (log != nullptr) {
    size_t bytes = 0;
    for (const CorpusDocument& d : s.documents) bytes += d.text.size();
    *log << "corpus: " << s.name << ": " << s.documents.size() << " documents, " << bytes << " bytes"
         << (s.skipped > 0 ? ", " + std::to_string(s.skipped) + " files left out" : "") << "\n";
  }
  return s;
}

}  // namespace phasescope
