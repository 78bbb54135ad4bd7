// bpe.cpp — loading the BPE vocabulary and merges, the rank-ordered merge loop, the piece cache.
#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "core/check.h"
#include "tokenizer/text.h"

namespace phasescope {

static uint64_t pair_key(int a, int b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// ---- loading

static void require_unset(const nlohmann::json& j, const char* key, const std::string& where,
                          const std::string& fix) {
  if (!j.contains(key) || j[key].is_null()) return;
  if (j[key].is_boolean() && !j[key].get<bool>()) return;
  if (j[key].is_string() && j[key].get<std::string>().empty()) return;
  fail(where + "." + key, "is " + j[key].dump() + ", which phasescope does not support", fix);
}

BpeModel bpe_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail(where, "missing or not an object", "a tokenizer.json has a \"model\" object");
  const std::string type = j.value("type", std::string("BPE"));
  if (type != "BPE")
    fail(where + ".type", "model " + type + " is not supported",
         "phasescope reads byte-level BPE tokenizers only");
  require_unset(j, "dropout", where, "set it to null (dropout makes encoding random)");
  require_unset(j, "byte_fallback", where, "byte-level BPE needs no byte fallback: set it to false");
  require_unset(j, "continuing_subword_prefix", where, "byte-level BPE uses none: set it to null");
  require_unset(j, "end_of_word_suffix", where, "byte-level BPE uses none: set it to null");

  BpeModel m;
  if (j.contains("ignore_merges") && !j["ignore_merges"].is_null()) {
    if (!j["ignore_merges"].is_boolean())
      fail(where + ".ignore_merges", "expected a boolean", "write true or false");
    m.ignore_merges = j["ignore_merges"].get<bool>();
  }

  // vocabulary: token string -> id
  if (!j.contains("vocab") || !j["vocab"].is_object())
    fail(where + ".vocab", "missing or not an object", "write \"vocab\": {\"token\": id, ...}");
  const auto& vocab = j["vocab"];
  m.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > (1 << 30))
      fail(where + ".vocab[\"" + it.key() + "\"]",
           "expected a non-negative integer id, got " + it.value().dump(), "write the token's id");
    const int id = it.value().get<int>();
    m.vocab[it.key()] = id;
    m.max_id = std::max(m.max_id, id);
  }

  // every byte must have its stand-in character in the vocabulary, or some text cannot be encoded
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8_append(ch, byte_level_char(static_cast<uint8_t>(b)));
    auto it = m.vocab.find(ch);
    if (it == m.vocab.end())
      fail(where + ".vocab",
           fmt::format("has no token for byte 0x{:02X} (ByteLevel character \"{}\")", b, ch),
           "use a byte-level BPE vocabulary (all 256 byte characters present)");
    m.byte_id[b] = it->second;
  }

  // merges by rank: "left right" strings (tokenizers < 0.20) or ["left", "right"] pairs
  if (!j.contains("merges") || !j["merges"].is_array())
    fail(where + ".merges", "missing or not an array",
         "write \"merges\": [\"a b\", ...] or [[\"a\", \"b\"], ...]");
  const auto& merges = j["merges"];
  m.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& e = merges[i];
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail(fmt::format("{}.merges[{}]", where, i), "\"" + s + "\" is not two tokens separated by one space",
             "write \"left right\" or [\"left\", \"right\"]");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail(fmt::format("{}.merges[{}]", where, i), "expected \"a b\" or [\"a\", \"b\"], got " + e.dump(),
           "fix the entry");
    }
    auto ia = m.vocab.find(a), ib = m.vocab.find(b), ir = m.vocab.find(a + b);
    if (ia == m.vocab.end() || ib == m.vocab.end() || ir == m.vocab.end())
      fail(fmt::format("{}.merges[{}]", where, i),
           "\"" + a + "\" + \"" + b + "\" uses or makes a token missing from the vocab",
           "every merge's parts and result must be in model.vocab");
    // a repeated pair keeps its last rank, as HF's map and the JS reference do
    m.merges[pair_key(ia->second, ib->second)] = BpeMerge{static_cast<int>(i), ir->second};
  }

  if (m.ignore_merges) {
    std::string bytes;
    for (const auto& [tok, id] : m.vocab)
      if (byte_level_to_bytes(tok, bytes)) m.bytes_vocab[bytes] = id;
  }
  return m;
}

// ---- merging

void bpe_encode_piece(const BpeModel& m, std::string_view piece, std::vector<int>& out) {
  const size_t n = piece.size();
  if (n == 1) {
    out.push_back(m.byte_id[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (m.ignore_merges) {
    auto it = m.bytes_vocab.find(std::string(piece));
    if (it != m.bytes_vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }

  // symbols as a linked list over positions; a merged-away symbol has id -1
  thread_local std::vector<int> id, next, prev;
  id.resize(n);
  next.resize(n);
  prev.resize(n);
  for (size_t i = 0; i < n; ++i) {
    id[i] = m.byte_id[static_cast<uint8_t>(piece[i])];
    next[i] = i + 1 < n ? static_cast<int>(i + 1) : -1;
    prev[i] = static_cast<int>(i) - 1;
  }

  // candidate merges, lowest rank first, then leftmost
  struct Cand {
    int rank, pos;
  };
  auto later = [](const Cand& x, const Cand& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  thread_local std::vector<Cand> heap;
  heap.clear();
  auto push = [&](int pos) {
    const int r = next[pos];
    if (r < 0) return;
    auto it = m.merges.find(pair_key(id[pos], id[r]));
    if (it == m.merges.end()) return;
    heap.push_back({it->second.rank, pos});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int>(i));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Cand c = heap.back();
    heap.pop_back();
    // stale candidates: the symbol or its right neighbour changed since it was pushed
    if (id[c.pos] < 0) continue;
    const int r = next[c.pos];
    if (r < 0) continue;
    auto it = m.merges.find(pair_key(id[c.pos], id[r]));
    if (it == m.merges.end() || it->second.rank != c.rank) continue;

    // merge pos with its right neighbour, then offer the two new adjacent pairs
    id[c.pos] = it->second.result;
    id[r] = -1;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    if (prev[c.pos] >= 0) push(prev[c.pos]);
    push(c.pos);
  }
  for (int i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

// ---- cache

bool BpeCache::get(std::string_view piece, std::vector<int>& out) const {
  if (piece.size() > kMaxPieceBytes) return false;
  thread_local std::string key;
  key.assign(piece);
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void BpeCache::put(std::string_view piece, const int* ids, size_t n) const {
  if (piece.size() > kMaxPieceBytes) return;
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (map_.size() >= kCapacity) map_.clear();
  map_.emplace(std::string(piece), std::vector<int>(ids, ids + n));
}

}  // namespace phasescope
