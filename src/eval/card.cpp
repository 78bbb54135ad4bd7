// card.cpp — the phase card from an evaluation's statistics, its ranking of phases, and its one JSON
// reader and writer (schema in docs/card.md).
#include "eval/card.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/build_info.h"
#include "core/check.h"
#include "core/io.h"
#include "core/json_fields.h"

namespace phasescope {

namespace {

using nlohmann::json;

CardPhase card_phase_of(const ResidueStat& s) {
  return CardPhase{s.residue, s.n, s.correct, s.acc, s.ci_low, s.ci_high};
}

json phase_json(const CardPhase& p) {
  return {{"phase", p.phase},
          {"n", p.n},
          {"correct", p.correct},
          {"acc", json_number_or_null(p.acc)},
          {"ci_low", json_number_or_null(p.ci_low)},
          {"ci_high", json_number_or_null(p.ci_high)}};
}

json interval_json(const Interval& i) {
  return json::array({json_number_or_null(i.lo), json_number_or_null(i.hi)});
}

const char* kFix = "write the card with `phasescope eval --card` or `phasescope audit` (docs/card.md)";

std::vector<CardPhase> phases_from_json(const json& j, const std::string& key, const std::string& where) {
  const json& list = json_at(j, key, where, kFix);
  if (!list.is_array()) fail(json_where(where, key), "expected a list of phases", kFix);
  std::vector<CardPhase> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string w = json_where(where, key) + "[" + std::to_string(i) + "]";
    const json& e = list[i];
    CardPhase p;
    p.phase = json_get<int>(e, "phase", w, kFix);
    p.n = json_get<int64_t>(e, "n", w, kFix);
    p.correct = json_get_or<int64_t>(e, "correct", 0, w, kFix);
    p.acc = json_number_or_nan(json_at(e, "acc", w, kFix), json_where(w, "acc"), kFix);
    p.ci_low = json_present(e, "ci_low") ? json_get<double>(e, "ci_low", w, kFix) : std::nan("");
    p.ci_high = json_present(e, "ci_high") ? json_get<double>(e, "ci_high", w, kFix) : std::nan("");
    out.push_back(p);
  }
  return out;
}

Interval interval_from_json(const json& j, const std::string& key, const std::string& where) {
  if (!json_present(j, key)) return {std::nan(""), std::nan("")};
  const json& v = j.at(key);
  if (!v.is_array() || v.size() != 2) fail(json_where(where, key), "expected [low, high]", kFix);
  return {json_number_or_nan(v[0], json_where(where, key), kFix),
          json_number_or_nan(v[1], json_where(where, key), kFix)};
}

}  // namespace

nlohmann::json card_check_json(const std::string& name, const std::string& verdict, const std::string& reason,
                               const std::string& rule, nlohmann::json figures) {
  return {{"name", name},
          {"verdict", verdict},
          {"reason", reason},
          {"rule", rule},
          {"figures", std::move(figures)}};
}

int card_phase(const CardGrid& g, int64_t p) {
  PS_ASSERT(g.period >= 1, "card_phase: the grid has no period");
  const int64_t r = (p - g.origin) % g.period;
  return int(r < 0 ? r + g.period : r);
}

void card_rank_phases(PhaseCard* c) {
  std::vector<int> order(c->folded.size());
  std::iota(order.begin(), order.end(), 0);
  auto acc = [&](int i) { return std::isfinite(c->folded[size_t(i)].acc) ? c->folded[size_t(i)].acc : -1.0; };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return acc(a) > acc(b); });
  c->phase_order.clear();
  for (int i : order) c->phase_order.push_back(c->folded[size_t(i)].phase);
  c->strongest_phase = c->phase_order.empty() ? 0 : c->phase_order.front();
  // the weakest: the lowest accuracy, ties to the lower phase
  int weakest = c->phase_order.empty() ? 0 : c->phase_order.back();
  double lo = 2;
  for (const CardPhase& p : c->folded)
    if (std::isfinite(p.acc) && p.acc < lo) lo = p.acc, weakest = p.phase;
  c->weakest_phase = weakest;
}

PhaseCard card_from_results(const EvalResults& r, const CardGrid& grid, uint64_t seed) {
  const Stats& s = r.stats;
  if (grid.period < 1 || s.R % grid.period != 0)
    fail("card grid.period",
         "is " + std::to_string(grid.period) +
             ", which does not divide the residues R = " + std::to_string(s.R),
         "use the model's stride (or the lcm of its strides) as the period, and R a multiple of it");
  PhaseCard c;
  c.model = r.meta.model;
  c.source = "eval";
  c.task = r.meta.task;
  c.protocol = r.meta.protocol;
  c.seed = seed;
  c.n_samples = s.n_scored;
  c.grid = grid;
  c.R = s.R;
  c.detected_period = s.period.P;
  for (const ResidueStat& x : s.per_residue) c.per_residue.push_back(card_phase_of(x));
  // fold to the card's period (the evaluation may have folded to another S)
  c.folded.resize(size_t(grid.period));
  for (int ph = 0; ph < grid.period; ++ph) c.folded[size_t(ph)].phase = ph;
  for (const ResidueStat& x : s.per_residue) {
    CardPhase& f = c.folded[size_t(card_phase(grid, x.residue))];
    f.n += x.n;
    f.correct += x.correct;
  }
  for (CardPhase& f : c.folded) {
    f.acc = f.n > 0 ? double(f.correct) / double(f.n) : std::nan("");
    const Interval w = wilson_interval(f.correct, f.n);
    f.ci_low = w.lo;
    f.ci_high = w.hi;
  }
  c.mean = s.mean;
  c.worst = s.worst;
  c.best = s.best;
  c.gap = s.gap;
  c.mean_ci = s.mean_ci;
  c.gap_ci = s.gap_ci;
  c.commit = build_commit();
  card_rank_phases(&c);
  return c;
}

json card_to_json(const PhaseCard& c) {
  json per = json::array(), fold = json::array();
  for (const CardPhase& p : c.per_residue) per.push_back(phase_json(p));
  for (const CardPhase& p : c.folded) fold.push_back(phase_json(p));
  return {{"schema", kCardSchema},
          {"version", kCardVersion},
          {"model", c.model},
          {"source", c.source},
          {"task", c.task},
          {"protocol", c.protocol},
          {"seed", c.seed},
          {"n_samples", c.n_samples},
          {"grid",
           {{"period", c.grid.period},
            {"origin", c.grid.origin},
            {"prompt_offset", c.grid.prompt_offset},
            {"note", c.grid.note}}},
          {"R", c.R},
          {"detected_period", c.detected_period},
          {"per_residue", per},
          {"folded", fold},
          {"mean", json_number_or_null(c.mean)},
          {"worst", json_number_or_null(c.worst)},
          {"best", json_number_or_null(c.best)},
          {"gap", json_number_or_null(c.gap)},
          {"mean_ci", interval_json(c.mean_ci)},
          {"gap_ci", interval_json(c.gap_ci)},
          {"strongest_phase", c.strongest_phase},
          {"weakest_phase", c.weakest_phase},
          {"phase_order", c.phase_order},
          {"neutral_tokens", c.neutral_tokens},
          {"tokenizer_sha256", c.tokenizer_sha256},
          {"commit", c.commit},
          {"checks", c.checks},
          {"provenance", c.provenance}};
}

PhaseCard card_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) fail(where, "is not a JSON object", kFix);
  const std::string schema = json_get<std::string>(j, "schema", where, kFix);
  if (schema != kCardSchema)
    fail(json_where(where, "schema"), "is '" + schema + "', not '" + kCardSchema + "'",
         "pass a phase card (results.json is not one: `phasescope eval --card` writes card.json)");
  const int version = json_get<int>(j, "version", where, kFix);
  if (version != kCardVersion)
    fail(json_where(where, "version"),
         "is " + std::to_string(version) + "; this build reads version " + std::to_string(kCardVersion),
         "rewrite the card with this build");
  PhaseCard c;
  c.model = json_get_or<std::string>(j, "model", "", where, kFix);
  c.source = json_get_or<std::string>(j, "source", "", where, kFix);
  c.task = json_get_or<std::string>(j, "task", "", where, kFix);
  c.protocol = json_get_or<std::string>(j, "protocol", "", where, kFix);
  c.seed = json_get_or<uint64_t>(j, "seed", 0, where, kFix);
  c.n_samples = json_get_or<int64_t>(j, "n_samples", 0, where, kFix);
  const std::string gw = json_where(where, "grid");
  const json& g = json_at(j, "grid", where,
                          "a card needs its grid: {\"period\": S, \"origin\": position of phase 0, "
                          "\"prompt_offset\": tokens before the prompt}");
  c.grid.period = json_get<int>(g, "period", gw, "the model's stride, e.g. 8");
  c.grid.origin = json_get<int64_t>(g, "origin", gw,
                                    "the absolute position phase 0 refers to (0 when compressed blocks start "
                                    "at the sequence's first token); without it no phase can be placed");
  c.grid.prompt_offset = json_get_or<int64_t>(g, "prompt_offset", 0, gw, kFix);
  c.grid.note = json_get_or<std::string>(g, "note", "", gw, kFix);
  if (c.grid.period < 1 || c.grid.period > 4096)
    fail(json_where(gw, "period"), "must be in [1, 4096]", "the model's stride, e.g. 8");
  if (c.grid.prompt_offset < 0)
    fail(json_where(gw, "prompt_offset"), "must be >= 0", "the number of tokens before the user's prompt");
  c.R = json_get_or<int>(j, "R", 0, where, kFix);
  c.detected_period = json_get_or<int>(j, "detected_period", 0, where, kFix);
  c.per_residue = json_present(j, "per_residue") ? phases_from_json(j, "per_residue", where) : c.per_residue;
  c.folded = phases_from_json(j, "folded", where);
  if (int(c.folded.size()) != c.grid.period)
    fail(json_where(where, "folded"),
         "has " + std::to_string(c.folded.size()) +
             " phases, not grid.period = " + std::to_string(c.grid.period),
         "one entry per phase 0..period-1");
  for (size_t i = 0; i < c.folded.size(); ++i)
    if (c.folded[i].phase != int(i))
      fail(json_where(where, "folded") + "[" + std::to_string(i) + "]",
           "has phase " + std::to_string(c.folded[i].phase), "list the phases in order 0..period-1");
  c.mean = json_present(j, "mean") ? json_get<double>(j, "mean", where, kFix) : std::nan("");
  c.worst = json_present(j, "worst") ? json_get<double>(j, "worst", where, kFix) : std::nan("");
  c.best = json_present(j, "best") ? json_get<double>(j, "best", where, kFix) : std::nan("");
  c.gap = json_present(j, "gap") ? json_get<double>(j, "gap", where, kFix) : std::nan("");
  c.mean_ci = interval_from_json(j, "mean_ci", where);
  c.gap_ci = interval_from_json(j, "gap_ci", where);
  c.neutral_tokens = json_get_or<std::vector<int>>(j, "neutral_tokens", {}, where, kFix);
  c.tokenizer_sha256 = json_get_or<std::string>(j, "tokenizer_sha256", "", where, kFix);
  c.commit = json_get_or<std::string>(j, "commit", "", where, kFix);
  if (json_present(j, "checks")) c.checks = j.at("checks");
  if (json_present(j, "provenance")) c.provenance = j.at("provenance");
  card_rank_phases(&c);  // recomputed from the phases, so a hand-edited card cannot disagree with itself
  return c;
}

PhaseCard card_read(const std::string& path) {
  const json j = json_parse_or_fail(io_read_text(path, "pass the card.json that eval or audit wrote"), path,
                                    "the card must be JSON (docs/card.md)");
  return card_from_json(j, path);
}

void card_write(const PhaseCard& c, const std::string& path) {
  io_write_atomic(path, card_to_json(c).dump(2) + "\n");
}

}  // namespace phasescope
