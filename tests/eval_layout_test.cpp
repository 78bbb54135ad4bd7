// eval_layout_test.cpp — the phase layout's controls: residue groups have equal mean and variance of
// the target position (both protocols, recomputed here with a plain loop), prompts have one length and
// one query position, every base example covers every residue once (paired shifts), the target and
// its answer are where the sample says, in-sequence padding moves distractors relative to the target
// while prefix padding does not, an offset of k moves every residue by k, and unbalanced designs are
// refused with a message that says what to change.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/check.h"
#include "eval/layout.h"

namespace phasescope {
namespace {

// Group means and variances of target_pos by residue, long double, two passes.
void plain_moments(const LayoutDesign& d, std::vector<long double>* mean, std::vector<long double>* var) {
  const int R = d.spec.R;
  std::vector<long double> s(R, 0), n(R, 0);
  for (const LayoutSample& x : d.samples) {
    s[x.target_pos % R] += x.target_pos;
    n[x.target_pos % R] += 1;
  }
  mean->assign(R, 0);
  var->assign(R, 0);
  for (int r = 0; r < R; ++r) (*mean)[r] = s[r] / n[r];
  for (const LayoutSample& x : d.samples) {
    const int r = x.target_pos % R;
    (*var)[r] += (x.target_pos - (*mean)[r]) * (x.target_pos - (*mean)[r]) / n[r];
  }
}

// The first record key's position (the first key token after BOS).
int64_t first_key_pos(const LayoutSpec& spec, const std::vector<int>& t) {
  for (size_t i = 1; i < t.size(); ++i)
    if (spec.task.vocab.is_key(t[i])) return static_cast<int64_t>(i);
  return -1;
}

class LayoutBothProtocols : public ::testing::TestWithParam<std::tuple<PadProtocol, int>> {};

TEST_P(LayoutBothProtocols, GroupsHaveEqualPositionMomentsAndPairedShifts) {
  LayoutSpec spec;
  spec.protocol = std::get<0>(GetParam());
  spec.n_base = std::get<1>(GetParam());
  const LayoutDesign d = layout_build(spec);
  const int R = spec.R;
  ASSERT_EQ(d.samples.size(), size_t(spec.n_base) * R);

  // equal moments, recomputed independently of layout_moments()
  std::vector<long double> mean, var;
  plain_moments(d, &mean, &var);
  long double mlo = 1e18, mhi = -1e18, slo = 1e18, shi = -1e18;
  for (int r = 0; r < R; ++r) {
    mlo = std::min(mlo, mean[r]);
    mhi = std::max(mhi, mean[r]);
    slo = std::min(slo, std::sqrt(var[r]));
    shi = std::max(shi, std::sqrt(var[r]));
  }
  EXPECT_LT(double(mhi - mlo), 1e-9) << "means must be exactly equal when n_base is a multiple of R";
  EXPECT_LE(double(shi - slo), spec.tol_sd);
  EXPECT_NEAR(double(mhi - mlo), d.mean_range, 1e-9);
  EXPECT_NEAR(double(shi - slo), d.sd_range, 1e-9);
  // the bound of layout.cpp: each group's variance within R^2 / n of a common target
  long double vlo = 1e18, vhi = -1e18;
  for (int r = 0; r < R; ++r) {
    vlo = std::min(vlo, var[r]);
    vhi = std::max(vhi, var[r]);
  }
  EXPECT_LE(double(vhi - vlo), 2.0 * R * R / spec.n_base + 1e-9);
  std::printf("  %s n_base=%d: group means span %.2e tokens, variances %.2f..%.2f (SD span %.3f tokens)\n",
              pad_protocol_name(spec.protocol).c_str(), spec.n_base, double(mhi - mlo), double(vlo),
              double(vhi), d.sd_range);

  // one length, one query position; the target and its answer are where the sample says
  std::map<int, std::set<int>> residues_of_base;
  std::map<int, int> per_residue;
  for (const LayoutSample& s : d.samples) {
    EXPECT_EQ(s.prompt_len, d.prompt_len);
    EXPECT_EQ(s.query_pos, d.prompt_len - 1);
    ASSERT_EQ(int64_t(s.tokens.size()), s.prompt_len);
    EXPECT_EQ(s.tokens[s.target_pos], s.tokens.back());
    EXPECT_EQ(s.tokens[s.target_pos + 1], s.answer);
    EXPECT_EQ(s.residue, s.target_pos % R);
    EXPECT_GE(s.shift, 0);
    EXPECT_LT(s.shift, 2 * R);
    residues_of_base[s.base].insert(s.residue);
    per_residue[s.residue]++;
  }
  for (const auto& [b, rs] : residues_of_base) EXPECT_EQ(int(rs.size()), R) << "base " << b;
  for (int r = 0; r < R; ++r) EXPECT_EQ(per_residue[r], spec.n_base);
}

INSTANTIATE_TEST_SUITE_P(Protocols, LayoutBothProtocols,
                         ::testing::Combine(::testing::Values(PadProtocol::Prefix, PadProtocol::InSequence),
                                            ::testing::Values(24, 48, 96)));

TEST(Layout, SameSpecGivesTheSameSamples) {
  LayoutSpec spec;
  spec.protocol = PadProtocol::InSequence;
  const LayoutDesign a = layout_build(spec), b = layout_build(spec);
  ASSERT_EQ(a.samples.size(), b.samples.size());
  for (size_t i = 0; i < a.samples.size(); ++i) EXPECT_EQ(a.samples[i].tokens, b.samples[i].tokens);
  spec.seed = 2;
  EXPECT_NE(layout_build(spec).samples[0].tokens, a.samples[0].tokens);
}

TEST(Layout, PrefixMovesRecordsTogetherInSequenceDecouplesThem) {
  for (PadProtocol p : {PadProtocol::Prefix, PadProtocol::InSequence}) {
    LayoutSpec spec;
    spec.protocol = p;
    spec.n_base = 24;
    const LayoutDesign d = layout_build(spec);
    int bases_with_varying_offsets = 0;
    std::map<int, std::set<int64_t>> rel;  // base -> first record key position - target position
    for (const LayoutSample& s : d.samples) rel[s.base].insert(first_key_pos(spec, s.tokens) - s.target_pos);
    for (const auto& [b, offsets] : rel) bases_with_varying_offsets += offsets.size() > 1 ? 1 : 0;
    if (p == PadProtocol::Prefix)
      EXPECT_EQ(bases_with_varying_offsets, 0) << "prefix padding must shift all records together";
    else  // a base whose target is record 0 cannot vary; all others should
      EXPECT_GE(bases_with_varying_offsets, 20)
          << "in-sequence padding must move distractors relative to the target";
  }
}

TEST(Layout, OffsetShiftsEveryResidueByK) {
  LayoutSpec spec;
  spec.n_base = 24;
  const LayoutDesign d0 = layout_build(spec);
  for (int k : {1, 3, 7}) {
    spec.offset = k;
    const LayoutDesign dk = layout_build(spec);
    EXPECT_EQ(dk.prompt_len, d0.prompt_len + k);
    // the same base example, shifted by k: sample (b, r) of d0 is sample (b, (r + k) % R) of dk
    std::map<std::pair<int, int>, const LayoutSample*> at;
    for (const LayoutSample& s : dk.samples) at[{s.base, s.residue}] = &s;
    for (const LayoutSample& s : d0.samples) {
      const LayoutSample* t = at[{s.base, (s.residue + k) % spec.R}];
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->id, s.id);
      EXPECT_EQ(t->target_pos, s.target_pos + k);
      EXPECT_EQ(t->answer, s.answer);
      // the very same prompt with k more tokens after BOS
      ASSERT_EQ(t->tokens.size(), s.tokens.size() + k);
      EXPECT_EQ(t->tokens[0], s.tokens[0]);
      EXPECT_TRUE(std::equal(s.tokens.begin() + 1, s.tokens.end(), t->tokens.begin() + 1 + k))
          << "sample " << s.id;
    }
    EXPECT_LT(dk.mean_range, 1e-9);
  }
}

TEST(Layout, NaivePairedShiftsAreRefused) {
  // shifts 0..R-1 from the same base examples: equal means only in expectation, unequal variances
  LayoutSpec spec;
  spec.balance = false;
  try {
    layout_build(spec);
    FAIL() << "the naive design should be refused";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("residue groups differ in target position"), std::string::npos) << msg;
    EXPECT_NE(msg.find("naive"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Fix:"), std::string::npos) << msg;
  }
  // its measured spread, for the record
  spec.tol_mean = spec.tol_sd = 1e9;
  const LayoutDesign d = layout_build(spec);
  std::printf("  naive shifts, n_base=48: means span %.2f tokens, SDs span %.2f tokens\n", d.mean_range,
              d.sd_range);
  EXPECT_GT(d.sd_range, 1.0);
}

TEST(Layout, TighterToleranceThanTheLatticeAllowsIsRefused) {
  LayoutSpec spec;
  spec.n_base = 24;
  spec.tol_sd = 0.01;
  try {
    layout_build(spec);
    FAIL() << "an SD spread of ~0.5 tokens must not pass a 0.01 tolerance";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of R"), std::string::npos) << e.what();
  }
}

TEST(Layout, InvalidSpecsNameTheField) {
  LayoutSpec spec;
  spec.pad = 10;
  try {
    layout_build(spec);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pad"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pad_protocol_parse("suffix", "--protocol"), Error);
  EXPECT_EQ(pad_protocol_parse("in-sequence", "--protocol"), PadProtocol::InSequence);
}

TEST(Layout, BaseCountRoundsUpToAMultipleOfR) {
  EXPECT_EQ(layout_base_count(1, 24), 24);
  EXPECT_EQ(layout_base_count(576, 24), 24);
  EXPECT_EQ(layout_base_count(577, 24), 48);
  EXPECT_EQ(layout_base_count(1000, 24), 48);
  EXPECT_EQ(layout_base_count(2000, 8), 256);
}

}  // namespace
}  // namespace phasescope
