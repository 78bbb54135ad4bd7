// study_test.cpp — `phasescope study`: the quick grid end to end at toy size (every run trained,
// evaluated under both protocols and explained; study.json with one row per run and protocol and the
// seven findings), sharding (two shards give the rows one invocation gives, and each aggregates the
// union), resume (a run with a row is not redone), the paper grid's inventory (every preset exists, the
// reference on four seeds, every compressed family on two), the findings' rules on synthetic rows (each
// rule's verdicts, the divisor-period category, the complete left-out list, the paper's headline), the
// gap interval against a known true gap, CSV quoting, and the KV-memory accounting every row reports.
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
#include "testing.h"

namespace phasescope {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Synthetic rows are written as JSON (readable) and read by the one row reader, as row.json files are.
std::vector<StudyRow> typed(const std::vector<json>& rows) {
  std::vector<StudyRow> out;
  for (const json& r : rows)
    out.push_back(study_row_from_json(r, "synthetic row " + r["id"].get<std::string>()));
  return out;
}

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

// issue 14's target on synthetic rows: paired by seed with the reference, each of worst doubled, gap halved
// and mean kept is needed on every seed; equal memory is checked; fewer than 3 seeds is inconclusive
TEST(StudyMitigations, GoalRuleSeedBySeed) {
  auto row = [](const std::string& preset, uint64_t seed, const std::string& family, double kv, double mean,
                double worst, double gap) {
    json p = {{"n", 4608},
              {"mean", mean},
              {"mean_ci", {mean - 0.02, mean + 0.02}},
              {"worst", worst},
              {"worst_ci", {worst - 0.03, worst + 0.03}},
              {"gap", gap},
              {"gap_ci", {gap - 0.05, gap + 0.05}},
              {"weakest_phase", 4},
              {"period", 8}};
    return json{{"id", preset + "@" + std::to_string(seed)},
                {"preset", preset},
                {"seed", seed},
                {"tag", ""},
                {"family", family},
                {"kv_bytes_per_token", kv},
                {"val_loss", 2.4},
                {"train_seconds", 400.0},
                {"protocols", {{"prefix", p}, {"in-sequence", p}}}};
  };
  std::vector<json> rows;
  for (uint64_t seed : {42, 43, 44}) {
    rows.push_back(row("w8s8-1kv", seed, "reference", 32.0, 0.50, 0.10, 0.30));
    rows.push_back(row("good", seed, "candidate: x", 32.05, 0.49, 0.25, 0.12));  // mean within noise
    // fails on seed 44 only: the gap is not halved
    rows.push_back(row("almost", seed, "candidate: y", 32.0, 0.55, 0.30, seed == 44 ? 0.16 : 0.10));
    rows.push_back(row("costly", seed, "candidate: z", 64.0, 0.60, 0.40, 0.05));  // twice the memory
    rows.push_back(row("w8s4-1kv", seed, "baseline", 64.0, 0.60, 0.40, 0.05));
  }
  rows.push_back(row("two-seeds", 42, "candidate: w", 32.0, 0.60, 0.40, 0.05));
  rows.push_back(row("two-seeds", 43, "candidate: w", 32.0, 0.60, 0.40, 0.05));
  // a fix carried over to another design is judged against the preset its name extends, at that memory
  for (uint64_t seed : {42, 43, 44}) {
    rows.push_back(row("mix", seed, "carry-over: reference", 20.0, 0.40, 0.04, 0.50));
    rows.push_back(row("mix-fix", seed, "carry-over: x", 20.0, 0.45, 0.09, 0.20));
    // another carried-over reference whose name extends mix is still a reference, not a candidate
    rows.push_back(row("mix-small", seed, "carry-over: reference", 10.0, 0.30, 0.20, 0.10));
  }
  // another recipe (a grid tag, e.g. a dense warm-up) is paired with the reference run of the same tag:
  // against mix-warm (worst 1%, gap 90) the tagged fix meets; against untagged mix (worst 4%) it would not
  auto tagged = [&](json r, const std::string& tag) {
    r["tag"] = tag;
    r["overrides"] = {{"train", {{"dense_warmup_steps", 500}}}};  // what the tag stands for
    r["id"] = r["preset"].get<std::string>() + "-" + tag + "@" + std::to_string(r["seed"].get<uint64_t>());
    return r;
  };
  for (uint64_t seed : {42, 43, 44}) {
    rows.push_back(tagged(row("mix", seed, "carry-over: reference", 20.0, 0.20, 0.01, 0.90), "warm"));
    rows.push_back(tagged(row("mix-fix", seed, "carry-over: x", 20.0, 0.30, 0.05, 0.45), "warm"));
  }
  const json m = study_mitigations(typed(rows), "w8s8-1kv");
  {
    std::map<std::string, std::string> by_variant, reference_of;
    for (const json& g : m["goal"]) {
      by_variant[g["variant"].get<std::string>() + "/" + g["protocol"].get<std::string>()] = g["verdict"];
      reference_of[g["variant"]] = g["reference"];
    }
    EXPECT_EQ(by_variant["mix-fix-warm/prefix"], "meets");  // worst 5% >= 2 x 1%, gap 45 <= 90 / 2
    EXPECT_EQ(by_variant["mix-fix/prefix"], "meets");       // the untagged pair is unchanged
    EXPECT_EQ(reference_of["mix-fix-warm"], "mix-warm");
    EXPECT_EQ(by_variant.count("mix-warm/prefix"), 0u);  // a carried-over reference is not judged
    size_t warm_rows = 0;
    for (const json& e : m["presets"])
      if (e["variant"] == "mix-warm") {
        EXPECT_EQ(e["preset"], "mix");
        EXPECT_EQ(e["tag"], "warm");
        EXPECT_EQ(e["seeds"].size(), 3u);
        ++warm_rows;
      }
    EXPECT_EQ(warm_rows, 2u);  // its own rows per protocol, not pooled with untagged mix
  }
  std::map<std::string, std::string> verdict;
  for (const json& g : m["goal"])
    verdict[g["variant"].get<std::string>() + "/" + g["protocol"].get<std::string>()] = g["verdict"];
  EXPECT_EQ(verdict["good/prefix"], "meets");
  EXPECT_EQ(verdict["almost/in-sequence"], "does not meet");
  EXPECT_EQ(verdict["costly/prefix"], "not at equal memory");
  EXPECT_EQ(verdict["two-seeds/prefix"], "inconclusive (fewer than 3 paired seeds)");
  EXPECT_EQ(verdict.count("w8s4-1kv/prefix"), 0u);   // baselines are not judged
  EXPECT_EQ(verdict["mix-fix/prefix"], "meets");     // against mix (20 B/token), not w8s8-1kv
  EXPECT_EQ(verdict.count("mix/prefix"), 0u);        // a carried-over reference is not judged
  EXPECT_EQ(verdict.count("mix-small/prefix"), 0u);  // nor one whose name extends another design's
  // against a reference that has not learned the task (mean below 10%) no seed is paired
  for (json& r : rows)
    if (r["preset"] == "mix")
      for (const char* protocol : {"prefix", "in-sequence"}) r["protocols"][protocol]["mean"] = 0.02;
  for (const json& g : study_mitigations(typed(rows), "w8s8-1kv")["goal"])
    if (g["preset"] == "mix-fix") {
      EXPECT_EQ(g["verdict"], "inconclusive (fewer than 3 paired seeds)");
      EXPECT_EQ(g["paired_seeds"], 0);
    }
  for (const json& g : m["goal"])
    EXPECT_EQ(g["reference"], g["variant"] == "mix-fix"        ? "mix"
                              : g["variant"] == "mix-fix-warm" ? "mix-warm"
                                                               : "w8s8-1kv")
        << g["variant"];
  EXPECT_EQ(m["rows"].size(), rows.size() * 2);
  for (const json& r : m["rows"])  // a tag's overrides become train flags in the row's command
    EXPECT_EQ(r["command"].get<std::string>().find("--dense-warmup 500") != std::string::npos,
              r["tag"] == "warm")
        << r["command"];
  for (const json& r : m["rows"]) {
    for (const char* k :
         {"preset", "seed", "protocol", "kv_bytes_per_token", "mean", "worst", "gap", "val_loss", "command"})
      EXPECT_TRUE(r.contains(k)) << k;
    EXPECT_NE(
        r["command"].get<std::string>().find("phasescope train --preset " + r["preset"].get<std::string>()),
        std::string::npos);
    // the prompts and residues the row was scored on (its "n"; "R" absent: 24)
    EXPECT_NE(r["command"].get<std::string>().find("--samples 4608 --R 24 "), std::string::npos);
  }
  // per preset over seeds, and the frontier point (averaged over seeds and both protocols)
  for (const json& e : m["presets"])
    if (e["preset"] == "almost" && e["protocol"] == "prefix") {
      EXPECT_NEAR(e["gap"]["mean"].get<double>(), (0.10 + 0.10 + 0.16) / 3, 1e-12);
      EXPECT_DOUBLE_EQ(e["gap"]["max"].get<double>(), 0.16);
    }
  for (const json& f : m["frontier"])
    if (f["preset"] == "costly") {
      EXPECT_DOUBLE_EQ(f["kv_bytes_per_token"].get<double>(), 64.0);
      EXPECT_NEAR(f["worst"].get<double>(), 0.40, 1e-12);
    }
}

TEST(StudyFindings, RulesOnSyntheticRows) {
  auto prot = [](double mean, double gap, double gap_lo, double q95, int period, int weakest,
                 std::vector<double> folded) {
    return json{{"n", 1152},
                {"mean", mean},
                {"mean_ci", {mean - 0.05, mean + 0.05}},
                {"worst", 0.1},
                {"best", 0.1 + gap},
                {"gap", gap},
                {"gap_ci", {gap_lo, gap + 0.1}},
                {"gap_ci_method", "simultaneous"},
                {"gap_null_q95", q95},
                {"period", period},
                {"p_value", 1e-9},
                {"folded", folded},
                {"weakest_phase", weakest}};
  };
  auto row = [&](const std::string& preset, uint64_t seed, const std::string& kind, int S, json p) {
    return json{{"id", preset + "@" + std::to_string(seed)},
                {"preset", preset},
                {"seed", seed},
                {"tag", ""},
                {"kind", kind},
                {"S", S},
                {"protocols", {{"prefix", p}}}};
  };
  const std::vector<double> boundary_weak = {0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.05};
  std::vector<json> rows = {
      row("full-1kv", 42, "full", 0, prot(0.5, 0.05, 0.0, 0.2, 0, 0, {})),
      row("w8s8-1kv", 42, "chunked", 8, prot(0.5, 0.6, 0.45, 0.2, 8, 7, boundary_weak)),
      row("w8s8-1kv", 43, "chunked", 8, prot(0.5, 0.6, 0.45, 0.2, 8, 7, boundary_weak)),
      row("w8s4-1kv", 42, "chunked", 4, prot(0.6, 0.3, 0.2, 0.15, 4, 3, {})),
      row("w8s4-1kv", 43, "chunked", 4, prot(0.6, 0.3, 0.2, 0.15, 4, 3, {})),
      row("no-rope", 42, "chunked", 8, prot(0.3, 0.5, 0.4, 0.2, 8, 7, {})),
      row("uniform", 42, "chunked", 8, prot(0.2, 0.1, 0.02, 0.2, 0, 7, {})),
  };
  std::map<std::string, std::string> v;
  for (const json& f : study_findings(typed(rows))) v[f["id"]] = f["verdict"];
  EXPECT_EQ(v["a"], "holds");             // full attention off the ceiling and flat
  EXPECT_EQ(v["b"], "holds");             // both seeds: large gap beyond noise, phase 7 weakest
  EXPECT_EQ(v["c"], "holds");             // W8/S4's gap smaller in both seeds
  EXPECT_EQ(v["d"], "inconclusive");      // S = 6 and 12 missing
  EXPECT_EQ(v["d-div"], "inconclusive");  // no run with a divisor period
  EXPECT_EQ(v["e"], "inconclusive");      // no knockouts in these rows
  EXPECT_EQ(v["g"], "inconclusive");      // no-rope persists, uniform does not
  // the same rows with W8/S8's weak spot away from the boundary: (b) does not hold
  rows[1]["protocols"]["prefix"]["weakest_phase"] = 4;
  rows[2]["protocols"]["prefix"]["weakest_phase"] = 5;
  for (const json& f : study_findings(typed(rows)))
    if (f["id"] == "b") EXPECT_EQ(f["verdict"], "does not hold") << f.dump();
  // full attention at its ceiling says nothing about flatness
  rows[0]["protocols"]["prefix"]["mean"] = 1.0;
  for (const json& f : study_findings(typed(rows)))
    if (f["id"] == "a") EXPECT_EQ(f["verdict"], "inconclusive") << f.dump();
}

// A protocol entry for the rules below (the simultaneous gap interval given as it is).
json prot_entry(double mean, double worst, double gap, double gap_lo, double q95, int period, int weakest,
                std::vector<double> folded = {}) {
  return json{{"n", 1152},
              {"mean", mean},
              {"mean_ci", {mean - 0.05, mean + 0.05}},
              {"worst", worst},
              {"best", worst + gap},
              {"gap", gap},
              {"gap_ci", {gap_lo, gap + 0.1}},
              {"gap_ci_method", "simultaneous"},
              {"gap_null_q95", q95},
              {"period", period},
              {"p_value", 1e-9},
              {"folded", folded},
              {"weakest_phase", weakest}};
}
json row_entry(const std::string& preset, uint64_t seed, const std::string& kind, int S, int kv_heads,
               const json& prefix, double val_loss = 2.0) {
  return json{{"id", preset + "@" + std::to_string(seed)},
              {"preset", preset},
              {"seed", seed},
              {"tag", ""},
              {"kind", kind},
              {"S", S},
              {"W", S},
              {"n_kv_heads", kv_heads},
              {"val_loss", val_loss},
              {"protocols", {{"prefix", prefix}}}};
}
std::map<std::string, json> findings_by_id(const std::vector<json>& rows) {
  std::map<std::string, json> out;
  for (const json& f : study_findings(typed(rows))) out[f["id"]] = f;
  return out;
}

// (d) is judged over every learned W/S run; a period that is a proper divisor of S (several KV heads
// owning different phases) is its own category with head-level evidence; the left-out list names every
// compressed run below the learned bar, DeepSeek mixes whose first layer is a window layer included
TEST(StudyFindings, PeriodRuleOverEveryWsRunWithTheDivisorCategory) {
  std::vector<json> rows;
  for (int S : {4, 6, 8, 12})
    rows.push_back(row_entry("w" + std::to_string(S) + "-s", 42, "chunked", S, 1,
                             prot_entry(0.5, 0.2, 0.4, 0.3, 0.1, S, 0)));
  EXPECT_EQ(findings_by_id(rows)["d"]["verdict"], "holds");
  // two KV heads, each owning one half of the phases: period S / 2
  json two = row_entry("w8s8-2kv", 42, "chunked", 8, 2, prot_entry(0.47, 0.2, 0.4, 0.3, 0.1, 4, 3));
  two["explain"] = {
      {"S", 8},
      {"knockouts",
       {{{"label", "L1.kv0"}, {"layer", 1}, {"kv_head", 0}, {"rel", {-90, -5, -90, -5, -90, -5, -90, -5}}},
        {{"label", "L1.kv1"}, {"layer", 1}, {"kv_head", 1}, {"rel", {-5, -90, -5, -90, -5, -90, -5, -90}}},
        {{"label", "L1"},
         {"layer", 1},
         {"kv_head", -1},
         {"rel", {-99, -99, -99, -99, -99, -99, -99, -99}}}}}};
  rows.push_back(two);
  auto f = findings_by_id(rows);
  EXPECT_EQ(f["d"]["verdict"], "does not hold");  // as written: a run finds a period other than S
  EXPECT_EQ(f["d-div"]["verdict"], "holds");
  ASSERT_EQ(f["d-div"]["figures"].size(), 1u);
  const json& ev = f["d-div"]["figures"][0];
  EXPECT_EQ(ev["period"], 4);
  ASSERT_EQ(ev["kv_head_knockouts"].size(), 2u);  // per KV head, not the whole layer
  EXPECT_EQ(ev["kv_head_knockouts"][0]["phases_lost"], json({0, 2, 4, 6}));
  EXPECT_EQ(ev["kv_head_knockouts"][1]["phases_lost"], json({1, 3, 5, 7}));
  std::set<std::string> categories;
  for (const json& x : f["d"]["figures"]) categories.insert(x["category"].get<std::string>());
  EXPECT_EQ(categories, (std::set<std::string>{"stride", "divisor"}));
  // a single KV head with a divisor period contradicts d-div; a multiple of S is "other"
  rows.push_back(row_entry("w8s8-1kv", 43, "chunked", 8, 1, prot_entry(0.3, 0.1, 0.4, 0.3, 0.1, 4, 3)));
  rows.push_back(row_entry("w8s8-4kv", 42, "chunked", 8, 4, prot_entry(0.35, 0.1, 0.4, 0.3, 0.1, 24, 3)));
  f = findings_by_id(rows);
  EXPECT_EQ(f["d-div"]["verdict"], "does not hold");
  bool other = false;
  for (const json& x : f["d"]["figures"])
    other = other || (x["run"] == "w8s8-4kv@42" && x["category"] == "other");
  EXPECT_TRUE(other);
  // a run that has not learned (prefix mean < 10%) is left out of (d) and listed, whatever its first layer
  rows.push_back(row_entry("dsv4-csa", 42, "window", 0, 1, prot_entry(0.01, 0.0, 0.03, 0.0, 0.05, 0, 0)));
  rows.push_back(row_entry("full-1kv", 44, "full", 0, 1, prot_entry(0.01, 0.0, 0.03, 0.0, 0.05, 0, 0)));
  rows.push_back(row_entry("w8s8-8kv", 43, "chunked", 8, 8, prot_entry(0.02, 0.0, 0.03, 0.0, 0.05, 0, 0)));
  f = findings_by_id(rows);
  EXPECT_EQ(f["b"]["left_out_not_learned"], json({"dsv4-csa@42", "w8s8-8kv@43"}));  // not full attention
  for (const json& x : f["d"]["figures"]) EXPECT_NE(x["run"], "dsv4-csa@42");
}

// the paper's headline: matched in mean (5 points) and validation loss (0.05 nats), worst 25 points lower
TEST(StudyFindings, MeanHidesOnSyntheticRows) {
  std::vector<json> rows = {
      row_entry("full-1kv", 42, "full", 0, 1, prot_entry(0.65, 0.60, 0.08, 0.02, 0.1, 0, 0), 2.40),
      row_entry("deepseek-style", 42, "chunked", 4, 1, prot_entry(0.66, 0.16, 0.84, 0.7, 0.1, 4, 0), 2.43),
      row_entry("w8s8-8kv", 42, "chunked", 8, 8, prot_entry(0.65, 0.10, 0.7, 0.6, 0.1, 8, 7), 2.40)};
  auto f = findings_by_id(rows);
  EXPECT_EQ(f["mean-hides"]["verdict"], "holds");
  EXPECT_EQ(f["mean-hides"]["figures"].size(), 1u);  // the 8-KV run has no 8-KV full-attention twin
  rows[1]["val_loss"] = 2.60;                        // 0.2 nats apart: not matched
  EXPECT_EQ(findings_by_id(rows)["mean-hides"]["verdict"], "inconclusive");
  rows[1]["val_loss"] = 2.43;
  rows[1]["protocols"]["prefix"]["worst"] = 0.50;  // matched, worst only 10 points lower
  EXPECT_EQ(findings_by_id(rows)["mean-hides"]["verdict"], "does not hold");
  const MeanHides rule;
  EXPECT_EQ(rule.judge(0.65, 0.60, std::nan(""), 0.70, 0.30, std::nan("")), "holds");  // no losses: mean only
  EXPECT_EQ(rule.judge(0.65, 0.60, std::nan(""), 0.71, 0.10, std::nan("")), "not matched");
}

// The gap's interval against a known true gap: the plug-in gap (max - min of noisy residues) is biased
// upward and its bootstrap replicates more so, so their percentile interval misses the truth; the
// simultaneous interval the study reports covers it (it is conservative by construction), and the
// bias-corrected gap reported beside the raw one is closer to the truth. Rows of the first writer
// (percentile interval only) get the simultaneous interval from their per-residue accuracies.
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
  ASSERT_EQ(s["findings"].size(), 9u);  // (a)-(g), d-div, mean-hides
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

// tagged rows beside their reference; the gates' static profile against the folded accuracy
TEST(StudyFindings, AblationsAndGateAccuracyOnSyntheticRows) {
  const std::vector<double> acc = {0.25, 0.27, 0.26, 0.20, 0.14, 0.10, 0.18, 0.21};
  std::vector<double> next(8), same(8);
  for (int p = 0; p < 8; ++p) next[size_t((p + 1) % 8)] = 3 * acc[size_t(p)];  // gate at p+1 follows acc at p
  for (int p = 0; p < 8; ++p) same[size_t(p)] = 1 - acc[size_t(p)];            // gate at p opposes acc at p
  auto row = [&](const std::string& tag, int weakest, std::vector<double> folded) {
    json p = {{"S", 8},          {"mean", 0.2},
              {"gap", 0.17},     {"gap_ci", {0.1, 0.3}},
              {"period", 8},     {"weakest_phase", weakest},
              {"folded", folded}};
    return json{
        {"id", "w8s8-1kv" + (tag.empty() ? "" : "-" + tag) + "@42"},
        {"preset", "w8s8-1kv"},
        {"seed", 42},
        {"tag", tag},
        {"kind", "chunked"},
        {"S", 8},
        {"W", 8},
        {"protocols", {{"prefix", p}}},
        {"explain",
         {{"gates",
           {{{"layer", 1}, {"branch", "k"}, {"kv_head", 0}, {"peak", 2}, {"static", 3.9}, {"profile", next}},
            {{"layer", 1},
             {"branch", "v"},
             {"kv_head", 0},
             {"peak", 3},
             {"static", 7.8},
             {"profile", same}}}}}}};
  };
  const std::vector<json> rows = {row("", 5, acc),
                                  row("window0", 7, {0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.05})};
  const json ab = study_ablations(typed(rows));
  ASSERT_EQ(ab.size(), 1u);
  EXPECT_EQ(ab[0]["run"], "w8s8-1kv-window0@42");
  EXPECT_EQ(ab[0]["reference"], "w8s8-1kv@42");
  EXPECT_EQ(ab[0]["prefix"]["weakest_phase"], 7);
  EXPECT_TRUE(ab[0]["prefix"]["boundary_weakest"].get<bool>());
  EXPECT_EQ(ab[0]["prefix"]["reference_weakest_phase"], 5);
  const json ga = study_gate_accuracy(typed(rows));
  ASSERT_EQ(ga.size(), 2u);
  EXPECT_NEAR(ga[0]["gates"][0]["r_next_offset"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(ga[0]["gates"][1]["r_same_offset"].get<double>(), -1.0, 1e-12);
  EXPECT_TRUE(ga[1]["gates"][0]["r_next_offset"].is_number());
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
