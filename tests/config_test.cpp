// config_test.cpp — attention configs: defaults validate, JSON round-trips every field, and bad
// input is refused with a message that names the field and the fix.
#include "attention/config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "attention/zoo.h"
#include "core/check.h"
#include "model/config.h"
#include "testing.h"

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

// hostile input: nesting, overflowing numbers and wrapping integers are
// refused with the field named, never stored wrapped, never a crash or an internal error
TEST(AttnConfig, HostileNumbersAndNestingAreRefused) {
  const std::string deep =
      "{\"kind\": \"chunked\", \"W\": " + std::string(90000, '[') + std::string(90000, ']') + "}";
  EXPECT_NE(error_of(deep).find("nested deeper than 64 levels"), std::string::npos);
  EXPECT_NE(error_of("{\"kind\": \"chunked\", \"rope_theta\": 1e400}").find("not valid JSON"),
            std::string::npos);
  const std::string wrapped = error_of("{\"kind\": \"chunked\", \"n_kv_heads\": 4294967296}");
  EXPECT_NE(wrapped.find("field 'n_kv_heads': integer 4294967296 is outside [-2147483648, 2147483647]"),
            std::string::npos)
      << wrapped;
  EXPECT_NE(error_of("{\"kind\": \"chunked\", \"window\": 2147483648}").find("outside"), std::string::npos);
  EXPECT_NE(error_of("{\"kind\": \"chunked\", \"sink\": 4294967296}").find("expected a boolean"),
            std::string::npos);
  EXPECT_NE(error_of("{\"kind\": \"chunked\", \"W\": [[1]]}").find("expected an integer, got array"),
            std::string::npos);
  // a misspelled field gets the closest name
  EXPECT_NE(error_of("{\"kind\": \"chunked\", \"windw\": 8}").find("did you mean 'window'?"),
            std::string::npos);
}

TEST(AttnConfig, BadInputNamesFileFieldAndFix) {
  EXPECT_NE(error_of("{\"kind\": \"chunked\", \"W\": 4, \"S\": 8}").find("presets/x.json field 'W'"),
            std::string::npos);
  EXPECT_NE(error_of("{\"kind\": \"chunked\", \"Wx\": 4}").find("field 'Wx': unknown field"),
            std::string::npos);
  EXPECT_NE(error_of("{\"kind\": \"chunked\", \"W\": \"8\"}").find("expected an integer"), std::string::npos);
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

namespace phasescope {
namespace {

// hostile preset values: each refused with the field named
TEST(PresetConfig, HostileValuesAreRefusedWithTheirField) {
  auto with = [](const std::string& section, const std::string& field, const nlohmann::json& v) {
    nlohmann::json j = preset_to_json(preset_load("w8s8-1kv"));
    j[section][field] = v;
    return testutil::error_of([&] { preset_from_json(j, "presets/x.json"); });
  };
  EXPECT_NE(with("task", "curriculum_steps", 2147483648LL)
                .find("field 'curriculum_steps': integer 2147483648 is outside"),
            std::string::npos);
  EXPECT_NE(with("task", "curriculum_steps", -2).find("task.curriculum_steps"), std::string::npos);
  EXPECT_NE(with("train", "eval_every", 4294967297LL).find("outside"), std::string::npos);
  EXPECT_NE(with("train", "lr", 18446744073709551615.0).find("train.lr"), std::string::npos);
  EXPECT_NE(with("train", "lr", 1e-300).find("train.lr"), std::string::npos);
  EXPECT_NE(with("model", "head_dim", 1000000000).find("too large"), std::string::npos);
  EXPECT_NE(with("model", "n_layers", 2000).find("model.n_layers"), std::string::npos);
  EXPECT_NE(with("model", "n_layers", 1000000000).find("model.n_layers"), std::string::npos);  // at once
  // sizes that would allocate gigabytes (a 10M-token vocabulary)
  EXPECT_NE(with("task", "n_keys", 10000000).find("task.n_keys/n_names/n_fillers"), std::string::npos);
  EXPECT_NE(with("task", "n_fillers", 1000000).find("task.n_keys/n_names/n_fillers"), std::string::npos);
  EXPECT_NE(with("task", "seq_len", 1000000000).find("task.seq_len"), std::string::npos);
  EXPECT_NE(with("train", "batch", 1000000).find("train.batch"), std::string::npos);
  {
    nlohmann::json j = preset_to_json(preset_load("w8s8-1kv"));
    j["train"]["batch"] = 65536;
    j["task"]["seq_len"] = 1024;
    EXPECT_NE(testutil::error_of([&] { preset_from_json(j, "presets/x.json"); }).find("16M tokens per step"),
              std::string::npos);
  }
  EXPECT_NE(with("train", "eval_examples", 0).find("train.eval_examples"), std::string::npos);
  nlohmann::json j = preset_to_json(preset_load("w8s8-1kv"));
  j["name"] = 5;
  EXPECT_NE(testutil::error_of([&] {
              preset_from_json(j, "presets/x.json");
            }).find("field 'name': expected a string"),
            std::string::npos);
  const std::string deep =
      "{\"name\": \"x\", \"model\": " + std::string(90000, '[') + std::string(90000, ']') + "}";
  EXPECT_NE(testutil::error_of([&] { preset_parse(deep, "presets/x.json"); }).find("nested deeper"),
            std::string::npos);
}

}  // namespace
}  // namespace phasescope
