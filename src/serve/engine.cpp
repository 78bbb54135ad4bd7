// engine.cpp — see engine.h. Shapes: B = sequences in one forward pass, T = the longest of them,
// V = vocabulary, d = model width, P = one prompt's length, K = alternatives asked for in a chunk.
#include "serve/engine.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <random>
#include <thread>

#include "core/check.h"
#include "core/runtime.h"
#include "data/tasks.h"
#include "model/forward.h"
#include "model/load.h"
#include "serve/text_codec.h"

namespace phasescope {

namespace {

struct Group;

// One sequence being continued: its tokens so far (prompt + generated) and what it has produced.
struct Sequence {
  GenSpec spec;
  std::vector<int> tokens;  // (P + generated)
  std::string full_text;    // the pieces of every generated token (before any stop cut)
  GenOutput out;
  std::mt19937_64 rng;
  bool prompt_pending = false;  // prompt log-probs still to compute (first forward pass)
  bool done = false;
  std::vector<AttnCache> cache;  // one per layer once prefilled (kv_cache); freed when done
};

// One request: its sequences stay together and finish together.
struct Group {
  std::vector<Sequence> seqs;
  std::promise<std::vector<GenOutput>> promise;
  std::exception_ptr error;
  bool finished() const {
    if (error) return true;
    for (const Sequence& s : seqs)
      if (!s.done) return false;
    return true;
  }
};

// A token drawn from softmax(logp / temperature), restricted to the top_p nucleus. logp: (V).
int sample_token(const float* logp, int64_t V, double temperature, double top_p, std::mt19937_64& rng) {
  const double mx = *std::max_element(logp, logp + V);
  std::vector<std::pair<double, int>> p(static_cast<size_t>(V));  // (weight, id)
  double total = 0;
  for (int64_t j = 0; j < V; ++j) {
    p[size_t(j)] = {std::exp((double(logp[j]) - mx) / temperature), int(j)};
    total += p[size_t(j)].first;
  }
  size_t keep = p.size();
  if (top_p < 1) {
    // most likely first; ties by id so the order (and the draw) is reproducible
    std::sort(p.begin(), p.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    double cum = 0;
    for (keep = 0; keep < p.size();) {
      cum += p[keep++].first;
      if (cum >= top_p * total) break;
    }
    total = cum;
  }
  double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  for (size_t j = 0; j < keep; ++j) {
    u -= p[j].first;
    if (u < 0) return p[j].second;
  }
  return p[keep - 1].second;
}

}  // namespace

struct Engine::Impl {
  LoadedModel model;
  Vocab vocab;
  EngineOptions opt;
  std::string description;

  std::mutex mu;  // guards everything below it
  std::condition_variable cv;
  std::deque<std::shared_ptr<Group>> queue;  // submitted, not yet admitted
  int64_t queued_sequences = 0;
  bool stopping = false;
  EngineStats stats;

  std::vector<std::shared_ptr<Group>> active;  // the worker's own (no lock needed)
  std::thread worker;

  void run();
  void admit(Group& g);
  void step();
  void forward_chunk(const std::vector<std::pair<Group*, Sequence*>>& chunk);
  // the chunk's next-token log-probs [B, V], and for sequences with prompt_pending their prompt's
  // log-probs [P-1, V] (row t-1: log p(prompt[t] | prompt[<t])); undefined for the others
  torch::Tensor uncached_logprobs(const std::vector<std::pair<Group*, Sequence*>>& chunk,
                                  std::vector<torch::Tensor>* prompt_lp);
  torch::Tensor cached_logprobs(const std::vector<std::pair<Group*, Sequence*>>& chunk,
                                std::vector<torch::Tensor>* prompt_lp);
  void advance(Sequence& s, const float* logp, const int64_t* top_ids, int64_t V);
};

Engine::Engine(const std::string& checkpoint, const EngineOptions& opt) : impl_(new Impl) {
  Impl& m = *impl_;
  if (opt.max_batch < 1)
    fail("serve", fmt::format("--max-batch {} is not positive", opt.max_batch), "use 1 or more");
  if (opt.batch_window_ms < 0)
    fail("serve", fmt::format("--batch-window-ms {} is negative", opt.batch_window_ms), "use 0 or more");
  m.opt = opt;
  m.model = model_load(checkpoint);
  m.vocab = task_vocab(m.model.preset.task);
  if (m.vocab.size() != m.model.model->config().vocab_size)
    fail(checkpoint_path(checkpoint),
         fmt::format("the model's vocabulary ({}) differs from its task's ({})",
                     m.model.model->config().vocab_size, m.vocab.size()),
         "the checkpoint does not match its own config; retrain");
  m.model.model->eval();
  m.opt.kv_cache = opt.kv_cache && decoder_can_decode(m.model.model->config());
  m.stats.kv_cache = m.opt.kv_cache;
  m.description =
      fmt::format("{}, step {}: {}", m.model.preset.name, m.model.step, model_describe(*m.model.model));
  m.worker = std::thread([this] { impl_->run(); });
}

Engine::~Engine() { stop(); }

std::future<std::vector<GenOutput>> Engine::submit(std::vector<GenSpec> specs) {
  Impl& m = *impl_;
  auto g = std::make_shared<Group>();
  for (GenSpec& spec : specs) {
    Sequence s;
    s.tokens = spec.prompt;
    s.rng.seed(spec.seed);
    s.spec = std::move(spec);
    g->seqs.push_back(std::move(s));
  }
  auto fut = g->promise.get_future();
  {
    std::lock_guard<std::mutex> lk(m.mu);
    if (m.stopping) fail("serve", "the server is shutting down", "retry against a running server");
    m.queued_sequences += int64_t(g->seqs.size());
    m.stats.requests += 1;
    m.stats.sequences += int64_t(g->seqs.size());
    m.queue.push_back(std::move(g));
  }
  m.cv.notify_all();
  return fut;
}

void Engine::stop() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lk(m.mu);
    m.stopping = true;
  }
  m.cv.notify_all();
  if (m.worker.joinable()) m.worker.join();
}

const Preset& Engine::preset() const { return impl_->model.preset; }
const Vocab& Engine::vocab() const { return impl_->vocab; }
int Engine::vocab_size() const { return impl_->vocab.size(); }
int64_t Engine::step() const { return impl_->model.step; }
std::string Engine::describe() const { return impl_->description; }
const EngineOptions& Engine::options() const { return impl_->opt; }
EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->stats;
}

void Engine::Impl::run() {
  // this thread does all the torch work: same intra-op threads and denormal flushing as the thread that
  // ran runtime_init (both are per-thread settings), so its arithmetic is the in-process evaluation's
  at::init_num_threads();
  at::globalContext().setFlushDenormal(runtime_init().flush_denormal);
  for (;;) {
    // wait for work; when idle, gather what arrives within the batch window
    std::vector<std::shared_ptr<Group>> fresh;
    {
      std::unique_lock<std::mutex> lk(mu);
      if (active.empty()) {
        cv.wait(lk, [&] { return !queue.empty() || stopping; });
        if (queue.empty()) return;  // stopping, and nothing left anywhere
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::microseconds(int64_t(opt.batch_window_ms * 1000));
        cv.wait_until(lk, deadline, [&] { return queued_sequences >= opt.max_batch || stopping; });
      }
      fresh.assign(queue.begin(), queue.end());
      queue.clear();
      queued_sequences = 0;
    }
    for (auto& g : fresh) {
      admit(*g);
      active.push_back(g);
    }

    // one step of every active sequence, then hand back the requests that are complete
    step();
    std::vector<std::shared_ptr<Group>> still;
    for (auto& g : active) {
      if (!g->finished()) {
        still.push_back(g);
      } else if (g->error) {
        g->promise.set_exception(g->error);
      } else {
        std::vector<GenOutput> outs;
        for (Sequence& s : g->seqs) outs.push_back(std::move(s.out));
        g->promise.set_value(std::move(outs));
      }
    }
    active.swap(still);
  }
}

void Engine::Impl::admit(Group& g) {
  for (Sequence& s : g.seqs) {
    s.prompt_pending = s.spec.prompt_logprobs;
    s.out.finish_reason = "length";
    // nothing to compute: no tokens wanted and no prompt log-probs
    if (s.spec.max_tokens <= 0 && !s.prompt_pending) s.done = true;
  }
}

void Engine::Impl::step() {
  std::vector<std::pair<Group*, Sequence*>> todo;  // every unfinished sequence, in arrival order
  for (auto& g : active)
    if (!g->error)
      for (Sequence& s : g->seqs)
        if (!s.done) todo.push_back({g.get(), &s});
  const size_t B = size_t(opt.max_batch);
  for (size_t start = 0; start < todo.size(); start += B) {
    std::vector<std::pair<Group*, Sequence*>> chunk(todo.begin() + long(start),
                                                    todo.begin() + long(std::min(todo.size(), start + B)));
    // a group that failed in an earlier chunk of this step is not run again
    chunk.erase(
        std::remove_if(chunk.begin(), chunk.end(), [](const auto& c) { return bool(c.first->error); }),
        chunk.end());
    if (chunk.empty()) continue;
    try {
      forward_chunk(chunk);
    } catch (...) {
      for (auto& c : chunk) c.first->error = std::current_exception();
    }
  }
}

torch::Tensor Engine::Impl::uncached_logprobs(const std::vector<std::pair<Group*, Sequence*>>& chunk,
                                              std::vector<torch::Tensor>* prompt_lp) {
  std::vector<const std::vector<int>*> prompts;
  bool need_hidden = false;
  for (const auto& c : chunk) {
    prompts.push_back(&c.second->tokens);
    need_hidden = need_hidden || c.second->prompt_pending;
  }
  // the shared forward pass: [B, V] next-token log-probs (and [B, T, d] states for prompt log-probs)
  torch::Tensor hidden;
  torch::Tensor logp = model_last_logprobs(*model.model, prompts, need_hidden ? &hidden : nullptr);
  for (size_t i = 0; i < chunk.size(); ++i) {
    const Sequence& s = *chunk[i].second;
    const int64_t P = int64_t(s.spec.prompt.size());
    if (s.prompt_pending && P > 1)
      (*prompt_lp)[i] = torch::log_softmax(model.model->unembed(hidden[int64_t(i)].slice(0, 0, P - 1)), -1);
  }
  return logp;
}

torch::Tensor Engine::Impl::cached_logprobs(const std::vector<std::pair<Group*, Sequence*>>& chunk,
                                            std::vector<torch::Tensor>* prompt_lp) {
  const int64_t V = vocab.size();
  std::vector<torch::Tensor> rows(chunk.size());
  // first step: prefill the prompt alone; its logits give the next token and the prompt's log-probs
  std::vector<size_t> cont;
  for (size_t i = 0; i < chunk.size(); ++i) {
    Sequence& s = *chunk[i].second;
    if (!s.cache.empty()) {
      cont.push_back(i);
      continue;
    }
    const int64_t P = int64_t(s.tokens.size());
    auto tokens = torch::tensor(std::vector<int64_t>(s.tokens.begin(), s.tokens.end())).view({1, P});
    auto lp = torch::log_softmax(model.model->prefill(tokens, &s.cache)[0], -1);  // [P, V]
    rows[i] = lp[P - 1];
    if (s.prompt_pending && P > 1) (*prompt_lp)[i] = lp.slice(0, 0, P - 1);
    std::lock_guard<std::mutex> lk(mu);
    stats.prefills += 1;
  }
  // later steps: one cached decode step for every continuing sequence, lengths as they are
  if (!cont.empty()) {
    std::vector<int64_t> last;
    std::vector<std::vector<AttnCache>*> caches;
    for (size_t i : cont) {
      Sequence& s = *chunk[i].second;
      last.push_back(s.tokens.back());
      caches.push_back(&s.cache);
    }
    auto tokens = torch::tensor(last).view({int64_t(cont.size()), 1});
    auto lp = torch::log_softmax(model.model->decode_ragged(tokens, caches).squeeze(1), -1);  // [B', V]
    for (size_t r = 0; r < cont.size(); ++r) rows[cont[r]] = lp[int64_t(r)];
    std::lock_guard<std::mutex> lk(mu);
    stats.cached_steps += int64_t(cont.size());
  }
  return torch::stack(rows).view({int64_t(chunk.size()), V});
}

void Engine::Impl::forward_chunk(const std::vector<std::pair<Group*, Sequence*>>& chunk) {
  torch::NoGradGuard no_grad;
  const int64_t B = int64_t(chunk.size()), V = vocab.size();
  int K = 1;
  for (const auto& c : chunk) K = std::max(K, c.second->spec.logprobs);
  K = int(std::min<int64_t>(K, V));

  std::vector<torch::Tensor> prompt_lp(chunk.size());
  torch::Tensor logp =
      (opt.kv_cache ? cached_logprobs(chunk, &prompt_lp) : uncached_logprobs(chunk, &prompt_lp)).contiguous();
  auto top = logp.topk(K, -1);
  torch::Tensor top_ids = std::get<1>(top).contiguous();  // [B, K]
  {
    std::lock_guard<std::mutex> lk(mu);
    stats.forwards += 1;
    stats.forward_rows += B;
    stats.max_rows = std::max(stats.max_rows, int(B));
  }

  for (int64_t i = 0; i < B; ++i) {
    Sequence& s = *chunk[size_t(i)].second;
    if (s.prompt_pending) {
      // log p(prompt[t] | prompt[<t]) for t = 1..P-1, from the states at positions 0..P-2
      s.prompt_pending = false;
      const int64_t P = int64_t(s.spec.prompt.size());
      s.out.prompt_logprobs.resize(size_t(P));
      s.out.prompt_logprobs[0].token = s.spec.prompt[0];
      if (P > 1) {
        auto lp = prompt_lp[size_t(i)].contiguous();  // [P-1, V]
        const int k = std::max(0, std::min<int>(s.spec.logprobs, int(V)));
        torch::Tensor pv, pi;
        if (k > 0) {
          auto pt = lp.topk(k, -1);
          pv = std::get<0>(pt).contiguous();
          pi = std::get<1>(pt).contiguous();
        }
        const float* lpd = lp.data_ptr<float>();
        for (int64_t t = 1; t < P; ++t) {
          TokenLogprob& e = s.out.prompt_logprobs[size_t(t)];
          e.token = s.spec.prompt[size_t(t)];
          e.logprob = lpd[(t - 1) * V + e.token];
          for (int j = 0; j < k; ++j)
            e.top.push_back(
                {int(pi.data_ptr<int64_t>()[(t - 1) * k + j]), pv.data_ptr<float>()[(t - 1) * k + j]});
        }
      }
      if (s.spec.max_tokens <= 0) {
        s.done = true;
        s.cache.clear();
        continue;
      }
    }
    advance(s, logp.data_ptr<float>() + i * V, top_ids.data_ptr<int64_t>() + i * K, V);
    if (s.done) s.cache.clear();  // free this sequence's KV cache now, not when its request ends
  }
}

// Choose the next token of `s` from its log-probs (V) and best ids (K), record it, and check the stops.
void Engine::Impl::advance(Sequence& s, const float* logp, const int64_t* top_ids, int64_t V) {
  const int tok = s.spec.temperature > 0 ? sample_token(logp, V, s.spec.temperature, s.spec.top_p, s.rng)
                                         : int(top_ids[0]);
  s.tokens.push_back(tok);
  s.out.tokens.push_back(tok);
  {
    std::lock_guard<std::mutex> lk(mu);
    stats.tokens_generated += 1;
  }
  if (s.spec.logprobs >= 0) {
    TokenLogprob e;
    e.token = tok;
    e.logprob = logp[tok];
    for (int j = 0; j < s.spec.logprobs && j < V; ++j) e.top.push_back({int(top_ids[j]), logp[top_ids[j]]});
    s.out.logprobs.push_back(std::move(e));
  }

  // stops: a stop token ends the text before its piece; a stop string cuts the text where it begins
  const size_t before = s.full_text.size();
  if (std::find(s.spec.stop_token_ids.begin(), s.spec.stop_token_ids.end(), tok) !=
      s.spec.stop_token_ids.end()) {
    s.out.text = s.full_text;
    s.out.finish_reason = "stop";
    s.done = true;
    return;
  }
  s.full_text += text_piece(vocab, tok, false);
  size_t cut = std::string::npos;
  for (const std::string& stop : s.spec.stop) {
    if (stop.empty()) continue;
    const size_t from =
        before >= stop.size() ? before - stop.size() + 1 : 0;  // a match must end in the new piece
    const size_t at = s.full_text.find(stop, from);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    s.out.text = s.full_text.substr(0, cut);
    s.out.finish_reason = "stop";
    s.done = true;
    return;
  }
  s.out.text = s.full_text;
  if (int(s.out.tokens.size()) >= s.spec.max_tokens) s.done = true;  // finish_reason stays "length"
}

}  // namespace phasescope
