// lookup.h — the paper's key -> name lookup task at small scale, as content and as tokens.
// Content (LookupExample): n_records distinct single-token keys, each with a single-token name
// (the key -> name mapping is drawn per example and is the bootstrap cluster), n_demos
// demonstration records and one target record. Rendering (lookup_render) places that content in a
// token sequence with given filler gaps, and records the absolute position of every key:
//   [BOS] [prefix fillers] k1 n1 [gap1 fillers] k2 n2 ... kR nR [post fillers] d1 m1 ... d8 m8 kT -> answer
//   nT
// The query is the last token; the answer is the name that followed kT in the records.
// Not here: which gaps a padding protocol chooses (eval/layout.h) or how models are scored.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "data/vocab.h"

namespace phasescope {

struct LookupSpec {
  int n_records = 64;  // records per prompt
  int n_demos = 8;     // demonstrations before the target key
  Vocab vocab;
};

struct LookupExample {
  std::vector<int> keys;    // [n_records] key token of record i, in record order
  std::vector<int> names;   // [n_records] name token of record i
  std::vector<int> demos;   // [n_demos] record indices shown as demonstrations (never the target)
  int target = 0;           // record index asked for
  uint64_t mapping_id = 0;  // identifies the key -> name mapping (cluster for the bootstrap)
  int answer() const { return names[target]; }
};

// Draw distinct keys, distinct names, demos and target from rng.
LookupExample lookup_sample(const LookupSpec& spec, std::mt19937_64& rng);

struct LookupTokens {
  std::vector<int> tokens;            // the whole prompt, query (target key) last
  std::vector<int64_t> key_pos;       // [n_records] position of each record's key (0-based in tokens)
  std::vector<int64_t> demo_key_pos;  // [n_demos] positions of demonstration keys
  int64_t target_pos = 0;             // position of the target record's key inside the records
  int64_t query_pos = 0;              // position of the final target key (= tokens.size() - 1)
  int answer = 0;
};

// Lay out one example: `prefix` filler tokens after BOS, gaps[i] fillers after record i
// (gaps.size() == n_records - 1), `post` fillers before the demonstrations. Filler tokens are
// drawn from rng (content only; they never carry the answer).
LookupTokens lookup_render(const LookupSpec& spec, const LookupExample& ex, int prefix,
                           const std::vector<int>& gaps, int post, std::mt19937_64& rng);

// Tokens a rendering takes: 1 + prefix + 2 * n_records + sum(gaps) + post + 2 * n_demos + 1.
int64_t lookup_length(const LookupSpec& spec, int prefix, const std::vector<int>& gaps, int post);

// k distinct values from [0, n), in random order (a partial Fisher-Yates shuffle).
std::vector<int> draw_distinct(int n, int k, std::mt19937_64& rng);

}  // namespace phasescope
