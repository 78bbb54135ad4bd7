// backend.h — the one question every evaluation asks a model: "which token comes after these tokens?"
// A Backend scores a batch of prompts (token ids, BOS first) and returns, per prompt, its top-1 token,
// the log-probability of the expected answer (when one is given), the top-k (token, logprob) pairs,
// the time spent, and an error string (non-empty = this sample failed, the runner retries it later;
// it is never scored as wrong). Implemented by the in-process model and the HTTP client.
// Not here: layouts, journals or statistics; a Backend knows nothing about phases.
#pragma once
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace phasescope {

struct ScoreRequest {
  std::vector<int> tokens;  // (T) the prompt; the backend predicts the token at position T
  int answer = -1;          // expected next token, or -1 when unknown (then answer_logprob stays NaN)
};

struct ScoreResult {
  int top1 = -1;                             // arg-max next token over the full vocabulary
  double answer_logprob = std::nan("");      // log p(answer | tokens), natural log
  std::vector<std::pair<int, double>> topk;  // (k) best tokens first, with their log-probabilities
  std::string error;                         // non-empty: this sample failed (not an answer)
  double ms = 0;                             // wall time attributed to this sample
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string describe() const = 0;  // one line: what model, where, what precision
  // What decides this backend's answers, recorded in every journal's identity (scoring.h): the kind,
  // the model's content hash or the served model's name, the options that change scores. Never
  // what may change without changing answers (a port, a thread count). Default: describe().
  virtual std::string identity() const { return describe(); }
  // One result per request, same order. May throw phasescope::Error for a failure of the whole batch.
  virtual std::vector<ScoreResult> score(const std::vector<ScoreRequest>& batch) = 0;
  virtual int max_batch() const { return 16; }
};

}  // namespace phasescope
