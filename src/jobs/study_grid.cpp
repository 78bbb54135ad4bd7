// study_grid.cpp — see study_grid.h.
#include "jobs/study_grid.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "core/check.h"
#include "core/io.h"
#include "core/json_fields.h"
#include "eval/model_backend.h"

#ifndef PHASESCOPE_GRID_DIR
#define PHASESCOPE_GRID_DIR "grids"
#endif

namespace phasescope {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
constexpr int kR = 24;  // residues: a multiple of every W/S stride of the paper (4, 6, 8, 12)
}

std::string study_variant(const std::string& preset, const std::string& tag) {
  return tag.empty() ? preset : preset + "-" + tag;
}

std::string StudyRun::id() const { return study_variant(preset, tag) + "@" + std::to_string(seed); }

std::string study_grid_dir() {
  if (const char* env = std::getenv("PHASESCOPE_GRIDS")) return env;
  return PHASESCOPE_GRID_DIR;
}

StudyGrid study_grid(const std::string& name, const std::vector<uint64_t>& seeds_in) {
  const std::vector<uint64_t> seeds = seeds_in.empty() ? std::vector<uint64_t>{42, 43, 44, 45} : seeds_in;
  // a name without a slash or .json is a built-in grid: grids/<name>.json
  std::string path = name;
  if (name.find('/') == std::string::npos && name.find(".json") == std::string::npos)
    path = (fs::path(study_grid_dir()) / (name + ".json")).string();
  const std::string fix = "pass a grid name of " + study_grid_dir() +
                          " (paper, quick, mitigations, ...) or a grid file {\"name\", \"toy\", \"runs\": "
                          "[{\"preset\", \"seed\", "
                          "...}]}";
  if (!fs::is_regular_file(path)) fail("--grid " + name, "is neither a built-in grid nor a file", fix);
  const json j = json_parse_or_fail(io_read_text(path, fix), path, fix);
  if (!j.is_object() || !j.contains("runs") || !j["runs"].is_array() || j["runs"].empty())
    fail(path, "a grid file is an object with a non-empty \"runs\" list", fix);

  StudyGrid g;
  g.name = j.value("name", fs::path(path).stem().string());
  g.toy = j.value("toy", false);
  for (const json& r : j["runs"]) {
    if (!r.is_object() || !r.contains("preset") || !r["preset"].is_string())
      fail(path, "every run needs a \"preset\" name: " + r.dump(), fix);
    // which of --seeds this entry runs on
    std::vector<uint64_t> run_seeds;
    if (r.contains("seed")) {
      if (!r["seed"].is_number_unsigned())
        fail(path, "\"seed\" is not a non-negative integer: " + r.dump(), fix);
      run_seeds = {r["seed"].get<uint64_t>()};
    } else if (r.contains("seed_index")) {
      const json& k = r["seed_index"];
      if (!k.is_number_unsigned() || k.get<size_t>() >= seeds.size())
        fail(path,
             "\"seed_index\" " + k.dump() + " is not an index into --seeds (" + std::to_string(seeds.size()) +
                 " seeds)",
             "pass more seeds with --seeds, or fix the index");
      run_seeds = {seeds[k.get<size_t>()]};
    } else if (r.contains("seeds")) {
      const json& n = r["seeds"];
      if (n == "all") {
        run_seeds = seeds;
      } else if (n.is_number_unsigned() && n.get<size_t>() >= 1) {
        run_seeds.assign(seeds.begin(), seeds.begin() + std::min(n.get<size_t>(), seeds.size()));
      } else {
        fail(path, "\"seeds\" is \"all\" or a count N >= 1 (the first N of --seeds): " + r.dump(), fix);
      }
    } else {
      run_seeds = {seeds[0]};
    }
    for (uint64_t seed : run_seeds) {
      StudyRun run;
      run.preset = r["preset"].get<std::string>();
      run.seed = seed;
      run.family = r.value("family", "");
      run.paper = r.value("paper", "");
      run.tag = r.value("tag", "");
      run.overrides = r.contains("overrides") ? r["overrides"] : json(nullptr);
      g.runs.push_back(run);
    }
  }
  std::set<std::string> ids;
  for (const StudyRun& r : g.runs)
    if (!ids.insert(r.id()).second)
      fail("grid " + g.name, "run " + r.id() + " appears twice", "give one of them a distinct \"tag\"");
  return g;
}

// preset_to_json writes every layer's attention under "layers", which preset_from_json merges over
// "attention": so a patch of "attention" is applied to each layer as well, or it would be lost.
Preset study_preset(const StudyRun& run, bool toy) {
  json j = preset_to_json(preset_load(run.preset));
  auto patch_attention = [&j](const json& patch) {
    j["attention"].merge_patch(patch);
    for (json& layer : j["layers"]) layer.merge_patch(patch);
  };
  if (toy) {
    j.merge_patch(
        {{"model", {{"d_model", 32}, {"head_dim", 8}}},
         {"task",
          {{"seq_len", 64},
           {"n_records", 8},
           {"n_demos", 4},
           {"min_records", 4},
           {"curriculum_steps", 0},
           {"curriculum_length", false},
           {"repeat_steps", 0}}},
         {"train", {{"steps", 40}, {"batch", 8}, {"warmup", 5}, {"eval_every", 0}, {"ckpt_every", 40}}}});
    // DeepSeek ratios of 128 need more than a toy row's 64 tokens
    for (json& layer : j["layers"])
      if (layer.contains("ratio") && layer["ratio"].get<int>() > 16) layer["ratio"] = 16;
  }
  j["train"]["seed"] = run.seed;
  if (!run.overrides.is_null()) {
    json o = run.overrides;
    if (o.contains("attention")) {
      patch_attention(o["attention"]);
      o.erase("attention");
    }
    j.merge_patch(o);
  }
  j["name"] = study_variant(run.preset, run.tag);
  return preset_from_json(j, "study run " + run.id());
}

int study_residues(const Preset& p) {
  const int S = std::max(1, display_stride(p));
  return kR % S == 0 ? kR : S;
}

}  // namespace phasescope
