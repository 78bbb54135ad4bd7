// forward.cpp — see forward.h.
#include "model/forward.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"

namespace phasescope {

torch::Tensor model_last_logprobs(DecoderImpl& model, const std::vector<const std::vector<int>*>& prompts,
                                  torch::Tensor* hidden) {
  const int64_t B = int64_t(prompts.size());
  const int64_t V = model.config().vocab_size;
  int64_t T = 0;
  for (const std::vector<int>* p : prompts) T = std::max<int64_t>(T, int64_t(p->size()));
  // right-padded token ids [B, T] and the index of each prompt's last token [B]
  auto tokens = torch::zeros({B, T}, torch::kInt64);
  auto last = torch::empty({B}, torch::kInt64);
  auto tk = tokens.accessor<int64_t, 2>();
  for (int64_t i = 0; i < B; ++i) {
    const std::vector<int>& r = *prompts[size_t(i)];
    if (r.empty()) fail("model backend", "empty prompt", "every prompt needs at least one token (BOS)");
    for (size_t t = 0; t < r.size(); ++t) {
      if (r[t] < 0 || r[t] >= V)
        fail("model backend", fmt::format("token id {} outside the model's vocabulary of {}", r[t], V),
             "build prompts with this checkpoint's vocabulary");
      tk[i][int64_t(t)] = r[t];
    }
    last[i] = int64_t(r.size()) - 1;
  }
  auto h = model.hidden(tokens);                // [B, T, d]
  auto hl = h.index({torch::arange(B), last});  // [B, d]
  if (hidden) *hidden = h;
  return torch::log_softmax(model.unembed(hl), -1);  // [B, V]
}

std::vector<std::vector<double>> model_next_token_logprobs(
    DecoderImpl& model, const std::vector<const std::vector<int>*>& prompts) {
  torch::Tensor hidden;
  model_last_logprobs(model, prompts, &hidden);  // checks the ids; hidden [B, T, d]
  std::vector<std::vector<double>> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int>& p = *prompts[i];
    const int64_t n = int64_t(p.size()) - 1;  // positions that predict a token of the prompt
    std::vector<double> lp;
    if (n > 0) {
      const torch::Tensor logp =
          torch::log_softmax(model.unembed(hidden[int64_t(i)].slice(0, 0, n)), -1);  // [n, V]
      const torch::Tensor next = torch::tensor(std::vector<int64_t>(p.begin() + 1, p.end()), torch::kInt64);
      const torch::Tensor picked =
          logp.gather(1, next.unsqueeze(1)).squeeze(1).to(torch::kFloat64).contiguous();
      lp.assign(picked.data_ptr<double>(), picked.data_ptr<double>() + n);
    }
    out.push_back(std::move(lp));
  }
  return out;
}

}  // namespace phasescope
