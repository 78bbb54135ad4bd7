// bpe.h — the BPE model of a byte-level tokenizer.json: vocabulary, merges by rank, and the
// merge loop that turns one pre-tokenized piece (raw bytes) into token ids.
// Works in id space: a piece starts as one id per byte (the id of that byte's ByteLevel stand-in
// character) and the lowest-ranked adjacent pair is merged until none is in the merge table, ties
// going to the leftmost pair — HF's `merge_word`. Not: dropout, byte_fallback, unk handling,
// continuing_subword_prefix / end_of_word_suffix (refused at load when set).
#pragma once
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace phasescope {

struct BpeMerge {
  int rank;    // position in "merges" (lower merges first)
  int result;  // id of the merged token
};

struct BpeModel {
  std::unordered_map<std::string, int> vocab;        // token string as in the file -> id
  std::array<int, 256> byte_id{};                    // raw byte -> id of its stand-in character
  std::unordered_map<uint64_t, BpeMerge> merges;     // (left id << 32 | right id) -> merge
  bool ignore_merges = false;                        // a piece that is itself in the vocab skips merging
  std::unordered_map<std::string, int> bytes_vocab;  // raw bytes -> id; filled only for ignore_merges
  int max_id = -1;
};

// Parse `"model"` of tokenizer.json; `where` names file and field for errors.
BpeModel bpe_from_json(const nlohmann::json& j, const std::string& where);

// Append the ids of one piece (raw bytes, non-empty) to `out`.
void bpe_encode_piece(const BpeModel& m, std::string_view piece, std::vector<int>& out);

// A bounded, thread-safe piece -> ids cache (most pieces of real text repeat).
class BpeCache {
 public:
  bool get(std::string_view piece, std::vector<int>& out) const;  // appends on a hit
  void put(std::string_view piece, const int* ids, size_t n) const;

 private:
  static constexpr size_t kCapacity = 1 << 17;   // entries; cleared when full
  static constexpr size_t kMaxPieceBytes = 256;  // longer pieces rarely repeat
  mutable std::shared_mutex mu_;
  mutable std::unordered_map<std::string, std::vector<int>> map_;
};

}  // namespace phasescope
