// study_lm.cpp — see study_lm.h.
#include "jobs/study_lm.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include "audit/flip_check.h"
#include "core/build_info.h"
#include "core/check.h"
#include "data/corpus.h"
#include "eval/layout.h"
#include "eval/model_backend.h"
#include "jobs/study_grid.h"
#include "model/load.h"
#include "probe/local_tokenizer_source.h"
#include "probe/needle.h"

namespace phasescope {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kFlipSeed = 20261207;  // the flip's permutation tests

// A language model's needle (probe/needle.h) in natural-text filler: context / 8 four-token records
// " key: name\n" of the corpus's lookup words (64 at 512 tokens, as many as the lookup has), cut into a
// validation passage after its first 1 + s tokens (s < 2R), the passage going on after them to fill the
// context (measured at 512: 249 passage tokens, at least 200 of them after the records), then "Recall:" and
// the target key; one prompt per residue of the target key's position in every base example; the model reads
// the token ids, so nothing re-tokenizes the cut text.
StudyProtocol study_needle(const LoadedModel& trained, const std::string& label, const Corpus& corpus, int R,
                           int64_t samples, bool fresh, const std::string& dir) {
  NeedleSpec spec;
  spec.context = trained.preset.task.seq_len;
  spec.R = R;
  spec.samples_per_group = layout_base_count(samples, R);  // as the lookup's protocols count them
  // half the prompt in four-token records (64 at 512, as many as the lookup has); a short (toy) context is
  // all records, since below ~32 records the residue groups' spreads cannot be balanced (measured: 16
  // records at R = 24 leave SDs 1.3 tokens apart)
  spec.max_records = spec.context >= 256 ? int(spec.context / 8) : 0;
  spec.verify = false;
  spec.header = "";  // the passage opens the prompt; a short cue before the query (a base LM continues it)
  spec.question = "Recall:";
  for (const LookupWord& w : corpus.lookup_keys) spec.keys.push_back(w.text);  // " cat": single tokens
  for (const LookupWord& w : corpus.lookup_names) spec.values.push_back(w.text);
  spec.passages =
      corpus_passages(corpus.val, corpus.boundary_id, spec.samples_per_group, size_t(spec.context), 20261207);
  const std::unique_ptr<TokenSource> tokens = local_tokenizer_open(corpus.tokenizer_path);
  const NeedleDesign design = needle_build(spec, *tokens, nullptr);
  NeedleRunOptions no;
  no.model = label;
  no.S = std::max(1, display_stride(trained.preset));
  no.report = false;
  no.fresh = fresh;
  ModelBackend backend(trained, label);
  return study_protocol_of(needle_run(
      backend, design, no, (fs::path(dir) / "eval" / fmt::format("needle-n{}", samples)).string()));
}

// The flip (study_flip_design), judged by the audit's rule and folded by the row's display stride.
StudyFlip study_flip(const LoadedModel& trained, const std::string& label, const Corpus& corpus, bool fresh,
                     const std::string& dir) {
  const std::unique_ptr<TokenSource> tokens = local_tokenizer_open(corpus.tokenizer_path);
  const int S = std::max(1, display_stride(trained.preset));
  const StudyFlipDesign fd = study_flip_design(trained.preset.task.seq_len, S, *tokens);
  FlipRunOptions fo;
  fo.model = label;
  fo.fresh = fresh;
  fo.require_comparison = false;  // the rule below judges a sweep without winners (inconclusive)
  ModelBackend backend(trained, label);
  const FlipResult r =
      flip_run(backend, fd.design, fo,
               (fs::path(dir) / "eval" /
                fmt::format("flip-{}-L{}-{}", fd.name, fd.design.spec.L_min, fd.design.spec.L_max))
                   .string());
  const FlipCheck c = flip_check(r, kFlipSeed);
  const FlipPhase ph = flip_margin_by_phase(r, S, kFlipSeed);
  StudyFlip f;
  f.template_name = fd.name;
  f.commit = build_commit();
  f.candidates = r.candidates;
  f.L_min = fd.design.spec.L_min;
  f.L_max = fd.design.spec.L_max;
  for (const FlipPointResult& p : r.points) f.L.push_back(p.L);
  f.margin = ph.margin;
  f.comparisons = r.comparisons;
  f.flips = r.flips;
  f.period = r.best.P;
  f.follows = r.best.follows;
  f.baseline_follows = r.baseline.follows;
  f.verdict = c.verdict;
  f.reason = c.reason;
  f.p_value = c.p_value;
  f.S = S;
  f.margin_folded = ph.folded;
  f.margin_folded_n = ph.folded_n;
  f.margin_range = ph.range;
  f.margin_share = ph.share;
  f.margin_share_null_q95 = ph.share_null_q95;
  f.margin_p = ph.p_value;
  return f;
}

// The longest input a point needs: its prompt and its longest candidate.
size_t longest_input(const FlipDesign& d) {
  size_t n = 0;
  for (const FlipPoint& p : d.points)
    for (const std::vector<int>& c : p.candidates) n = std::max(n, p.prompt.size() + c.size());
  return n;
}

}  // namespace

StudyFlipDesign study_flip_design(int64_t context, int S, const TokenSource& tokens) {
  constexpr int kMinLengths = 16;
  FlipSpec full = audit_flip_spec(ServedTokenSpace{}, S);
  FlipSpec short_form = full;
  short_form.template_text = flip_fp8_short_example().template_text;
  std::vector<std::string> why;
  for (auto& [name, spec] : {std::pair<std::string, FlipSpec>{"fp8", full}, {"fp8-short", short_form}}) {
    FlipSpec s = spec;
    // the text before the filler may already pass L_min (a small vocabulary): the window starts where L can
    const int lengths = s.L_max - s.L_min + 1;
    const std::string before = s.template_text.substr(0, s.template_text.find("{filler}"));
    s.L_min = std::max(s.L_min, int(tokens.encode(before).size()) + (tokens.bos_id() >= 0 ? 1 : 0));
    s.L_max = s.L_min + lengths - 1;
    bool decided = false;
    for (int attempt = 0; attempt < 8 && !decided; ++attempt) {
      if (s.L_max - s.L_min + 1 < kMinLengths) break;
      s.P_max = std::max(8, std::min(2 * S, (s.L_max - s.L_min + 1) / 2));  // as audit_flip_spec sizes it
      FlipDesign d;
      try {
        d = flip_build(s, tokens, nullptr);
      } catch (const Error& e) {
        why.push_back(fmt::format("{}: {}", name, e.what()));
        decided = true;
        continue;
      }
      const int64_t excess = int64_t(longest_input(d)) - context;
      if (excess <= 0 && d.points.size() >= size_t(kMinLengths)) return {name, std::move(d)};
      if (excess <= 0) {
        why.push_back(fmt::format("{}: only {} lengths reachable in L {}..{}", name, d.points.size(), s.L_min,
                                  s.L_max));
        decided = true;
      } else if (s.L_max - int(excess) - s.L_min + 1 < kMinLengths) {
        why.push_back(
            fmt::format("{}: its prompt at L = {} takes {} tokens", name, s.L_max, longest_input(d)));
        decided = true;
      }
      s.L_max -= int(excess);  // the longest lengths do not fit the context
    }
    if (!decided)
      why.push_back(fmt::format("{}: no window of {} lengths fits after 8 tries", name, kMinLengths));
  }
  fail("the flip of a language model",
       fmt::format("neither FP8 example gives {} lengths within a context of {} tokens ({})", kMinLengths,
                   context, fmt::join(why, "; ")),
       "train the model with a longer task.seq_len (the short example needs about 90 tokens with a "
       "near-byte vocabulary)");
}

std::vector<std::string> study_lm_probes_missing(const StudyRow& row) {
  std::vector<std::string> missing;
  if (!row.copy_loss) return missing;  // a task-trained row
  if (!row.protocol(kStudyNeedle)) missing.push_back(kStudyNeedle);
  if (!row.flip) missing.push_back("flip");
  return missing;
}

std::vector<std::string> study_lm_probes(StudyRow& row, const LoadedModel& trained, const Corpus& corpus,
                                         int R, int64_t samples, bool fresh, const std::string& dir) {
  std::vector<std::string> failed;
  if (!row.protocol(kStudyNeedle)) try {
      row.protocols[kStudyNeedle] = study_needle(trained, row.id, corpus, R, samples, fresh, dir);
    } catch (const Error& e) {
      failed.push_back(fmt::format("needle: {}", e.what()));
    }
  if (!row.flip) try {
      row.flip = study_flip(trained, row.id, corpus, fresh, dir);
    } catch (const Error& e) {
      failed.push_back(fmt::format("flip: {}", e.what()));
    }
  return failed;
}

std::vector<std::string> study_lm_probes_add(StudyRow& row, bool fresh, const std::string& dir) {
  const LoadedModel trained = model_load((fs::path(dir) / "model").string());
  const Corpus corpus = corpus_open(trained.preset.task.corpus, CorpusVerify::kSizes);
  return study_lm_probes(row, trained, corpus, study_residues(trained.preset), study_row_min_samples(row),
                         fresh, dir);
}

}  // namespace phasescope
