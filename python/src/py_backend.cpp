// py_backend.cpp — see py_backend.h.
#include "py_backend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/extension.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/json_fields.h"
#include "eval/model_backend.h"
#include "eval/results.h"
#include "eval/runner.h"
#include "model/config.h"
#include "model/load.h"
#include "probe/local_tokenizer_source.h"
#include "probe/needle.h"

namespace py = pybind11;

namespace phasescope {

namespace {

using json = nlohmann::json;

class PyBackend : public Backend {
 public:
  PyBackend(py::function fn, std::string model, int vocab)
      : fn_(std::move(fn)), model_(std::move(model)), vocab_(vocab) {}
  std::string describe() const override { return "Python score_fn " + model_; }
  std::string identity() const override { return "python score_fn " + model_ + " top-5"; }
  int max_batch() const override { return 16; }

  std::vector<ScoreResult> score(const std::vector<ScoreRequest>& batch) override {
    std::vector<ScoreResult> out(batch.size());
    std::map<size_t, std::vector<size_t>> by_len;  // prompt length -> request indices
    for (size_t i = 0; i < batch.size(); ++i) by_len[batch[i].tokens.size()].push_back(i);
    py::gil_scoped_acquire gil;
    for (const auto& [len, idx] : by_len) {
      const auto t0 = std::chrono::steady_clock::now();
      torch::Tensor ids = torch::empty({int64_t(idx.size()), int64_t(len)}, torch::kInt64);
      auto acc = ids.accessor<int64_t, 2>();
      for (size_t r = 0; r < idx.size(); ++r)
        for (size_t t = 0; t < len; ++t) acc[int64_t(r)][int64_t(t)] = batch[idx[r]].tokens[t];
      std::string error;
      torch::Tensor logp;
      try {
        py::object res = fn_(ids);
        if (!THPVariable_Check(res.ptr()))
          error = fmt::format("score_fn returned a {}, not a torch.Tensor [B, V]",
                              py::str(res.get_type().attr("__name__")).cast<std::string>());
        else
          logp = THPVariable_Unpack(res.ptr());
      } catch (py::error_already_set& e) {
        error = std::string("score_fn raised ") + e.what();
      }
      if (error.empty() && (logp.dim() != 2 || logp.size(0) != int64_t(idx.size()) ||
                            (vocab_ > 0 ? logp.size(1) != vocab_ : logp.size(1) <= max_token(batch, idx))))
        error = fmt::format(
            "score_fn returned shape {}, expected [B = {}, V = {}] (log-probabilities of the next "
            "token after each row's last token, over the layout's vocabulary)",
            shape_str(logp.sizes()), idx.size(), vocab_);
      if (error.empty() && !logp.is_floating_point())
        error = "score_fn returned an integer tensor; return float log-probabilities";
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
          double(idx.size());
      if (!error.empty()) {
        for (size_t i : idx) out[i].error = error;
        continue;
      }
      logp = logp.detach().cpu();
      const int64_t V = logp.size(1);
      auto top = logp.topk(std::min<int64_t>(5, V), -1);
      auto tv = std::get<0>(top), ti = std::get<1>(top);
      for (size_t r = 0; r < idx.size(); ++r) {
        ScoreResult& s = out[idx[r]];
        s.top1 = int(ti[int64_t(r)][0].item<int64_t>());
        for (int64_t k = 0; k < ti.size(1); ++k)
          s.topk.push_back({int(ti[int64_t(r)][k].item<int64_t>()), tv[int64_t(r)][k].item<double>()});
        const int a = batch[idx[r]].answer;
        if (a >= 0 && a < V) s.answer_logprob = logp[int64_t(r)][a].item<double>();
        s.ms = ms;
      }
    }
    return out;
  }

 private:
  // the largest token id of the group's prompts and answers: a width V must exceed it (needle: V unknown)
  static int64_t max_token(const std::vector<ScoreRequest>& batch, const std::vector<size_t>& idx) {
    int64_t m = 0;
    for (size_t i : idx) {
      for (int t : batch[i].tokens) m = std::max<int64_t>(m, t);
      m = std::max<int64_t>(m, batch[i].answer);
    }
    return m;
  }

  py::function fn_;
  std::string model_;
  int vocab_;
};

// The evaluation options a spec describes (the same as `eval` for a preset or checkpoint). `loaded`: the
// spec's checkpoint when the caller has loaded it already (its preset is read from there, not the file).
EvalOptions options_of(const json& s, const LoadedModel* loaded = nullptr) {
  const std::string where = "phasescope.evaluate";
  const std::string task = json_get_or<std::string>(s, "task", "lookup", where, "task=\"lookup\"");
  if (task != "lookup")
    fail(where + " task", "'" + task + "' is not lookup here", "a bug: needle has its own path");
  const PadProtocol protocol = pad_protocol_parse(
      json_get_or<std::string>(s, "protocol", "prefix", where, "prefix | in-sequence"), "protocol");
  const int64_t samples = json_get_or<int64_t>(s, "samples", 1152, where, "a positive number of prompts");
  const int R = json_get_or<int>(s, "residues", 24, where, "residues in [2, 512]");
  const uint64_t seed = json_get_or<uint64_t>(s, "seed", 1, where, "an integer seed");
  if (samples < 1 || samples > (int64_t(1) << 24))
    fail(where + " samples", fmt::format("is {}", samples), "use 1 to 2^24");
  if (R < 2 || R > 512) fail(where + " residues", fmt::format("is {}", R), "use 2 to 512");
  const bool has_preset = json_present(s, "preset"), has_ckpt = json_present(s, "checkpoint"),
             has_ids = json_present(s, "ids");
  if (int(has_preset) + int(has_ckpt) + int(has_ids) != 1)
    fail(where, "the layout's vocabulary needs exactly one of preset=, checkpoint= or ids=",
         "pass preset=\"w8s8-1kv\" (a phasescope preset), checkpoint=DIR, or ids=dict(bos=..., size=..., "
         "keys=[...], "
         "names=[...], fillers=[...]) from your own tokenizer");
  EvalOptions opt;
  if (has_ids) {
    const json& j = s["ids"];
    VocabIds ids;
    ids.bos = json_get<int>(j, "bos", where + " ids", "the BOS / document-boundary token id");
    ids.size = json_get<int>(j, "size", where + " ids", "the vocabulary size V of your model's output");
    ids.keys = json_get<std::vector<int>>(j, "keys", where + " ids", "single-token key ids");
    ids.names = json_get<std::vector<int>>(j, "names", where + " ids", "single-token name ids");
    ids.fillers = json_get<std::vector<int>>(j, "fillers", where + " ids", "neutral filler token ids");
    const int n_records = json_get_or<int>(s, "records", 64, where, "records per prompt");
    if (n_records < 2) fail(where + " records", fmt::format("is {}", n_records), "use at least 2");
    if (int(ids.keys.size()) < n_records || int(ids.names.size()) < n_records || ids.fillers.empty())
      fail(where + " ids",
           fmt::format("has {} keys, {} names and {} fillers for {} records", ids.keys.size(),
                       ids.names.size(), ids.fillers.size(), n_records),
           "give at least `records` keys and names (the paper: 64) and one filler, or lower records=");
    for (const auto* list : {&ids.keys, &ids.names, &ids.fillers})
      for (int t : *list)
        if (t < 0 || t >= ids.size)
          fail(where + " ids", fmt::format("token {} is outside the vocabulary [0, {})", t, ids.size),
               "pass ids of your tokenizer and its vocabulary size");
    Preset p = preset_load("w8s8-1kv");  // the evaluation's format only: records and demos come from the spec
    p.name = json_get_or<std::string>(s, "model", "model", where, "a name");
    p.task.n_records = n_records;
    opt = eval_options_for(p, protocol, samples, R, seed);
    opt.layout.task.vocab = vocab_of_ids(ids);
    opt.S = json_get_or<int>(s, "S", 8, where, "the stride accuracy is folded by");
  } else {
    const Preset p =
        has_preset ? preset_load(json_get<std::string>(s, "preset", where, "a preset name or file"))
        : loaded   ? loaded->preset
                   : model_load(json_get<std::string>(s, "checkpoint", where, "a checkpoint folder")).preset;
    opt = eval_options_for(p, protocol, samples, R, seed);
    if (json_present(s, "records")) {  // a shorter lookup than the preset's, e.g. for a small model
      opt.layout.task.n_records = json_get<int>(s, "records", where, "records per prompt, at least 2");
      if (opt.layout.task.n_records < 2 || opt.layout.task.n_records > p.task.n_records)
        fail(where + " records", fmt::format("is {}", opt.layout.task.n_records),
             fmt::format("use 2 to the preset's {} records (its vocabulary has that many keys)",
                         p.task.n_records));
      opt.layout.task.n_demos = std::min(8, opt.layout.task.n_records - 1);
    }
    if (json_present(s, "S")) opt.S = json_get<int>(s, "S", where, "the stride accuracy is folded by");
  }
  if (json_present(s, "model"))
    opt.model = json_get<std::string>(s, "model", where, "a name for the journal");
  opt.bootstrap = json_get_or<int>(s, "bootstrap", 2000, where, "bootstrap replicates");
  opt.fresh = json_get_or<bool>(s, "fresh", false, where, "true or false");
  opt.report = json_get_or<bool>(s, "report", false, where, "true or false");
  opt.log = nullptr;
  const int pad = json_get_or<int>(s, "pad", 0, where, "filler tokens per prompt");
  eval_set_pad_and_align(&opt, pad, "", "align", 2);
  return opt;
}

bool is_needle(const json& s) {
  const std::string task = json_get_or<std::string>(s, "task", "lookup", "phasescope", "lookup | needle");
  if (task != "lookup" && task != "needle")
    fail("phasescope task", "'" + task + "' is not a task", "use task=\"lookup\" or task=\"needle\"");
  return task == "needle";
}

// The needle in a tokenizer's own tokens (probe/needle.h), as `probe needle --tokenizer` builds it.
NeedleDesign needle_of(const json& s) {
  const std::string where = "phasescope needle";
  if (!json_present(s, "tokenizer"))
    fail(where, "task=\"needle\" needs tokenizer= (a tokenizer.json path, or a folder holding one)",
         "pass the tokenizer of the model you evaluate");
  NeedleSpec spec;
  spec.R = json_get_or<int>(s, "residues", 8, where, "residues in [2, 512]");
  const int64_t samples = json_get_or<int64_t>(s, "samples", 1152, where, "prompts");
  spec.samples_per_group = int(std::max<int64_t>(1, (samples + spec.R - 1) / spec.R));
  spec.context = json_get_or<int64_t>(s, "context", 2048, where, "tokens per prompt");
  spec.seed = json_get_or<uint64_t>(s, "seed", 1, where, "an integer seed");
  const auto ts = local_tokenizer_open(json_get<std::string>(s, "tokenizer", where, "a tokenizer.json path"));
  return needle_build(spec, *ts, nullptr);
}

}  // namespace

std::string py_layout(const std::string& spec_json) {
  const json spec = json_parse_or_fail(spec_json, "phasescope.layout spec", "a bug in phasescope");
  if (is_needle(spec)) {
    const NeedleDesign d = needle_of(spec);
    json out = {
        {"vocab_size", nullptr}, {"R", d.spec.R}, {"S", json_get_or<int>(spec, "S", 8, "phasescope", "S")}};
    json& samples = out["samples"] = json::array();
    for (int64_t id = 0; id < d.samples(); ++id) {
      const ScoringSample x = needle_render(d, id, "layout");
      samples.push_back({{"id", id},
                         {"base", id / d.spec.R},
                         {"residue", x.rec.residue},
                         {"target_pos", x.rec.target_pos},
                         {"answer", x.answer.front()},
                         {"answer_tokens", x.answer},
                         {"tokens", x.prompt}});
    }
    return out.dump();
  }
  const EvalOptions opt = options_of(spec);
  const LayoutDesign d = layout_build(opt.layout);
  json out = {{"vocab_size", opt.layout.task.vocab.size()}, {"R", opt.layout.R}, {"S", opt.S}};
  json& samples = out["samples"] = json::array();
  for (const LayoutSample& x : d.samples)
    samples.push_back({{"id", x.id},
                       {"base", x.base},
                       {"residue", x.residue},
                       {"target_pos", x.target_pos},
                       {"answer", x.answer},
                       {"tokens", x.tokens}});
  return out.dump();
}

namespace {

// Run (or resume) the lookup evaluation into out_dir with the GIL released (a Python backend takes it back
// for each call), write its card; results.json's text.
std::string run_lookup(Backend& backend, const EvalOptions& opt, const std::string& out_dir) {
  EvalResults r;
  {
    py::gil_scoped_release release;
    r = run_eval(backend, opt, out_dir);
    eval_write_card(r, opt, out_dir + "/card.json");
  }
  return results_to_json(r).dump();
}

}  // namespace

std::string py_evaluate(py::function score_fn, const std::string& spec_json, const std::string& out_dir) {
  const json spec = json_parse_or_fail(spec_json, "phasescope.evaluate spec", "a bug in phasescope");
  if (is_needle(spec)) {
    const NeedleDesign d = needle_of(spec);
    NeedleRunOptions o;
    o.model = json_get_or<std::string>(spec, "model", "model", "phasescope.evaluate", "a name");
    o.S = json_get_or<int>(spec, "S", 8, "phasescope.evaluate", "the stride accuracy is folded by");
    o.bootstrap = json_get_or<int>(spec, "bootstrap", 2000, "phasescope.evaluate", "bootstrap replicates");
    o.fresh = json_get_or<bool>(spec, "fresh", false, "phasescope.evaluate", "true or false");
    o.report = false;
    PyBackend backend(std::move(score_fn), o.model, -1);
    EvalResults r;
    {
      py::gil_scoped_release release;
      r = needle_run(backend, d, o, out_dir);
    }
    return results_to_json(r).dump();
  }
  const EvalOptions opt = options_of(spec);
  PyBackend backend(std::move(score_fn), opt.model, opt.layout.task.vocab.size());
  return run_lookup(backend, opt, out_dir);
}

std::string py_evaluate_checkpoint(const std::string& spec_json, const std::string& out_dir) {
  const json spec = json_parse_or_fail(spec_json, "phasescope.evaluate spec", "a bug in phasescope");
  if (!json_present(spec, "checkpoint"))
    fail("phasescope evaluate_checkpoint", "needs checkpoint=", "pass the checkpoint folder");
  LoadedModel m = model_load(spec["checkpoint"].get<std::string>());  // loaded once: options and backend
  const EvalOptions opt = options_of(spec, &m);
  ModelBackend backend(std::move(m), opt.model);
  return run_lookup(backend, opt, out_dir);
}

}  // namespace phasescope
