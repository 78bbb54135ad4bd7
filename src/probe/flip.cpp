// flip.cpp — see flip.h.
#include "probe/flip.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <random>
#include <sstream>
#include <unordered_map>

#include "core/check.h"
#include "core/csv.h"
#include "core/io.h"
#include "eval/stats.h"
#include "report/html.h"

namespace phasescope {

namespace {

constexpr const char* kSlot = "{filler}";

bool starts_with(const std::vector<int>& a, const std::vector<int>& prefix) {
  return a.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), a.begin());
}

std::string show(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '\n' ? std::string("\\n") : std::string(1, c);
  return "'" + o + "'";
}

}  // namespace

FlipSpec flip_token_space_example(int fillers, int keys, int names) {
  if (fillers < 1 || keys < 4 || names < 4)
    fail("flip token space",
         fmt::format("{} fillers, {} keys and {} names; the example needs at least 1, 4 and 4", fillers, keys,
                     names),
         "pass --template, --filler and --candidate with this server's token names");
  FlipSpec s;
  s.template_text = "k0 n0 k1 n1 k2 n2 k3 n3 {filler} k1";
  s.families = {{"f0", " f0"}};
  s.candidates = {" n1", " n2"};
  return s;
}

FlipSpec flip_fp8_example() {
  FlipSpec s;
  // Lines from the paper's illustration (design doc §1.3): the docstring sentence, the "=" line, the
  // FP8/FP4/FP32 constants, the block-wise docstring, compute_dtype = FP32, the fp8_max_inv line and
  // the final T.Cast(compute_dtype, T.Cast(FP. The code connecting them stands in for the elided parts.
  s.template_text =
      "\"\"\"This module contains optimized tensor kernels used by the model inference runtime.\n"
      "{filler}\n"
      "\"\"\"\n"
      "\n"
      "import tilelang\n"
      "import tilelang.language as T\n"
      "\n"
      "FP8 = \"float8_e4m3\"\n"
      "FP4 = \"float4_e2m1fn\"\n"
      "FP32 = \"float32\"\n"
      "\n"
      "\n"
      "@tilelang.jit\n"
      "def act_quant_kernel(N, block_size=128):\n"
      "    \"\"\"Block-wise FP8 quantization.\"\"\"\n"
      "    compute_dtype = FP32\n"
      "    fp8_max = 448.0\n"
      "    fp8_max_inv = 1.0 / fp8_max\n"
      "\n"
      "    @T.prim_func\n"
      "    def act_quant(X: T.Tensor((N,), \"bfloat16\"), Y: T.Tensor((N,), FP8), S: T.Tensor((N // "
      "block_size,), FP32)):\n"
      "        with T.Kernel(N // block_size) as pid:\n"
      "            x_local = T.alloc_fragment((block_size,), compute_dtype)\n"
      "            amax_local = T.alloc_fragment((1,), compute_dtype)\n"
      "            s_local = T.alloc_fragment((1,), compute_dtype)\n"
      "            T.copy(X[pid * block_size], x_local)\n"
      "            T.reduce_absmax(x_local, amax_local, dim=0)\n"
      "            for i in T.Parallel(1):\n"
      "                s_local[i] = T.max(amax_local[i], 1e-4) * fp8_max_inv\n"
      "            for i in T.Parallel(block_size):\n"
      "                Y[pid * block_size + i] = T.Cast(compute_dtype, T.Cast(FP";
  s.families = {{"equals", " ="}};
  s.candidates = {"8", "32"};
  s.L_min = 24;
  s.L_max = 39;
  return s;
}

FlipSpec flip_fp8_short_example() {
  FlipSpec s = flip_fp8_example();
  s.template_text =
      "# FP8 kernel\n"
      "# {filler}\n"
      "FP8 = \"e4m3\"\n"
      "FP32 = \"f32\"\n"
      "y = Cast(FP";
  return s;
}

std::string flip_filler(const FlipFamily& f, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += f.unit;
  const size_t first = out.find_first_not_of(' ');
  return first == std::string::npos ? std::string() : out.substr(first);
}

FlipDesign flip_build(const FlipSpec& spec, const TokenSource& ts, std::ostream* log) {
  const size_t slot = spec.template_text.find(kSlot);
  if (slot == std::string::npos || spec.template_text.find(kSlot, slot + 1) != std::string::npos)
    fail("flip template", "the template must contain {filler} exactly once",
         "mark where the filler goes with {filler}");
  if (spec.families.empty()) fail("flip", "no filler family", "pass --filler UNIT (e.g. \" =\")");
  if (spec.candidates.size() < 2)
    fail("flip", "fewer than two candidates", "pass --candidate A --candidate B");
  if (spec.L_min < 0 || spec.L_max < spec.L_min)
    fail("flip", "the L range is empty", "pass --L-min <= --L-max");
  for (const FlipFamily& f : spec.families)
    if (flip_filler(f, 1).empty())
      fail("flip filler " + show(f.unit), "the unit is empty", "pass a unit like \" =\"");
  const std::string prefix = spec.template_text.substr(0, slot), suffix = spec.template_text.substr(slot + 8);

  FlipDesign d;
  d.spec = spec;
  d.bos = ts.bos_id();
  const int n_max = spec.L_max + 8;
  std::string id = "flip|";
  int straddled = 0;
  for (size_t fi = 0; fi < spec.families.size(); ++fi) {
    // L(n) for n = 0..n_max: the tokens up to the end of the filler, which must also begin the full text
    std::vector<std::string> texts;
    for (int n = 0; n <= n_max; ++n) {
      texts.push_back(prefix + flip_filler(spec.families[fi], n));
      texts.push_back(prefix + flip_filler(spec.families[fi], n) + suffix);
    }
    const std::vector<std::vector<int>> enc = ts.encode_many(texts);
    std::map<int, int> units_for_L;
    for (int n = 0; n <= n_max; ++n) {
      const std::vector<int>& head = enc[size_t(2 * n)];
      const std::vector<int>& full = enc[size_t(2 * n + 1)];
      const size_t B = texts[size_t(2 * n)].size();  // bytes up to the end of the filler
      // tokens of the full text that start before B: the shared prefix with the head's tokens, then any
      // token that straddles the end of the filler (GPT-4-style pre-tokenizers glue "=\n" together)
      size_t j = 0;
      while (j < head.size() && j < full.size() && head[j] == full[j]) ++j;
      int L = static_cast<int>(j);
      if (j < head.size()) {
        size_t pos =
            ts.decode(std::vector<int>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(j))).size();
        while (pos < B && size_t(L) < full.size()) {
          pos += ts.decode({full[size_t(L)]}).size();
          ++L;
        }
        ++straddled;
      }
      units_for_L.emplace(L + (d.bos >= 0 ? 1 : 0),
                          n);  // BOS counts: L is the position where the code starts
    }
    std::vector<int> missing;
    std::vector<std::string> cand_texts;
    std::vector<size_t> new_points;
    for (int L = spec.L_min; L <= spec.L_max; ++L) {
      auto it = units_for_L.find(L);
      if (it == units_for_L.end()) {
        missing.push_back(L);
        continue;
      }
      FlipPoint p;
      p.family = static_cast<int>(fi);
      p.L = L;
      p.units = it->second;
      if (d.bos >= 0) p.prompt.push_back(d.bos);
      const std::vector<int>& full = enc[size_t(2 * it->second + 1)];
      p.prompt.insert(p.prompt.end(), full.begin(), full.end());
      const std::string full_text = prefix + flip_filler(spec.families[fi], it->second) + suffix;
      for (const std::string& c : spec.candidates) cand_texts.push_back(full_text + c);
      new_points.push_back(d.points.size());
      d.points.push_back(std::move(p));
    }
    // each candidate's tokens in context
    const std::vector<std::vector<int>> ce = ts.encode_many(cand_texts);
    const size_t C = spec.candidates.size();
    for (size_t k = 0; k < new_points.size(); ++k) {
      FlipPoint& p = d.points[new_points[k]];
      const std::vector<int> full(p.prompt.begin() + (d.bos >= 0 ? 1 : 0), p.prompt.end());
      for (size_t c = 0; c < C; ++c) {
        const std::vector<int>& both = ce[k * C + c];
        if (!starts_with(both, full) || both.size() == full.size())
          fail("flip candidate " + show(spec.candidates[c]),
               fmt::format("at L = {} it merges with the end of the template (or adds no token)", p.L),
               "end the template where a new token starts, or choose other candidates");
        p.candidates.emplace_back(both.begin() + static_cast<std::ptrdiff_t>(full.size()), both.end());
      }
      for (int x : p.prompt) id += std::to_string(x) + ",";
      for (const auto& c : p.candidates) {
        id += "|";
        for (int x : c) id += std::to_string(x) + ",";
      }
      id += ";";
    }
    d.missing_L.push_back(missing);
  }
  if (d.points.empty())
    fail("flip", fmt::format("no filler length reaches L in [{}, {}]", spec.L_min, spec.L_max),
         "widen --L-min / --L-max (L counts the tokens up to the end of the filler)");
  d.fingerprint =
      fmt::format("flip families={} candidates={} L={}..{} points={} pieces={}", spec.families.size(),
                  spec.candidates.size(), spec.L_min, spec.L_max, d.points.size(), hash_hex(fnv1a(id)));
  if (log) {
    *log << fmt::format("flip: {} points ({} families x L in [{}, {}]), {} candidates, {} samples\n",
                        d.points.size(), spec.families.size(), spec.L_min, spec.L_max, spec.candidates.size(),
                        d.samples())
         << std::flush;
    for (size_t fi = 0; fi < d.missing_L.size(); ++fi)
      if (!d.missing_L[fi].empty())
        *log << fmt::format("  family {}: no filler length gives L = {}\n", spec.families[fi].name,
                            fmt::join(d.missing_L[fi], ", "))
             << std::flush;
    if (straddled > 0)
      *log << fmt::format(
                  "  {} filler length(s) end inside a token (the filler merges with the text after it): that "
                  "token counts in L\n",
                  straddled)
           << std::flush;
  }
  return d;
}

ScoringSample flip_render(const FlipDesign& d, int64_t id, const std::string& model) {
  const int64_t C = static_cast<int64_t>(d.spec.candidates.size());
  const size_t p = static_cast<size_t>(id / C), c = static_cast<size_t>(id % C);
  PS_ASSERT(id >= 0 && p < d.points.size(), "flip_render: sample id out of range");
  const FlipPoint& pt = d.points[p];
  ScoringSample s;
  s.prompt = pt.prompt;
  s.answer = pt.candidates[c];
  JournalRecord& j = s.rec;
  j.id = id;
  j.base = static_cast<int>(p);
  j.cluster = d.spec.families[size_t(pt.family)].name;
  j.R = 1;
  j.residue = 0;
  j.target_pos = pt.L;
  j.query_pos = static_cast<int64_t>(pt.prompt.size()) - 1;
  j.prompt_len = static_cast<int64_t>(pt.prompt.size());
  j.shift = pt.units;
  j.expected = s.answer[0];
  j.expected_text = d.spec.candidates[c];
  j.protocol = "flip";
  j.model = model;
  j.layout = d.fingerprint;
  std::vector<int> all = pt.prompt;
  all.insert(all.end(), s.answer.begin(), s.answer.end());
  j.tokens_hash = hash_tokens_hex(all);
  return s;
}

FlipPeriod flip_period_fit(const std::vector<FlipPointResult>& points, int P, size_t C) {
  FlipPeriod fp;
  fp.P = P;
  std::vector<std::vector<int>> votes(size_t(P), std::vector<int>(C, 0));
  for (const FlipPointResult& pr : points)
    if (pr.winner >= 0) votes[size_t(pr.L % P)][size_t(pr.winner)]++;
  for (int k = 0; k < P; ++k)
    fp.pattern.push_back(static_cast<int>(std::max_element(votes[size_t(k)].begin(), votes[size_t(k)].end()) -
                                          votes[size_t(k)].begin()));
  for (const FlipPointResult& pr : points)
    if (pr.winner >= 0 && pr.winner == fp.pattern[size_t(pr.L % P)]) ++fp.follows;
  return fp;
}

FlipResult flip_analyze(const FlipDesign& d, const std::vector<JournalRecord>& records,
                        const std::string& model) {
  FlipResult r;
  r.model = model;
  for (const FlipFamily& f : d.spec.families) r.families.push_back(f.name);
  r.candidates = d.spec.candidates;
  const size_t C = d.spec.candidates.size();
  std::unordered_map<int64_t, const JournalRecord*> by_id;
  for (const JournalRecord& j : records)
    if (j.scored()) by_id[j.id] = &j;

  // each candidate's log-probability and the winner per point
  for (size_t p = 0; p < d.points.size(); ++p) {
    FlipPointResult pr;
    pr.family = d.points[p].family;
    pr.L = d.points[p].L;
    pr.units = d.points[p].units;
    double best = -INFINITY;
    for (size_t c = 0; c < C; ++c) {
      auto it = by_id.find(static_cast<int64_t>(p * C + c));
      double lp = std::nan("");
      if (it == by_id.end()) {
        ++r.unscored;
      } else if (!it->second->logprob_seq.empty()) {
        lp = 0;
        for (double x : it->second->logprob_seq) lp += x;  // NaN when any token is unknown
      } else {
        lp = it->second->logprob;
      }
      pr.logprob.push_back(lp);
      if (!std::isnan(lp) && lp > best) {
        best = lp;
        pr.winner = static_cast<int>(c);
      }
    }
    r.comparisons += pr.winner >= 0 ? 1 : 0;
    if (!r.points.empty() && r.points.back().family == pr.family && r.points.back().L == pr.L - 1 &&
        r.points.back().winner >= 0 && pr.winner >= 0 && r.points.back().winner != pr.winner)
      ++r.flips;
    r.points.push_back(pr);
  }

  r.baseline = flip_period_fit(r.points, 1, C);
  int lengths = 0;
  {
    std::map<int, int> per_family;
    for (const FlipPointResult& pr : r.points) per_family[pr.family]++;
    for (const auto& [f, n] : per_family) lengths = std::max(lengths, n);
  }
  const int P_min = std::max(2, d.spec.P_min);
  const int P_max = d.spec.P_max > 0 ? d.spec.P_max : std::max(P_min, lengths / 2);
  r.best = r.baseline;
  for (int P = P_min; P <= P_max; ++P) {
    r.periods.push_back(flip_period_fit(r.points, P, C));
    if (r.periods.back().follows > r.best.follows) r.best = r.periods.back();
  }
  for (FlipPointResult& pr : r.points)
    pr.follows = pr.winner >= 0 && pr.winner == r.best.pattern[size_t(pr.L % r.best.P)];
  return r;
}

FlipPhase flip_margin_by_phase(const FlipResult& r, int S, uint64_t seed, int permutations) {
  if (r.candidates.size() != 2 || S < 1)
    fail("flip margin", fmt::format("{} candidates at S = {}", r.candidates.size(), S),
         "the margin compares exactly two candidates, folded by a stride S >= 1");
  FlipPhase ph;
  ph.S = S;
  // the margin, and its residual from each family's least-squares line in L
  std::map<int, std::vector<size_t>> by_family;  // family -> indices of points with a margin
  for (size_t i = 0; i < r.points.size(); ++i) {
    const std::vector<double>& lp = r.points[i].logprob;
    ph.margin.push_back(lp[0] - lp[1]);  // NaN when either is unknown
    if (std::isfinite(ph.margin.back())) by_family[r.points[i].family].push_back(i);
  }
  // y less each family's least-squares line in L (at the points with a margin; NaN elsewhere)
  auto detrend = [&](const std::vector<double>& y) {
    std::vector<double> out(r.points.size(), std::nan(""));
    for (const auto& [f, idx] : by_family) {
      double mx = 0, my = 0;
      for (size_t i : idx) mx += r.points[i].L, my += y[i];
      mx /= double(idx.size());
      my /= double(idx.size());
      double sxx = 0, sxy = 0;
      for (size_t i : idx) {
        sxx += (r.points[i].L - mx) * (r.points[i].L - mx);
        sxy += (r.points[i].L - mx) * (y[i] - my);
      }
      const double slope = sxx > 0 ? sxy / sxx : 0;
      for (size_t i : idx) out[i] = y[i] - my - slope * (r.points[i].L - mx);
    }
    return out;
  };
  const std::vector<double> resid = detrend(ph.margin);
  double spread = 0;  // the margins' sum of squares about their families' means
  for (const auto& [f, idx] : by_family) {
    double my = 0;
    for (size_t i : idx) my += ph.margin[i];
    my /= double(idx.size());
    for (size_t i : idx) spread += (ph.margin[i] - my) * (ph.margin[i] - my);
    ph.points += int(idx.size());
  }
  // the share of the residuals' sum of squares that the class means explain (the residuals' mean is 0)
  auto share_of = [&](const std::vector<double>& x, std::vector<double>* folded, std::vector<int>* n) {
    std::vector<double> sum(size_t(S), 0);
    std::vector<int> cnt(size_t(S), 0);
    double total = 0;
    for (const auto& [f, idx] : by_family)
      for (size_t i : idx) {
        sum[size_t(r.points[i].L % S)] += x[i];
        cnt[size_t(r.points[i].L % S)]++;
        total += x[i] * x[i];
      }
    double between = 0;
    for (int k = 0; k < S; ++k)
      if (cnt[size_t(k)] > 0) between += sum[size_t(k)] * sum[size_t(k)] / cnt[size_t(k)];
    if (folded)
      for (int k = 0; k < S; ++k)
        folded->push_back(cnt[size_t(k)] > 0 ? sum[size_t(k)] / cnt[size_t(k)] : std::nan(""));
    if (n) *n = cnt;
    return total > 1e-12 * spread ? between / total : 0.0;  // a line alone leaves round-off, not a phase
  };
  ph.share = share_of(resid, &ph.folded, &ph.folded_n);
  double lo = INFINITY, hi = -INFINITY;
  for (double v : ph.folded)
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  ph.range = hi >= lo ? hi - lo : 0;
  // its null (Freedman-Lane): the residuals shuffled among each family's points, their line fitted again
  std::mt19937_64 rng(seed);
  std::vector<double> x = resid, null;
  int at_least = 0;
  for (int k = 0; k < permutations; ++k) {
    for (const auto& [f, idx] : by_family) {
      std::vector<double> v;
      for (size_t i : idx) v.push_back(resid[i]);
      std::shuffle(v.begin(), v.end(), rng);
      for (size_t j = 0; j < idx.size(); ++j) x[idx[j]] = v[j];
    }
    null.push_back(share_of(detrend(x), nullptr, nullptr));
    at_least += null.back() >= ph.share;
  }
  ph.share_null_q95 = null.empty() ? std::nan("") : quantile(null, 0.95);
  ph.p_value = double(1 + at_least) / double(1 + permutations);
  return ph;
}

std::string flip_format(const FlipResult& r) {
  std::ostringstream o;
  const size_t C = r.candidates.size();
  o << fmt::format("{:<10} {:>4} {:>6}", "family", "L", "units");
  for (const std::string& c : r.candidates) o << fmt::format(" {:>10}", "p(" + c + ")");
  o << fmt::format(" {:>8} {:>8}\n", "winner", "follows");
  for (const FlipPointResult& p : r.points) {
    o << fmt::format("{:<10} {:>4} {:>6}", r.families[size_t(p.family)], p.L, p.units);
    for (size_t c = 0; c < C; ++c)
      o << (std::isnan(p.logprob[c]) ? fmt::format(" {:>10}", "?")
                                     : fmt::format(" {:>10.3f}", std::exp(p.logprob[c])));
    o << fmt::format(" {:>8} {:>8}\n", p.winner >= 0 ? r.candidates[size_t(p.winner)] : "-",
                     p.follows ? "yes" : "no");
  }
  auto pattern = [&](const FlipPeriod& fp) {
    std::string s;
    for (int k = 0; k < fp.P; ++k)
      s += fmt::format("{}L%{}={}:{}", k ? ", " : "", fp.P, k, r.candidates[size_t(fp.pattern[size_t(k)])]);
    return s;
  };
  o << fmt::format(
      "\nperiod: P = {} ({}); {} of {} comparisons follow it ({} without flips, P = 1); {} flips between "
      "consecutive lengths\n",
      r.best.P, pattern(r.best), r.best.follows, r.comparisons, r.baseline.follows, r.flips);
  o << "by period:";
  for (const FlipPeriod& fp : r.periods) o << fmt::format(" P={}:{}", fp.P, fp.follows);
  o << "\n";
  if (r.unscored > 0)
    o << fmt::format("{} samples are missing or failed in the journal: rerun to score them\n", r.unscored);
  return o.str();
}

FlipResult flip_run(Backend& backend, const FlipDesign& d, const FlipRunOptions& opt,
                    const std::string& out_dir) {
  // score (or resume) every (length, candidate)
  io_make_dirs(out_dir);
  ScoringOptions po;
  po.what = "flip " + opt.model;
  po.identity = scoring_identity(opt.model, backend, d.fingerprint, "flip");
  po.fresh = opt.fresh;
  po.log = opt.log;
  po.max_failed_batches = opt.max_failed_batches;
  const std::string journal = out_dir + "/journal.jsonl";
  scoring_run(
      backend, d.samples(), [&](int64_t i) { return flip_render(d, i, opt.model); }, journal, po);

  // the analysis and its files
  const FlipResult r = flip_analyze(d, journal_load(journal).records, opt.model);
  if (r.comparisons == 0 &&
      opt.require_comparison)  // no two scored points to compare: no period can be claimed
    fail("flip " + opt.model,
         fmt::format("no comparison between scored points ({} samples missing or failed)", r.unscored),
         "fix what the failures name (journal.jsonl), then rerun the same command");
  nlohmann::json j;
  j["schema"] = "phasescope.probe.flip";
  j["version"] = 1;
  j["model"] = r.model;
  j["backend"] = backend.describe();
  j["layout"] = d.fingerprint;
  j["families"] = r.families;
  j["candidates"] = r.candidates;
  j["L_min"] = d.spec.L_min;
  j["L_max"] = d.spec.L_max;
  j["comparisons"] = r.comparisons;
  j["flips"] = r.flips;
  j["unscored"] = r.unscored;
  auto period_json = [&](const FlipPeriod& fp) {
    nlohmann::json pj = {{"P", fp.P}, {"follows", fp.follows}};
    for (int c : fp.pattern) pj["pattern"].push_back(r.candidates[size_t(c)]);
    return pj;
  };
  j["period"] = period_json(r.best);
  j["baseline"] = period_json(r.baseline);
  for (const FlipPeriod& fp : r.periods) j["periods"].push_back(period_json(fp));
  CsvTable csv;
  csv.header = {"family", "L", "units"};
  for (const std::string& c : r.candidates) csv.header.push_back("logprob(" + c + ")");
  csv.header.insert(csv.header.end(), {"winner", "follows"});
  for (const FlipPointResult& p : r.points) {
    nlohmann::json pj = {
        {"family", r.families[size_t(p.family)]},
        {"L", p.L},
        {"units", p.units},
        {"winner", p.winner >= 0 ? nlohmann::json(r.candidates[size_t(p.winner)]) : nlohmann::json(nullptr)},
        {"follows", p.follows}};
    std::vector<std::string> line = {r.families[size_t(p.family)], std::to_string(p.L),
                                     std::to_string(p.units)};
    for (double lp : p.logprob) {
      pj["logprob"].push_back(std::isnan(lp) ? nlohmann::json(nullptr) : nlohmann::json(lp));
      line.push_back(csv_num(lp, "{:.6f}"));
    }
    line.push_back(p.winner >= 0 ? r.candidates[size_t(p.winner)] : "");
    line.push_back(p.follows ? "1" : "0");
    csv.rows.push_back(line);
    j["points"].push_back(pj);
  }
  io_write_atomic(out_dir + "/flip.json", j.dump(2) + "\n");
  io_write_atomic(out_dir + "/flip.csv", csv_text(csv));
  io_write_atomic(out_dir + "/flip.txt", flip_format(r));
  return r;
}

}  // namespace phasescope
