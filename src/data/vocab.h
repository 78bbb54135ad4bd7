// vocab.h — the token space of phasescope's in-process models: one BOS, filler tokens, single-token
// keys and names for the lookup/MQAR tasks, and 256 byte tokens for the optional text task.
// Ranges are contiguous: [bos] [fillers] [keys] [names] [bytes]. Not a tokenizer for served models
// (those use HuggingFace tokenizer.json, see probe/).
#pragma once
#include <string>

namespace phasescope {

struct Vocab {
  int n_fillers = 16;
  int n_keys = 128;
  int n_names = 128;
  bool bytes = true;  // reserve 256 byte tokens for the text task

  int bos() const { return 0; }
  int filler(int i) const { return 1 + i; }
  int key(int i) const { return 1 + n_fillers + i; }
  int name(int i) const { return 1 + n_fillers + n_keys + i; }
  int byte(int b) const { return 1 + n_fillers + n_keys + n_names + b; }
  int size() const { return 1 + n_fillers + n_keys + n_names + (bytes ? 256 : 0); }
  bool is_name(int tok) const { return tok >= name(0) && tok < name(n_names); }
  bool is_key(int tok) const { return tok >= key(0) && tok < key(n_keys); }
};

// e.g. "bos", "f3", "k17", "n101", "b97" (byte 97) — for journals, debugging and the serve text codec.
std::string vocab_token_name(const Vocab& v, int tok);

}  // namespace phasescope
