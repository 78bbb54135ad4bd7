// corpus_sources.h — where the corpus's documents come from (internal to data/corpus.cpp): the built-in
// sources (Debian packages: their roots, file kinds, licences) and user folders, read into documents.
// A document is one file (gzip-compressed files are decompressed), or one book of the bible (read
// through the `bible` program of bible-kjv, the only reader of its compressed data file). Files are
// visited in sorted path order; symbolic links, empty files, files that are not UTF-8 and files that
// spell the boundary token are left out and counted.
// Not here: the split, the tokenizer or the shards (corpus.cpp).
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace phasescope {

struct CorpusDocument {
  std::string path;     // the file, or "/usr/lib/bible.data#Genesis" for a book
  std::string licence;  // the file's SPDX-License-Identifier when it states one, else its source's
  std::string text;     // UTF-8
};

struct CorpusSource {
  std::string name;                       // "python-stdlib", ... or the folder as given
  std::string packages;                   // Debian packages it comes from ("" for a user folder)
  std::string versions;                   // their installed versions (dpkg-query), "" when unknown
  std::string licence;                    // what the packages' copyright files say, in short
  std::string root;                       // the folder (or data file) read
  std::vector<CorpusDocument> documents;  // sorted by path
  int skipped = 0;                        // files left out (see above)
};

// Names of the built-in sources, in build order.
std::vector<std::string> corpus_source_names();

// The documents of a built-in source (by name) or of a file or folder (every regular file under it).
// A missing root is an Error naming it and the package that provides it.
CorpusSource corpus_source_read(const std::string& spec, const std::string& boundary_token,
                                std::ostream* log);

}  // namespace phasescope
