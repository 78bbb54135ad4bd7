// config_test.cpp — attention configs: defaults validate, JSON round-trips every field, and bad
// input is refused with a message that names the field and the fix.
#include "attention/config.h"

#include <gtest/gtest.h>

#include <set>

#include "attention/zoo.h"
#include "core/check.h"

namespace phasescope {
namespace {

std::string error_of(const std::string& json) {
  try {
    attn_config_from_json(json, "presets/x.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(AttnConfig, EveryKindsDefaultValidatesAndRoundTrips) {
  for (AttnKind k : attn_all_kinds()) {
    AttnConfig c = zoo_config(k);
    c.gate = GateKind::Vector;
    c.window = 21;
    EXPECT_NO_THROW(attn_config_validate(c, "test"));
    AttnConfig back = attn_config_from_json(attn_config_to_json(c), "test");
    EXPECT_EQ(attn_config_to_json(back), attn_config_to_json(c)) << attn_kind_name(k);
    EXPECT_EQ(back.kind, k);
    EXPECT_EQ(back.gate, GateKind::Vector);
    EXPECT_EQ(back.window, 21);
  }
}

TEST(AttnConfig, BadInputNamesFileFieldAndFix) {
  EXPECT_NE(error_of("{\"kind\": \"chunked\", \"W\": 4, \"S\": 8}").find("presets/x.json field 'W'"),
            std::string::npos);
  EXPECT_NE(error_of("{\"kind\": \"chunked\", \"Wx\": 4}").find("field 'Wx': unknown field"),
            std::string::npos);
  EXPECT_NE(error_of("{\"kind\": \"chunked\", \"W\": \"8\"}").find("expected integer"), std::string::npos);
  EXPECT_NE(error_of("{\"kind\": \"sparse\"}").find("unknown attention kind 'sparse'"), std::string::npos);
  EXPECT_NE(error_of("{\"W\": 8}").find("field 'kind'"), std::string::npos);
  EXPECT_NE(error_of("{\"kind\": ").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("{\"kind\": \"hca\", \"overlap\": true}").find("Fix:"), std::string::npos);
  EXPECT_NE(error_of("{\"kind\": \"v41-csa2\", \"offset_bias\": true}").find("offset_bias"),
            std::string::npos);
  EXPECT_NE(error_of("{\"kind\": \"dsv4-csa\", \"n_kv_heads\": 2, \"n_heads\": 4}").find("MQA"),
            std::string::npos);
  EXPECT_NE(error_of("{\"kind\": \"hca\", \"ratio\": 32, \"window\": 8}").find("ratio - 1"),
            std::string::npos);
  EXPECT_NE(error_of("{\"kind\": \"full\", \"n_heads\": 6, \"n_kv_heads\": 4}").find("divide n_heads"),
            std::string::npos);
}

TEST(AttnConfig, ParamInventoryFollowsTheOptions) {
  auto names = [](const AttnConfig& c) {
    std::set<std::string> s;
    for (const auto& p : attn_param_specs(c)) s.insert(p.name);
    return s;
  };
  AttnConfig c = zoo_config(AttnKind::Chunked);
  EXPECT_TRUE(names(c).count("cv_payload"));
  c.tied_kv = true;
  EXPECT_FALSE(names(c).count("cv_payload"));
  c.gate = GateKind::Uniform;
  EXPECT_FALSE(names(c).count("ck_gate_w"));
  AttnConfig d = zoo_config(AttnKind::DsCsa);
  EXPECT_TRUE(names(d).count("idx_comp_ape"));
  EXPECT_EQ(attn_param_specs(d)[0].name, "wq_a");
  for (const auto& p : attn_param_specs(d))
    if (p.name == "comp_wkv") EXPECT_EQ(p.shape[0], 2 * d.head_dim);  // overlap: P and C halves
}

}  // namespace
}  // namespace phasescope
