// flip_check.cpp — the audit's flip sweep and the permutation verdict of flip_check.h.
#include "audit/flip_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <random>

#include "core/json_fields.h"
#include "eval/card.h"

namespace phasescope {

namespace {

// The best period's excess over P = 1, over the periods the probe tried.
int excess_of(const std::vector<FlipPointResult>& points, const std::vector<FlipPeriod>& periods, size_t C) {
  const int base = flip_period_fit(points, 1, C).follows;
  int best = base;
  for (const FlipPeriod& fp : periods) best = std::max(best, flip_period_fit(points, fp.P, C).follows);
  return best - base;
}

}  // namespace

std::string flip_rule() {
  return "The padding-flip probe: a filler grows one token at a time and the winning candidate is read per "
         "length L. inconclusive when the sweep cannot be built in the server's tokens or fewer than 8 "
         "lengths have a known winner; pass when one candidate wins at every scored length; otherwise D = "
         "(points following the best period's pattern) - (points following one candidate) is compared with "
         "D over 2000 seeded permutations of the winners among each family's lengths: fail when p < 0.01, "
         "pass when p >= 0.05, else inconclusive.";
}

FlipSpec audit_flip_spec(const ServedTokenSpace& space, int S) {
  FlipSpec s =
      space.present ? flip_token_space_example(space.fillers, space.keys, space.names) : flip_fp8_example();
  const int lengths = std::min(256, std::max(16, 4 * S));
  s.L_min = 24;
  s.L_max = s.L_min + lengths - 1;
  s.P_min = 2;
  s.P_max = std::max(8, std::min(2 * S, lengths / 2));  // every class of the longest period holds 2 lengths
  return s;
}

FlipCheck flip_check(const FlipResult& r, uint64_t seed, int permutations) {
  FlipCheck c;
  if (r.comparisons < 8) {
    c.verdict = "inconclusive";
    c.reason = fmt::format(
        "only {} lengths have a known winner (a candidate outside the server's top-k is "
        "unknown): too few to see a period",
        r.comparisons);
    return c;
  }
  c.excess = r.best.follows - r.baseline.follows;
  if (r.baseline.follows == r.comparisons) {
    c.verdict = "pass";
    c.reason = fmt::format("'{}' wins at all {} scored lengths: no flip",
                           r.candidates.at(size_t(r.baseline.pattern.at(0))), r.comparisons);
    return c;
  }
  // permute the winners among each family's scored lengths; D of each permutation
  const size_t C = r.candidates.size();
  std::map<int, std::vector<size_t>> by_family;
  for (size_t i = 0; i < r.points.size(); ++i)
    if (r.points[i].winner >= 0) by_family[r.points[i].family].push_back(i);
  std::vector<FlipPointResult> shuffled = r.points;
  std::mt19937_64 rng(seed);
  int at_least = 0;
  for (int k = 0; k < permutations; ++k) {
    for (const auto& [f, idx] : by_family) {
      std::vector<int> w;
      for (size_t i : idx) w.push_back(r.points[i].winner);
      std::shuffle(w.begin(), w.end(), rng);
      for (size_t j = 0; j < idx.size(); ++j) shuffled[idx[j]].winner = w[j];
    }
    at_least += excess_of(shuffled, r.periods, C) >= c.excess;
  }
  c.permutations = permutations;
  c.p_value = double(1 + at_least) / double(1 + permutations);
  const std::string what = fmt::format("{} of {} lengths follow period {} ({} follow one candidate)",
                                       r.best.follows, r.comparisons, r.best.P, r.baseline.follows);
  if (c.p_value < 0.01) {
    c.verdict = "fail";
    c.reason =
        fmt::format("the winner flips with the filler's length: {}; permutation p = {:.2g}", what, c.p_value);
  } else if (c.p_value >= 0.05) {
    c.verdict = "pass";
    c.reason = fmt::format("no period beyond chance: {}; permutation p = {:.2g}", what, c.p_value);
  } else {
    c.verdict = "inconclusive";
    c.reason = fmt::format("{}; permutation p = {:.2g}: between the thresholds", what, c.p_value);
  }
  return c;
}

nlohmann::json flip_check_json(const FlipResult& r, const FlipCheck& c, int S) {
  nlohmann::json pattern = nlohmann::json::array();
  for (int w : r.best.pattern) pattern.push_back(r.candidates.at(size_t(w)));
  return card_check_json(
      "flip", c.verdict, c.reason, flip_rule(),
      {{"comparisons", r.comparisons},
       {"flips", r.flips},
       {"period", r.best.P},
       {"pattern", pattern},
       {"follows", r.best.follows},
       {"baseline_follows", r.baseline.follows},
       {"excess", c.excess},
       {"p_value", json_number_or_null(c.p_value)},
       {"permutations", c.permutations},
       {"stride", S},
       {"periods_tried",
        {r.periods.empty() ? 1 : r.periods.front().P, r.periods.empty() ? 1 : r.periods.back().P}},
       {"candidates", r.candidates},
       {"unscored", r.unscored}});
}

nlohmann::json flip_check_unbuilt_json(const std::string& why) {
  return card_check_json("flip", "inconclusive",
                         "the flip sweep could not be built in this server's tokens: " + why, flip_rule(),
                         nlohmann::json::object());
}

}  // namespace phasescope
