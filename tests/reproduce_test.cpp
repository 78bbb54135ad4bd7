// reproduce_test.cpp — the main job end to end at toy size (`reproduce --quick`, one model): it trains,
// evaluates both protocols, runs explain, and writes one report with an explain section per model;
// a second run reuses the checkpoint and the journals (nothing retrained, nothing rescored).
#include "jobs/reproduce.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "testing.h"

using namespace phasescope;
namespace fs = std::filesystem;

using testutil::slurp;

TEST(Reproduce, QuickRunWritesEvaluationAndExplainAndResumes) {
  const fs::path out = testutil::tmp_dir("reproduce_quick");
  ReproduceOptions o;
  o.out = out.string();
  o.quick = true;
  o.models = {"w8s8-1kv"};
  o.steps = 20;
  const std::string report = reproduce_run(o);
  ASSERT_TRUE(fs::exists(report));
  const std::string html = slurp(report);
  EXPECT_NE(html.find("id=\"explain-w8s8-1kv\""), std::string::npos);
  for (const char* f : {"eval/w8s8-1kv/prefix/journal.jsonl", "eval/w8s8-1kv/in-sequence/results.json",
                        "explain/w8s8-1kv/explain.json", "explain/w8s8-1kv/knockout.png", "results.csv"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  const std::string ckpt = slurp(out / "models/w8s8-1kv/checkpoint.safetensors");
  const std::string journal = slurp(out / "eval/w8s8-1kv/prefix/journal.jsonl");

  reproduce_run(o);  // resumes: the same checkpoint bytes, no new journal lines
  EXPECT_EQ(slurp(out / "models/w8s8-1kv/checkpoint.safetensors"), ckpt);
  EXPECT_EQ(slurp(out / "eval/w8s8-1kv/prefix/journal.jsonl"), journal);
  fs::remove_all(out);
}
