// engine.h — the server's model worker: one thread owns the checkpoint and runs every forward pass;
// HTTP threads hand it whole requests (a group of sequences) through a queue and wait on a future.
// Batching: when idle, the worker waits up to batch_window_ms after the first arrival for more, then
// admits every queued request; each step runs the active sequences in chunks of up to max_batch, one
// right-padded forward per chunk (model_last_logprobs, the same pass as the in-process ModelBackend, so a
// prompt's next-token log-probs match `phasescope eval`), and appends one token to each. Requests that
// arrive while it works join at the next step, so a long generation never holds short ones back.
// Generation uses the KV cache (EngineOptions::kv_cache, default on): a sequence's first step prefills its
// prompt alone (batch 1: its logits give the next token and the prompt's log-probs), every later step is
// one cached decode step for all the chunk's sequences together (DecoderImpl::decode_ragged: lengths
// differ, each attends over its own cache); a sequence's cache is freed when it finishes. Without the
// cache (kv_cache = false, `serve --no-kv-cache`, and models with token shift) each step re-runs the
// right-padded forward over every whole sequence: the reference the cached path is tested against.
// Greedy picks the top-1 of the fp32 log-probs; sampling is seeded per sequence and independent of
// batching.
// The header is torch-free (the server and tests include it); libtorch lives in engine.cpp only.
#pragma once
#include <cmath>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/vocab.h"
#include "model/config.h"

namespace phasescope {

struct EngineOptions {
  int max_batch = 32;            // sequences per forward pass (1 = unbatched)
  double batch_window_ms = 2.0;  // when idle: how long to gather requests after the first arrives
  int max_logprobs = 20;         // the most alternatives a request may ask per position
  bool kv_cache = true;          // prefill once, then cached decode steps (false: whole forward per step)
};

// One sequence to continue.
struct GenSpec {
  std::vector<int> prompt;          // (T >= 1) token ids; nothing is prepended
  int max_tokens = 16;              // tokens to generate; 0 = none (prompt log-probs only)
  double temperature = 0;           // 0 = greedy (arg-max); > 0 = sample from softmax(logp / temperature)
  double top_p = 1;                 // nucleus: sample among the most likely tokens holding top_p of the mass
  uint64_t seed = 0;                // sampling seed of this sequence
  int logprobs = -1;                // -1 = none; k >= 0: the chosen token's log-prob and the k best per step
  bool prompt_logprobs = false;     // also log p(prompt[t] | prompt[<t]) for t >= 1, with `logprobs` best
  std::vector<std::string> stop;    // stop when the completion text contains one (text_codec form)
  std::vector<int> stop_token_ids;  // stop after generating one of these
};

// The log-prob of one token at one position, and the best alternatives there (best first).
struct TokenLogprob {
  int token = -1;
  double logprob = std::nan("");  // natural log, fp32 computed; NaN for a prompt's first token
  std::vector<std::pair<int, double>> top;
};

struct GenOutput {
  std::vector<int> tokens;             // generated ids (all of them, the stopping one included)
  std::string text;                    // completion text, cut before a matched stop string or stop token
  std::vector<TokenLogprob> logprobs;  // per generated token (logprobs >= 0)
  std::vector<TokenLogprob> prompt_logprobs;  // per prompt token (prompt_logprobs); [0] has no log-prob
  std::string finish_reason;                  // "length" | "stop"
};

// Counters for tests and logs.
struct EngineStats {
  int64_t requests = 0;      // submitted groups
  int64_t sequences = 0;     // submitted sequences
  int64_t forwards = 0;      // forward passes run
  int64_t forward_rows = 0;  // sequences summed over forward passes
  int max_rows = 0;          // the largest batch of one forward pass
  int64_t tokens_generated = 0;
  int64_t prefills = 0;      // prompts prefilled into a KV cache
  int64_t cached_steps = 0;  // decode steps served from KV caches (sequences summed)
  bool kv_cache = false;     // whether generation runs on the KV cache
};

class Engine {
 public:
  // Load DIR (or a .safetensors file) and start the worker. Throws Error for a bad checkpoint.
  Engine(const std::string& checkpoint, const EngineOptions& opt);
  ~Engine();  // stop()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queue one request (its sequences stay together in the batches); the future yields one output per
  // spec, in order, or rethrows the Error that failed the forward pass. Throws Error once stop() began.
  std::future<std::vector<GenOutput>> submit(std::vector<GenSpec> specs);

  // Finish everything queued and active, then end the worker. Idempotent; later submits throw.
  void stop();

  const Preset& preset() const;  // the checkpoint's embedded preset
  const Vocab& vocab() const;    // task_vocab(preset().task)
  int vocab_size() const;
  int64_t step() const;          // training step of the checkpoint
  std::string describe() const;  // "w8s8-1kv, step 1500: 2 layers [...], d=128, 0.3M params"
  EngineStats stats() const;
  const EngineOptions& options() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace phasescope
