// model_backend.h — the in-process Backend: a phasescope checkpoint scored with libtorch.
// Prompts of different lengths share one forward pass, right-padded (the decoder is causal, so
// padding after a prompt never changes the logits at the prompt's last position).
// Its forward pass is model/forward.h's model_last_logprobs, the one the server runs too.
// Not here: loading the checkpoint (model/load.h: model_load) or any phase logic.
#pragma once
#include <string>
#include <vector>

#include "eval/backend.h"
#include "eval/runner.h"
#include "model/forward.h"
#include "model/load.h"

namespace phasescope {

class ModelBackend : public Backend {
 public:
  ModelBackend(LoadedModel model, std::string label, int topk = 5, int batch = 16);
  std::string describe() const override;
  std::string identity() const override;  // "in-process fp32 model <content hash> top-<k>"
  std::vector<ScoreResult> score(const std::vector<ScoreRequest>& batch) override;
  int max_batch() const override { return batch_; }
  DecoderImpl& model() { return *model_.model; }
  const Preset& preset() const { return model_.preset; }

 private:
  LoadedModel model_;
  std::string label_;
  std::string description_;
  int topk_;
  int batch_;
};

// The stride a checkpoint's accuracy is folded by: its first compressed layer's, else 8 (the paper
// shows full attention on the W8/S8 axis).
int display_stride(const Preset& p);

// Evaluation options for a checkpoint's preset: the lookup task at its n_records with the paper's
// 8 demonstrations, its vocabulary, about `samples` prompts in whole paired blocks, filler room for R
// residues (pad max(48, 2R - 1)), progress to stdout.
EvalOptions eval_options_for(const Preset& p, PadProtocol protocol, int64_t samples, int R, uint64_t seed);
// "" when the design scores exactly `requested` prompts; else one line saying how many it scores and
// why (the paired design takes whole blocks: R base examples, each at all R residues).
std::string eval_samples_note(int64_t requested, const EvalOptions& opt);

}  // namespace phasescope
