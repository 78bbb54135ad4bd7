// lookup.cpp — see lookup.h.
#include "data/lookup.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"

namespace phasescope {

Vocab vocab_of_ids(const VocabIds& ids) {
  Vocab v;
  v.lm = true;
  v.ids = ids;
  v.n_fillers = int(ids.fillers.size());
  v.n_keys = int(ids.keys.size());
  v.n_names = int(ids.names.size());
  v.bytes = false;
  return v;
}

std::string vocab_token_name(const Vocab& v, int tok) {
  if (tok == v.bos()) return "bos";
  if (int i = v.filler_index(tok); i >= 0) return "f" + std::to_string(i);
  if (int i = v.key_index(tok); i >= 0) return "k" + std::to_string(i);
  if (int i = v.name_index(tok); i >= 0) return "n" + std::to_string(i);
  if (v.bytes && tok >= v.byte(0) && tok < v.byte(256)) return "b" + std::to_string(tok - v.byte(0));
  return "?" + std::to_string(tok);
}

std::vector<int> draw_distinct(int n, int k, std::mt19937_64& rng) {
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  for (int i = 0; i < k; ++i)
    std::swap(all[i], all[i + std::uniform_int_distribution<int>(0, n - 1 - i)(rng)]);
  all.resize(k);
  return all;
}

LookupExample lookup_sample(const LookupSpec& spec, std::mt19937_64& rng) {
  PS_ASSERT(spec.n_records <= spec.vocab.n_keys && spec.n_records <= spec.vocab.n_names,
            "lookup: n_records must not exceed the number of keys or names");
  PS_ASSERT(spec.n_demos < spec.n_records, "lookup: need more records than demonstrations");
  LookupExample ex;
  ex.mapping_id = rng();
  for (int k : draw_distinct(spec.vocab.n_keys, spec.n_records, rng)) ex.keys.push_back(spec.vocab.key(k));
  for (int n : draw_distinct(spec.vocab.n_names, spec.n_records, rng)) ex.names.push_back(spec.vocab.name(n));
  ex.target = std::uniform_int_distribution<int>(0, spec.n_records - 1)(rng);
  // demonstrations: distinct records other than the target
  auto order = draw_distinct(spec.n_records - 1, spec.n_demos, rng);
  for (int o : order) ex.demos.push_back(o < ex.target ? o : o + 1);
  return ex;
}

int64_t lookup_length(const LookupSpec& spec, int prefix, const std::vector<int>& gaps, int post) {
  return 1 + prefix + 2 * int64_t(spec.n_records) + std::accumulate(gaps.begin(), gaps.end(), int64_t(0)) +
         post + 2 * int64_t(spec.n_demos) + 1;
}

LookupTokens lookup_render(const LookupSpec& spec, const LookupExample& ex, int prefix,
                           const std::vector<int>& gaps, int post, std::mt19937_64& rng) {
  PS_ASSERT(int(gaps.size()) == spec.n_records - 1, "lookup_render: need n_records - 1 gaps");
  PS_ASSERT(prefix >= 0 && post >= 0, "lookup_render: negative padding");
  std::uniform_int_distribution<int> filler(0, spec.vocab.n_fillers - 1);
  LookupTokens out;
  auto& t = out.tokens;
  auto pad = [&](int n) {
    for (int i = 0; i < n; ++i) t.push_back(spec.vocab.filler(filler(rng)));
  };
  t.push_back(spec.vocab.bos());
  pad(prefix);
  for (int i = 0; i < spec.n_records; ++i) {
    out.key_pos.push_back(int64_t(t.size()));
    t.push_back(ex.keys[i]);
    t.push_back(ex.names[i]);
    if (i + 1 < spec.n_records) {
      PS_ASSERT(gaps[i] >= 0, "lookup_render: negative gap");
      pad(gaps[i]);
    }
  }
  pad(post);
  for (int d : ex.demos) {
    out.demo_key_pos.push_back(int64_t(t.size()));
    t.push_back(ex.keys[d]);
    t.push_back(ex.names[d]);
  }
  out.target_pos = out.key_pos[ex.target];
  out.query_pos = int64_t(t.size());
  t.push_back(ex.keys[ex.target]);
  out.answer = ex.answer();
  return out;
}

}  // namespace phasescope
