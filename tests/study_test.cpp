// study_test.cpp — `phasescope study`: the quick grid end to end at toy size (every run trained,
// evaluated under both protocols and explained; study.json with one row per run and protocol and every
// finding), sharding (two shards give the rows one invocation gives, and each aggregates the union),
// resume (a run with a row is not redone), the paper grid's inventory (every preset exists, the reference
// on four seeds, every compressed family on two), the gap interval against a known true gap, the row's
// JSON (old rows, the flip), CSV quoting, and the KV-memory accounting every row reports. The rules
// themselves on synthetic rows: study_findings_test.cpp.
#include "jobs/study.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "attention/kv_memory.h"
#include "core/csv.h"
#include "core/io.h"
#include "eval/model_backend.h"
#include "eval_testing.h"
#include "jobs/study_report.h"
#include "model/config.h"
#include "study_testing.h"
#include "testing.h"

namespace phasescope {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace testing_study;

TEST(StudyGrid, PaperGridCoversThePapersRunsWithEnoughSeeds) {
  const StudyGrid g = study_grid("paper", {42, 43, 44, 45});
  std::map<std::string, std::set<uint64_t>> seeds;
  for (const StudyRun& r : g.runs) {
    EXPECT_NO_THROW(preset_load(r.preset)) << r.preset;
    if (r.tag.empty()) seeds[r.preset].insert(r.seed);
  }
  EXPECT_EQ(seeds["w8s8-1kv"], (std::set<uint64_t>{42, 43, 44, 45}));
  for (const auto& [preset, s] : seeds)
    if (preset.rfind("full-", 0) != 0) EXPECT_GE(s.size(), 2u) << preset;
  // the paper's 23 compressed runs (counting its four reference seeds) map to presets, plus our three
  // DeepSeek kinds, three full-attention baselines and one full-attention run off the ceiling
  std::set<std::string> paper_names;
  for (const StudyRun& r : g.runs)
    if (!r.paper.empty()) paper_names.insert(r.paper);
  EXPECT_EQ(paper_names.size(), 24u);  // 3 baselines + 21 compressed designs (the reference once)
  EXPECT_THROW(study_grid("no-such-grid", {42}), Error);
}

// the mitigations grid: every candidate at the reference's KV memory (within 0.5% at 128K), three seeds
TEST(StudyGrid, MitigationCandidatesKeepTheReferenceMemory) {
  const StudyGrid g = study_grid("mitigations", {42, 43, 44, 45});
  const auto bytes = [](const std::string& preset) {
    return model_kv_bytes_per_token(preset_load(preset).model.layers, 131072, 2);
  };
  const double ref = bytes("w8s8-1kv");
  std::map<std::string, std::set<uint64_t>> seeds;
  for (const StudyRun& r : g.runs) {
    seeds[r.preset].insert(r.seed);
    if (r.family.rfind("candidate", 0) == 0) EXPECT_NEAR(bytes(r.preset) / ref, 1.0, 0.005) << r.preset;
    // a carried-over fix keeps the memory of the preset it extends
    if (r.family.rfind("carry-over", 0) == 0 && r.family != "carry-over: reference")
      EXPECT_NEAR(bytes(r.preset) / bytes(r.preset.substr(0, r.preset.rfind('-'))), 1.0, 0.005) << r.preset;
  }
  EXPECT_EQ(seeds.size(), 16u);
  for (const auto& [preset, s] : seeds) EXPECT_EQ(s, (std::set<uint64_t>{42, 43, 44})) << preset;
  // the candidates differ from the reference where they say they do
  EXPECT_EQ(preset_load("w16s8-1kv").model.layers[0].W, 16);
  EXPECT_EQ(preset_load("w8s8-shift").model.token_shift, 1);
  const Preset mixed = preset_load("mixed-s6-s12");
  EXPECT_EQ(mixed.model.layers[0].S, 6);
  EXPECT_EQ(mixed.model.layers[1].S, 12);
  EXPECT_GT(preset_load("w8s8-gate-entropy").train.gate_entropy_bonus, 0);
  EXPECT_GT(preset_load("w8s8-coverage").train.gate_coverage_bonus, 0);
  EXPECT_EQ(preset_load("w8s8-stagger").model.layers[0].grid_offset, 0);
  EXPECT_EQ(preset_load("w8s8-stagger").model.layers[1].grid_offset, 4);
  EXPECT_EQ(preset_load("w8s8-gate-entropy").model.layers[0].W, 8);
  EXPECT_GT(preset_load("dsv4-csa-coverage").train.gate_coverage_bonus, 0);
  EXPECT_EQ(preset_load("deepseek-style-stagger").model.layers[1].grid_offset, 2);
  EXPECT_EQ(preset_load("deepseek-style-stagger").model.layers[1].S, 4);
}

// Residues fold onto phases only when R is a multiple of the stride: HCA's m = 16 gets R = 16, not 24.
TEST(StudyGrid, ResiduesAreAMultipleOfEveryRunsStride) {
  EXPECT_EQ(study_residues(preset_load("w8s8-1kv")), 24);
  EXPECT_EQ(study_residues(preset_load("w12s12-1kv")), 24);
  EXPECT_EQ(study_residues(preset_load("hca")), 16);
  for (const StudyRun& r : study_grid("paper", {42, 43, 44, 45}).runs) {
    const Preset p = study_preset(r, false);
    EXPECT_EQ(study_residues(p) % std::max(1, display_stride(p)), 0) << r.id();
  }
}

TEST(StudyGapInterval, CoversAKnownGapWhereThePercentileIntervalDoesNot) {
  std::vector<double> profile(24, 0.5);  // true gap 0.2: four weak residues among twenty at 0.5
  for (int r : {3, 11, 19, 23}) profile[size_t(r)] = 0.3;
  const double truth = 0.2;
  int simultaneous = 0, percentile = 0, bc_closer = 0;
  const int trials = 40;
  for (int t = 0; t < trials; ++t) {
    StatsOptions so;
    so.S = 8;
    so.bootstrap = 400;
    so.seed = uint64_t(t) + 1;
    const Stats s = stats_compute(testing_eval::synthetic_journal(profile, 48, 1000 + uint64_t(t)), so);
    simultaneous += s.gap_ci.lo <= truth && truth <= s.gap_ci.hi;
    percentile += s.gap_ci_percentile.lo <= truth && truth <= s.gap_ci_percentile.hi;
    bc_closer += std::abs(s.gap_bc - truth) < std::abs(s.gap - truth);
  }
  std::printf(
      "gap coverage of a true gap of 0.2 over %d evaluations: simultaneous %d, percentile %d; bias-corrected "
      "closer %d\n",
      trials, simultaneous, percentile, bc_closer);
  EXPECT_GE(simultaneous, 38) << "the simultaneous interval covers the true gap " << simultaneous << " of "
                              << trials;
  EXPECT_LE(percentile, 4) << "the percentile interval covers it " << percentile << " of " << trials;
  EXPECT_GE(bc_closer, 30) << "the bias-corrected gap is closer " << bc_closer << " of " << trials;
  // a flat profile: the true gap is 0, which the simultaneous interval contains and the percentile never
  const Stats flat = stats_compute(testing_eval::synthetic_journal(std::vector<double>(24, 0.4), 48, 7), {});
  EXPECT_EQ(flat.gap_ci.lo, 0.0);
  EXPECT_GT(flat.gap_ci_percentile.lo, 0.0);
  // a row written with the percentile interval: kept beside, the simultaneous one from its residues
  json old = row_entry("w8s8-1kv", 42, "chunked", 8, 1, prot_entry(0.3, 0.25, 0.1, 0.0, 0.1, 8, 4));
  json& p = old["protocols"]["prefix"];
  p.erase("gap_ci_method");
  p["gap_ci"] = {0.089, 0.172};
  p["R"] = 24;
  p["n"] = 24 * 192;
  std::vector<int64_t> correct, n(24, 192);
  for (int r = 0; r < 24; ++r) {
    p["per_residue"].push_back((r == 5 ? 48 : 67) / 192.0);
    correct.push_back(r == 5 ? 48 : 67);
  }
  const StudyProtocol got = typed({old})[0].protocols.at("prefix");
  const Interval want = gap_simultaneous_interval(correct, n);
  EXPECT_NEAR(got.gap_ci.lo, want.lo, 1e-12);
  EXPECT_NEAR(got.gap_ci.hi, want.hi, 1e-12);
  EXPECT_NEAR(got.gap_ci_percentile.lo, 0.089, 1e-12);
  EXPECT_NEAR(got.gap_bc, 2 * 0.1 - (0.089 + 0.172) / 2, 1e-12);
}

// The simultaneous interval by hand: Wilson intervals at z for 1 - 0.05 / (2 R), max L - min U .. max U - min
// L
TEST(StudyGapInterval, SimultaneousIntervalByHand) {
  EXPECT_NEAR(normal_quantile(0.975), 1.959963984540054, 1e-9);
  EXPECT_NEAR(normal_quantile(1 - 0.05 / 48), 3.0781, 1e-4);  // R = 24
  const std::vector<int64_t> c = {10, 50, 90}, n = {100, 100, 100};
  const double z = normal_quantile(1 - 0.05 / 6);
  const Interval lo = wilson_interval(10, 100, z), hi = wilson_interval(90, 100, z);
  const Interval g = gap_simultaneous_interval(c, n);
  EXPECT_NEAR(g.lo, hi.lo - lo.hi, 1e-12);
  EXPECT_NEAR(g.hi, hi.hi - lo.lo, 1e-12);
  EXPECT_EQ(gap_simultaneous_interval({5, 0}, {10, 0}).lo, 0.0);  // one residue with samples: no gap
}

// Every CSV goes through one writer that quotes; a family with a comma keeps its row's field count
TEST(StudyCsv, FieldsWithCommasAndQuotesAreQuoted) {
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field("a, b"), "\"a, b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_text({{"x", "y"}, {{"1", "a\nb"}}}), "x,y\n1,\"a\nb\"\n");
  EXPECT_THROW(csv_text({{"x", "y"}, {{"1"}}}), std::logic_error);
  json r = row_entry("w8s8-1kv", 42, "chunked", 8, 1, prot_entry(0.3, 0.1, 0.2, 0.1, 0.1, 8, 4, {0.1, 0.2}));
  r["family"] = "size: 4 layers, dense warm-up";
  for (const std::string& text : {study_runs_csv(typed({r})), study_phases_csv(typed({r}))}) {
    // count fields outside quotes on each line: every line has the header's count
    size_t header_fields = 0;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      size_t fields = 1;
      bool quoted = false;
      for (char c : line) {
        if (c == '"') quoted = !quoted;
        fields += c == ',' && !quoted;
      }
      if (header_fields == 0) header_fields = fields;
      EXPECT_EQ(fields, header_fields) << line;
    }
  }
}

// a language model's flip survives row.json both ways (an unknown margin as null), and a flip whose lengths
// and margins disagree is refused with the field named
TEST(StudyRowJson, FlipRoundTripsAndAMismatchIsRefused) {
  StudyRow row = study_row_from_json(
      row_entry("lm-w8s8-1kv", 42, "chunked", 8, 1, prot_entry(0.3, 0.1, 0.2, 0.1, 0.1, 8, 4, {0.1, 0.2})),
      "t");
  StudyFlip f;
  f.template_name = "fp8";
  f.commit = "abc123";
  f.candidates = {"8", "32"};
  f.L_min = 24, f.L_max = 26;
  f.L = {24, 25, 26};
  f.margin = {2.0, std::nan(""), 1.5};
  f.comparisons = 2, f.flips = 0, f.period = 1, f.follows = 2, f.baseline_follows = 2;
  f.verdict = "pass", f.reason = "no flip", f.p_value = 1;
  f.S = 2;
  f.margin_folded = {0.1, -0.1};
  f.margin_folded_n = {1, 1};
  f.margin_range = 0.2, f.margin_share = 0.3, f.margin_share_null_q95 = 0.4, f.margin_p = 0.5;
  row.flip = f;
  const StudyRow back = study_row_from_json(study_row_to_json(row), "t");
  ASSERT_TRUE(back.flip.has_value());
  EXPECT_EQ(back.flip->template_name, "fp8");
  EXPECT_EQ(back.flip->commit, "abc123");
  EXPECT_EQ(back.flip->candidates, f.candidates);
  EXPECT_EQ(back.flip->L, f.L);
  EXPECT_EQ(back.flip->margin[0], 2.0);
  EXPECT_TRUE(std::isnan(back.flip->margin[1]));
  EXPECT_EQ(back.flip->margin_folded_n, f.margin_folded_n);
  EXPECT_EQ(back.flip->margin_share_null_q95, 0.4);
  EXPECT_EQ(back.flip->verdict, "pass");
  json bad_fold = study_row_to_json(row);
  bad_fold["flip"]["S"] = 8;
  EXPECT_THROW(study_row_from_json(bad_fold, "t"), Error);
  json j = study_row_to_json(row);
  j["flip"]["L"] = {24, 25};
  try {
    study_row_from_json(j, "runs/x/row.json");
    ADD_FAILURE() << "a flip with 2 lengths and 3 margins was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("flip.margin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("runs/x/row.json"), std::string::npos) << e.what();
  }
}

// grid files: "seeds": N takes the first N of --seeds, "all" every one, "seed_index" one of them
TEST(StudyGrid, GridFilesExpandSeeds) {
  const std::string dir = testutil::tmp_dir("study_grid_seeds");
  const std::string grid = dir + "/g.json";
  io_write_atomic(grid, R"({"name": "g", "runs": [{"preset": "w8s8-1kv", "seeds": "all"},
      {"preset": "w8s4-1kv", "seeds": 2}, {"preset": "full-1kv"}, {"preset": "uniform", "seed_index": 2},
      {"preset": "no-rope", "seed": 7}]})");
  std::vector<std::string> ids;
  for (const StudyRun& r : study_grid(grid, {1, 2, 3}).runs) ids.push_back(r.id());
  EXPECT_EQ(ids, (std::vector<std::string>{"w8s8-1kv@1", "w8s8-1kv@2", "w8s8-1kv@3", "w8s4-1kv@1",
                                           "w8s4-1kv@2", "full-1kv@1", "uniform@3", "no-rope@7"}));
  EXPECT_NE(testutil::error_of([&] { study_grid(grid, {1, 2}); }).find("seed_index"), std::string::npos);
  // the built-in grids are these files
  EXPECT_EQ(study_grid("paper", {42, 43, 44, 45}).runs.size(), 54u);
  EXPECT_EQ(study_grid("quick", {42, 43}).runs.size(), 7u);
  EXPECT_TRUE(study_grid("quick", {42}).toy);
}

// --runs picks runs of the grid by id, within the shard; an id the grid does not have is refused with the
// flag and the grid's ids (nothing is trained here: --no-train on an empty folder)
TEST(Study, RunsFlagSelectsByIdAndRefusesAnUnknownOne) {
  const std::vector<StudyRun> all = study_grid("quick", {42, 43}).runs;
  StudyOptions o;
  o.grid = "quick";
  o.seeds = {42, 43};
  o.out = testutil::tmp_dir("study_runs_flag");
  o.train = false;
  o.report = false;
  o.runs = {all[2].id(), all[5].id()};
  std::ostringstream log;
  o.log = &log;
  const StudyResult r = study_run(o);
  EXPECT_NE(log.str().find("0 of this shard's 2 runs to train"), std::string::npos) << log.str();
  EXPECT_EQ(r.missing.size(), all.size());  // nothing ran; every run of the grid is still missing
  o.shard_k = 2, o.shard_n = 2;  // run 2 is even (shard 1/2), run 5 odd: the shard keeps one of them
  log.str("");
  study_run(o);
  EXPECT_NE(log.str().find("0 of this shard's 1 runs to train"), std::string::npos) << log.str();
  o.runs = {"w8s8-1kv@99"};
  const std::string what = testutil::error_of([&] { study_run(o); });
  EXPECT_NE(what.find("--runs w8s8-1kv@99"), std::string::npos) << what;
  EXPECT_NE(what.find(all[0].id()), std::string::npos) << what;  // the fix lists the grid's ids
}

TEST(KvMemory, CountsFollowTheDesign) {
  AttnConfig full = attn_config_default(AttnKind::Full);
  full.n_kv_heads = 2;
  full.head_dim = 16;
  EXPECT_EQ(attn_kv_memory(full, 1000).total(), 1000 * 2 * 16 * 2);
  AttnConfig c = attn_config_default(AttnKind::Chunked);  // W8/S8, window 16
  c.W = 8, c.S = 8, c.window = 16, c.n_kv_heads = 1, c.head_dim = 32, c.d_model = 64;
  // T = 8192: 1024 entries of K and V, 16 raw tokens, no open block
  KvMemory m = attn_kv_memory(c, 8192);
  EXPECT_EQ(m.entries, 1024);
  EXPECT_EQ(m.entry_values, 1024 * 32 * 2);
  EXPECT_EQ(m.raw_values, 16 * 32 * 2);
  EXPECT_EQ(m.state_values, 0);
  // T = 8195: 3 tokens of the open entry wait as hidden states
  EXPECT_EQ(attn_kv_memory(c, 8195).state_values, 3 * 64);
  EXPECT_EQ(attn_kv_memory(c, 7).entries, 0);
  c.tied_kv = true;
  EXPECT_EQ(attn_kv_memory(c, 8192).entry_values, 1024 * 32);
  // at long context the compressed cache per token tends to 1/S of full attention's
  AttnConfig f1 = full;
  f1.n_kv_heads = 1, f1.head_dim = 32;
  c.tied_kv = false;
  const double ratio = model_kv_bytes_per_token({c}, 1 << 20, 2) / model_kv_bytes_per_token({f1}, 1 << 20, 2);
  EXPECT_NEAR(ratio, 1.0 / 8, 1e-3);
  AttnConfig hca = attn_config_default(AttnKind::DsHca);
  hca.ratio = 128, hca.head_dim = 64, hca.window = 16, hca.overlap = false, hca.index_topk = 0;
  EXPECT_EQ(attn_kv_memory(hca, 1280).entries, 10);
  EXPECT_EQ(attn_kv_memory(hca, 1280).entry_values, 10 * 64);
}

// the quick grid at toy size: two shard processes into two folders, merged, equal one process; resumed
TEST(Study, QuickGridShardsMergedEqualOneProcess) {
  const std::string a_dir = testutil::tmp_dir("study_quick_a"), b_dir = testutil::tmp_dir("study_quick_b"),
                    merged_dir = testutil::tmp_dir("study_quick_merged"),
                    one_dir = testutil::tmp_dir("study_quick_one");
  StudyOptions o;
  o.grid = "quick";
  o.report = false;
  o.out = a_dir, o.shard_k = 1, o.shard_n = 2;
  StudyResult a = study_run(o);
  EXPECT_FALSE(a.missing.empty());  // the other shard's runs
  o.out = b_dir, o.shard_k = 2;
  StudyResult b = study_run(o);
  EXPECT_FALSE(b.missing.empty());

  StudyOptions m = o;
  m.out = merged_dir, m.run = false, m.report = true, m.merge = {a_dir, b_dir};
  StudyResult merged = study_run(m);
  EXPECT_TRUE(merged.missing.empty());
  EXPECT_EQ(merged.merged, int(a.study["runs"].size() + b.study["runs"].size()) / 2);

  StudyOptions one = o;
  one.out = one_dir, one.shard_k = 1, one.shard_n = 1;
  StudyResult c = study_run(one);
  EXPECT_TRUE(c.missing.empty());
  EXPECT_EQ(merged.study["runs"], c.study["runs"]);                        // the same numbers, run for run
  EXPECT_EQ(merged.study["findings"].dump(), c.study["findings"].dump());  // dump: NaN figures compare

  const json& s = merged.study;
  const StudyGrid g = study_grid("quick", o.seeds);
  ASSERT_EQ(s["runs"].size(), 2 * g.runs.size());  // one row per run and protocol
  for (const json& r : s["runs"]) {
    for (const char* k : {"preset", "seed", "protocol", "n", "mean", "worst", "best", "gap", "period",
                          "val_loss", "kv_bytes_per_token"})
      EXPECT_TRUE(r.contains(k)) << k;
    for (const char* k : {"mean", "worst", "best", "gap"}) {
      EXPECT_GE(r[k].get<double>(), 0.0);
      EXPECT_LE(r[k].get<double>(), 1.0);
    }
    EXPECT_EQ(r["n"].get<int64_t>(), 48 * 24);  // toy default: 48 prompts per residue
    EXPECT_GT(r["val_loss"].get<double>(), 0.0);
    EXPECT_GT(r["kv_bytes_per_token"].get<double>(), 0.0);
  }
  ASSERT_EQ(s["findings"].size(), 10u);  // (a)-(g), d-div, mean-hides, dense
  for (const json& f : s["findings"]) {
    const std::string verdict = f["verdict"];
    EXPECT_TRUE(verdict == "holds" || verdict == "does not hold" || verdict == "inconclusive") << verdict;
    EXPECT_FALSE(f["rule"].get<std::string>().empty());
  }
  EXPECT_TRUE(fs::exists(merged_dir + "/report.html"));
  EXPECT_TRUE(fs::exists(merged_dir + "/runs.csv"));
  // resumed: every run has its row, nothing is trained or scored again
  const std::string row = io_read_text(one_dir + "/runs/w8s8-1kv@42/row.json");
  StudyResult again = study_run(one);
  EXPECT_TRUE(again.missing.empty());
  EXPECT_EQ(io_read_text(one_dir + "/runs/w8s8-1kv@42/row.json"), row);
  EXPECT_EQ(again.study["runs"], c.study["runs"]);
  // merging a folder that is not a study's output is refused, naming it
  StudyOptions bad = m;
  bad.merge = {testutil::tmp_dir("study_not_a_study")};
  EXPECT_THROW(study_run(bad), Error);
}

// a run's attention overrides reach every layer (the preset's per-layer list would otherwise win)
TEST(Study, AttentionOverridesReachEveryLayer) {
  StudyRun run{
      "w8s8-1kv",
      43,
      "ablation",
      "",
      "window0",
      json{{"attention", {{"window", 0}, {"per_offset_payload", false}}}, {"train", {{"steps", 7}}}}};
  const Preset p = study_preset(run, false);
  ASSERT_EQ(p.model.layers.size(), 2u);
  for (const AttnConfig& a : p.model.layers) {
    EXPECT_EQ(a.window, 0);
    EXPECT_FALSE(a.per_offset_payload);
    EXPECT_EQ(a.W, 8);  // the rest of the preset stays
  }
  EXPECT_EQ(p.train.steps, 7);
  EXPECT_EQ(p.train.seed, 43u);
  EXPECT_EQ(p.name, "w8s8-1kv-window0");
  EXPECT_EQ(study_preset({"w8s8-1kv", 42, "", "", "", nullptr}, false).model.layers[0].window, 16);
  const Preset toy = study_preset({"hca", 42, "", "", "", nullptr}, true);  // toy: ratio at most 16
  for (const AttnConfig& a : toy.model.layers) EXPECT_LE(a.ratio, 16);
}

// a row scored on fewer prompts than asked is evaluated again on the trained model, its training kept
TEST(Study, RowOnFewerPromptsIsEvaluatedAgain) {
  const std::string dir = testutil::tmp_dir("study_upgrade");
  const std::string grid = dir + "/grid.json";
  io_write_atomic(grid, R"({"name": "one", "toy": true, "runs": [{"preset": "w8s8-1kv", "seed": 42}]})");
  StudyOptions o;
  o.grid = grid;
  o.out = dir + "/out";
  o.report = false;
  o.samples = 1152;
  const StudyResult first_run = study_run(o);
  ASSERT_TRUE(first_run.failed.empty()) << first_run.failed[0].second;
  const std::string row_path = o.out + "/runs/w8s8-1kv@42/row.json";
  const json first = json::parse(io_read_text(row_path));
  EXPECT_EQ(first["protocols"]["prefix"]["n"].get<int64_t>(), 1152);
  o.samples = 2304;
  StudyResult r = study_run(o);
  const json second = json::parse(io_read_text(row_path));
  EXPECT_EQ(second["protocols"]["prefix"]["n"].get<int64_t>(), 2304);
  EXPECT_EQ(second["protocols"]["in-sequence"]["n"].get<int64_t>(), 2304);
  EXPECT_EQ(second["upgraded_from_samples"].get<int64_t>(), 1152);
  EXPECT_EQ(second["train_seconds"], first["train_seconds"]);
  EXPECT_EQ(second["val_loss"], first["val_loss"]);  // the same trained model
  EXPECT_EQ(second["explain"], first["explain"]);
  // asking for fewer than the row has changes nothing
  o.samples = 1152;
  study_run(o);
  EXPECT_EQ(json::parse(io_read_text(row_path)), second);
}

}  // namespace
}  // namespace phasescope
