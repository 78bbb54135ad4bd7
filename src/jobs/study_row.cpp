// study_row.cpp — see study_row.h.
#include "jobs/study_row.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>

#include "core/check.h"
#include "core/io.h"
#include "core/json_fields.h"
#include "eval/results.h"
#include "explain/explain.h"

namespace phasescope {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

json num(double x) { return study_json_number(x); }
json nums(const std::vector<double>& v) { return study_json_numbers(v); }
json interval(const Interval& i) { return study_json_interval(i); }

// Typed reads of one row's fields (core/json_fields.h's json_get_or for scalars; lists of numbers may
// hold null for NaN): `where` names the file.
struct RowReader {
  std::string where;
  std::string fix() const { return "delete " + where + " (that run is redone)"; }
  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    fail(where, "field \"" + key + "\" " + what, fix());
  }
  double d(const json& j, const char* key, double def = kNaN) const {
    return json_get_or<double>(j, key, def, where, fix());
  }
  int64_t i(const json& j, const char* key, int64_t def = 0) const {
    return json_get_or<int64_t>(j, key, def, where, fix());
  }
  std::string s(const json& j, const char* key) const {
    return json_get_or<std::string>(j, key, "", where, fix());
  }
  std::vector<double> ds(const json& j, const char* key) const {
    std::vector<double> v;
    if (!j.contains(key) || j[key].is_null()) return v;
    if (!j[key].is_array()) bad(key, "is not a list");
    for (const json& x : j[key]) v.push_back(x.is_number() ? x.get<double>() : kNaN);
    return v;
  }
  std::vector<std::string> ss(const json& j, const char* key) const {
    std::vector<std::string> v;
    if (!j.contains(key) || j[key].is_null()) return v;
    if (!j[key].is_array()) bad(key, "is not a list");
    for (const json& x : j[key]) {
      if (!x.is_string()) bad(key, "holds something other than strings");
      v.push_back(x.get<std::string>());
    }
    return v;
  }
  Interval iv(const json& j, const char* key) const {
    const std::vector<double> v = ds(j, key);
    if (v.empty()) return {kNaN, kNaN};
    if (v.size() != 2) bad(key, "is not a [lo, hi] pair");
    return {v[0], v[1]};
  }
};

StudyProtocol protocol_from_json(const json& p, const RowReader& rd) {
  StudyProtocol s;
  s.n = rd.i(p, "n");
  s.mean = rd.d(p, "mean");
  s.mean_ci = rd.iv(p, "mean_ci");
  s.worst = rd.d(p, "worst");
  s.worst_ci = rd.iv(p, "worst_ci");
  s.best = rd.d(p, "best");
  s.gap = rd.d(p, "gap");
  s.gap_null_q95 = rd.d(p, "gap_null_q95");
  s.period = int(rd.i(p, "period"));
  s.p_value = rd.d(p, "p_value");
  s.R = int(rd.i(p, "R"));
  s.S = int(rd.i(p, "S"));
  s.folded = rd.ds(p, "folded");
  for (double x : rd.ds(p, "folded_n")) s.folded_n.push_back(std::isfinite(x) ? int64_t(x) : 0);
  s.per_residue = rd.ds(p, "per_residue");
  if (rd.s(p, "gap_ci_method") == "simultaneous") {
    s.gap_ci = rd.iv(p, "gap_ci");
    s.gap_ci_percentile = rd.iv(p, "gap_ci_percentile");
    s.gap_bc = rd.d(p, "gap_bc");
  } else {  // an older row: its gap_ci is the bootstrap's percentile interval
    s.gap_ci_percentile = rd.iv(p, "gap_ci");
    s.gap_bc = gap_bias_corrected(s.gap, s.gap_ci_percentile);
    // a study row is a paired design (every base example at every residue): n / R prompts per residue
    std::vector<int64_t> correct, n;
    if (s.R > 0 && s.n % s.R == 0 && int(s.per_residue.size()) == s.R)
      for (double acc : s.per_residue) {
        n.push_back(std::isfinite(acc) ? s.n / s.R : 0);
        correct.push_back(std::isfinite(acc) ? std::llround(acc * double(s.n / s.R)) : 0);
      }
    // a row whose counts cannot be recovered has no simultaneous interval (never the percentile one
    // under the simultaneous mark)
    s.gap_ci = n.empty() ? Interval{kNaN, kNaN} : gap_simultaneous_interval(correct, n);
  }
  s.weakest_phase = int(rd.i(p, "weakest_phase", -1));
  return s;
}

StudyExplain explain_from_json(const json& x, const RowReader& rd) {
  StudyExplain e;
  e.S = int(rd.i(x, "S"));
  e.clean = rd.ds(x, "clean");
  e.cycling_note = rd.s(x, "cycling_note");
  for (const json& k : x.value("knockouts", json::array()))
    e.knockouts.push_back({rd.s(k, "label"), int(rd.i(k, "layer", -1)), int(rd.i(k, "kv_head", -1)),
                           rd.ds(k, "rel"), rd.ds(k, "acc")});
  for (const json& g : x.value("gates", json::array())) {
    StudyGate sg;
    sg.layer = int(rd.i(g, "layer"));
    sg.branch = rd.s(g, "branch");
    sg.kv_head = int(rd.i(g, "kv_head"));
    sg.static_conc = rd.d(g, "static");
    sg.window_conc = rd.d(g, "window");
    sg.peak = int(rd.i(g, "peak"));
    sg.profile = rd.ds(g, "profile");
    sg.W = int(rd.i(g, "W"));
    e.gates.push_back(sg);
  }
  for (const json& c : x.value("cycling", json::array()))
    e.cycling.push_back({int(rd.i(c, "layer", -1)), int(rd.i(c, "delta")), rd.d(c, "r2"),
                         rd.d(c, "r2_no_boundary"), rd.ds(c, "acc")});
  return e;
}

json explain_to_json(const StudyExplain& e) {
  json ko = json::array(), gates = json::array(), cyc = json::array();
  for (const StudyKnockout& k : e.knockouts)
    ko.push_back({{"label", k.label},
                  {"layer", k.layer},
                  {"kv_head", k.kv_head},
                  {"rel", nums(k.rel)},
                  {"acc", nums(k.acc)}});
  for (const StudyGate& g : e.gates)
    gates.push_back({{"layer", g.layer},
                     {"branch", g.branch},
                     {"kv_head", g.kv_head},
                     {"static", num(g.static_conc)},
                     {"window", num(g.window_conc)},
                     {"peak", g.peak},
                     {"profile", nums(g.profile)},
                     {"W", g.W}});
  for (const StudyCycling& c : e.cycling)
    cyc.push_back({{"layer", c.layer},
                   {"delta", c.delta},
                   {"r2", num(c.r2)},
                   {"r2_no_boundary", num(c.r2_no_boundary)},
                   {"acc", nums(c.acc)}});
  return {{"S", e.S},       {"clean", nums(e.clean)}, {"knockouts", ko},
          {"gates", gates}, {"cycling", cyc},         {"cycling_note", e.cycling_note}};
}

}  // namespace

json study_json_number(double x) { return json_number_or_null(x); }

json study_json_numbers(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(study_json_number(x));
  return a;
}

json study_json_interval(const Interval& i) {
  return json::array({study_json_number(i.lo), study_json_number(i.hi)});
}

bool study_is_design(const StudyRow& row, const std::string& base) {
  return row.tag.empty() && (row.preset == base || row.preset == "lm-" + base);
}

const StudyProtocol* StudyRow::protocol(const std::string& name) const {
  const auto it = protocols.find(name);
  return it == protocols.end() ? nullptr : &it->second;
}

bool StudyRow::compressed() const {
  if (strides.empty()) return kind != "full" && !kind.empty();
  for (int s : strides)
    if (s > 0) return true;
  return false;
}

int StudyRow::design_period() const {
  if (strides.empty()) return S;
  int l = 0;
  for (int s : strides)
    if (s > 0) l = l == 0 ? s : std::lcm(l, s);
  return l;
}

json study_protocol_summary_json(const StudyProtocol& p) {
  return {{"n", p.n},
          {"mean", num(p.mean)},
          {"mean_ci", interval(p.mean_ci)},
          {"worst", num(p.worst)},
          {"worst_ci", interval(p.worst_ci)},
          {"best", num(p.best)},
          {"gap", num(p.gap)},
          {"gap_ci", interval(p.gap_ci)},
          {"gap_ci_method", "simultaneous"},
          {"gap_ci_percentile", interval(p.gap_ci_percentile)},
          {"gap_bc", num(p.gap_bc)},
          {"gap_null_q95", num(p.gap_null_q95)},
          {"period", p.period},
          {"p_value", num(p.p_value)},
          {"R", p.R},
          {"S", p.S},
          {"weakest_phase", p.weakest_phase}};
}

json study_flip_json(const StudyFlip& f) {
  return {{"template", f.template_name},
          {"commit", f.commit},
          {"candidates", f.candidates},
          {"L_min", f.L_min},
          {"L_max", f.L_max},
          {"L", f.L},
          {"margin", nums(f.margin)},
          {"comparisons", f.comparisons},
          {"flips", f.flips},
          {"period", f.period},
          {"follows", f.follows},
          {"baseline_follows", f.baseline_follows},
          {"verdict", f.verdict},
          {"reason", f.reason},
          {"p_value", num(f.p_value)},
          {"S", f.S},
          {"margin_folded", nums(f.margin_folded)},
          {"margin_folded_n", f.margin_folded_n},
          {"margin_range", num(f.margin_range)},
          {"margin_share", num(f.margin_share)},
          {"margin_share_null_q95", num(f.margin_share_null_q95)},
          {"margin_p", num(f.margin_p)}};
}

StudyRow study_row_from_json(const json& j, const std::string& where) {
  const RowReader rd{where};
  if (!j.is_object()) fail(where, "a row is a JSON object", "delete " + where + " (that run is redone)");
  if (!j.contains("protocols")) rd.bad("protocols", "is missing");
  StudyRow r;
  r.id = json_get<std::string>(j, "id", where, rd.fix());
  r.preset = json_get<std::string>(j, "preset", where, rd.fix());
  r.seed = json_get<uint64_t>(j, "seed", where, rd.fix());
  r.family = rd.s(j, "family");
  r.paper = rd.s(j, "paper");
  r.tag = rd.s(j, "tag");
  r.steps = rd.i(j, "steps");
  r.train_seconds = rd.d(j, "train_seconds");
  r.wall_seconds = rd.d(j, "wall_seconds");
  r.overrides = j.value("overrides", json(nullptr));
  r.commit = rd.s(j, "commit");
  r.threads = j.value("threads", json(nullptr));
  r.kind = rd.s(j, "kind");
  r.S = int(rd.i(j, "S"));
  r.W = int(rd.i(j, "W"));
  for (double s : rd.ds(j, "strides")) r.strides.push_back(int(s));
  r.n_kv_heads = int(rd.i(j, "n_kv_heads", 1));
  r.kv_bytes_per_token = rd.d(j, "kv_bytes_per_token");
  r.kv_context = rd.i(j, "kv_context");
  r.val_loss = rd.d(j, "val_loss");
  if (!j["protocols"].is_object()) rd.bad("protocols", "is not an object");
  for (const auto& [name, p] : j["protocols"].items()) r.protocols[name] = protocol_from_json(p, rd);
  if (j.contains("explain") && j["explain"].is_object()) r.explain = explain_from_json(j["explain"], rd);
  if (j.contains("copy_loss") && j["copy_loss"].is_object()) {
    const json& c = j["copy_loss"];
    StudyCopyLoss cl;
    cl.per_residue = rd.ds(c, "per_residue");
    cl.folded = rd.ds(c, "folded");
    cl.first_copy = rd.ds(c, "first_copy");
    cl.mean = rd.d(c, "mean");
    cl.worst = rd.d(c, "worst");
    cl.gap = rd.d(c, "gap");
    cl.worst_phase = int(rd.i(c, "worst_phase", -1));
    cl.gap_ci_percentile = rd.iv(c, "gap_ci_percentile");
    cl.tokens_per_residue = rd.i(c, "tokens_per_residue");
    r.copy_loss = cl;
  }
  if (j.contains("flip") && j["flip"].is_object()) {
    const json& f = j["flip"];
    StudyFlip fl;
    fl.template_name = rd.s(f, "template");
    fl.commit = rd.s(f, "commit");
    fl.candidates = rd.ss(f, "candidates");
    fl.L_min = int(rd.i(f, "L_min"));
    fl.L_max = int(rd.i(f, "L_max"));
    fl.L = json_get_or<std::vector<int>>(f, "L", {}, rd.where, rd.fix());
    fl.margin = rd.ds(f, "margin");
    fl.comparisons = int(rd.i(f, "comparisons"));
    fl.flips = int(rd.i(f, "flips"));
    fl.period = int(rd.i(f, "period"));
    fl.follows = int(rd.i(f, "follows"));
    fl.baseline_follows = int(rd.i(f, "baseline_follows"));
    fl.verdict = rd.s(f, "verdict");
    fl.reason = rd.s(f, "reason");
    fl.p_value = rd.d(f, "p_value");
    fl.S = int(rd.i(f, "S"));
    fl.margin_folded = rd.ds(f, "margin_folded");
    fl.margin_folded_n = json_get_or<std::vector<int>>(f, "margin_folded_n", {}, rd.where, rd.fix());
    fl.margin_range = rd.d(f, "margin_range");
    fl.margin_share = rd.d(f, "margin_share");
    fl.margin_share_null_q95 = rd.d(f, "margin_share_null_q95");
    fl.margin_p = rd.d(f, "margin_p");
    if (fl.L.size() != fl.margin.size()) rd.bad("flip.margin", "does not hold one margin per length");
    if (fl.candidates.size() != 2)
      rd.bad("flip.candidates", "does not hold the two candidates the margin compares");
    if (fl.margin_folded.size() != size_t(fl.S) || fl.margin_folded_n.size() != fl.margin_folded.size())
      rd.bad("flip.margin_folded", "does not hold one value and one count per phase 0..S-1");
    r.flip = fl;
  }
  r.deviation = rd.s(j, "deviation");
  r.train_commit = rd.s(j, "train_commit");
  r.train_threads = j.value("train_threads", json(nullptr));
  r.upgraded_from_samples = rd.i(j, "upgraded_from_samples");
  return r;
}

json study_row_to_json(const StudyRow& r) {
  json j = {{"id", r.id},
            {"preset", r.preset},
            {"seed", r.seed},
            {"family", r.family},
            {"paper", r.paper},
            {"tag", r.tag},
            {"steps", r.steps},
            {"train_seconds", num(r.train_seconds)},
            {"commit", r.commit},
            {"threads", r.threads},
            {"kind", r.kind},
            {"S", r.S},
            {"W", r.W},
            {"strides", r.strides},
            {"n_kv_heads", r.n_kv_heads},
            {"kv_bytes_per_token", num(r.kv_bytes_per_token)},
            {"kv_context", r.kv_context},
            {"val_loss", num(r.val_loss)}};
  if (std::isfinite(r.wall_seconds)) j["wall_seconds"] = r.wall_seconds;
  if (!r.overrides.is_null()) j["overrides"] = r.overrides;  // what the tag stands for
  json protocols = json::object();
  for (const auto& [name, p] : r.protocols) {
    json e = study_protocol_summary_json(p);
    e["folded"] = nums(p.folded);
    e["folded_n"] = p.folded_n;
    e["per_residue"] = nums(p.per_residue);
    protocols[name] = e;
  }
  j["protocols"] = protocols;
  if (r.explain) j["explain"] = explain_to_json(*r.explain);
  if (r.copy_loss)
    j["copy_loss"] = {{"per_residue", nums(r.copy_loss->per_residue)},
                      {"folded", nums(r.copy_loss->folded)},
                      {"first_copy", nums(r.copy_loss->first_copy)},
                      {"mean", num(r.copy_loss->mean)},
                      {"worst", num(r.copy_loss->worst)},
                      {"gap", num(r.copy_loss->gap)},
                      {"worst_phase", r.copy_loss->worst_phase},
                      {"gap_ci_percentile", interval(r.copy_loss->gap_ci_percentile)},
                      {"tokens_per_residue", r.copy_loss->tokens_per_residue}};
  if (r.flip) j["flip"] = study_flip_json(*r.flip);
  if (!r.deviation.empty()) j["deviation"] = r.deviation;
  if (r.upgraded_from_samples > 0) {
    j["train_commit"] = r.train_commit;
    j["train_threads"] = r.train_threads;
    j["upgraded_from_samples"] = r.upgraded_from_samples;
  }
  return j;
}

std::string study_row_path(const std::string& out, const std::string& id) {
  return (fs::path(out) / "runs" / id / "row.json").string();
}

std::optional<StudyRow> study_row_read(const std::string& path) {
  if (!fs::exists(path)) return std::nullopt;
  const std::string fix = "delete " + path + " (that run is redone)";
  return study_row_from_json(json_parse_or_fail(io_read_text(path, fix), path, fix), path);
}

void study_row_write(const std::string& path, const StudyRow& row) {
  io_make_dirs(fs::path(path).parent_path().string());
  io_write_atomic(path, study_row_to_json(row).dump(1) + "\n");
}

StudyProtocol study_protocol_of(const EvalResults& r) {
  const Stats& s = r.stats;
  StudyProtocol p;
  p.n = s.n_scored;
  p.mean = s.mean;
  p.mean_ci = s.mean_ci;
  p.worst = s.worst;
  p.worst_ci = s.worst_ci;
  p.best = s.best;
  p.gap = s.gap;
  p.gap_ci = s.gap_ci;
  p.gap_ci_percentile = s.gap_ci_percentile;
  p.gap_bc = s.gap_bc;
  p.gap_null_q95 = s.gap_null_q95;
  p.period = s.period.P;
  p.p_value = s.p_value;
  p.R = s.R;
  p.S = s.S;
  for (size_t i = 0; i < s.folded.size(); ++i) {
    p.folded.push_back(s.folded[i].acc);
    p.folded_n.push_back(s.folded[i].n);
    if (s.folded[i].n > 0 && (p.weakest_phase < 0 || s.folded[i].acc < s.folded[size_t(p.weakest_phase)].acc))
      p.weakest_phase = int(i);
  }
  for (const ResidueStat& x : s.per_residue) p.per_residue.push_back(x.acc);
  return p;
}

StudyExplain study_explain_of(const ExplainResults& x) {
  StudyExplain e;
  e.S = x.S;
  e.clean = x.clean.acc;
  e.cycling_note = x.cycling_note;
  for (const KnockoutRow& k : x.knockouts)
    e.knockouts.push_back({k.label, k.layer, k.kv_head, k.rel, k.acc.acc});
  for (const GateStats& g : x.gates) {
    StudyGate sg;
    sg.layer = g.layer;
    sg.branch = g.branch;
    sg.kv_head = g.kv_head;
    sg.static_conc = g.static_conc;
    sg.window_conc = g.window_conc;
    sg.peak = g.peak;
    sg.profile = g.profile;
    sg.W = g.W;
    e.gates.push_back(sg);
  }
  for (const CyclingRow& c : x.cycling)
    e.cycling.push_back({c.layer, c.delta, c.r2, c.r2_no_boundary, c.acc.acc});
  return e;
}

int64_t study_row_min_samples(const StudyRow& row) {
  if (row.protocols.empty()) return 0;
  int64_t n = std::numeric_limits<int64_t>::max();
  for (const auto& [name, p] : row.protocols) n = std::min(n, p.n);
  return n;
}

}  // namespace phasescope
