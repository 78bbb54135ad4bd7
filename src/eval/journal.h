// journal.h — the sample journal: one JSON object per line, one line per scored (or failed) sample,
// append-only, each line written with one write(2) call as soon as the sample is scored. It is the
// currency between scoring and statistics: every statistic is recomputed from it (stats.h).
// Resume rules: a sample is done when it has a line without error; a line with an error means "try
// again" (never "wrong"); duplicates keep the first scored line; trailing bytes after the last newline
// are a torn write (the process died mid-line) and are ignored on load and cut off before appending.
// Not here: which samples exist (layout.h) or how they are scored (backend.h).
#pragma once
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/hash.h"  // hash_tokens_hex: tokens_hash of a prompt

namespace phasescope {

struct JournalRecord {
  int64_t id = 0;                            // sample id (layout.h: base * R + residue), unique within a run
  uint64_t seed = 0;                         // the layout seed
  int base = 0;                              // base example = paired block
  std::string cluster;                       // key -> name mapping id (hex): the bootstrap cluster
  int R = 0;                                 // residues of the design
  int residue = 0;                           // target_pos % R, measured
  int64_t target_pos = 0;                    // position of the target key in the prompt (0-based, BOS at 0)
  int64_t query_pos = 0;                     // position of the query (last) token
  int64_t prompt_len = 0;                    // tokens in the prompt
  int shift = 0;                             // filler tokens placed before the target by the layout
  int expected = -1;                         // the answer token
  int answer = -1;                           // the backend's top-1 token (-1 when it failed)
  double logprob = std::nan("");             // log p(expected), NaN when unknown (null in JSON)
  std::vector<std::pair<int, double>> topk;  // (token, logprob), best first
  double ms = 0;                             // scoring time attributed to this sample
  std::string error;                         // non-empty: the sample failed and is retried on resume
  std::string protocol;                      // "prefix" | "in-sequence"
  std::string model;                         // preset / run name
  std::string layout;                        // layout_fingerprint(): refuses mixing runs in one journal
  std::string tokens_hash;                   // FNV-1a of the prompt tokens (hex): the same sample on resume
  // Optional (written only when set; journals without them read as before). Answers of several
  // tokens (probes over HTTP): each expected token, the backend's top-1 at its position given the
  // prompt and the expected tokens before it (teacher forcing: all equal <=> greedy decoding gives
  // the answer), and log p of each expected token. `expected` / `answer` / `logprob` are the first's.
  std::vector<int> expected_seq;
  std::vector<int> answer_seq;
  std::vector<double> logprob_seq;
  std::string expected_text;  // the expected answer as text, for people reading the journal

  bool scored() const { return error.empty(); }
  bool correct() const {
    return scored() && (expected_seq.size() > 1 ? answer_seq == expected_seq : answer == expected);
  }
};

nlohmann::json journal_record_to_json(const JournalRecord& r);
// `where` names the file and line in errors ("out/journal.jsonl:17").
JournalRecord journal_record_from_json(const nlohmann::json& j, const std::string& where);

// The run a journal belongs to: written once, as its first line ({"journal_identity": {...}}), when
// the journal is created, and compared field by field on every resume (eval/scoring.h), so that no
// sample scored by one model, backend, layout or scoring setting is ever counted for another.
// Fields (all strings): model (name), model_hash (content hash of the weights and config, or what an
// HTTP backend can name), backend (kind and what changes its answers), layout (design fingerprint),
// scoring (protocol and options).
using JournalIdentity = std::map<std::string, std::string>;

struct JournalLoad {
  JournalIdentity identity;            // the header's fields (empty when the journal has none)
  bool has_identity = false;           // false: missing file, empty file, or a journal of an older phasescope
  std::vector<JournalRecord> records;  // one per sample id, in first-seen order (see the resume rules)
  int64_t lines = 0;                   // complete lines read
  int64_t error_lines = 0;             // lines that recorded a failure
  int64_t duplicate_lines = 0;         // scored lines for an id that already had one (ignored)
  int64_t torn_bytes = 0;              // bytes after the last newline (ignored)
};

// Read a journal; a missing file is an empty journal. Throws Error (file:line, fix) when a complete line
// is not a valid record.
JournalLoad journal_load(const std::string& path);

// Appends to a journal; cuts off a torn tail first so that new lines never glue onto a fragment.
class JournalWriter {
 public:
  // A new (or empty) journal gets `identity` as its first line; an existing one is appended to as is
  // (check its identity first: scoring_run does).
  JournalWriter(const std::string& path, const JournalIdentity& identity);
  ~JournalWriter();
  JournalWriter(const JournalWriter&) = delete;
  JournalWriter& operator=(const JournalWriter&) = delete;

  void append(const JournalRecord& r);  // one line, one write(2); throws Error on failure
  void sync();                          // fdatasync: survive a machine crash, not only a killed process
  int64_t torn_bytes_cut() const { return torn_cut_; }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t torn_cut_ = 0;
};

}  // namespace phasescope
