// vocab.h — the token space of phasescope's in-process models: one BOS, filler tokens, single-token
// keys and names for the lookup/MQAR tasks, and 256 byte tokens for the optional text task.
// Two forms. A task vocabulary (the task-trained models): contiguous ranges [bos] [fillers] [keys]
// [names] [bytes]. A language model's (a trained BPE, data/corpus.h): the same roles held by explicit
// token ids of that tokenizer (`ids` set), the document-boundary token as BOS, no byte range.
// Not a tokenizer (src/tokenizer/ is).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

namespace phasescope {

// A language model's lookup tokens, ids of its tokenizer.
struct VocabIds {
  int bos = 0;               // the document-boundary token
  int size = 0;              // the tokenizer's vocabulary size
  std::vector<int> fillers;  // neutral tokens the layouts pad with
  std::vector<int> keys;     // single-token keys (the paper's animals)
  std::vector<int> names;    // single-token names
};

struct Vocab {
  int n_fillers = 16;
  int n_keys = 128;
  int n_names = 128;
  bool bytes = true;  // reserve 256 byte tokens for the text task
  VocabIds ids;       // used when lm is true
  bool lm = false;    // the roles are ids of a language model's tokenizer

  int bos() const { return lm ? ids.bos : 0; }
  int filler(int i) const { return lm ? ids.fillers[size_t(i)] : 1 + i; }
  int key(int i) const { return lm ? ids.keys[size_t(i)] : 1 + n_fillers + i; }
  int name(int i) const { return lm ? ids.names[size_t(i)] : 1 + n_fillers + n_keys + i; }
  int byte(int b) const { return 1 + n_fillers + n_keys + n_names + b; }
  int size() const { return lm ? ids.size : 1 + n_fillers + n_keys + n_names + (bytes ? 256 : 0); }
  // The role index of `tok` (i for key(i), ...), -1 when it has another role.
  int key_index(int tok) const { return lm ? find(ids.keys, tok) : in_range(tok, 1 + n_fillers, n_keys); }
  int name_index(int tok) const {
    return lm ? find(ids.names, tok) : in_range(tok, 1 + n_fillers + n_keys, n_names);
  }
  int filler_index(int tok) const { return lm ? find(ids.fillers, tok) : in_range(tok, 1, n_fillers); }
  bool is_name(int tok) const { return name_index(tok) >= 0; }
  bool is_key(int tok) const { return key_index(tok) >= 0; }

 private:
  static int find(const std::vector<int>& list, int tok) {
    const auto it = std::find(list.begin(), list.end(), tok);
    return it == list.end() ? -1 : int(it - list.begin());
  }
  static int in_range(int tok, int first, int n) {
    return tok >= first && tok < first + n ? tok - first : -1;
  }
};

// A language model's vocabulary from its ids (n_fillers, n_keys, n_names from the lists; no bytes).
Vocab vocab_of_ids(const VocabIds& ids);

// e.g. "bos", "f3", "k17", "n101", "b97" (byte 97) — for journals, debugging and the serve text codec.
std::string vocab_token_name(const Vocab& v, int tok);

}  // namespace phasescope
