// results.cpp — see results.h; the schema itself is documented in docs/results-schema.md.
#include "eval/results.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/format.h"
#include "core/io.h"
#include "core/json_fields.h"
#include "eval/journal.h"
#include "report/html.h"

namespace phasescope {

namespace {

nlohmann::json num(double v) { return json_number_or_null(v); }

nlohmann::json interval_json(const Interval& i) { return nlohmann::json::array({num(i.lo), num(i.hi)}); }

nlohmann::json residue_json(const ResidueStat& s, const char* index_name) {
  return {{index_name, s.residue},   {"n", s.n},
          {"correct", s.correct},    {"acc", num(s.acc)},
          {"ci_low", num(s.ci_low)}, {"ci_high", num(s.ci_high)}};
}

nlohmann::json test_json(const TestResult& t) {
  return {{"name", t.name},
          {"statistic", num(t.statistic)},
          {"df", t.df},
          {"p_value", num(t.p_value)},
          {"n_used", t.n_used}};
}

// Reading goes through core/json_fields.h, so every error names the file and the field. Bound here: the
// file's name and its two fixes (a missing field: rewrite; a wrong type: fix or rewrite). A number that
// was not finite (an empty residue's accuracy) is written null and read back as NaN.
struct Reader {
  std::string where;
  std::string fix_missing() const {
    return "rewrite the file with `phasescope eval` (schema " + std::string(kResultsSchema) + " v1)";
  }
  static constexpr const char* kFixType = "fix or rewrite the file";
  const nlohmann::json& at(const nlohmann::json& j, const char* key) const {
    return json_at(j, key, where, fix_missing());
  }
  template <class T>
  T get(const nlohmann::json& j, const char* key) const {
    return json_as<T>(at(j, key), json_where(where, key), kFixType);
  }
  double number_or_nan(const nlohmann::json& v, const char* key) const {
    return json_number_or_nan(v, json_where(where, key), kFixType);
  }
  double d(const nlohmann::json& j, const char* key) const { return number_or_nan(at(j, key), key); }
  int64_t i(const nlohmann::json& j, const char* key) const { return get<int64_t>(j, key); }
  std::string s(const nlohmann::json& j, const char* key) const { return get<std::string>(j, key); }
  Interval iv(const nlohmann::json& j, const char* key) const {
    const auto& v = at(j, key);
    if (!v.is_array() || v.size() != 2)
      fail(json_where(where, key), "must be [low, high], got " + v.dump(), kFixType);
    return {number_or_nan(v[0], key), number_or_nan(v[1], key)};
  }
  ResidueStat rs(const nlohmann::json& j, const char* index_name) const {
    ResidueStat s;
    s.residue = static_cast<int>(i(j, index_name));
    s.n = i(j, "n");
    s.correct = i(j, "correct");
    s.acc = d(j, "acc");
    s.ci_low = d(j, "ci_low");
    s.ci_high = d(j, "ci_high");
    return s;
  }
  TestResult test(const nlohmann::json& j) const {
    TestResult t;
    t.name = s(j, "name");
    t.statistic = d(j, "statistic");
    t.df = static_cast<int>(i(j, "df"));
    t.p_value = d(j, "p_value");
    t.n_used = i(j, "n_used");
    return t;
  }
};

std::string pct_ci(const Interval& i) { return "[" + pct(i.lo) + ", " + pct(i.hi) + "]"; }
std::string period_text(const PeriodResult& p, int R) {
  if (p.P == 0) return "none";
  if (p.P == R) return fmt::format("none < {}", R);
  return fmt::format("{} ({:.0f}%)", p.P, 100 * p.explained);
}

}  // namespace

nlohmann::json results_to_json(const EvalResults& r) {
  const Stats& s = r.stats;
  const EvalMeta& m = r.meta;
  nlohmann::json j;
  j["schema"] = kResultsSchema;
  j["version"] = kResultsVersion;
  j["model"] = m.model;
  j["protocol"] = m.protocol;
  j["task"] = m.task;
  j["backend"] = m.backend;
  j["R"] = s.R;
  j["S"] = s.S;
  j["design"] = s.design;
  j["n_samples"] = s.n_samples;
  j["n_scored"] = s.n_scored;
  j["n_errors"] = s.n_errors;
  j["n_clusters"] = s.n_clusters;
  j["per_residue"] = nlohmann::json::array();
  for (size_t k = 0; k < s.per_residue.size(); ++k) {
    nlohmann::json row = residue_json(s.per_residue[k], "residue");
    row["pos_mean"] = num(k < s.pos_mean.size() ? s.pos_mean[k] : std::nan(""));
    row["pos_var"] = num(k < s.pos_var.size() ? s.pos_var[k] : std::nan(""));
    j["per_residue"].push_back(row);
  }
  j["folded"] = nlohmann::json::array();
  for (const ResidueStat& f : s.folded) j["folded"].push_back(residue_json(f, "phase"));
  j["mean"] = num(s.mean);
  j["mean_ci"] = interval_json(s.mean_ci);
  j["worst"] = num(s.worst);
  j["worst_residue"] = s.worst_residue;
  j["worst_ci"] = interval_json(s.worst_ci);
  j["best"] = num(s.best);
  j["best_residue"] = s.best_residue;
  j["best_ci"] = interval_json(s.best_ci);
  j["gap"] = num(s.gap);
  j["gap_ci"] = interval_json(s.gap_ci);
  j["gap_ci_percentile"] = interval_json(s.gap_ci_percentile);
  j["gap_bc"] = num(s.gap_bc);
  j["gap_null"] = {{"mean", num(s.gap_null_mean)}, {"q95", num(s.gap_null_q95)}};
  j["bootstrap"] = {{"replicates", s.bootstrap},
                    {"seed", s.bootstrap_seed},
                    {"cluster", "mapping"},
                    {"interval", "percentile 95%; gap_ci: simultaneous 95% (Bonferroni Wilson per residue)"}};
  j["mean_abs_diff_S"] = num(s.mean_abs_diff_S);
  nlohmann::json cands = nlohmann::json::array();
  for (const PeriodCandidate& c : s.period.candidates)
    cands.push_back({{"P", c.P},
                     {"explained", num(c.explained)},
                     {"p_between", num(c.p_between)},
                     {"p_residual", num(c.p_residual)}});
  j["period"] = {{"P", s.period.P},
                 {"explained", num(s.period.explained)},
                 {"note", s.period.note},
                 {"candidates", cands}};
  j["p_value"] = num(s.p_value);
  j["test"] = test_json(s.independence);
  j["chi_square"] = test_json(s.chi_square);
  j["cochran_q"] = test_json(s.cochran);
  j["layout"] = {{"fingerprint", m.layout},
                 {"n_base", m.n_base},
                 {"pad", m.pad},
                 {"prompt_len", m.prompt_len},
                 {"query_pos", m.query_pos},
                 {"pos_mean_range", num(s.pos_mean_range)},
                 {"pos_sd_range", num(s.pos_sd_range)},
                 {"tol_mean", m.tol_mean},
                 {"tol_sd", m.tol_sd},
                 {"align", m.align},
                 {"added_mean", m.added_mean}};
  j["journal"] = m.journal;
  j["wall_s"] = m.wall_s;
  return j;
}

EvalResults results_from_json(const nlohmann::json& j, const std::string& where) {
  Reader rd{where};
  if (!j.is_object() || !j.contains("schema") || j["schema"] != kResultsSchema)
    fail(where,
         std::string("not a phasescope results file (field 'schema' is not \"") + kResultsSchema + "\")",
         "pass the results.json written by `phasescope eval`");
  if (rd.i(j, "version") != kResultsVersion)
    fail(where,
         fmt::format("results version {} is not supported (this build reads {})", rd.i(j, "version"),
                     kResultsVersion),
         "rerun the evaluation with this build (the journal is reused)");
  EvalResults r;
  EvalMeta& m = r.meta;
  Stats& s = r.stats;
  m.model = rd.s(j, "model");
  m.protocol = rd.s(j, "protocol");
  m.task = rd.s(j, "task");
  m.backend = rd.s(j, "backend");
  s.R = static_cast<int>(rd.i(j, "R"));
  s.S = static_cast<int>(rd.i(j, "S"));
  s.design = rd.s(j, "design");
  s.n_samples = rd.i(j, "n_samples");
  s.n_scored = rd.i(j, "n_scored");
  s.n_errors = rd.i(j, "n_errors");
  s.n_clusters = rd.i(j, "n_clusters");
  for (const auto& row : rd.at(j, "per_residue")) {
    s.per_residue.push_back(rd.rs(row, "residue"));
    s.pos_mean.push_back(rd.d(row, "pos_mean"));
    s.pos_var.push_back(rd.d(row, "pos_var"));
  }
  if (static_cast<int>(s.per_residue.size()) != s.R)
    fail(where, fmt::format("per_residue has {} rows but R = {}", s.per_residue.size(), s.R),
         "rewrite the file");
  for (const auto& row : rd.at(j, "folded")) s.folded.push_back(rd.rs(row, "phase"));
  s.mean = rd.d(j, "mean");
  s.mean_ci = rd.iv(j, "mean_ci");
  s.worst = rd.d(j, "worst");
  s.worst_residue = static_cast<int>(rd.i(j, "worst_residue"));
  s.worst_ci = rd.iv(j, "worst_ci");
  s.best = rd.d(j, "best");
  s.best_residue = static_cast<int>(rd.i(j, "best_residue"));
  s.best_ci = rd.iv(j, "best_ci");
  s.gap = rd.d(j, "gap");
  s.gap_ci = rd.iv(j, "gap_ci");
  s.gap_ci_percentile = rd.iv(j, "gap_ci_percentile");
  s.gap_bc = rd.d(j, "gap_bc");
  const auto& gn = rd.at(j, "gap_null");
  s.gap_null_mean = rd.d(gn, "mean");
  s.gap_null_q95 = rd.d(gn, "q95");
  const auto& boot = rd.at(j, "bootstrap");
  s.bootstrap = static_cast<int>(rd.i(boot, "replicates"));
  s.bootstrap_seed = rd.get<uint64_t>(boot, "seed");
  s.mean_abs_diff_S = rd.d(j, "mean_abs_diff_S");
  const auto& per = rd.at(j, "period");
  s.period.P = static_cast<int>(rd.i(per, "P"));
  s.period.explained = rd.d(per, "explained");
  s.period.note = rd.s(per, "note");
  for (const auto& c : rd.at(per, "candidates"))
    s.period.candidates.push_back(PeriodCandidate{static_cast<int>(rd.i(c, "P")), rd.d(c, "explained"),
                                                  rd.d(c, "p_between"), rd.d(c, "p_residual")});
  s.p_value = rd.d(j, "p_value");
  s.independence = rd.test(rd.at(j, "test"));
  s.chi_square = rd.test(rd.at(j, "chi_square"));
  s.cochran = rd.test(rd.at(j, "cochran_q"));
  const auto& lay = rd.at(j, "layout");
  m.layout = rd.s(lay, "fingerprint");
  m.n_base = static_cast<int>(rd.i(lay, "n_base"));
  m.pad = static_cast<int>(rd.i(lay, "pad"));
  m.prompt_len = rd.i(lay, "prompt_len");
  m.query_pos = rd.i(lay, "query_pos");
  s.pos_mean_range = rd.d(lay, "pos_mean_range");
  s.pos_sd_range = rd.d(lay, "pos_sd_range");
  m.tol_mean = rd.d(lay, "tol_mean");
  m.tol_sd = rd.d(lay, "tol_sd");
  m.align = json_get_or<std::string>(lay, "align", "", where, "written by `phasescope eval --align-card`");
  m.added_mean =
      json_get_or<double>(lay, "added_mean", 0.0, where, "written by `phasescope eval --align-card`");
  m.journal = rd.s(j, "journal");
  m.wall_s = rd.d(j, "wall_s");
  return r;
}

EvalResults results_from_journal(const std::string& journal_path, const StatsOptions& so,
                                 const EvalMeta& meta) {
  EvalResults res;
  res.stats = stats_compute(journal_load(journal_path).records, so);
  res.meta = meta;
  return res;
}

EvalResults results_read(const std::string& path) {
  const std::string text = io_read_text(path, "check the path (an eval --out folder holds results.json)");
  return results_from_json(json_parse_or_fail(text, path, "rerun the evaluation to rewrite it"), path);
}

void results_write_json(const EvalResults& r, const std::string& path) {
  io_write_atomic(path, results_to_json(r).dump(2) + "\n");
}

std::string results_csv(const std::vector<EvalResults>& runs) {
  std::ostringstream os;
  os << "model,protocol,kind,index,n,correct,acc,ci_low,ci_high\n";
  auto row = [&](const EvalResults& r, const char* kind, const ResidueStat& s) {
    auto f = [](double v) { return std::isfinite(v) ? fmt::format("{:.6f}", v) : std::string(); };
    os << fmt::format("{},{},{},{},{},{},{},{},{}\n", r.meta.model, r.meta.protocol, kind, s.residue, s.n,
                      s.correct, f(s.acc), f(s.ci_low), f(s.ci_high));
  };
  for (const EvalResults& r : runs) {
    for (const ResidueStat& s : r.stats.per_residue) row(r, "residue", s);
    for (const ResidueStat& s : r.stats.folded) row(r, "folded", s);
  }
  return os.str();
}

std::string results_format_table(const EvalResults& r) {
  const Stats& s = r.stats;
  std::ostringstream os;
  os << fmt::format("{} · {} padding · {} samples ({} scored, {} failed) · {} clusters · {} design\n",
                    r.meta.model, r.meta.protocol, s.n_samples, s.n_scored, s.n_errors, s.n_clusters,
                    s.design);
  os << fmt::format("{:>7} {:>6} {:>7} {:>7}  {:<15} {:>9} {:>8}\n", "residue", "n", "correct", "acc %",
                    "95% Wilson", "pos mean", "pos sd");
  for (size_t k = 0; k < s.per_residue.size(); ++k) {
    const ResidueStat& p = s.per_residue[k];
    os << fmt::format("{:>7} {:>6} {:>7} {:>7}  {:<15} {:>9.2f} {:>8.2f}\n", p.residue, p.n, p.correct,
                      pct(p.acc), pct_ci({p.ci_low, p.ci_high}),
                      k < s.pos_mean.size() ? s.pos_mean[k] : std::nan(""),
                      k < s.pos_var.size() ? std::sqrt(s.pos_var[k]) : std::nan(""));
  }
  os << fmt::format("folded mod {} (acc %):", s.S);
  for (const ResidueStat& f : s.folded) os << fmt::format(" {}:{}", f.residue, pct(f.acc));
  os << "\n";
  os << fmt::format(
      "mean {} {}  worst {} (r={}) {}  best {} (r={}) {}  gap {} {}   [% ; cluster bootstrap x{}]\n",
      pct(s.mean), pct_ci(s.mean_ci), pct(s.worst), s.worst_residue, pct_ci(s.worst_ci), pct(s.best),
      s.best_residue, pct_ci(s.best_ci), pct(s.gap), pct_ci(s.gap_ci), s.bootstrap);
  os << fmt::format(
      "gap from sampling noise alone (every residue at the pooled accuracy): mean {}, 95th percentile {}\n",
      pct(s.gap_null_mean), pct(s.gap_null_q95));
  os << fmt::format(
      "mean |A(r) - A(r+{})| = {} points; period: {}; independence: {} = {:.2f}, df {}, p = {:.3g}\n", s.S,
      pct(s.mean_abs_diff_S), period_text(s.period, s.R),
      s.independence.name == "cochran_q" ? "Cochran's Q" : "chi-square", s.independence.statistic,
      s.independence.df, s.p_value);
  os << fmt::format("target position: group means span {:.3f}, SDs span {:.3f} tokens (tolerances {} / {})\n",
                    s.pos_mean_range, s.pos_sd_range, r.meta.tol_mean, r.meta.tol_sd);
  return os.str();
}

std::string results_format_compare(const std::vector<EvalResults>& runs) {
  std::ostringstream os;
  os << fmt::format("{:<16} {:<12} {:>6} {:>18} {:>24} {:>7} {:>18} {:>9} {:>9} {:>10}\n", "model",
                    "protocol", "n", "mean % [95%]", "worst % (r) [95%]", "best %", "gap [95%]", "noise gap",
                    "p", "period");
  for (const EvalResults& r : runs) {
    const Stats& s = r.stats;
    os << fmt::format("{:<16} {:<12} {:>6} {:>18} {:>24} {:>7} {:>18} {:>9} {:>9.2g} {:>10}\n", r.meta.model,
                      r.meta.protocol, s.n_scored, pct(s.mean) + " " + pct_ci(s.mean_ci),
                      pct(s.worst) + " (" + std::to_string(s.worst_residue) + ") " + pct_ci(s.worst_ci),
                      pct(s.best), pct(s.gap) + " " + pct_ci(s.gap_ci), "<" + pct(s.gap_null_q95), s.p_value,
                      period_text(s.period, s.R));
  }
  return os.str();
}

}  // namespace phasescope
