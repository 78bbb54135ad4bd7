// study_mitigations.cpp — see study_mitigations.h.
#include "jobs/study_mitigations.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "core/format.h"
#include "jobs/study_findings.h"
#include "jobs/study_grid.h"

namespace phasescope {

using json = nlohmann::json;

namespace {

const std::vector<std::string> kProtocols = {"prefix", "in-sequence"};

json num(double x) { return study_json_number(x); }
json interval(const Interval& i) { return study_json_interval(i); }

// One run under one protocol: the unit every table below is made of.
struct Cell {
  const StudyRow* row;
  std::string protocol;
  const StudyProtocol* p;
  std::string variant() const { return study_variant(row->preset, row->tag); }
};

// The `phasescope train` flags that apply a run's grid overrides, or nothing when some override has no
// flag (the run is then redone through the study). "" for no overrides.
std::optional<std::string> train_flags(const json& overrides) {
  if (overrides.is_null() || overrides.empty()) return std::string();
  static const std::map<std::pair<std::string, std::string>, std::string> flags = {
      {{"model", "n_layers"}, "--layers"},
      {{"model", "token_shift"}, "--token-shift"},
      {{"train", "steps"}, "--steps"},
      {{"train", "dense_warmup_steps"}, "--dense-warmup"}};
  std::string out;
  for (const auto& [section, fields] : overrides.items()) {
    if (!fields.is_object()) return std::nullopt;
    for (const auto& [field, value] : fields.items()) {
      const auto f = flags.find({section, field});
      if (f == flags.end() || !value.is_number_integer()) return std::nullopt;
      out += fmt::format(" {} {}", f->second, value.get<int64_t>());
    }
  }
  return out;
}

// The commands that rebuild one cell outside the study: an untagged run is its preset as it is; a tagged
// run with an override no flag sets is rebuilt through the study.
std::string cell_command(const Cell& c) {
  const StudyRow& r = *c.row;
  const std::string dir = "runs/" + r.id;
  const std::optional<std::string> flags = r.tag.empty() ? std::string() : train_flags(r.overrides);
  if (!flags)
    return "phasescope study --grid mitigations (run " + r.id + ": the preset with the grid's overrides)";
  return fmt::format(
      "phasescope train --preset {} --seed {}{} --out {} && phasescope eval --checkpoint {} --protocol {} "
      "--samples {} --R {} --bootstrap 2000 --seed 1 --out {}/eval-{}",
      r.preset, r.seed, *flags, dir, dir, c.protocol, c.p->n, c.p->R > 0 ? c.p->R : 24, dir, c.protocol);
}

json cell_json(const Cell& c) {
  const StudyRow& r = *c.row;
  const StudyProtocol& p = *c.p;
  return {{"preset", r.preset},
          {"seed", r.seed},
          {"tag", r.tag},
          {"variant", c.variant()},  // the unit of every aggregate below
          {"family", r.family},
          {"protocol", c.protocol},
          {"kv_bytes_per_token", num(r.kv_bytes_per_token)},
          {"mean", num(p.mean)},
          {"mean_ci", interval(p.mean_ci)},
          {"worst", num(p.worst)},
          {"worst_ci", interval(p.worst_ci)},
          {"gap", num(p.gap)},
          {"gap_ci", interval(p.gap_ci)},
          {"gap_bc", num(p.gap_bc)},
          {"weakest_phase", p.weakest_phase},
          {"period", p.period},
          {"n", p.n},
          {"val_loss", num(r.val_loss)},
          {"train_seconds", num(r.train_seconds)},
          {"commit", r.commit},
          {"command", cell_command(c)}};
}

double avg(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? std::nan("") : s / double(v.size());
}

// The reference a variant is judged against: the longest other preset that `preset` extends as BASE-x,
// else `reference`.
std::string base_of(const std::string& preset, const std::vector<std::string>& presets,
                    const std::string& reference) {
  std::string base = reference;
  size_t base_len = 0;
  for (const std::string& other : presets)
    if (other != preset && other.size() > base_len && preset.rfind(other + "-", 0) == 0) {
      base = other;
      base_len = other.size();
    }
  return base;
}

// Per variant (preset and tag) and protocol over seeds: each figure's mean and range ("presets"), and per
// variant its KV bytes per token with worst and mean averaged over seeds and protocols ("frontier").
void add_variant_summaries(const std::vector<const StudyRow*>& firsts, const std::vector<Cell>& cells,
                           json* out) {
  json presets = json::array(), frontier = json::array();
  for (const StudyRow* first : firsts) {
    const std::string variant = study_variant(first->preset, first->tag);
    std::vector<double> worst_all, mean_all;
    double kv = 0;
    std::string family;
    for (const std::string& protocol : kProtocols) {
      std::map<std::string, std::vector<double>> f;
      std::vector<uint64_t> seeds;
      for (const Cell& c : cells)
        if (c.variant() == variant && c.protocol == protocol) {
          f["mean"].push_back(c.p->mean);
          f["worst"].push_back(c.p->worst);
          f["gap"].push_back(c.p->gap);
          f["val_loss"].push_back(c.row->val_loss);
          seeds.push_back(c.row->seed);
          kv = c.row->kv_bytes_per_token;
          family = c.row->family;
        }
      if (seeds.empty()) continue;
      json e = {{"preset", first->preset}, {"tag", first->tag}, {"variant", variant},      {"family", family},
                {"protocol", protocol},    {"seeds", seeds},    {"kv_bytes_per_token", kv}};
      for (auto& [k, v] : f)
        e[k] = {{"mean", num(avg(v))},
                {"min", num(*std::min_element(v.begin(), v.end()))},
                {"max", num(*std::max_element(v.begin(), v.end()))}};
      presets.push_back(e);
      worst_all.insert(worst_all.end(), f["worst"].begin(), f["worst"].end());
      mean_all.insert(mean_all.end(), f["mean"].begin(), f["mean"].end());
    }
    if (!worst_all.empty())
      frontier.push_back({{"preset", first->preset},
                          {"tag", first->tag},
                          {"variant", variant},
                          {"family", family},
                          {"kv_bytes_per_token", kv},
                          {"worst", num(avg(worst_all))},
                          {"mean", num(avg(mean_all))}});
  }
  (*out)["presets"] = presets;
  (*out)["frontier"] = frontier;
}

// One candidate variant judged seed by seed against `base` (of the same tag), per protocol; reference
// cells below the learned bar are not paired and are added to `unpaired`.
void add_goal_rows(const StudyRow& first, const std::string& base, const std::vector<Cell>& cells, json* goal,
                   std::vector<std::string>* unpaired) {
  const std::string variant = study_variant(first.preset, first.tag);
  for (const std::string& protocol : kProtocols) {
    json seeds = json::array();
    int pass = 0, paired = 0;
    bool equal_memory = true;
    for (const Cell& c : cells) {
      if (c.variant() != variant || c.protocol != protocol) continue;
      const Cell* ref = nullptr;
      for (const Cell& q : cells)
        if (q.row->preset == base && q.protocol == protocol && q.row->seed == c.row->seed &&
            q.row->tag == first.tag)
          ref = &q;
      if (!ref) continue;
      if (ref->p->mean < kStudyLearned) {
        const std::string id = ref->row->id + " (" + protocol + ")";
        if (std::find(unpaired->begin(), unpaired->end(), id) == unpaired->end()) unpaired->push_back(id);
        continue;
      }
      ++paired;
      const double kv_ratio = c.row->kv_bytes_per_token / ref->row->kv_bytes_per_token;
      equal_memory = equal_memory && std::abs(kv_ratio - 1) <= 0.005;
      const bool worst_ok = c.p->worst >= 2 * ref->p->worst;
      const bool gap_ok = c.p->gap <= ref->p->gap / 2;
      const bool mean_ok = c.p->mean >= ref->p->mean_ci.lo;
      pass += worst_ok && gap_ok && mean_ok;
      seeds.push_back({{"seed", c.row->seed},
                       {"worst", num(c.p->worst)},
                       {"reference_worst", num(ref->p->worst)},
                       {"gap", num(c.p->gap)},
                       {"reference_gap", num(ref->p->gap)},
                       {"mean", num(c.p->mean)},
                       {"reference_mean", num(ref->p->mean)},
                       {"reference_mean_lo", num(ref->p->mean_ci.lo)},
                       {"kv_ratio", kv_ratio},
                       {"worst_doubled", worst_ok},
                       {"gap_halved", gap_ok},
                       {"mean_kept", mean_ok}});
    }
    const std::string verdict = paired < 3       ? "inconclusive (fewer than 3 paired seeds)"
                                : !equal_memory  ? "not at equal memory"
                                : pass == paired ? "meets"
                                                 : "does not meet";
    goal->push_back({{"preset", first.preset},
                     {"tag", first.tag},
                     {"variant", variant},
                     {"reference", study_variant(base, first.tag)},
                     {"protocol", protocol},
                     {"paired_seeds", paired},
                     {"seeds_passing", pass},
                     {"verdict", verdict},
                     {"per_seed", seeds}});
  }
}

}  // namespace

json study_mitigations(const std::vector<StudyRow>& rows, const std::string& reference) {
  std::vector<Cell> cells;
  for (const StudyRow& r : rows)
    for (const std::string& protocol : kProtocols)
      if (const StudyProtocol* p = r.protocol(protocol)) cells.push_back({&r, protocol, p});
  json out;
  out["reference"] = reference;
  out["kv_context"] = kStudyKvContext;
  out["kv_bytes_per_value"] = kStudyKvBytes;
  json flat = json::array();
  for (const Cell& c : cells) flat.push_back(cell_json(c));
  out["rows"] = flat;

  // variants and presets in row order
  std::vector<const StudyRow*> firsts;  // the first row of each variant
  std::vector<std::string> preset_names;
  for (const StudyRow& r : rows) {
    if (std::none_of(firsts.begin(), firsts.end(),
                     [&](const StudyRow* q) { return q->preset == r.preset && q->tag == r.tag; }))
      firsts.push_back(&r);
    if (std::find(preset_names.begin(), preset_names.end(), r.preset) == preset_names.end())
      preset_names.push_back(r.preset);
  }

  add_variant_summaries(firsts, cells, &out);

  // the target, per candidate and protocol, seed by seed against the reference of that seed
  const std::string rule =
      "at the reference's KV bytes per token (within 0.5%), on every seed the reference also has: worst >= 2 "
      "x the reference's worst, gap <= the reference's gap / 2, and mean >= the lower end of the reference "
      "mean's 95% interval (the mean is not lowered beyond noise); 'meets' when every such seed passes, "
      "with at least 3 seeds; a seed whose reference row has not learned the task (mean below 10%) is not "
      "paired (nothing to double or halve). The reference is " +
      reference +
      ", except for a candidate named BASE-x where preset BASE has rows here (a fix carried over to "
      "another design, e.g. dsv4-csa-coverage against dsv4-csa); a candidate run with a grid tag (another "
      "recipe, e.g. a dense warm-up) is paired with the reference's run of the same tag and seed";
  json goal = json::array();
  std::vector<std::string> unpaired;  // reference cells below the learned bar
  for (const StudyRow* first : firsts) {
    const std::string variant = study_variant(first->preset, first->tag);
    const std::string base = base_of(first->preset, preset_names, reference);
    // judged: every "candidate..." variant, and a "carry-over..." one that extends another preset here; a
    // carried-over design's own reference ("carry-over: reference", even when its name extends another
    // design's) is not a candidate
    bool candidate = false;
    for (const Cell& c : cells) {
      const std::string& fam = c.row->family;
      if (c.variant() == variant &&
          (fam.rfind("candidate", 0) == 0 ||
           (fam.rfind("carry-over", 0) == 0 && fam != "carry-over: reference" && base != reference)))
        candidate = true;
    }
    if (!candidate) continue;
    add_goal_rows(*first, base, cells, &goal, &unpaired);
  }
  out["goal_rule"] = rule;
  out["goal"] = goal;
  out["left_out_not_learned"] = unpaired;
  return out;
}

std::string study_format_mitigations(const json& m) {
  std::string t = fmt::format(
      "\nmitigations at {} tokens (KV bytes per token, bf16); figures in %, mean over seeds [min..max]\n",
      m["kv_context"].get<int64_t>());
  t += fmt::format("{:<20} {:<12} {:>5} {:>8} {:>18} {:>18} {:>18} {:>7}\n", "preset", "protocol", "seeds",
                   "KV B/tok", "mean", "worst", "gap", "val");
  auto value = [](const json& x) { return x.is_number() ? x.get<double>() : std::nan(""); };
  auto cell = [&](const json& f) {
    return fmt::format("{} [{}..{}]", pct(value(f["mean"])), pct(value(f["min"])), pct(value(f["max"])));
  };
  for (const json& e : m["presets"])
    t += fmt::format("{:<20} {:<12} {:>5} {:>8.2f} {:>18} {:>18} {:>18} {:>7.3f}\n",
                     e["variant"].get<std::string>(), e["protocol"].get<std::string>(), e["seeds"].size(),
                     e["kv_bytes_per_token"].get<double>(), cell(e["mean"]), cell(e["worst"]), cell(e["gap"]),
                     value(e["val_loss"]["mean"]));
  t += "goal: " + m["goal_rule"].get<std::string>() + "\n";
  for (const json& g : m["goal"])
    t += fmt::format("  {:<20} {:<12} vs {:<10} {} ({} of {} seeds pass)\n", g["variant"].get<std::string>(),
                     g["protocol"].get<std::string>(), g["reference"].get<std::string>(),
                     g["verdict"].get<std::string>(), g["seeds_passing"].get<int>(),
                     g["paired_seeds"].get<int>());
  return t;
}

}  // namespace phasescope
