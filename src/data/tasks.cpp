// tasks.cpp — see tasks.h.
#include "data/tasks.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>

#include "core/check.h"
#include "core/io.h"
#include "tokenizer/tokenizer.h"

namespace phasescope {

Vocab corpus_vocab(const std::string& corpus_dir) {
  static std::mutex mu;
  static std::map<std::string, Vocab> cache;  // by manifest hash: a corpus rebuilt in place is read again
  std::lock_guard<std::mutex> lock(mu);
  const Corpus c = corpus_open(corpus_dir, CorpusVerify::kSizes);
  if (const auto it = cache.find(c.manifest_hash); it != cache.end()) return it->second;
  VocabIds ids;
  ids.bos = c.boundary_id;
  ids.size = c.vocab_size;
  for (const LookupWord& w : c.lookup_keys) ids.keys.push_back(w.id);
  for (const LookupWord& w : c.lookup_names) ids.names.push_back(w.id);
  const Tokenizer tok = Tokenizer::load(c.tokenizer_path);
  for (const char* s : {"\n", " ", ",", ".", ";", ":", " -", "!", "?", "\n\n", " ,", " .", " ;", " :"}) {
    const std::vector<int> e = tok.encode(s);
    if (e.size() == 1 && e[0] != ids.bos && std::count(ids.fillers.begin(), ids.fillers.end(), e[0]) == 0 &&
        std::count(ids.keys.begin(), ids.keys.end(), e[0]) == 0 &&
        std::count(ids.names.begin(), ids.names.end(), e[0]) == 0)
      ids.fillers.push_back(e[0]);
  }
  if (ids.fillers.empty() || ids.keys.size() < 2 || ids.names.size() < 2)
    fail(corpus_dir + "/manifest.json", "has too few lookup words or no single-token filler",
         "rebuild the corpus with `phasescope corpus build --out " + corpus_dir + "`");
  return cache[c.manifest_hash] = vocab_of_ids(ids);
}

Vocab task_vocab(const TaskConfig& cfg) {
  if (cfg.task == "corpus") return corpus_vocab(cfg.corpus);
  Vocab v;
  v.n_fillers = cfg.n_fillers;
  v.n_keys = cfg.n_keys;
  v.n_names = cfg.n_names;
  v.bytes = true;
  return v;
}

namespace {

// Spread `total` filler tokens over `slots` slots uniformly at random (each token picks a slot).
std::vector<int> spread(int total, int slots, std::mt19937_64& rng) {
  std::vector<int> out(size_t(slots), 0);
  std::uniform_int_distribution<int> pick(0, slots - 1);
  for (int i = 0; i < total; ++i) ++out[size_t(pick(rng))];
  return out;
}

}  // namespace

int curriculum_records(const TaskConfig& cfg, int64_t step) {
  if (cfg.curriculum_steps <= 0 || step >= cfg.curriculum_steps) return cfg.n_records;
  const double f = double(step) / double(cfg.curriculum_steps);
  return cfg.min_records + int(f * (cfg.n_records - cfg.min_records));
}

TaskConfig curriculum_task(const TaskConfig& cfg, int64_t step) {
  if (cfg.curriculum_steps <= 0 || step >= cfg.curriculum_steps) return cfg;
  TaskConfig c = cfg;
  c.n_records = curriculum_records(cfg, step);
  const double f = double(c.n_records) / double(cfg.n_records);
  c.mqar_pairs = std::max(2, int(std::lround(f * cfg.mqar_pairs)));
  if (cfg.curriculum_length) {
    const int demos = std::min(cfg.n_demos, c.n_records - 1);
    const int need = cfg.task == "mqar" ? 1 + 2 * c.mqar_pairs + 2 * std::min(c.mqar_queries, c.mqar_pairs)
                                        : 2 + 2 * c.n_records + 2 * demos;
    c.seq_len = std::min(cfg.seq_len, std::max({need, 32, int(std::ceil(f * cfg.seq_len))}));
  }
  return c;
}

Example lookup_train_example(const TaskConfig& cfg, const Vocab& v, int n_records, std::mt19937_64& rng) {
  LookupSpec spec;
  spec.n_records = n_records;
  spec.n_demos = std::min(cfg.n_demos, n_records - 1);  // under a curriculum, fewer records allow fewer demos
  spec.vocab = v;
  const int64_t fixed = lookup_length(spec, 0, std::vector<int>(size_t(n_records - 1), 0), 0);
  if (fixed > cfg.seq_len)
    fail("task",
         "lookup with " + std::to_string(n_records) + " records needs " + std::to_string(fixed) +
             " tokens but seq_len is " + std::to_string(cfg.seq_len),
         "raise task.seq_len or lower task.n_records");
  LookupExample ex = lookup_sample(spec, rng);
  // fillers: prefix, n_records - 1 gaps, post — spread at random so every phase occurs
  auto slots = spread(int(cfg.seq_len - fixed), n_records + 1, rng);
  std::vector<int> gaps(slots.begin() + 1, slots.end() - 1);
  LookupTokens lt = lookup_render(spec, ex, slots.front(), gaps, slots.back(), rng);
  Example out;
  out.tokens = lt.tokens;
  out.targets.assign(out.tokens.size(), -1);
  out.key_pos = lt.key_pos;
  // scored: every demonstration key -> its name, and the final key -> the answer
  for (size_t i = 0; i < lt.demo_key_pos.size(); ++i) {
    out.targets[size_t(lt.demo_key_pos[i])] = ex.names[size_t(ex.demos[i])];
    out.query_pos.push_back(lt.demo_key_pos[i]);
    out.query_key_pos.push_back(lt.key_pos[size_t(ex.demos[i])]);
  }
  out.targets[size_t(lt.query_pos)] = lt.answer;
  out.query_pos.push_back(lt.query_pos);
  out.query_key_pos.push_back(lt.target_pos);
  return out;
}

Example mqar_example(const TaskConfig& cfg, const Vocab& v, std::mt19937_64& rng) {
  const int P = cfg.mqar_pairs, Q = std::min(cfg.mqar_queries, cfg.mqar_pairs);
  const int64_t fixed = 1 + 2 * int64_t(P) + 2 * int64_t(Q);
  if (fixed > cfg.seq_len)
    fail("task",
         "mqar with " + std::to_string(P) + " pairs and " + std::to_string(Q) + " queries needs " +
             std::to_string(fixed) + " tokens but seq_len is " + std::to_string(cfg.seq_len),
         "raise task.seq_len or lower task.mqar_pairs / mqar_queries");
  // keys and values: distinct keys, distinct values
  std::vector<int> keys(static_cast<size_t>(P)), vals(static_cast<size_t>(P)), order(static_cast<size_t>(P));
  {
    std::vector<int> k(static_cast<size_t>(v.n_keys)), n(static_cast<size_t>(v.n_names));
    std::iota(k.begin(), k.end(), 0);
    std::iota(n.begin(), n.end(), 0);
    std::shuffle(k.begin(), k.end(), rng);
    std::shuffle(n.begin(), n.end(), rng);
    for (int i = 0; i < P; ++i) {
      keys[size_t(i)] = v.key(k[size_t(i)]);
      vals[size_t(i)] = v.name(n[size_t(i)]);
    }
  }
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  auto slots =
      spread(int(cfg.seq_len - fixed), P + 1, rng);  // after each pair, the last one before the queries
  std::uniform_int_distribution<int> filler(0, v.n_fillers - 1);
  Example out;
  auto& t = out.tokens;
  t.push_back(v.bos());
  for (int i = 0; i < P; ++i) {
    out.key_pos.push_back(int64_t(t.size()));
    t.push_back(keys[size_t(i)]);
    t.push_back(vals[size_t(i)]);
    for (int f = 0; f < slots[size_t(i)]; ++f) t.push_back(v.filler(filler(rng)));
  }
  for (int f = 0; f < slots[size_t(P)]; ++f) t.push_back(v.filler(filler(rng)));
  out.targets.assign(size_t(cfg.seq_len), -1);
  for (int q = 0; q < Q; ++q) {
    const int i = order[size_t(q)];
    out.query_pos.push_back(int64_t(t.size()));
    out.query_key_pos.push_back(out.key_pos[size_t(i)]);
    out.targets[t.size()] = vals[size_t(i)];
    t.push_back(keys[size_t(i)]);
    t.push_back(vals[size_t(i)]);
  }
  out.targets.back() = -1;  // nothing follows the last token
  return out;
}

Example repeat_example(const TaskConfig& cfg, const Vocab& v, std::mt19937_64& rng) {
  const int T = cfg.seq_len, pool = v.n_keys + v.n_names;
  const int max_len = std::min(pool, (T - 1) / 2);
  PS_ASSERT(max_len >= 2, "repeat_example: seq_len too short for a repeated segment");
  const int L = std::uniform_int_distribution<int>(std::min(8, max_len), max_len)(rng);
  std::vector<int> seg = draw_distinct(pool, L, rng);  // L distinct tokens of keys and names together
  for (int& x : seg) x = x < v.n_keys ? v.key(x) : v.name(x - v.n_keys);
  const auto slots = spread(T - 1 - 2 * L, 3, rng);  // before, between and after the two copies
  std::uniform_int_distribution<int> filler(0, v.n_fillers - 1);
  Example out;
  auto& t = out.tokens;
  auto pad = [&](int n) {
    for (int i = 0; i < n; ++i) t.push_back(v.filler(filler(rng)));
  };
  t.push_back(v.bos());
  pad(slots[0]);
  for (int x : seg) {
    out.key_pos.push_back(int64_t(t.size()));
    t.push_back(x);
  }
  pad(slots[1]);
  out.targets.assign(size_t(T), -1);
  for (int i = 0; i < L; ++i) {
    if (i + 1 < L) {  // the second copy's token i predicts token i + 1, found after the first copy's token i
      out.targets[t.size()] = seg[size_t(i + 1)];
      out.query_pos.push_back(int64_t(t.size()));
      out.query_key_pos.push_back(out.key_pos[size_t(i)]);
    }
    t.push_back(seg[size_t(i)]);
  }
  pad(slots[2]);
  return out;
}

Example text_example(const TaskConfig& cfg, const Vocab& v, const std::vector<uint8_t>& text,
                     std::mt19937_64& rng) {
  const size_t n = size_t(cfg.seq_len);  // BOS + n - 1 bytes, each predicting the next byte
  std::uniform_int_distribution<size_t> start(0, text.size() - n);
  const size_t s = start(rng);
  Example out;
  out.tokens.push_back(v.bos());
  for (size_t i = 0; i + 1 < n; ++i) out.tokens.push_back(v.byte(text[s + i]));
  for (size_t i = 0; i < n; ++i) out.targets.push_back(v.byte(text[s + i]));
  return out;
}

Example corpus_example(const TaskConfig& cfg, const CorpusTokens& split, std::mt19937_64& rng) {
  const size_t n = size_t(cfg.seq_len);
  if (split.size < n + 1)
    fail("task.corpus", "a split has " + std::to_string(split.size) + " tokens, fewer than seq_len + 1",
         "build a larger corpus or use a shorter task.seq_len");
  const size_t s = std::uniform_int_distribution<size_t>(0, split.size - n - 1)(rng);
  Example out;
  out.tokens.assign(split.data + s, split.data + s + n);
  out.targets.assign(split.data + s + 1, split.data + s + n + 1);
  return out;
}

Example corpus_repeat_example(const TaskConfig& cfg, const CorpusTokens& split, std::mt19937_64& rng) {
  // A natural-text row in which one span of the row's own text occurs a second time later on:
  // window w of n + 1 consecutive training tokens; span w[a, a + L) is inserted again at position b
  // (a + L <= b), the rest of the window follows it, truncated to n + 1 tokens. Shapes: tokens [n],
  // targets [n] = tokens shifted by one; loss on every token, so the second copy is the induction signal.
  const size_t n = size_t(cfg.seq_len);
  Example window = corpus_example(cfg, split, rng);
  std::vector<int> w = window.tokens;
  w.push_back(window.targets.back());  // n + 1 tokens
  const size_t max_len = std::min<size_t>(64, n / 4);
  PS_ASSERT(max_len >= 8, "corpus_repeat_example: seq_len too short for a repeated span");
  const size_t L = std::uniform_int_distribution<size_t>(8, max_len)(rng);
  const size_t a = std::uniform_int_distribution<size_t>(0, n - 2 * L)(rng);
  const size_t b = std::uniform_int_distribution<size_t>(a + L, n - L)(rng);
  std::vector<int> row(w.begin(), w.begin() + std::ptrdiff_t(b));
  row.insert(row.end(), w.begin() + std::ptrdiff_t(a), w.begin() + std::ptrdiff_t(a + L));
  row.insert(row.end(), w.begin() + std::ptrdiff_t(b), w.begin() + std::ptrdiff_t(n + 1 - L));
  Example out;
  out.tokens.assign(row.begin(), row.end() - 1);
  out.targets.assign(row.begin() + 1, row.end());
  return out;
}

TaskStream::TaskStream(const TaskConfig& cfg, uint64_t seed)
    : cfg_(cfg), vocab_(task_vocab(cfg)), rng_(seed) {
  if (cfg_.task == "corpus") corpus_ = corpus_open(cfg_.corpus, CorpusVerify::kSizes);
  if (cfg_.task == "text" || cfg_.task == "mix") {
    const std::string bytes = io_read_text(cfg_.text_file, "check task.text_file / --text");
    text_.assign(bytes.begin(), bytes.end());
    if (text_.size() < size_t(cfg_.seq_len))
      fail(cfg_.text_file,
           "has " + std::to_string(text_.size()) + " bytes, fewer than seq_len " +
               std::to_string(cfg_.seq_len),
           "use a longer file or a shorter task.seq_len");
  }
}

Example TaskStream::next(int64_t step) {
  const TaskConfig c = curriculum_task(cfg_, step);  // every row of a step has c.seq_len tokens
  if (c.task == "text") return text_example(c, vocab_, text_, rng_);
  if (c.task == "corpus") {
    if (c.lookup_ratio > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < c.lookup_ratio)
      return lookup_train_example(c, vocab_, c.n_records, rng_);
    if (c.repeat_ratio > 0 && (c.repeat_steps <= 0 || step < c.repeat_steps) &&
        std::uniform_real_distribution<double>(0, 1)(rng_) < c.repeat_ratio)
      return corpus_repeat_example(c, corpus_.train, rng_);
    return corpus_example(c, corpus_.train, rng_);
  }
  if (c.task == "mix" && std::uniform_real_distribution<double>(0, 1)(rng_) < c.text_ratio)
    return text_example(c, vocab_, text_, rng_);
  if (c.repeat_ratio > 0 && (c.repeat_steps <= 0 || step < c.repeat_steps) &&
      std::uniform_real_distribution<double>(0, 1)(rng_) < c.repeat_ratio)
    return repeat_example(c, vocab_, rng_);
  if (c.task == "mqar") return mqar_example(c, vocab_, rng_);
  return lookup_train_example(c, vocab_, c.n_records, rng_);
}

std::string TaskStream::state() const {
  std::ostringstream os;
  os << rng_;
  return os.str();
}

void TaskStream::set_state(const std::string& s) {
  std::istringstream is(s);
  is >> rng_;
  if (!is)
    fail("checkpoint data_state", "cannot restore the task stream's RNG state",
         "the checkpoint is damaged; retrain or use another");
}

}  // namespace phasescope
