// eval_testing.h — fakes shared by the eval tests: backends whose answers depend on the target key's
// position in a known way (found by scanning the tokens, as a model would have to), a backend that
// "dies" (throws a non-std exception, like a killed process), one that fails some samples, and a
// generator of synthetic journals with a planted per-residue accuracy profile. Temp folders and slurp
// come from testing.h.
#pragma once
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "eval/backend.h"
#include "eval/journal.h"
#include "testing.h"

namespace phasescope {
namespace testing_eval {

// The target key's position: the last token is the query key; its earlier occurrence is the record.
inline int64_t target_position(const std::vector<int>& t) {
  for (size_t i = 0; i + 1 < t.size(); ++i)
    if (t[i] == t.back()) return static_cast<int64_t>(i);
  return -1;
}

inline uint64_t fnv(const std::vector<int>& t, size_t begin, size_t end) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = begin; i < end; ++i) {
    h ^= static_cast<uint32_t>(t[i]);
    h *= 1099511628211ull;
  }
  return h;
}

// Answers right when correct(target position, tokens) says so, else BOS (always wrong).
struct RuleBackend : Backend {
  std::function<bool(int64_t, const std::vector<int>&)> correct;
  int batch = 16;
  int64_t calls = 0;
  std::string describe() const override { return "fake rule backend"; }
  int max_batch() const override { return batch; }
  std::vector<ScoreResult> score(const std::vector<ScoreRequest>& reqs) override {
    ++calls;
    std::vector<ScoreResult> out;
    for (const ScoreRequest& q : reqs) {
      ScoreResult r;
      const int64_t p = target_position(q.tokens);
      const bool ok = p >= 0 && correct(p, q.tokens);
      r.top1 = ok ? q.tokens[p + 1] : 0;
      r.answer_logprob = ok ? -0.1 : -3.0;
      r.topk = {{r.top1, ok ? -0.1 : -0.5}, {q.answer, r.answer_logprob}};
      r.ms = 0.5;
      out.push_back(r);
    }
    return out;
  }
};

// Phase-dependent: right iff (target position mod 8) is in `good`, and a content hash (the key and its
// answer, independent of position) passes, so accuracies are fractional but depend on phase only.
inline RuleBackend phase_backend(std::vector<int> good = {0, 1, 2, 4, 6}) {
  RuleBackend b;
  b.correct = [good](int64_t p, const std::vector<int>& t) {
    bool phase_ok = false;
    for (int g : good) phase_ok = phase_ok || p % 8 == g;
    const uint64_t content = fnv(t, static_cast<size_t>(p), static_cast<size_t>(p) + 2);
    return phase_ok && content % 5 != 0;
  };
  return b;
}

// Phase-independent: right for ~70% of prompts, by a hash of all tokens (fillers included).
inline RuleBackend flat_backend() {
  RuleBackend b;
  b.correct = [](int64_t, const std::vector<int>& t) { return fnv(t, 0, t.size()) % 1000 < 700; };
  return b;
}

struct Killed {};  // not a std::exception: the runner must not catch it (a killed process)

// Forwards to `inner` for `calls_before_kill` calls, then throws Killed.
struct KillingBackend : Backend {
  Backend& inner;
  int64_t calls_before_kill;
  int64_t calls = 0;
  KillingBackend(Backend& b, int64_t n) : inner(b), calls_before_kill(n) {}
  std::string describe() const override { return inner.describe(); }
  int max_batch() const override { return inner.max_batch(); }
  std::vector<ScoreResult> score(const std::vector<ScoreRequest>& reqs) override {
    if (calls++ >= calls_before_kill) throw Killed{};
    return inner.score(reqs);
  }
};

// Fails every request whose prompt hash is = 0 mod `every` (an error string, not an answer).
struct FlakyBackend : Backend {
  Backend& inner;
  int every;
  FlakyBackend(Backend& b, int e) : inner(b), every(e) {}
  std::string describe() const override { return inner.describe(); }
  int max_batch() const override { return inner.max_batch(); }
  std::vector<ScoreResult> score(const std::vector<ScoreRequest>& reqs) override {
    std::vector<ScoreResult> out = inner.score(reqs);
    for (size_t i = 0; i < reqs.size(); ++i)
      if (fnv(reqs[i].tokens, 0, reqs[i].tokens.size()) % every == 0)
        out[i] = ScoreResult{-1, std::nan(""), {}, "HTTP 503", 1};
    return out;
  }
};

// A paired synthetic journal: n_base blocks x R residues, correct ~ Bernoulli(profile[r]).
inline std::vector<JournalRecord> synthetic_journal(const std::vector<double>& profile, int n_base,
                                                    uint64_t seed) {
  const int R = static_cast<int>(profile.size());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<JournalRecord> out;
  for (int b = 0; b < n_base; ++b)
    for (int r = 0; r < R; ++r) {
      JournalRecord j;
      j.id = int64_t(b) * R + r;
      j.base = b;
      j.cluster = "m" + std::to_string(b);
      j.R = R;
      j.residue = r;
      j.target_pos = 100 + r;
      j.query_pos = 200;
      j.prompt_len = 201;
      j.expected = 7;
      j.answer = u(rng) < profile[r] ? 7 : 8;
      j.protocol = "prefix";
      j.model = "synthetic";
      out.push_back(j);
    }
  return out;
}

}  // namespace testing_eval
}  // namespace phasescope
