// study_findings.cpp — see study_findings.h.
#include "jobs/study_findings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "eval/stats.h"

namespace phasescope {

using json = nlohmann::json;

namespace {

const std::string kPrefix = "prefix";

bool is_ref(const StudyRow& r, const std::string& preset) { return study_is_design(r, preset); }

json num(double x) { return study_json_number(x); }
json interval(const Interval& i) { return study_json_interval(i); }
json nums(const std::vector<double>& v) { return study_json_numbers(v); }

// beyond sampling noise: the gap's simultaneous lower 95% bound is above 0 (some residue's accuracy is
// above another's beyond the noise of either)
bool gap_beyond_noise(const StudyProtocol& p) { return p.gap_ci.lo > 0; }

json finding(const std::string& id, const std::string& claim, const std::string& rule,
             const std::string& verdict, const json& figures) {
  return {{"id", id}, {"claim", claim}, {"rule", rule}, {"verdict", verdict}, {"figures", figures}};
}

// The period detector's result against the design's period S: "stride" (P = S), "divisor" (a proper
// divisor of S, 1 < P < S), "none" (P = 0: no phase dependence detected) or "other".
std::string period_category(int P, int S) {
  if (P == S) return "stride";
  if (P == 0) return "none";
  if (P > 1 && P < S && S % P == 0) return "divisor";
  return "other";
}

json finding_a(const std::vector<StudyRow>& rows) {
  json figs = json::array();
  int qualifying = 0, flat = 0, not_flat = 0;
  for (const StudyRow& r : rows) {
    if (r.kind != "full") continue;
    for (const std::string protocol : {"prefix", "in-sequence"}) {
      const StudyProtocol* p = r.protocol(protocol);
      if (!p) continue;
      const double bar = std::max(0.061, p->gap_null_q95);
      const bool off = p->mean >= 0.2 && p->mean <= 0.9;
      const std::string v = !off                 ? "at ceiling/floor"
                            : p->gap <= bar      ? "flat"
                            : p->gap_ci.lo > bar ? "not flat"
                                                 : "unclear";
      if (off) {
        ++qualifying;
        flat += v == "flat";
        not_flat += v == "not flat";
      }
      figs.push_back({{"run", r.id},
                      {"protocol", protocol},
                      {"mean", num(p->mean)},
                      {"gap", num(p->gap)},
                      {"bar", num(bar)},
                      {"status", v}});
    }
  }
  const std::string verdict = qualifying == 0      ? "inconclusive"
                              : not_flat > 0       ? "does not hold"
                              : flat == qualifying ? "holds"
                                                   : "inconclusive";
  return finding(
      "a", "full attention is flat across residues (gap within 6.1 points)",
      "over full-attention runs and protocols with mean in [20%, 90%]: flat if gap <= max(6.1 pts, "
      "the noise-only gap's 95th percentile), not flat if the gap's simultaneous lower 95% bound exceeds "
      "that bar; holds if every such run is flat, does not hold if any is not flat, inconclusive if "
      "none is off the ceiling or some are unclear",
      verdict, figs);
}

json finding_b(const std::map<uint64_t, const StudyRow*>& ref) {
  json figs = json::array();
  int large = 0, boundary = 0;
  for (const auto& [seed, r] : ref) {
    const StudyProtocol& p = *r->protocol(kPrefix);
    const bool is_large = p.gap >= 0.30 && gap_beyond_noise(p);
    const bool is_boundary = p.weakest_phase == r->S - 1;
    large += is_large;
    boundary += is_boundary;
    figs.push_back({{"seed", seed},
                    {"gap", num(p.gap)},
                    {"gap_ci", interval(p.gap_ci)},
                    {"weakest_phase", p.weakest_phase},
                    {"boundary_phase", r->S - 1},
                    {"folded", nums(p.folded)}});
  }
  const int n = int(ref.size());
  const std::string verdict = n < 2                               ? "inconclusive"
                              : large == n && boundary == n       ? "holds"
                              : 2 * boundary < n || 2 * large < n ? "does not hold"
                                                                  : "inconclusive";
  return finding(
      "b", "W8/S8 · 1 KV has a large gap and its boundary phase (7) is the weakest in every seed",
      "per reference seed (prefix): large = gap >= 30 pts and its simultaneous lower 95% bound above 0 "
      "(some residue beats another beyond noise); boundary = the weakest folded phase is S - 1. "
      "Inconclusive with fewer than 2 learned seeds; else holds if both in every seed, does not hold if "
      "either is true in fewer than half of the seeds",
      verdict, figs);
}

json finding_c(const std::vector<StudyRow>& rows, const std::map<uint64_t, const StudyRow*>& ref) {
  json figs = json::array();
  int smaller = 0, larger = 0;
  for (const StudyRow& r : rows) {
    if (!is_ref(r, "w8s4-1kv") || !study_learned(r) || !ref.count(r.seed)) continue;
    const double g4 = r.protocol(kPrefix)->gap, g8 = ref.at(r.seed)->protocol(kPrefix)->gap;
    smaller += g4 < g8;
    larger += g4 > g8;
    figs.push_back({{"seed", r.seed}, {"gap_w8s4", num(g4)}, {"gap_w8s8", num(g8)}});
  }
  const int n = int(figs.size());
  const std::string verdict = n == 0         ? "inconclusive"
                              : smaller == n ? "holds"
                              : larger == n  ? "does not hold"
                                             : "inconclusive";
  return finding("c", "W8/S4's gap is smaller than W8/S8's",
                 "per seed with both runs (prefix): holds if W8/S4's gap is smaller in every seed, does not "
                 "hold if it is larger in every seed, else inconclusive",
                 verdict, figs);
}

// (d) and (d-div): the detected period of every learned W/S run against its design period
json findings_d(const std::vector<StudyRow>& rows) {
  json figs = json::array(), div_figs = json::array();
  std::map<int, int> match;
  int divisor = 0, other = 0, none = 0, divisor_one_kv = 0;
  for (const StudyRow& r : rows) {
    if (r.kind != "chunked" || !study_learned(r)) continue;
    const StudyProtocol& p = *r.protocol(kPrefix);
    const int S = r.design_period();
    const std::string cat = period_category(p.period, S);
    match[S] += cat == "stride";
    divisor += cat == "divisor";
    other += cat == "other";
    none += cat == "none";
    figs.push_back({{"run", r.id},
                    {"S", S},
                    {"period", p.period},
                    {"p_value", num(p.p_value)},
                    {"n_kv_heads", r.n_kv_heads},
                    {"category", cat}});
    if (cat != "divisor") continue;
    divisor_one_kv += r.n_kv_heads == 1;
    // head-level evidence: the phases each knockout of one KV head costs at least half their accuracy
    json heads = json::array();
    if (r.explain)
      for (const StudyKnockout& k : r.explain->knockouts) {
        if (k.kv_head < 0) continue;
        json lost = json::array();
        for (size_t ph = 0; ph < k.rel.size(); ++ph)
          if (std::isfinite(k.rel[ph]) && k.rel[ph] <= -50) lost.push_back(int(ph));
        heads.push_back(
            {{"knockout", k.label}, {"layer", k.layer}, {"kv_head", k.kv_head}, {"phases_lost", lost}});
      }
    div_figs.push_back({{"run", r.id},
                        {"S", S},
                        {"period", p.period},
                        {"n_kv_heads", r.n_kv_heads},
                        {"folded", nums(p.folded)},
                        {"kv_head_knockouts", heads}});
  }
  bool all_s = true;
  for (int S : {4, 6, 8, 12}) all_s = all_s && match[S] > 0;
  const std::string verdict = divisor + other > 0  ? "does not hold"
                              : none == 0 && all_s ? "holds"
                                                   : "inconclusive";
  json d = finding("d", "the period of the accuracy equals the stride S, for S in {4, 6, 8, 12}",
                   "the period detector on every learned W/S run (chunked attention; prefix; S = the least "
                   "common multiple of its layers' strides), each put in one category: stride (period = S), "
                   "divisor (a proper divisor of S), none (no phase dependence detected) or other. Holds if "
                   "every run is stride and every S in {4, 6, 8, 12} has one; does not hold if any run is "
                   "divisor or other; inconclusive otherwise (a run with none, or an S missing)",
                   verdict, figs);
  const std::string div_verdict = divisor == 0         ? "inconclusive"
                                  : divisor_one_kv > 0 ? "does not hold"
                                                       : "holds";
  json dd =
      finding("d-div",
              "a period that is a proper divisor S/k of the stride comes from several KV heads, never "
              "from one (heads owning different phases)",
              "over the learned W/S runs whose detected period (prefix) is a proper divisor of S: holds "
              "if there is at least one and every one has more than one KV head per layer, does not "
              "hold if one has a single KV head, inconclusive if there is none. Figures: each run's "
              "folded accuracy and, per knockout of one KV head, the phases it costs at least 50% of "
              "their accuracy",
              div_verdict, div_figs);
  return json::array({d, dd});
}

json finding_e(const std::vector<StudyRow>& rows) {
  json figs = json::array();
  int compressed_runs = 0, concentrated_runs = 0;
  for (const StudyRow& r : rows) {
    if (!r.explain || !study_learned(r)) continue;
    int matter = 0, conc = 0;
    for (const StudyKnockout& k : r.explain->knockouts) {
      double lo = 1e9, hi = -1e9, sum = 0;
      int n = 0;
      for (double v : k.rel) {
        if (!std::isfinite(v)) continue;
        lo = std::min(lo, -v);
        hi = std::max(hi, -v);
        sum += -v;
        ++n;
      }
      if (n == 0 || sum / n < 20) continue;
      ++matter;
      conc += hi >= 50 && lo <= 20;
    }
    if (r.compressed()) {
      ++compressed_runs;
      concentrated_runs += conc > 0;
    }
    figs.push_back({{"run", r.id},
                    {"compressed", r.compressed()},
                    {"knockouts_that_matter", matter},
                    {"concentrated", conc}});
  }
  const std::string verdict = compressed_runs == 0                       ? "inconclusive"
                              : 2 * concentrated_runs >= compressed_runs ? "holds"
                              : concentrated_runs == 0                   ? "does not hold"
                                                                         : "inconclusive";
  return finding(
      "e", "knockout losses concentrate on a few phases per layer or KV head under compression",
      "over the learned runs with explain results: a knockout (layer, or KV head) matters if it costs >= "
      "20% of clean accuracy on average over phases; a knockout that matters is concentrated if some "
      "phase loses >= 50% while another loses <= 20%. Holds if at least half of the compressed runs have "
      "a concentrated knockout, does not hold if none has, else inconclusive",
      verdict, figs);
}

json finding_f(const std::vector<StudyRow>& rows) {
  // R^2 is unbounded below (a cycled profile unlike the shifted one scores -1000 or less), so runs and
  // conditions are summarized by medians: one outlier cannot decide the verdict
  json figs = json::array();
  std::vector<double> run_r2;
  int conds = 0, boundary_weakest = 0;
  for (const StudyRow& r : rows) {
    if (!r.explain || r.explain->cycling.empty() || !study_learned(r)) continue;
    const int S = r.explain->S;
    std::vector<double> r2s;
    for (const StudyCycling& c : r.explain->cycling) {
      if (c.layer != -1) continue;
      r2s.push_back(c.r2_no_boundary);
      ++conds;
      boundary_weakest += int(std::min_element(c.acc.begin(), c.acc.end()) - c.acc.begin()) == S - 1;
    }
    if (r2s.empty()) continue;
    run_r2.push_back(quantile(r2s, 0.5));
    figs.push_back({{"run", r.id}, {"median_r2_no_boundary", num(run_r2.back())}});
  }
  const double r2 = quantile(run_r2, 0.5);
  const double share = conds ? double(boundary_weakest) / conds : std::nan("");
  figs.push_back({{"median_r2_no_boundary", num(r2)}, {"boundary_weakest_share", num(share)}});
  const std::string verdict = run_r2.empty()              ? "inconclusive"
                              : r2 >= 0.6 && share >= 0.8 ? "holds"
                              : r2 < 0.3 || share < 0.5   ? "does not hold"
                                                          : "inconclusive";
  return finding(
      "f", "cycling the gates moves the within-window weak spots (R^2 >= 0.6) but not the boundary phase",
      "over the learned runs with cycling results (explain cycles, together, every chunked layer with W = S "
      "and learned gates) by delta in {+-1, +-2, +-3}: the median over runs of each "
      "run's median R^2 of A_delta(r) against A_0((r - delta) mod S) without the boundary phase, and the "
      "share of cycled conditions whose weakest phase is S - 1. Holds if R^2 >= 0.6 and share >= 80%, does "
      "not hold if R^2 < 0.3 or share < 50%",
      verdict, figs);
}

json finding_g(const std::vector<StudyRow>& rows) {
  json figs = json::array();
  int n = 0, persists = 0;
  for (const StudyRow& r : rows) {
    if ((!is_ref(r, "no-rope") && !is_ref(r, "uniform")) || !study_learned(r)) continue;
    const StudyProtocol& p = *r.protocol(kPrefix);
    const bool ok = gap_beyond_noise(p) && p.period == r.design_period();
    ++n;
    persists += ok;
    figs.push_back({{"run", r.id},
                    {"gap", num(p.gap)},
                    {"gap_ci", interval(p.gap_ci)},
                    {"gap_null_q95", num(p.gap_null_q95)},
                    {"period", p.period},
                    {"persists", ok}});
  }
  const std::string verdict = n == 0          ? "inconclusive"
                              : persists == n ? "holds"
                              : persists == 0 ? "does not hold"
                                              : "inconclusive";
  return finding(
      "g", "the periodic weak spot persists without RoPE and with uniform averaging",
      "no-rope and uniform runs (prefix): persists if the gap's simultaneous lower 95% bound is above 0 "
      "(some residue beats another beyond noise) and the detected period is S (the lcm of its layers' "
      "strides). Holds if every run persists, "
      "does "
      "not hold if none does",
      verdict, figs);
}

json finding_mean_hides(const std::vector<StudyRow>& rows) {
  const MeanHides rule;
  json figs = json::array();
  int matched = 0, hides = 0;
  for (const StudyRow& c : rows) {
    if (!c.compressed() || !study_learned(c)) continue;
    for (const StudyRow& f : rows) {
      if (f.kind != "full" || f.seed != c.seed || f.n_kv_heads != c.n_kv_heads) continue;
      const StudyProtocol &pc = *c.protocol(kPrefix), *pf = f.protocol(kPrefix);
      if (!pf) continue;
      const std::string v = rule.judge(pf->mean, pf->worst, f.val_loss, pc.mean, pc.worst, c.val_loss);
      if (v == "not matched") continue;
      ++matched;
      hides += v == "holds";
      figs.push_back({{"compressed", c.id},
                      {"full", f.id},
                      {"val_loss", {num(c.val_loss), num(f.val_loss)}},
                      {"mean", {num(pc.mean), num(pf->mean)}},
                      {"worst", {num(pc.worst), num(pf->worst)}},
                      {"gap", {num(pc.gap), num(pf->gap)}},
                      {"hides", v == "holds"}});
    }
  }
  const std::string verdict = matched == 0           ? "inconclusive"
                              : 2 * hides >= matched ? "holds"
                              : hides == 0           ? "does not hold"
                                                     : "inconclusive";
  return finding("mean-hides",
                 "the mean hides it: a compressed model matched to full attention in mean accuracy and "
                 "validation loss has a far lower worst residue",
                 "pairs of a learned compressed run and a full-attention run of the same seed and KV heads "
                 "(prefix): " +
                     rule.rule() +
                     ". Holds if at least half of the matched pairs show it, does not hold if none does, "
                     "inconclusive if no pair is matched",
                 verdict, figs);
}

json finding_dense(const std::vector<StudyRow>& rows) {
  const DenseShows rule;
  json figs = json::array();
  int pairs = 0, shows = 0, none = 0;
  for (const StudyRow& c : rows) {
    if (!c.compressed() || (!c.copy_loss && !c.flip)) continue;
    for (const StudyRow& f : rows) {
      if (f.kind != "full" || f.seed != c.seed || f.n_kv_heads != c.n_kv_heads || f.tag != c.tag) continue;
      const std::string copy = rule.copy(c, f), flip = rule.flip(c, f);
      const int measured = (copy != "not measured") + (flip != "not measured");
      const int shown = (copy == "shows") + (flip == "shows");
      if (measured == 0) continue;
      ++pairs;
      shows += shown == measured;
      none += shown == 0;
      json e = {{"compressed", c.id}, {"full", f.id}, {"copy", copy}, {"flip", flip}};
      if (c.copy_loss && f.copy_loss)
        e["copy_gap"] = {{"compressed", {num(c.copy_loss->gap), interval(c.copy_loss->gap_ci_percentile)}},
                         {"full", {num(f.copy_loss->gap), interval(f.copy_loss->gap_ci_percentile)}}};
      if (c.flip && f.flip)
        e["flip_margin"] = {
            {"compressed", {{"range", num(c.flip->margin_range)}, {"p", num(c.flip->margin_p)}}},
            {"full", {{"range", num(f.flip->margin_range)}, {"p", num(f.flip->margin_p)}}}};
      e["shows"] = shown == measured;
      figs.push_back(e);
    }
  }
  const std::string verdict = pairs == 0           ? "inconclusive"
                              : none == pairs      ? "does not hold"
                              : 2 * shows >= pairs ? "holds"
                                                   : "inconclusive";
  return finding("dense",
                 "a compressed language model's phase shows in signals that need no retrieval: its copy "
                 "loss on repeated text and its flip margin vary with phase beyond its full-attention twin's",
                 "pairs of a compressed run and a full-attention run of the same seed, KV heads and tag "
                 "(the same tokens in the same order), each with the copy loss or the flip measured on "
                 "both: " +
                     rule.rule() +
                     ". A pair shows it if every signal measured on both shows it. Holds if at least half "
                     "of the pairs show it, does not hold if no signal shows it in any pair, inconclusive "
                     "otherwise or with no pair. Runs need not have learned the lookup",
                 verdict, figs);
}

}  // namespace

std::string DenseShows::rule() const {
  return fmt::format(
      "the copy loss shows it if the compressed run's gap between phases has a 95% lower bound above the "
      "twin's upper bound (bootstrap percentile intervals); the flip shows it if the compressed run's "
      "margin log p(8) - log p(32) by length mod S has a phase share with permutation p at most {:g} and "
      "a range at least {:g} times the twin's",
      max_flip_p, min_flip_ratio);
}

std::string DenseShows::copy(const StudyRow& c, const StudyRow& f) const {
  if (!c.copy_loss || !f.copy_loss) return "not measured";
  return c.copy_loss->gap_ci_percentile.lo > f.copy_loss->gap_ci_percentile.hi ? "shows" : "does not show";
}

std::string DenseShows::flip(const StudyRow& c, const StudyRow& f) const {
  if (!c.flip || !f.flip) return "not measured";
  return c.flip->margin_p <= max_flip_p && c.flip->margin_range >= min_flip_ratio * f.flip->margin_range
             ? "shows"
             : "does not show";
}

bool study_learned(const StudyRow& row) {
  const StudyProtocol* p = row.protocol(kPrefix);
  return p && p->mean >= kStudyLearned;
}

std::string MeanHides::rule() const {
  return fmt::format(
      "matched if the means differ by at most {:.0f} points and the validation losses by at most {:.2f} "
      "nats (where both are measured); the mean hides it if the compressed run's worst residue is at "
      "least {:.0f} points below full attention's",
      100 * max_mean_diff, max_loss_diff, 100 * min_worst_drop);
}

std::string MeanHides::judge(double mean_f, double worst_f, double loss_f, double mean_c, double worst_c,
                             double loss_c) const {
  if (!(std::abs(mean_c - mean_f) <= max_mean_diff)) return "not matched";
  if (std::isfinite(loss_f) && std::isfinite(loss_c) && !(std::abs(loss_c - loss_f) <= max_loss_diff))
    return "not matched";
  return worst_f - worst_c >= min_worst_drop ? "holds" : "does not hold";
}

json study_findings(const std::vector<StudyRow>& rows) {
  json out = json::array();
  out.push_back(finding_a(rows));
  // the reference W8/S8 · 1 KV per seed, learned
  std::map<uint64_t, const StudyRow*> ref;
  for (const StudyRow& r : rows)
    if (is_ref(r, "w8s8-1kv") && study_learned(r)) ref[r.seed] = &r;
  out.push_back(finding_b(ref));
  out.push_back(finding_c(rows, ref));
  for (const json& d : findings_d(rows)) out.push_back(d);
  out.push_back(finding_e(rows));
  out.push_back(finding_f(rows));
  out.push_back(finding_g(rows));
  out.push_back(finding_mean_hides(rows));
  out.push_back(finding_dense(rows));
  // every finding but (a) and (dense) left these out
  json not_learned = json::array();
  for (const StudyRow& r : rows)
    if (r.protocol(kPrefix) && !study_learned(r) && r.compressed()) not_learned.push_back(r.id);
  for (json& f : out)
    if (f["id"] != "a" && f["id"] != "dense") {
      f["rule"] =
          f["rule"].get<std::string>() +
          ". Compressed runs whose prefix mean is below 10% have not learned the task and are left out";
      f["left_out_not_learned"] = not_learned;
    }
  return out;
}

std::string study_format_findings(const json& findings) {
  std::string s = fmt::format("{:<10} {:<15} {}\n", "id", "verdict", "claim");
  for (const json& f : findings)
    s += fmt::format("{:<10} {:<15} {}\n", f["id"].get<std::string>(), f["verdict"].get<std::string>(),
                     f["claim"].get<std::string>());
  return s;
}

json study_gate_accuracy(const std::vector<StudyRow>& rows) {
  json out = json::array();
  for (const StudyRow& r : rows) {
    const StudyProtocol* p = r.protocol(kPrefix);
    if (!p || !r.explain || r.kind != "chunked" || r.W != r.S) continue;
    const int S = r.S;
    if (int(p->folded.size()) != S) continue;
    json gates = json::array();
    for (const StudyGate& g : r.explain->gates) {
      if (int(g.profile.size()) != S) continue;
      double rs[2];
      for (int shift : {0, 1}) {
        std::vector<double> x;
        for (int ph = 0; ph < S; ++ph) x.push_back(g.profile[size_t((ph + shift) % S)]);
        rs[shift] = stats_pearson(p->folded, x);
      }
      gates.push_back({{"layer", g.layer},
                       {"branch", g.branch},
                       {"kv_head", g.kv_head},
                       {"peak", g.peak},
                       {"static", num(g.static_conc)},
                       {"r_same_offset", num(rs[0])},
                       {"r_next_offset", num(rs[1])}});
    }
    out.push_back({{"run", r.id},
                   {"S", S},
                   {"prefix_folded", nums(p->folded)},
                   {"weakest_phase", p->weakest_phase},
                   {"gates", gates}});
  }
  return out;
}

json study_ablations(const std::vector<StudyRow>& rows) {
  json out = json::array();
  for (const StudyRow& r : rows) {
    if (r.tag.empty()) continue;
    const StudyRow* ref = nullptr;
    for (const StudyRow& q : rows)
      if (q.preset == r.preset && q.seed == r.seed && q.tag.empty()) ref = &q;
    json a = {{"run", r.id}, {"reference", ref ? json(ref->id) : json(nullptr)}};
    for (const std::string protocol : {"prefix", "in-sequence"}) {
      const StudyProtocol* p = r.protocol(protocol);
      if (!p) continue;
      json e = {{"mean", num(p->mean)},
                {"gap", num(p->gap)},
                {"gap_ci", interval(p->gap_ci)},
                {"period", p->period},
                {"weakest_phase", p->weakest_phase},
                {"boundary_weakest", p->weakest_phase == p->S - 1},
                {"learned", protocol != kPrefix || p->mean >= kStudyLearned},
                {"folded", nums(p->folded)}};
      if (const StudyProtocol* q = ref ? ref->protocol(protocol) : nullptr) {
        e["reference_mean"] = num(q->mean);
        e["reference_gap"] = num(q->gap);
        e["reference_weakest_phase"] = q->weakest_phase;
      }
      a[protocol] = e;
    }
    out.push_back(a);
  }
  return out;
}

}  // namespace phasescope
