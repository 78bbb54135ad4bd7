// model_backend.cpp — see model_backend.h.
#include "eval/model_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "core/check.h"
#include "data/tasks.h"

namespace phasescope {

ModelBackend::ModelBackend(LoadedModel model, std::string label, int topk, int batch)
    : model_(std::move(model)), label_(std::move(label)), topk_(topk), batch_(batch) {
  model_.model->eval();
  description_ = model_describe(*model_.model);
}

std::string ModelBackend::describe() const {
  return fmt::format("{} (in-process, fp32, step {}): {}", label_, model_.step, description_);
}

std::string ModelBackend::identity() const {
  return fmt::format("in-process fp32 model {} top-{}", model_.hash, topk_);
}

std::vector<ScoreResult> ModelBackend::score(const std::vector<ScoreRequest>& batch) {
  torch::NoGradGuard no_grad;
  auto t0 = std::chrono::steady_clock::now();
  const int64_t B = int64_t(batch.size());
  const int64_t V = model_.model->config().vocab_size;
  std::vector<const std::vector<int>*> prompts;
  for (const ScoreRequest& r : batch) prompts.push_back(&r.tokens);
  auto logp = model_last_logprobs(*model_.model, prompts);  // [B, V]
  auto top = logp.topk(std::min<int64_t>(topk_, V), -1);
  auto tv = std::get<0>(top), ti = std::get<1>(top);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / double(B);
  std::vector<ScoreResult> out(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) {
    ScoreResult& r = out[size_t(i)];
    r.top1 = int(ti[i][0].item<int64_t>());
    for (int64_t k = 0; k < ti.size(1); ++k)
      r.topk.push_back({int(ti[i][k].item<int64_t>()), tv[i][k].item<double>()});
    const int a = batch[size_t(i)].answer;
    if (a >= 0 && a < V) r.answer_logprob = logp[i][a].item<double>();
    r.ms = ms;
  }
  return out;
}

int display_stride(const Preset& p) {
  for (const auto& a : p.model.layers)
    if (attn_is_compressed(a) && attn_stride(a) > 1) return attn_stride(a);
  return 8;
}

EvalOptions eval_options_for(const Preset& p, PadProtocol protocol, int64_t samples, int R, uint64_t seed) {
  EvalOptions o;
  o.model = p.name;
  o.S = display_stride(p);
  o.layout.protocol = protocol;
  o.layout.R = R;
  o.layout.pad = std::max(o.layout.pad, 2 * R - 1);  // room for every shift (layout.h); 48 up to R = 24
  o.layout.seed = seed;
  o.layout.task.n_records = p.task.n_records;
  o.layout.task.n_demos = std::min(8, p.task.n_records - 1);  // the paper's evaluation format
  o.layout.task.vocab = task_vocab(p.task);
  if (p.task.task == "corpus" && p.model.vocab_size > 0 && o.layout.task.vocab.size() != p.model.vocab_size)
    fail(p.task.corpus + "/manifest.json",
         fmt::format("has a vocabulary of {} tokens, but the model has {}", o.layout.task.vocab.size(),
                     p.model.vocab_size),
         "evaluate with the corpus the model was trained on (the checkpoint's task.corpus), or retrain on "
         "this one");
  o.layout.n_base = layout_base_count(samples, R);
  o.log = &std::cout;
  return o;
}

std::string eval_samples_note(int64_t requested, const EvalOptions& opt) {
  const int64_t R = opt.layout.R, n = int64_t(opt.layout.n_base) * R;
  if (n == requested) return "";
  return fmt::format(
      "note: --samples {} gives {} prompts: the paired design takes whole blocks of R x R = {} x {} "
      "(R base examples, each at all R residues); pass --samples {} to say so\n",
      requested, n, R, R, n);
}

}  // namespace phasescope
