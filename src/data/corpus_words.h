// corpus_words.h — the lookup's words, chosen from a trained vocabulary (internal to data/corpus.cpp).
// Keys are animals (the paper's), then common concrete nouns when the vocabulary has too few animals;
// names are capitalized first names of people, then places, then other proper nouns (" Linux"). A candidate
// is taken when " word" (leading space) encodes to one token that the train split uses at least
// kLookupMinCount times; candidates are tried in the order of the lists in corpus_words.cpp (most familiar
// first), so the choice is a function of the tokenizer and the counts. Not here: how the lookup places them
// (data/lookup.h, eval/layout.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "tokenizer/tokenizer.h"

namespace phasescope {

constexpr int64_t kLookupMinCount = 20;  // uses in the train split, so the word's embedding is trained

struct LookupChoice {
  std::vector<LookupWord> keys;   // animals first, then nouns
  std::vector<LookupWord> names;  // disjoint from keys (capitalized vs lower-case spellings)
  int animal_keys = 0;            // how many keys are animals
  int people_names = 0;           // how many names are first names of people
  int place_names = 0;            // how many are places (the rest: other proper nouns, e.g. " Linux")
};

// Up to n keys and n names; `counts[id]` is the token's number of uses in the train split.
LookupChoice corpus_choose_lookup_words(const Tokenizer& tok, const std::vector<int64_t>& counts, int n);

}  // namespace phasescope
