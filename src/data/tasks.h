// tasks.h — seeded training/evaluation streams for the decoder: lookup (the paper's key -> name
// task, loss on every demonstration name and on the answer), mqar (multi-query associative recall,
// loss on every queried value), text (byte-level next-token prediction on a user's UTF-8 file) and
// mix (lookup rows and text rows at a ratio), corpus (packed BPE text); lookup, mqar and corpus can mix
// in repeated-segment rows (task.repeat_ratio), a dense induction signal. Every example has exactly seq_len
// tokens and records the absolute position of every key and of every scored query, so evaluation can bucket
// by phase without re-deriving anything. Torch-free; the stream's state is a string (checkpointed). Not here:
// the padding protocols of the phase evaluation (eval/layout.h).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/lookup.h"
#include "data/vocab.h"
#include "model/config.h"

namespace phasescope {

struct Example {
  std::vector<int> tokens;         // [T]
  std::vector<int> targets;        // [T] next-token target at each position, -1 = no loss
  std::vector<int64_t> key_pos;    // positions of every key token of the content (records / pairs)
  std::vector<int64_t> query_pos;  // positions whose target is scored (demo keys, queries, final key)
  std::vector<int64_t>
      query_key_pos;  // for each query: the position of the record key it asks for (-1 = none)
};

// The task's vocabulary; for task "corpus", corpus_vocab(cfg.corpus).
Vocab task_vocab(const TaskConfig& cfg);

// A language model's lookup vocabulary from its corpus folder: the manifest's single-token keys and names,
// the boundary token as BOS, and as fillers the whitespace and punctuation strings that are one token of
// its tokenizer (newline, space, comma, period, ...). The tokenizer is read once per corpus (manifest hash).
Vocab corpus_vocab(const std::string& corpus_dir);

class TaskStream {
 public:
  TaskStream(const TaskConfig& cfg, uint64_t seed);  // reads text_file for text/mix (clear error if unusable)

  // One example for training step `step` (the curriculum depends on it).
  Example next(int64_t step);

  const Vocab& vocab() const { return vocab_; }
  std::string state() const;  // the RNG state; set_state(state()) resumes exactly
  void set_state(const std::string& s);

 private:
  TaskConfig cfg_;
  Vocab vocab_;
  std::mt19937_64 rng_;
  std::vector<uint8_t> text_;
  Corpus corpus_;  // task "corpus": the mapped shards
};

// Generators used by the stream (exposed for tests and evaluation sets).
Example lookup_train_example(const TaskConfig& cfg, const Vocab& v, int n_records, std::mt19937_64& rng);
Example mqar_example(const TaskConfig& cfg, const Vocab& v, std::mt19937_64& rng);
// A run of L distinct key/name tokens (L uniform in [8, (seq_len - 1) / 2], capped by the pool), filler
// before, between and after, then the run again; loss on every token of the second copy but the last.
// query_key_pos points at the token's first occurrence. A dense induction signal for warm-up mixing.
Example repeat_example(const TaskConfig& cfg, const Vocab& v, std::mt19937_64& rng);
Example text_example(const TaskConfig& cfg, const Vocab& v, const std::vector<uint8_t>& text,
                     std::mt19937_64& rng);
// seq_len consecutive tokens of a corpus split at a random offset, each predicting the next (packed rows:
// documents run into each other, the boundary token between them; loss on every position).
Example corpus_example(const TaskConfig& cfg, const CorpusTokens& split, std::mt19937_64& rng);
// A corpus row whose own span of L tokens (L uniform in [8, min(64, seq_len / 4)]) is inserted again
// later in the row, the window's text continuing after it; loss on every position. The corpus task's
// repeated-segment rows (task.repeat_ratio): in-context copying of natural text, never the lookup.
Example corpus_repeat_example(const TaskConfig& cfg, const CorpusTokens& split, std::mt19937_64& rng);

// Records in use at a step under the curriculum (min_records -> n_records over curriculum_steps).
int curriculum_records(const TaskConfig& cfg, int64_t step);

// The task as trained at a step: records (lookup), pairs/queries (mqar, scaled by records / n_records)
// and, with curriculum_length, a shorter seq_len. After the curriculum it is cfg itself.
TaskConfig curriculum_task(const TaskConfig& cfg, int64_t step);

}  // namespace phasescope
