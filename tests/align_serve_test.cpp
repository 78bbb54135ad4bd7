// align_serve_test.cpp — `serve --align-spans`: a completion that marks phasescope_spans is answered exactly
// as the client-side aligned prompt is (same generated tokens, same log-probabilities), the reply says what
// was added, and a server without a card, or a span that cannot be aligned, is an OpenAI-style 400.
#include <gtest/gtest.h>

#include "align/align.h"
#include "jobs/align_study.h"
#include "serve_testing.h"

namespace phasescope {
namespace {

namespace ts = testing_serve;
using json = nlohmann::json;

PhaseCard card_for(const Vocab& v) {
  PhaseCard c;
  c.model = "tiny-w8s8";
  c.grid.period = 8;
  for (int p = 0; p < 8; ++p) c.folded.push_back({p, 10, p == 5 ? 9 : 3, p == 5 ? 0.9 : 0.3, 0, 1});
  for (int i = 0; i < v.n_fillers; ++i) c.neutral_tokens.push_back(v.filler(i));
  card_rank_phases(&c);
  return c;
}

TEST(AlignServe, MarkedSpansAreAnsweredAsTheClientSideAlignedPrompt) {
  const std::string ckpt = ts::tiny_checkpoint("align_serve");
  ServeOptions o = ts::local_options(ckpt);
  Server plain(o);
  const Vocab v = task_vocab(ts::tiny_preset().task);
  const PhaseCard card = card_for(v);
  o.align_card = testutil::tmp_dir("align_serve_card") + "/card.json";
  card_write(card, o.align_card);
  Server aligned(o);

  const std::vector<int> prompt = {v.bos(),   v.key(1),    v.name(2), v.filler(0), v.key(3),
                                   v.name(4), v.filler(1), v.key(5),  v.name(6),   v.key(3)};
  const std::vector<AlignSpan> spans = {{1, 3, 0}, {4, 6, 0}};
  for (const char* mode : {"align", "both"}) {
    AlignOptions ao;
    ao.mode = align_mode_parse(mode, "test");
    ao.copies = 2;
    ao.phase_order = card.phase_order;
    ao.neutral = card.neutral_tokens;
    const AlignedPrompt client = align_prompt(prompt, spans, card.grid, ao);
    const json common = {{"max_tokens", 3}, {"temperature", 0}, {"logprobs", 5}, {"echo", true}};
    json by_server = common, by_client = common;
    by_server["prompt"] = prompt;
    by_server["phasescope_spans"] = {{1, 3}, {4, 6}};
    by_server["phasescope_align"] = {{"mode", mode}, {"copies", 2}};
    by_client["prompt"] = client.tokens;
    const ts::Reply s = ts::post(aligned.port(), "/v1/completions", by_server);
    const ts::Reply c = ts::post(plain.port(), "/v1/completions", by_client);
    ASSERT_EQ(s.status, 200) << s.raw;
    ASSERT_EQ(c.status, 200) << c.raw;
    EXPECT_EQ(s.body["choices"], c.body["choices"]) << mode;  // tokens, text, log-probs: equal
    EXPECT_EQ(s.body["usage"], c.body["usage"]);
    const json& al = s.body["phasescope_alignment"][0];
    EXPECT_EQ(al["added"].get<int64_t>(), client.added);
    EXPECT_EQ(al["anchors"], json(client.anchors));
    for (const json& copies : al["phases"]) EXPECT_EQ(copies[0].get<int>(), 5);
  }

  // refusals: a server without a card, a span outside the prompt, one list of spans for two prompts
  const ts::Reply no_card =
      ts::post(plain.port(), "/v1/completions", json{{"prompt", prompt}, {"phasescope_spans", {{1, 3}}}});
  EXPECT_EQ(no_card.status, 400);
  EXPECT_EQ(no_card.body["error"]["param"], "phasescope_spans");
  EXPECT_NE(no_card.body["error"]["message"].get<std::string>().find("--align-spans"), std::string::npos);
  const ts::Reply outside =
      ts::post(aligned.port(), "/v1/completions", json{{"prompt", prompt}, {"phasescope_spans", {{8, 40}}}});
  EXPECT_EQ(outside.status, 400);
  EXPECT_NE(outside.body["error"]["message"].get<std::string>().find("outside"), std::string::npos);
  const ts::Reply two = ts::post(aligned.port(), "/v1/completions",
                                 json{{"prompt", {prompt, prompt}}, {"phasescope_spans", {{1, 3}}}});
  EXPECT_EQ(two.status, 400);
  EXPECT_NE(two.body["error"]["message"].get<std::string>().find("one list of spans per prompt"),
            std::string::npos);
}

// The measurement job end to end on an untrained tiny model (plumbing, not accuracy): a card, then 2
// protocols x 6 modes (4 remedies, 2 controls) in process and over HTTP, each aligned row judged against its
// unaligned twin, every row of a model at one prompt length, and the HTTP rows equal to the in-process ones
// (same prompts, same model).
TEST(AlignStudy, EveryRowIsWrittenJudgedAndHttpAgreesWithInProcess) {
  const std::string ckpt = ts::tiny_checkpoint("align_study_model");
  AlignStudyOptions o;
  o.models = {{ckpt, true}};
  o.out = testutil::tmp_dir("align_study");
  o.R = 8;
  o.per_residue = 1;
  const std::vector<AlignStudyRow> rows = align_study_run(o);
  ASSERT_EQ(rows.size(), 24u);
  for (const AlignStudyRow& r : rows) {
    EXPECT_EQ(r.judged, r.mode != "none" && r.mode.rfind("control", 0) != 0) << r.mode;
    EXPECT_EQ(r.prompt_len, rows[0].prompt_len);
    EXPECT_EQ(r.n, 64);
    EXPECT_EQ(r.added_tokens_mean > 0, r.mode != "none") << r.mode;
  }
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(rows[i].backend, "in-process");
    EXPECT_EQ(rows[12 + i].backend, "http");
    EXPECT_EQ(rows[12 + i].mean, rows[i].mean) << rows[i].mode;
    EXPECT_EQ(rows[12 + i].worst, rows[i].worst) << rows[i].mode;
  }
  const json j = json::parse(testutil::slurp(o.out + "/results.json"));
  EXPECT_EQ(j["schema"], "phasescope.align.results");
  EXPECT_EQ(j["rows"].size(), 24u);
  for (const char* k :
       {"model", "seed", "protocol", "mode", "worst", "mean", "gap", "added_tokens_mean", "n"})
    EXPECT_TRUE(j["rows"][1].contains(k)) << k;
  EXPECT_NE(testutil::slurp(o.out + "/table.md").find("| repeat x3 |"), std::string::npos);
}

}  // namespace
}  // namespace phasescope
