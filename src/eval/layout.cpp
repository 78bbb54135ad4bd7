// layout.cpp — see layout.h. How the design balances the target position across residue groups:
//
// Base example b has its target record at index j_b; with no filler before it, its key sits at
// a_b = 1 + 2 j_b (the offset control is inserted after BOS once the design is made). Sample (b, r)
// puts p_b(r) fillers before the target, so target_pos = a_b + p_b(r) must be = r (mod R).
// Let y_b(r) = a_b + ((r - a_b) mod R), the naive choice (shifts 0..R-1). Naive paired shifts give
// equal group means only in expectation over a_b, and unequal variances even then: group r holds
// y = R q + r + R [r < a mod R], whose variance carries an extra R^2 p(1-p), p = P(a mod R > r) (up to
// 144 tok^2 at R = 24). Measured on the default task with n_base = 48: means span 5.0 tokens, SDs 4.9.
//
// Here a sample may instead take y_b(r) + R (shift p0 + R, so shifts come from 0..2R-1). Group r
// bumps k_r of its n samples by R: its sum becomes B_r + R k_r (B_r = sum of its y), its sum of
// squares Q_r + k_r R^2 + 2R * (sum of the bumped y). Groups are independent of each other, so:
//   1. choose one common sum S1, k_r = (S1 - B_r) / R   -> equal means. Every B_r = n r (mod R), so
//      this is exact iff R divides n_base (layout_base_count rounds up to that);
//   2. the bumped y of group r are all = r (mod R): their sum moves in steps of R, the group variance
//      in steps of 2R^2/n. Choose one target variance that every group reaches most closely (a scan
//      over one lattice period; S1 +- R t gives the same means but other lattices, so a few are tried);
//   3. pick which k_r samples to bump so their sum hits that target exactly (seeded random start, then
//      swaps). What is left is lattice rounding: |Var_r - Var_s| <= 2R^2/n (48 tok^2 at n = 24 against
//      a total variance ~1.2e3; measured SD spans 0.52 / 0.24 / 0.10 tokens at n = 24 / 48 / 96).
//      Equal sums and sums of squares of integers need n a multiple of R * R/2 (R divisible by 4),
//      so below 288 base examples at R = 24 no paired design has exactly equal variances.
// The same shifts serve both protocols: they differ only in where the shift's fillers go.
#include "eval/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "core/check.h"

namespace phasescope {

std::string pad_protocol_name(PadProtocol p) {
  switch (p) {
    case PadProtocol::Prefix:
      return "prefix";
    case PadProtocol::InSequence:
      return "in-sequence";
  }
  return "?";
}

PadProtocol pad_protocol_parse(const std::string& name, const std::string& where) {
  if (name == "prefix") return PadProtocol::Prefix;
  if (name == "in-sequence" || name == "insequence" || name == "in_sequence") return PadProtocol::InSequence;
  fail(where, "unknown padding protocol '" + name + "'", "use prefix or in-sequence");
}

// A 64-bit mix of a seed and two labels (SplitMix64 finalizer): independent per-sample streams.
uint64_t layout_mix64(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t z = seed ^ (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform integer in [0, n) without modulo bias (library-independent, unlike std:: distributions).
int layout_below(std::mt19937_64& rng, int n) {
  const uint64_t un = static_cast<uint64_t>(n);
  const uint64_t limit = UINT64_MAX - UINT64_MAX % un;
  uint64_t x;
  do x = rng();
  while (x >= limit);
  return static_cast<int>(x % un);
}

namespace {

int mod(int64_t a, int R) { return static_cast<int>(((a % R) + R) % R); }

// Choose which k of the items (values v) to bump so that the sum of their values is V.
// Returns a 0/1 flag per item. Starts from a seeded random subset, then swaps one in for one out,
// each time the largest value difference that does not overshoot.
std::vector<char> choose_subset(const std::vector<int>& v, int k, int64_t V, std::mt19937_64& rng) {
  const int n = static_cast<int>(v.size());
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  for (int i = n - 1; i > 0; --i) std::swap(order[i], order[layout_below(rng, i + 1)]);
  const int vmax = *std::max_element(v.begin(), v.end());
  // buckets[value] = items with that value, inside / outside the subset
  std::vector<std::vector<int>> in(vmax + 1), out(vmax + 1);
  std::vector<char> flag(n, 0);
  int64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    const int item = order[i];
    if (i < k) {
      flag[item] = 1;
      in[v[item]].push_back(item);
      sum += v[item];
    } else {
      out[v[item]].push_back(item);
    }
  }
  while (sum != V) {
    const bool up = sum < V;
    const int64_t need = up ? V - sum : sum - V;
    bool moved = false;
    for (int64_t d = std::min<int64_t>(need, vmax); d >= 1 && !moved; --d) {
      for (int u = 0; u + d <= vmax && !moved; ++u) {
        // up: swap an inside item of value u for an outside one of value u + d; down: the reverse
        auto& from = up ? in[u] : in[u + d];
        auto& to = up ? out[u + d] : out[u];
        if (from.empty() || to.empty()) continue;
        const int a = from.back(), b = to.back();
        from.pop_back();
        to.pop_back();
        flag[a] = 0;
        flag[b] = 1;
        out[v[a]].push_back(a);
        in[v[b]].push_back(b);
        sum += up ? d : -d;
        moved = true;
      }
    }
    if (!moved) break;  // unreachable target: the moment check reports what is left
  }
  return flag;
}

// shift[b][r] for the balanced design (see the top of this file).
std::vector<std::vector<int>> balanced_shifts(const std::vector<int64_t>& a, int R, uint64_t seed) {
  const int n = static_cast<int>(a.size());
  std::vector<std::vector<int>> p0(n, std::vector<int>(R));
  std::vector<std::vector<int>> v(R, std::vector<int>(n));  // y = r + R v
  std::vector<double> B(R, 0), Q(R, 0);
  for (int b = 0; b < n; ++b)
    for (int r = 0; r < R; ++r) {
      p0[b][r] = mod(r - a[b], R);
      const int64_t y = a[b] + p0[b][r];
      v[r][b] = static_cast<int>((y - r) / R);
      B[r] += double(y);
      Q[r] += double(y) * double(y);
    }

  // 1. one common sum S1 (k_r bumps of +R each): the candidates closest to equal means, best first
  const double Bmin = *std::min_element(B.begin(), B.end()), Bmax = *std::max_element(B.begin(), B.end());
  const double mid = std::round((Bmin + Bmax + double(R) * n) / 2);
  auto ks_for = [&](double s, std::vector<int>* k) {
    double dev = 0;
    for (int r = 0; r < R; ++r) {
      (*k)[r] = std::clamp(static_cast<int>(std::llround((s - B[r]) / R)), 0, n);
      dev = std::max(dev, std::abs(B[r] + double(R) * (*k)[r] - s));
    }
    return dev;
  };
  std::vector<int> k(R);
  double best_dev = std::numeric_limits<double>::infinity(), S1 = mid;
  for (double s = mid - R; s <= mid + R; s += 1) {
    const double dev = ks_for(s, &k);
    if (dev < best_dev - 1e-9 ||
        (std::abs(dev - best_dev) <= 1e-9 && std::abs(s - mid) < std::abs(S1 - mid))) {
      best_dev = dev;
      S1 = s;
    }
  }

  // 2. for a given S1, the variance each group reaches with bumped-value sum V is var_r(V) = base_r +
  //    step * V (one lattice per group); choose one common target that all groups reach most closely.
  //    S1 +- R t gives the same means (every k_r moves by t) but other lattices: try a few, keep the best.
  const double step = 2.0 * R * R / n;
  std::vector<double> base(R);
  std::vector<int64_t> Vmin(R), Vmax(R);
  std::vector<std::vector<int>> sorted_v = v;
  for (auto& s : sorted_v) std::sort(s.begin(), s.end());
  auto pick_V = [&](int r, double target) {
    return std::clamp<int64_t>(std::llround((target - base[r]) / step), Vmin[r], Vmax[r]);
  };
  // fills base/Vmin/Vmax for the bump counts k; returns the best target variance and its range
  auto plan_variance = [&](const std::vector<int>& kk, double* target) {
    for (int r = 0; r < R; ++r) {
      const double mean_r = (B[r] + double(R) * kk[r]) / n;
      base[r] = (Q[r] + double(kk[r]) * R * R + 2.0 * R * kk[r] * r) / n - mean_r * mean_r;
      Vmin[r] = Vmax[r] = 0;
      for (int i = 0; i < kk[r]; ++i) {
        Vmin[r] += sorted_v[r][i];
        Vmax[r] += sorted_v[r][n - 1 - i];
      }
    }
    double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
    for (int r = 0; r < R; ++r) {
      lo = std::max(lo, base[r] + step * Vmin[r]);
      hi = std::min(hi, base[r] + step * Vmax[r]);
    }
    const double centre = (lo + hi) / 2;
    const double a0 = lo <= hi ? std::max(lo, centre - step) : hi,
                 a1 = lo <= hi ? std::min(hi, centre + step) : lo;
    double best_range = std::numeric_limits<double>::infinity();
    *target = centre;
    const int grid = 512;
    for (int g = 0; g <= grid; ++g) {
      const double x = a0 + (a1 - a0) * g / grid;
      double vlo = std::numeric_limits<double>::infinity(), vhi = -vlo;
      for (int r = 0; r < R; ++r) {
        const double vr = base[r] + step * pick_V(r, x);
        vlo = std::min(vlo, vr);
        vhi = std::max(vhi, vr);
      }
      if (vhi - vlo < best_range - 1e-9 ||
          (std::abs(vhi - vlo - best_range) <= 1e-9 && std::abs(x - centre) < std::abs(*target - centre))) {
        best_range = vhi - vlo;
        *target = x;
      }
    }
    return best_range;
  };
  double best_S1 = S1, best_range = std::numeric_limits<double>::infinity();
  const int tries = std::max(1, std::min(R, n / 4));
  for (int t = -tries; t <= tries; ++t) {
    const double s = S1 + double(R) * t;
    if (ks_for(s, &k) > best_dev + 1e-9) continue;  // a bump count hit 0 or n: means would suffer
    double target = 0;
    const double range = plan_variance(k, &target);
    if (range < best_range - 1e-9) {
      best_range = range;
      best_S1 = s;
    }
  }
  ks_for(best_S1, &k);
  double target = 0;
  plan_variance(k, &target);

  // 3. which samples of each group are bumped
  std::vector<std::vector<int>> shift(n, std::vector<int>(R));
  for (int r = 0; r < R; ++r) {
    std::mt19937_64 rng(layout_mix64(seed, 0x5b5e7ull, static_cast<uint64_t>(r)));
    const std::vector<char> bump = choose_subset(v[r], k[r], pick_V(r, target), rng);
    for (int b = 0; b < n; ++b) shift[b][r] = p0[b][r] + (bump[b] ? R : 0);
  }
  return shift;
}

// Spread `balls` filler tokens over `slots` slots, each token in a uniformly random slot.
std::vector<int> spread(int balls, int slots, std::mt19937_64& rng) {
  std::vector<int> out(slots, 0);
  for (int i = 0; i < balls; ++i) out[layout_below(rng, slots)]++;
  return out;
}

}  // namespace

std::vector<std::vector<int>> layout_balanced_shifts(const std::vector<int64_t>& a, int R, uint64_t seed) {
  if (a.empty() || R < 1)
    fail("layout", "no base examples or R < 1", "pass at least one base example and R >= 1");
  return balanced_shifts(a, R, seed);
}

void layout_moments(const std::vector<int64_t>& target_pos, const std::vector<int>& residue, int R,
                    std::vector<GroupMoments>* groups, double* mean, double* var, double* mean_range,
                    double* sd_range) {
  PS_ASSERT(target_pos.size() == residue.size(), "layout_moments: sizes differ");
  std::vector<double> s1(R, 0), s2(R, 0);
  std::vector<int64_t> cnt(R, 0);
  double t1 = 0, t2 = 0;
  // shift by a reference to keep the sums small (exact variances for integer positions)
  const double ref = target_pos.empty() ? 0.0 : double(target_pos[0]);
  for (size_t i = 0; i < target_pos.size(); ++i) {
    const int r = residue[i];
    PS_ASSERT(r >= 0 && r < R, "layout_moments: residue out of range");
    const double x = double(target_pos[i]) - ref;
    s1[r] += x;
    s2[r] += x * x;
    cnt[r]++;
    t1 += x;
    t2 += x * x;
  }
  groups->assign(R, GroupMoments{});
  double mlo = std::numeric_limits<double>::infinity(), mhi = -mlo, slo = mlo, shi = -mlo;
  for (int r = 0; r < R; ++r) {
    GroupMoments& g = (*groups)[r];
    g.residue = r;
    g.n = cnt[r];
    if (cnt[r] == 0) {
      g.mean = g.var = std::nan("");
      continue;
    }
    const double m = s1[r] / cnt[r];
    g.mean = m + ref;
    g.var = std::max(0.0, s2[r] / cnt[r] - m * m);
    mlo = std::min(mlo, g.mean);
    mhi = std::max(mhi, g.mean);
    slo = std::min(slo, std::sqrt(g.var));
    shi = std::max(shi, std::sqrt(g.var));
  }
  const double N = double(target_pos.size());
  *mean = N > 0 ? t1 / N + ref : std::nan("");
  *var = N > 0 ? std::max(0.0, t2 / N - (t1 / N) * (t1 / N)) : std::nan("");
  *mean_range = mhi >= mlo ? mhi - mlo : 0.0;
  *sd_range = shi >= slo ? shi - slo : 0.0;
}

std::string layout_fingerprint(const LayoutSpec& s) {
  const Vocab& v = s.task.vocab;
  return fmt::format(
      "lookup records={} demos={} vocab={}/{}/{}/{} R={} n_base={} pad={} base_gaps={} offset={} protocol={} "
      "balance={} "
      "seed={}{}",
      s.task.n_records, s.task.n_demos, v.n_fillers, v.n_keys, v.n_names, v.bytes ? "bytes" : "nobytes", s.R,
      s.n_base, s.pad, s.base_gaps, s.offset, pad_protocol_name(s.protocol), s.balance ? 1 : 0, s.seed,
      s.align.empty() ? "" : " " + s.align);
}

int layout_base_count(int64_t samples, int R) {
  PS_ASSERT(R >= 1, "layout_base_count: R must be positive");
  int64_t n = std::max<int64_t>(1, (samples + R - 1) / R);
  n = (n + R - 1) / R * R;
  return static_cast<int>(n);
}

LayoutDesign layout_build(const LayoutSpec& spec) {
  // check the spec
  const std::string where = "layout (" + pad_protocol_name(spec.protocol) + ")";
  if (spec.R < 2)
    fail(where, "R = " + std::to_string(spec.R) + " residues is too few", "use R >= 2 (default 24)");
  if (spec.n_base < 1) fail(where, "n_base must be at least 1", "ask for more samples");
  const int min_pad = spec.balance ? 2 * spec.R - 1 : spec.R - 1;
  if (spec.pad < min_pad)
    fail(where,
         fmt::format("pad = {} filler tokens cannot hold the shifts (need >= {} for R = {})", spec.pad,
                     min_pad, spec.R),
         fmt::format("set pad >= {}", min_pad));
  if (spec.offset < 0) fail(where, "offset must be >= 0", "use a non-negative offset");
  if (spec.task.n_records < 2 || spec.task.n_demos < 0 || spec.task.n_demos >= spec.task.n_records ||
      spec.task.n_records > spec.task.vocab.n_keys || spec.task.n_records > spec.task.vocab.n_names)
    fail(where,
         fmt::format("lookup task with {} records, {} demos, {} keys, {} names is not valid",
                     spec.task.n_records, spec.task.n_demos, spec.task.vocab.n_keys, spec.task.vocab.n_names),
         "need 2 <= n_records <= keys and names, and n_demos < n_records");
  const int R = spec.R, n = spec.n_base, N = spec.task.n_records;

  // draw the base examples; a[b] = target key position with no filler before it
  std::mt19937_64 rng(spec.seed);
  std::vector<LookupExample> ex(n);
  std::vector<int64_t> a(n);
  const int gap_total = spec.base_gaps < 0 ? N / 2 : spec.base_gaps;
  std::vector<std::vector<int>> base_gap(n);  // [n][N - 1] fillers between records, fixed per base example
  for (int b = 0; b < n; ++b) {
    ex[b] = lookup_sample(spec.task, rng);
    base_gap[b] = spread(gap_total, N - 1, rng);
    a[b] = 1 + 2 * int64_t(ex[b].target);  // the offset is added after the design (below)
    for (int i = 0; i < ex[b].target; ++i) a[b] += base_gap[b][i];
  }

  // the shift of every sample
  std::vector<std::vector<int>> shift;
  if (spec.balance) {
    shift = balanced_shifts(a, R, spec.seed);
  } else {
    shift.assign(n, std::vector<int>(R));
    for (int b = 0; b < n; ++b)
      for (int r = 0; r < R; ++r) shift[b][r] = mod(r - a[b], R);
  }

  // render every sample and measure it
  LayoutDesign d;
  d.spec = spec;
  d.samples.reserve(size_t(n) * R);
  for (int b = 0; b < n; ++b) {
    const int j = ex[b].target;
    for (int r = 0; r < R; ++r) {
      LayoutSample s;
      s.id = int64_t(b) * R + r;
      s.base = b;
      s.mapping_id = ex[b].mapping_id;
      s.shift = shift[b][r];
      std::mt19937_64 srng(layout_mix64(spec.seed, 0xf111e7ull, static_cast<uint64_t>(s.id)));
      int prefix = 0, post = 0;
      std::vector<int> gaps(N - 1, 0);
      if (spec.protocol == PadProtocol::Prefix) {
        prefix += s.shift;
        post = spec.pad - s.shift;
      } else {
        // before the target: prefix and gaps 0..j-1 share the shift; after: gaps j..N-2 and post share the
        // rest
        const std::vector<int> before = spread(s.shift, j + 1, srng);
        const std::vector<int> after = spread(spec.pad - s.shift, N - j, srng);
        prefix += before[0];
        for (int i = 0; i < j; ++i) gaps[i] = before[1 + i];
        for (int i = j; i < N - 1; ++i) gaps[i] = after[i - j];
        post = after[N - 1 - j];
      }
      for (int i = 0; i < N - 1; ++i) gaps[i] += base_gap[b][i];
      LookupTokens t = lookup_render(spec.task, ex[b], prefix, gaps, post, srng);
      if (spec.offset > 0) {
        // the "shift all inputs by k" control: the very same prompt with k more fillers after BOS
        std::mt19937_64 orng(layout_mix64(spec.seed, 0x0ff5e7ull, static_cast<uint64_t>(s.id)));
        std::vector<int> extra(spec.offset);
        for (int& e : extra) e = spec.task.vocab.filler(layout_below(orng, spec.task.vocab.n_fillers));
        t.tokens.insert(t.tokens.begin() + 1, extra.begin(), extra.end());
        t.target_pos += spec.offset;
        t.query_pos += spec.offset;
      }
      s.target_pos = t.target_pos;
      s.query_pos = t.query_pos;
      s.prompt_len = int64_t(t.tokens.size());
      s.answer = t.answer;
      s.residue = mod(s.target_pos, R);
      s.tokens = std::move(t.tokens);
      // measured, not intended: the key really is there, the answer really follows it
      PS_ASSERT(s.target_pos == a[b] + s.shift + spec.offset,
                "layout: target landed off its planned position");
      PS_ASSERT(s.residue == mod(r + spec.offset, R), "layout: sample has the wrong residue");
      PS_ASSERT(s.tokens[s.target_pos] == s.tokens.back() && s.tokens[s.target_pos + 1] == s.answer,
                "layout: target key/answer not where measured");
      PS_ASSERT(s.query_pos == s.prompt_len - 1, "layout: query is not the last token");
      d.samples.push_back(std::move(s));
    }
  }
  d.prompt_len = d.samples.front().prompt_len;
  d.query_pos = d.samples.front().query_pos;
  for (const LayoutSample& s : d.samples)
    PS_ASSERT(s.prompt_len == d.prompt_len && s.query_pos == d.query_pos, "layout: prompt length varies");

  // the achieved moments, and the refusal
  std::vector<int64_t> pos;
  std::vector<int> res;
  for (const LayoutSample& s : d.samples) {
    pos.push_back(s.target_pos);
    res.push_back(s.residue);
  }
  layout_moments(pos, res, R, &d.groups, &d.mean, &d.var, &d.mean_range, &d.sd_range);
  if (d.mean_range > spec.tol_mean + 1e-9 || d.sd_range > spec.tol_sd + 1e-9) {
    // a multiple of R balances the means exactly; the SD span shrinks about as 1 / n_base
    const int suggest = d.mean_range > spec.tol_mean + 1e-9 && n % R != 0
                            ? layout_base_count(int64_t(n) * R, R)
                            : layout_base_count(int64_t(2 * n) * R, R);
    fail(where + fmt::format(", R={}, n_base={}", R, n),
         fmt::format(
             "residue groups differ in target position: the means span {:.3f} tokens (tolerance {}), the "
             "standard deviations span {:.3f} tokens (tolerance {}){}",
             d.mean_range, spec.tol_mean, d.sd_range, spec.tol_sd,
             spec.balance ? "" : "; this is the naive (balance = false) design"),
         spec.balance ? fmt::format("use more base examples, a multiple of R: --samples {} (n_base = {})",
                                    int64_t(suggest) * R, suggest)
                      : "use the balanced design (balance = true)");
  }
  return d;
}

std::string layout_format_moments(const LayoutDesign& d) {
  std::ostringstream os;
  os << fmt::format(
      "layout: {} protocol, {} base examples x {} residues = {} prompts of {} tokens, query at {}\n",
      pad_protocol_name(d.spec.protocol), d.spec.n_base, d.spec.R, d.samples.size(), d.prompt_len,
      d.query_pos);
  os << fmt::format("{:>8} {:>6} {:>10} {:>10} {:>8}\n", "residue", "n", "mean pos", "var", "sd");
  for (const GroupMoments& g : d.groups)
    os << fmt::format("{:>8} {:>6} {:>10.3f} {:>10.3f} {:>8.3f}\n", g.residue, g.n, g.mean, g.var,
                      std::sqrt(g.var));
  os << fmt::format("{:>8} {:>6} {:>10.3f} {:>10.3f} {:>8.3f}\n", "all", d.samples.size(), d.mean, d.var,
                    std::sqrt(d.var));
  os << fmt::format("group means span {:.4f} tokens (tolerance {}), SDs span {:.4f} tokens (tolerance {})\n",
                    d.mean_range, d.spec.tol_mean, d.sd_range, d.spec.tol_sd);
  return os.str();
}

}  // namespace phasescope
