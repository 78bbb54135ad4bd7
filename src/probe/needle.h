// needle.h — the paper's position-matched needle test (design doc §1.4) for any served model, built in
// the model's own token space. Every prompt has the same length and query position:
//   [BOS] header | filler x (1 + s) \n | N records "key: value\n" | filler x (1 + 2R-1-s + rest) \n |
//   question | target key: -> expected value
// A record is key_tokens + separator + value_tokens + delimiter tokens (4 by default: "apple: pear\n"),
// each piece tokenized in context ("\n"+key, ":"+value) and candidates kept only when they have the
// wanted length; every base example's whole prompt is then checked to decode and re-encode to the same
// tokens (stable in context), and drawn again with other words if not. The query is written in record
// form (the prompt ends with the target key and separator exactly as in its record), so base models
// answer by continuing it. Residues r = target_pos % R: base example b yields one prompt per residue,
// its records shifted by s from the balanced paired shifts of eval/layout.h (equal group means, nearly
// equal variances, checked against tol_mean / tol_sd). Scored by exact match of the value (teacher-forced
// when it has several tokens) and by the first value token's log-probability.
// Not here: HTTP (http/), journals and statistics (eval/scoring.h, eval/stats.h).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "eval/backend.h"
#include "eval/layout.h"
#include "eval/results.h"
#include "eval/scoring.h"
#include "http/token_source.h"

namespace phasescope {

struct NeedleSpec {
  int64_t context = 8192;  // tokens per prompt (BOS and query included): every prompt has exactly this many
  int R = 8;               // residues r = target_pos % R
  int samples_per_group = 256;   // prompts per residue = base examples (paired design)
  int key_tokens = 1;            // tokens of a key in context (after a newline)
  int value_tokens = 1;          // tokens of a value in context (after the separator)
  std::string separator = ":";   // between key and value
  std::string delimiter = "\n";  // after each record
  std::string filler;            // one filler token, repeated to shift the records ("": the first of
                                 // " .", " -", " the", " x" that is one token and keeps apart)
  std::string header =
      "Below is a list of records, one per line: a key, a colon and its value. Remember every value.\n";
  std::string question = "The list is over. Recall the value of this key by completing its record:\n";
  double middle = 0.1;  // the target record is drawn from the middle (1 +- 2 middle) / 2 of the records
  uint64_t seed = 1;
  double tol_mean = 0.5, tol_sd = 0.75;  // as in eval/layout.h (tokens)
  int64_t position_offset =
      0;               // tokens the server puts before the prompt (a chat template); positions count them
  bool verify = true;  // decode + re-encode every base example's prompt
  std::vector<std::string> keys, values;  // candidate words (empty: the built-in lists)
  // Natural-text filler, for a backend fed token ids (a model in this process): when non-empty, base
  // example b's filler is the first 2R + 1 + rest tokens of passages[b % size] (rest as in NeedleDesign),
  // its first 1 + s before the records and the others after them, in place of one repeated filler token.
  // Needs verify = false: a cut passage need not survive decode + re-encode, so a server that tokenizes
  // text could see other tokens.
  std::vector<std::vector<int>> passages;
  int max_records = 0;  // at most this many records (0: as many as fit); the filler after them takes the rest
};

// The measured token pieces (every piece in context).
struct NeedleVocab {
  int bos = -1;
  std::vector<int> header, filler, filler_end, separator, delimiter, question;  // filler: exactly 1 token
  std::vector<std::vector<int>> keys, values;  // candidates of the wanted length, distinct
  std::vector<std::string> key_text, value_text;
  std::string filler_text;  // the filler chosen
};

struct NeedleBase {
  int attempt = 0;              // re-draws after a failed stability check
  int target = 0;               // record index of the target
  std::vector<int> key, value;  // (N) candidate indices per record
};

struct NeedleDesign {
  NeedleSpec spec;
  NeedleVocab vocab;
  int n_records = 0, record_tokens = 0;
  int64_t prompt_len = 0, query_pos = 0;
  int rest = 0;                         // extra filler after the records so that prompt_len == context
  std::vector<NeedleBase> bases;        // (n_base)
  std::vector<std::vector<int>> shift;  // (n_base, R)
  std::vector<GroupMoments> groups;     // (R) of target_pos
  double mean = 0, var = 0, mean_range = 0, sd_range = 0;
  int redrawn = 0;          // base examples drawn again after the stability check
  std::string fingerprint;  // spec + tokenizer pieces: journals refuse other designs
  int64_t samples() const { return int64_t(bases.size()) * spec.R; }
  int64_t filler_tokens() const { return 2 * spec.R + 1 + rest; }  // per prompt, before and after the records
};

// The built-in candidate words (common English nouns).
const std::vector<std::string>& needle_default_keys();
const std::vector<std::string>& needle_default_values();

// Tokenize the pieces, draw and check every base example, place them. Throws Error (what and how to fix)
// when the context is too short, a passage is shorter than the filler it must give or comes with verify, too
// few candidates have the wanted length, prompts are not stable in context, or the residue groups' moments
// differ by more than the tolerances.
NeedleDesign needle_build(const NeedleSpec& spec, const TokenSource& ts, std::ostream* log);

// The needle in a phasescope server's own token names (serve/text_codec.h; the server lists its token
// space in /v1/models): keys k0..k{keys-1}, values n0..n{names-1}, filler f0, separator f1, delimiter
// f2, question f3, no header (a newline is no token there). Every other field of `base` is kept.
// Needs at least 4 fillers, 2 keys and 2 names (Error otherwise).
NeedleSpec needle_token_space_spec(NeedleSpec base, int fillers, int keys, int names);

// Sample id = base * R + r. The prompt, expected value tokens and journal record (model `model`).
ScoringSample needle_render(const NeedleDesign& d, int64_t id, const std::string& model);

std::string needle_format_design(const NeedleDesign& d);  // pieces, sizes and the per-residue moments

// residue,n,known,mean_logprob: the first value token's log-probability over scored samples where the
// server gave it (known), per residue.
std::string needle_logprob_csv(const std::vector<JournalRecord>& records, int R);

struct NeedleRunOptions {
  std::string model;  // journal / results label (the served model's name)
  int S = 4;          // fold for display (DeepSeek-V4's stride)
  int bootstrap = 2000;
  uint64_t bootstrap_seed = 1;  // as eval's
  bool report = true;           // plots and report.html (needs gnuplot)
  bool fresh = false;           // start the journal over (eval/scoring.h)
  std::ostream* log = nullptr;
  int max_failed_batches = 3;
};

// Score (or resume) into out_dir/journal.jsonl, then statistics and the same outputs as `eval`
// (results.json with task "needle", per_residue.csv, table.txt, layout.txt, report.html), plus
// logprob_per_residue.csv: the mean log-probability of the value's first token per residue.
EvalResults needle_run(Backend& backend, const NeedleDesign& d, const NeedleRunOptions& opt,
                       const std::string& out_dir);

}  // namespace phasescope
