// needle.cpp — see needle.h. Positions: every piece has a fixed token count, so a prompt is
//   pre  = BOS? + |header| + (1 + s) fillers + |filler_end|   (fillers: one repeated token, or the first
//   tokens of a natural-text passage that goes on after the records)
//   record i's key at pre + i * record_tokens, the target's at a_b + s with a_b the s = 0 position
// and s in [0, 2R) from layout_balanced_shifts; the fillers after the records (2R - 1 - s + 1 + rest)
// keep the total at exactly spec.context, so the query position is the same in every prompt.
#include "probe/needle.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <ostream>
#include <random>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/csv.h"
#include "core/io.h"
#include "eval/card.h"
#include "eval/journal.h"
#include "eval/runner.h"
#include "eval/stats.h"
#include "report/html.h"

namespace phasescope {

namespace {

// encode(before + piece) minus encode(before), from texts encoded together; false when they merge.
bool strip_prefix(const std::vector<int>& before, const std::vector<int>& both, std::vector<int>* out) {
  if (both.size() < before.size() || !std::equal(before.begin(), before.end(), both.begin())) return false;
  out->assign(both.begin() + static_cast<std::ptrdiff_t>(before.size()), both.end());
  return true;
}

std::string show(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '\n' ? std::string("\\n") : std::string(1, c);
  return "'" + o + "'";
}

void append(std::vector<int>* t, const std::vector<int>& piece, int times = 1) {
  for (int i = 0; i < times; ++i) t->insert(t->end(), piece.begin(), piece.end());
}

// The prompt of base example b with shift s; *target_pos = the target key's position.
std::vector<int> render_tokens(const NeedleDesign& d, int b, int s, int64_t* target_pos) {
  const NeedleVocab& v = d.vocab;
  const NeedleBase& base = d.bases[size_t(b)];
  const int R = d.spec.R;
  std::vector<int> t;
  t.reserve(static_cast<size_t>(d.prompt_len));
  if (v.bos >= 0) t.push_back(v.bos);
  append(&t, v.header);
  const std::vector<int>* passage =
      d.spec.passages.empty() ? nullptr : &d.spec.passages[size_t(b) % d.spec.passages.size()];
  const auto pass = [&](int64_t from, int64_t to) {  // passage tokens [from, to)
    t.insert(t.end(), passage->begin() + from, passage->begin() + to);
  };
  if (passage)
    pass(0, 1 + s);
  else
    append(&t, v.filler, 1 + s);
  append(&t, v.filler_end);
  for (int i = 0; i < d.n_records; ++i) {
    if (i == base.target) *target_pos = static_cast<int64_t>(t.size()) + d.spec.position_offset;
    append(&t, v.keys[size_t(base.key[size_t(i)])]);
    append(&t, v.separator);
    append(&t, v.values[size_t(base.value[size_t(i)])]);
    append(&t, v.delimiter);
  }
  if (passage)
    pass(1 + s, d.filler_tokens());
  else
    append(&t, v.filler, 1 + (2 * R - 1 - s) + d.rest);
  append(&t, v.filler_end);
  append(&t, v.question);
  append(&t, v.keys[size_t(base.key[size_t(base.target)])]);
  append(&t, v.separator);
  return t;
}

NeedleBase draw_base(const NeedleDesign& d, int b, int attempt) {
  std::mt19937_64 rng(layout_mix64(d.spec.seed, 0x6e656564ull + uint64_t(b), uint64_t(attempt)));
  const int N = d.n_records, nk = int(d.vocab.keys.size()), nv = int(d.vocab.values.size());
  const int lo = std::max(0, int(std::floor(N * (0.5 - d.spec.middle))));
  const int hi = std::min(N - 1, std::max(lo, int(std::ceil(N * (0.5 + d.spec.middle))) - 1));
  NeedleBase base;
  base.attempt = attempt;
  base.target = lo + layout_below(rng, hi - lo + 1);
  const int kt = layout_below(rng, nk);
  base.key.resize(size_t(N));
  base.value.resize(size_t(N));
  for (int i = 0; i < N; ++i) {
    int k = kt;
    if (i != base.target) {  // any key but the target's: the target key appears once before the query
      k = layout_below(rng, nk - 1);
      if (k >= kt) ++k;
    }
    base.key[size_t(i)] = k;
    base.value[size_t(i)] = layout_below(rng, nv);
  }
  return base;
}

}  // namespace

const std::vector<std::string>& needle_default_keys() {
  static const std::vector<std::string> w = {
      "apple",    "river",   "window",   "garden",  "bottle",   "candle",  "mirror",  "pocket",  "ladder",
      "basket",   "hammer",  "pillow",   "carpet",  "bucket",   "jacket",  "button",  "engine",  "rocket",
      "planet",   "forest",  "desert",   "island",  "valley",   "bridge",  "castle",  "temple",  "market",
      "office",   "school",  "church",   "prison",  "palace",   "harbor",  "tunnel",  "station", "airport",
      "village",  "country", "mountain", "ocean",   "lake",     "cloud",   "storm",   "thunder", "shadow",
      "silver",   "copper",  "marble",   "cotton",  "leather",  "paper",   "glass",   "stone",   "metal",
      "wood",     "iron",    "steel",    "brick",   "sand",     "snow",    "rain",    "wind",    "fire",
      "water",    "earth",   "light",    "sound",   "voice",    "music",   "story",   "letter",  "number",
      "picture",  "answer",  "question", "problem", "reason",   "method",  "system",  "program", "machine",
      "computer", "phone",   "camera",   "screen",  "keyboard", "printer", "table",   "chair",   "door",
      "floor",    "wall",    "roof",     "kitchen", "bedroom",  "house",   "street",  "road",    "car",
      "train",    "plane",   "ship",     "boat",    "horse",    "tiger",   "lion",    "eagle",   "rabbit",
      "monkey",   "dolphin", "spider",   "turtle",  "parrot",   "wolf",    "bear",    "fox",     "deer",
      "snake",    "frog",    "duck",     "goose",   "sheep",    "goat",    "mouse",   "king",    "queen",
      "doctor",   "teacher", "farmer",   "soldier", "pilot",    "artist",  "writer",  "singer",  "dancer",
      "driver",   "lawyer",  "nurse",    "baker",   "banker",   "captain", "student", "child",   "friend",
      "family",   "money",   "price",    "market",  "garden",   "winter",  "summer",  "spring",  "autumn",
      "morning",  "evening", "night",    "moon",    "star",     "sun",     "sky",     "field",   "flower",
      "tree",     "leaf",    "root",     "seed",    "grass",    "bread",   "butter",  "cheese",  "sugar",
      "salt",     "pepper",  "coffee",   "tea",     "milk",     "wine",    "juice",   "soup",    "rice",
      "pizza",    "cake",    "cookie",   "lemon",   "orange",   "banana",  "cherry",  "grape",   "melon",
      "peach",    "onion",   "potato",   "tomato",  "carrot",   "garlic",  "ticket",  "wallet",  "helmet",
      "blanket",  "towel",   "brush",    "comb",    "needle",   "thread",  "rope",    "chain",   "lock",
      "key",      "clock",   "watch",    "ring",    "crown",    "sword",   "shield",  "arrow",   "drum",
      "piano",    "guitar",  "violin",   "flute"};
  return w;
}

const std::vector<std::string>& needle_default_values() {
  static const std::vector<std::string> w = {
      " red",  " blue",  " green", " yellow", " purple", " black", " white", " brown",   " pink",  " gray",
      " gold", " cat",   " dog",   " cow",    " pig",    " hen",   " owl",   " bee",     " ant",   " bat",
      " fish", " bird",  " shark", " whale",  " pear",   " plum",  " lime",  " fig",     " nut",   " corn",
      " bean", " pea",   " egg",   " ham",    " jam",    " pie",   " tea",   " cup",     " pan",   " pot",
      " box",  " bag",   " hat",   " cap",    " coat",   " shoe",  " sock",  " belt",    " ring",  " coin",
      " map",  " pen",   " book",  " card",   " note",   " film",  " song",  " game",    " ball",  " kite",
      " toy",  " doll",  " bed",   " lamp",   " fan",    " sofa",  " desk",  " shelf",   " sink",  " tap",
      " pipe", " wire",  " nail",  " bolt",   " tool",   " saw",   " axe",   " gun",     " bow",   " flag",
      " sign", " gate",  " wall",  " tower",  " farm",   " barn",  " mill",  " mine",    " port",  " dock",
      " pier", " beach", " hill",  " cave",   " rock",   " cliff", " reef",  " bay",     " pond",  " well",
      " road", " path",  " lane",  " park",   " zoo",    " bank",  " shop",  " club",    " hall",  " room",
      " king", " duke",  " monk",  " nun",    " chef",   " cook",  " maid",  " guard",   " judge", " poet",
      " spy",  " thief", " north", " south",  " east",   " west",  " one",   " two",     " three", " four",
      " five", " six",   " seven", " eight",  " nine",   " ten",   " zero",  " hundred", " iron",  " gold",
      " salt", " oil",   " gas",   " ice",    " dust",   " mud",   " silk",  " wool",    " lace",  " felt",
      " fur",  " bone",  " horn",  " shell",  " pearl",  " ruby",  " jade",  " opal"};
  return w;
}

NeedleSpec needle_token_space_spec(NeedleSpec base, int fillers, int keys, int names) {
  if (fillers < 4 || keys < 2 || names < 2)
    fail("needle token space",
         fmt::format("{} fillers, {} keys and {} names; the needle needs at least 4, 2 and 2", fillers, keys,
                     names),
         "pass --filler, --separator, --keys-file and --values-file with this server's token names");
  base.filler = " f0";
  base.separator = " f1";
  base.delimiter = " f2";
  base.question = " f3";
  base.header = "";
  base.keys.clear();
  base.values.clear();
  for (int i = 0; i < keys; ++i) base.keys.push_back("k" + std::to_string(i));
  for (int i = 0; i < names; ++i)
    base.values.push_back(" n" + std::to_string(i));  // a value follows its separator
  return base;
}

NeedleDesign needle_build(const NeedleSpec& spec, const TokenSource& ts, std::ostream* log) {
  NeedleDesign d;
  d.spec = spec;
  const int R = spec.R;
  if (R < 1 || R > 4096) fail("--residues", fmt::format("R = {} is outside 1..4096", R), "pass --residues 8");
  if (spec.samples_per_group < 1)
    fail("--samples-per-group", "must be at least 1", "pass --samples-per-group 256");
  if (spec.key_tokens < 1 || spec.value_tokens < 1)
    fail("--key-tokens / --value-tokens", "must be at least 1", "use the defaults (1 and 1)");
  if (!(spec.middle > 0 && spec.middle <= 0.5)) fail("needle", "middle must be in (0, 0.5]", "use 0.1");
  const std::vector<std::string>& keys = spec.keys.empty() ? needle_default_keys() : spec.keys;
  const std::vector<std::string>& values = spec.values.empty() ? needle_default_values() : spec.values;
  NeedleVocab& v = d.vocab;
  v.bos = ts.bos_id();

  // the filler: one token that stays one token when repeated and before a newline (in a token space
  // where a newline is no token, the filler's end is empty). Punctuation
  // absorbs a following newline in GPT-4-style pre-tokenizers (DeepSeek, Qwen, Llama 3), so after
  // " ." and " -" (SentencePiece models) a word is tried.
  const std::vector<std::string> fillers = spec.filler.empty()
                                               ? std::vector<std::string>{" .", " -", " the", " x"}
                                               : std::vector<std::string>{spec.filler};
  std::vector<std::string> ftexts = {"\n"};
  for (const std::string& f : fillers) {
    ftexts.push_back("\n" + f);
    ftexts.push_back("\n" + f + f);
    ftexts.push_back("\n" + f + "\n");
  }
  const std::vector<std::vector<int>> fenc = ts.encode_many(ftexts);
  std::string why;
  if (!spec.passages.empty()) {  // natural text fills; a newline ends it before the records and the question
    v.filler_end = fenc[0];
    v.filler_text = "natural-text passages";
  }
  for (size_t i = 0; i < fillers.size() && v.filler_text.empty(); ++i) {
    const std::vector<int>&one = fenc[1 + 3 * i], &two = fenc[2 + 3 * i], &nl_after = fenc[3 + 3 * i];
    std::vector<int> f1, f2, end;
    if (!strip_prefix(fenc[0], one, &f1) || !strip_prefix(one, two, &f2) || f1.size() != 1 || f2 != f1)
      why += fmt::format("{}: {} token(s), not one that repeats; ", show(fillers[i]), f1.size());
    else if (!strip_prefix(one, nl_after, &end) || (end.empty() && !fenc[0].empty()))
      why += fmt::format("{}: merges with the newline after it; ", show(fillers[i]));
    else {
      v.filler = f1;
      v.filler_end = end;
      v.filler_text = fillers[i];
    }
  }
  if (v.filler_text.empty())
    fail("needle filler", "no usable filler (" + why + ")",
         "pass --filler TEXT: one token (a short word with its leading space, like \" the\") that does not "
         "merge "
         "with itself or with a newline");

  // every other piece in context, from one batch of encodings
  std::vector<std::string> texts = {"\n", spec.separator, "\n" + spec.question, spec.header};
  const size_t k0 = texts.size();
  for (const std::string& k : keys) texts.push_back("\n" + k);
  const size_t v0 = texts.size();
  for (const std::string& x : values) texts.push_back(spec.separator + x);
  const std::vector<std::vector<int>> enc = ts.encode_many(texts);
  const std::vector<int>& nl = enc[0];
  const std::string tok_fix = "choose pieces that the tokenizer keeps apart (e.g. the defaults)";
  if (!strip_prefix(nl, enc[2], &v.question) || v.question.empty())
    fail("needle question " + show(spec.question), "it merges with the newline before it", tok_fix);
  v.header = enc[3];
  std::set<std::vector<int>> seen;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::vector<int> t;
    if (strip_prefix(nl, enc[k0 + i], &t) && int(t.size()) == spec.key_tokens && seen.insert(t).second) {
      v.keys.push_back(t);
      v.key_text.push_back(keys[i]);
    }
  }
  seen.clear();
  for (size_t i = 0; i < values.size(); ++i) {
    std::vector<int> t;
    if (strip_prefix(enc[1], enc[v0 + i], &t) && int(t.size()) == spec.value_tokens &&
        seen.insert(t).second) {
      v.values.push_back(t);
      v.value_text.push_back(values[i]);
    }
  }
  if (v.keys.size() < 2 || v.values.size() < 2)
    fail("needle vocabulary",
         fmt::format(
             "only {} of {} candidate keys tokenize to {} token(s) after a newline and {} of {} values to {} "
             "after {}; at least 2 of each are needed",
             v.keys.size(), keys.size(), spec.key_tokens, v.values.size(), values.size(), spec.value_tokens,
             show(spec.separator)),
         "pass --key-tokens / --value-tokens matching this tokenizer, or other candidate words (--keys-file, "
         "--values-file)");
  // separator after a key, delimiter after a value
  const std::vector<std::vector<int>> e2 =
      ts.encode_many({v.key_text[0], v.key_text[0] + spec.separator, spec.separator + v.value_text[0],
                      spec.separator + v.value_text[0] + spec.delimiter});
  if (!strip_prefix(e2[0], e2[1], &v.separator) || v.separator.empty())
    fail("needle separator " + show(spec.separator), "it merges with the key before it", tok_fix);
  if (!strip_prefix(e2[2], e2[3], &v.delimiter) || v.delimiter.empty())
    fail("needle delimiter " + show(spec.delimiter), "it merges with the value before it", tok_fix);

  // sizes: every prompt is exactly spec.context tokens
  d.record_tokens = spec.key_tokens + int(v.separator.size()) + spec.value_tokens + int(v.delimiter.size());
  const int64_t fixed = (v.bos >= 0 ? 1 : 0) + int64_t(v.header.size()) + (2 * R + 1) +
                        2 * int64_t(v.filler_end.size()) + int64_t(v.question.size()) + spec.key_tokens +
                        int64_t(v.separator.size());
  int64_t n_rec = (spec.context - fixed) / d.record_tokens;
  if (spec.max_records > 0 && n_rec >= 3) n_rec = std::min<int64_t>(n_rec, spec.max_records);
  if (n_rec < 3)
    fail("--context " + std::to_string(spec.context),
         fmt::format("too short: the header, question, fillers and query take {} tokens and a record {}",
                     fixed, d.record_tokens),
         fmt::format("pass --context {} or more", fixed + 16 * d.record_tokens));
  d.n_records = static_cast<int>(n_rec);
  d.rest = static_cast<int>(spec.context - fixed - n_rec * d.record_tokens);
  d.prompt_len = spec.context;
  d.query_pos = spec.context - 1 + spec.position_offset;
  if (!spec.passages.empty()) {
    if (spec.verify)
      fail("needle passages", "natural-text filler is cut at every shift, so the prompts need not re-encode",
           "feed the token ids to the model (a backend in this process) and set verify = false");
    for (size_t i = 0; i < spec.passages.size(); ++i)
      if (int64_t(spec.passages[i].size()) < d.filler_tokens())
        fail(fmt::format("needle passage {}", i),
             fmt::format("{} tokens, fewer than the {} filler tokens of a {}-token prompt",
                         spec.passages[i].size(), d.filler_tokens(), spec.context),
             "give passages at least as long as the context");
  }

  // the base examples, each checked to be stable in context (drawn again with other words if not)
  const int n_base = spec.samples_per_group;
  d.bases.resize(size_t(n_base));
  for (int b = 0; b < n_base; ++b) d.bases[size_t(b)] = draw_base(d, b, 0);
  if (spec.verify) {
    std::vector<int> pending(static_cast<size_t>(n_base));
    for (int b = 0; b < n_base; ++b) pending[size_t(b)] = b;
    std::string first_problem;
    for (int attempt = 0; !pending.empty(); ++attempt) {
      if (attempt == 4)
        fail("needle prompts",
             fmt::format("{} base example(s) still re-encode differently after 3 re-draws; first: {}",
                         pending.size(), first_problem),
             "the tokenizer merges pieces across records: pass other --separator / --delimiter / candidate "
             "words, "
             "or --no-verify to accept it");
      std::vector<int> failed;
      const size_t chunk = 32;  // bound the memory of 128K-token prompts
      for (size_t c0 = 0; c0 < pending.size(); c0 += chunk) {
        std::vector<std::vector<int>> bodies;
        for (size_t i = c0; i < std::min(pending.size(), c0 + chunk); ++i) {
          int64_t tp = 0;
          std::vector<int> t = render_tokens(d, pending[i], 0, &tp);
          if (v.bos >= 0) t.erase(t.begin());
          bodies.push_back(std::move(t));
        }
        const std::vector<std::string> text = ts.decode_many(bodies);
        const std::vector<std::vector<int>> again = ts.encode_many(text);
        for (size_t i = 0; i < bodies.size(); ++i) {
          if (again[i] == bodies[i]) continue;
          const int b = pending[c0 + i];
          failed.push_back(b);
          if (first_problem.empty()) {
            size_t p = 0;
            while (p < bodies[i].size() && p < again[i].size() && bodies[i][p] == again[i][p]) ++p;
            const size_t lo = p >= 6 ? p - 6 : 0;
            std::vector<int> around(
                bodies[i].begin() + static_cast<std::ptrdiff_t>(lo),
                bodies[i].begin() + static_cast<std::ptrdiff_t>(std::min(bodies[i].size(), p + 6)));
            first_problem = fmt::format("base {}: token {} of {} differs; the text there is {}", b, p,
                                        bodies[i].size(), show(ts.decode(around)));
          }
        }
      }
      for (int b : failed) d.bases[size_t(b)] = draw_base(d, b, attempt + 1);
      d.redrawn += attempt == 0 ? int(failed.size()) : 0;
      pending = failed;
    }
  }

  // the balanced paired shifts and the measured moments of the target position
  std::vector<int64_t> a(static_cast<size_t>(n_base));
  const int64_t pre = (v.bos >= 0 ? 1 : 0) + int64_t(v.header.size()) + 1 + int64_t(v.filler_end.size());
  for (int b = 0; b < n_base; ++b)
    a[size_t(b)] = pre + int64_t(d.bases[size_t(b)].target) * d.record_tokens + spec.position_offset;
  d.shift = layout_balanced_shifts(a, R, spec.seed);
  std::vector<int64_t> pos;
  std::vector<int> res;
  for (int b = 0; b < n_base; ++b)
    for (int r = 0; r < R; ++r) {
      const int64_t tp = a[size_t(b)] + d.shift[size_t(b)][size_t(r)];
      PS_ASSERT(tp % R == r, "needle: a shift missed its residue");
      pos.push_back(tp);
      res.push_back(r);
    }
  layout_moments(pos, res, R, &d.groups, &d.mean, &d.var, &d.mean_range, &d.sd_range);
  if (d.mean_range > spec.tol_mean + 1e-9 || d.sd_range > spec.tol_sd + 1e-9)
    fail("needle layout",
         fmt::format(
             "the residue groups' target positions differ: means span {:.3f} tokens (tolerance {}), SDs span "
             "{:.3f} (tolerance {})",
             d.mean_range, spec.tol_mean, d.sd_range, spec.tol_sd),
         fmt::format("pass a larger --samples-per-group (e.g. --samples-per-group {}): more base examples "
                     "balance the groups' positions more closely",
                     std::max(2 * n_base, 4 * R)));

  // what identifies this design (journals refuse to mix designs)
  std::string id = fmt::format("needle|{}|{}|{}|{}|{}|{}|{}|{}|{}|", spec.context, R, n_base, spec.key_tokens,
                               spec.value_tokens, spec.seed, spec.position_offset, spec.middle, d.n_records);
  auto add = [&](const std::vector<int>& t) {
    for (int x : t) id += std::to_string(x) + ",";
    id += ";";
  };
  add({v.bos});
  add(v.header);
  add(v.filler);
  add(v.filler_end);
  add(v.separator);
  add(v.delimiter);
  add(v.question);
  for (const auto& k : v.keys) add(k);
  for (const auto& x : v.values) add(x);
  for (const NeedleBase& b : d.bases) id += std::to_string(b.attempt);
  for (const auto& p : spec.passages) add(std::vector<int>(p.begin(), p.begin() + d.filler_tokens()));
  d.fingerprint = fmt::format("needle ctx={} R={} n={} rec={} seed={} off={} pieces={}", spec.context, R,
                              n_base, d.record_tokens, spec.seed, spec.position_offset, hash_hex(fnv1a(id)));
  if (log)
    *log << fmt::format(
                "needle: {} records of {} tokens, prompt {} tokens, {} keys and {} values usable, {} base "
                "example(s) re-drawn after the stability check\n",
                d.n_records, d.record_tokens, d.prompt_len, v.keys.size(), v.values.size(), d.redrawn)
         << std::flush;
  return d;
}

ScoringSample needle_render(const NeedleDesign& d, int64_t id, const std::string& model) {
  const int R = d.spec.R;
  const int b = static_cast<int>(id / R), r = static_cast<int>(id % R);
  PS_ASSERT(id >= 0 && b < int(d.bases.size()), "needle_render: sample id out of range");
  const int s = d.shift[size_t(b)][size_t(r)];
  ScoringSample out;
  int64_t tp = -1;
  out.prompt = render_tokens(d, b, s, &tp);
  PS_ASSERT(int64_t(out.prompt.size()) == d.prompt_len,
            "needle_render: prompt length differs from the design's");
  const NeedleBase& base = d.bases[size_t(b)];
  out.answer = d.vocab.values[size_t(base.value[size_t(base.target)])];
  JournalRecord& j = out.rec;
  j.id = id;
  j.seed = d.spec.seed;
  j.base = b;
  j.cluster =
      fmt::format("{:016x}", layout_mix64(d.spec.seed, 0x6e656564ull + uint64_t(b), uint64_t(base.attempt)));
  j.R = R;
  j.residue = static_cast<int>(tp % R);
  j.target_pos = tp;
  j.query_pos = d.query_pos;
  j.prompt_len = d.prompt_len;
  j.shift = s;
  j.expected = out.answer[0];
  j.expected_text = d.vocab.value_text[size_t(base.value[size_t(base.target)])];
  j.protocol = "prefix";
  j.model = model;
  j.layout = d.fingerprint;
  j.tokens_hash = hash_tokens_hex(out.prompt);
  return out;
}

std::string needle_format_design(const NeedleDesign& d) {
  std::ostringstream o;
  const NeedleSpec& s = d.spec;
  o << fmt::format("needle design: {} prompts of {} tokens ({} base examples x {} residues), query at {}\n",
                   d.samples(), d.prompt_len, d.bases.size(), s.R, d.query_pos);
  o << fmt::format(
      "records: {} of {} tokens (key {}, separator {}, value {}, delimiter {}), target in the middle "
      "{:.0f}% of them, {} filler tokens per prompt ({} of them after the records in every prompt)\n",
      d.n_records, d.record_tokens, s.key_tokens, d.vocab.separator.size(), s.value_tokens,
      d.vocab.delimiter.size(), 200 * s.middle, d.filler_tokens(), d.rest);
  o << fmt::format("candidates: {} keys, {} values; filler {}; BOS {}; position offset {}; fingerprint {}\n",
                   d.vocab.keys.size(), d.vocab.values.size(),
                   s.passages.empty() ? show(d.vocab.filler_text)
                                      : fmt::format("{} natural-text passages", s.passages.size()),
                   d.vocab.bos, s.position_offset, d.fingerprint);
  o << fmt::format("{:>8} {:>6} {:>12} {:>12} {:>10}\n", "residue", "n", "mean", "variance", "SD");
  for (const GroupMoments& g : d.groups)
    o << fmt::format("{:>8} {:>6} {:>12.3f} {:>12.3f} {:>10.3f}\n", g.residue, g.n, g.mean, g.var,
                     std::sqrt(g.var));
  o << fmt::format(
      "all: mean {:.3f}, SD {:.3f}; across groups the means span {:.3f} tokens (tolerance {}), the SDs "
      "{:.3f} (tolerance {})\n",
      d.mean, std::sqrt(d.var), d.mean_range, s.tol_mean, d.sd_range, s.tol_sd);
  return o.str();
}

std::string needle_logprob_csv(const std::vector<JournalRecord>& records, int R) {
  std::vector<int64_t> n(size_t(R), 0), known(size_t(R), 0);
  std::vector<double> sum(size_t(R), 0);
  for (const JournalRecord& r : records) {
    if (!r.scored() || r.residue < 0 || r.residue >= R) continue;
    ++n[size_t(r.residue)];
    if (std::isfinite(r.logprob)) {
      ++known[size_t(r.residue)];
      sum[size_t(r.residue)] += r.logprob;
    }
  }
  CsvTable csv{{"residue", "n", "known", "mean_logprob"}, {}};
  for (int r = 0; r < R; ++r)
    csv.rows.push_back(
        {std::to_string(r), std::to_string(n[size_t(r)]), std::to_string(known[size_t(r)]),
         known[size_t(r)] > 0 ? csv_num(sum[size_t(r)] / double(known[size_t(r)]), "{:.6f}") : ""});
  return csv_text(csv);
}

EvalResults needle_run(Backend& backend, const NeedleDesign& d, const NeedleRunOptions& opt,
                       const std::string& out_dir) {
  // the design, then the journal (scored or resumed)
  io_make_dirs(out_dir);
  io_write_atomic(out_dir + "/layout.txt", needle_format_design(d));
  ScoringOptions po;
  po.what = "needle " + opt.model;
  po.identity = scoring_identity(opt.model, backend, d.fingerprint, "needle");
  po.fresh = opt.fresh;
  po.log = opt.log;
  po.max_failed_batches = opt.max_failed_batches;
  const std::string journal = out_dir + "/journal.jsonl";
  const ScoringSummary sum = scoring_run(
      backend, d.samples(), [&](int64_t i) { return needle_render(d, i, opt.model); }, journal, po);

  // statistics of the whole journal and the same files as `eval`
  const StatsOptions so{opt.S, opt.bootstrap, opt.bootstrap_seed};
  EvalMeta m;
  m.model = opt.model;
  m.protocol = "prefix";
  m.task = "needle";
  m.backend = backend.describe();
  m.layout = d.fingerprint;
  m.n_base = static_cast<int>(d.bases.size());
  m.pad = 2 * d.spec.R + 1 + d.rest;
  m.prompt_len = d.prompt_len;
  m.query_pos = d.query_pos;
  m.tol_mean = d.spec.tol_mean;
  m.tol_sd = d.spec.tol_sd;
  m.wall_s = sum.wall_s;
  const EvalResults res = results_from_journal(journal, so, m);
  for (const ResidueStat& r : res.stats.per_residue)  // a per-residue claim needs every residue
    if (r.n == 0)
      fail("needle " + opt.model,
           fmt::format(
               "residue {} has no scored sample ({} of {} samples failed; last error: {}): no per-residue "
               "statistic or period can be given",
               r.residue, res.stats.n_errors, res.stats.n_samples, sum.last_error),
           "fix what the last error names, then rerun the same command (failed samples are retried)");
  eval_write_outputs(res, opt.report, out_dir, "phasescope probe needle: " + opt.model);
  CardGrid g;  // the journal's positions count the tokens the server puts first, so phase 0 is position 0
  g.period = d.spec.R % opt.S == 0 ? opt.S : d.spec.R;
  g.prompt_offset = d.spec.position_offset;
  g.note = "probe needle: positions count the server's own tokens before the prompt (--position-offset)";
  PhaseCard card = card_from_results(res, g, d.spec.seed);
  card.source = "probe needle";
  card_write(card, out_dir + "/card.json");
  io_write_atomic(out_dir + "/logprob_per_residue.csv",
                  needle_logprob_csv(journal_load(journal).records, d.spec.R));
  return res;
}

}  // namespace phasescope
