// pretokenizer.cpp — Split steps over PCRE2 (UTF + UCP, JIT when available) and the ByteLevel step;
// the delimiter behaviours follow HF's SplitDelimiterBehavior (see pretokenizer.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <fmt/format.h>
#include <pcre2.h>

#include "core/check.h"

namespace phasescope {

// ---- PCRE2

struct Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Regex() { pcre2_code_free(code); }
};

// Per-thread match state: match data sized for one pair, and a JIT stack that may grow to 16 MiB
// (the 32 KiB default overflows on long whitespace runs, e.g. `\s+(?!\S)` over 100k spaces).
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

static MatchState& match_state() {
  thread_local MatchState s;
  return s;
}

// HF compiles Split patterns with Oniguruma, whose Unicode `\s` is the White_Space property. PCRE2's
// UCP `\s` adds U+180E (MONGOLIAN VOWEL SEPARATOR, no longer a space since Unicode 6.3), so `\s` and
// `\S` are spelled out as that set. A `\S` inside a [...] class is left to PCRE2 (off by U+180E only).
static const char* kSpaceSet =
    R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string onig_spaces(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 's') {
        out += in_class ? std::string(kSpaceSet) : std::string("[") + kSpaceSet + "]";
      } else if (e == 'S' && !in_class) {
        out += std::string("[^") + kSpaceSet + "]";
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // a ']' right after '[' or '[^' is a literal, not the end of the class
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // POSIX [:name:]
      const size_t close = p.find(":]", i + 2);
      if (close != std::string::npos) {
        out.append(p, i, close + 2 - i);
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

static std::shared_ptr<const Regex> regex_compile(const std::string& written, bool literal,
                                                  const std::string& where) {
  auto r = std::make_shared<Regex>();
  int err = 0;
  PCRE2_SIZE err_at = 0;
  const uint32_t options =
      literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;  // UCP is refused with LITERAL
  const std::string pattern = literal ? written : onig_spaces(written);
  r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err,
                          &err_at, nullptr);
  if (!r->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail(where,
         fmt::format("the pattern does not compile with PCRE2 ({} at offset {})",
                     reinterpret_cast<char*>(msg), err_at),
         "use a pattern in the Oniguruma/PCRE syntax that HF tokenizers accepts");
  }
  r->jit = pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE) == 0;  // the interpreter is the fallback
  return r;
}

// Every match of `re` in s, as (begin, end) byte pairs; empty matches are skipped as HF and the JS
// reference skip them (neither keeps an empty piece).
static void regex_find_all(const Regex& re, std::string_view s, std::vector<Piece>& matches) {
  MatchState& st = match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t offset = 0;
  while (offset <= s.size()) {
    const int rc = pcre2_match(re.code, subject, s.size(), offset, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail("tokenizer pre-tokenizer",
           fmt::format("regex match failed ({}) on a piece of {} bytes", reinterpret_cast<char*>(msg),
                       s.size()),
           "split the input into shorter texts");
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    if (ov[1] > ov[0]) {
      matches.push_back({ov[0], ov[1]});
      offset = ov[1];
    } else {
      // empty match: step over one character
      if (offset >= s.size()) break;
      size_t next = offset + 1;
      while (next < s.size() && (static_cast<uint8_t>(s[next]) & 0xC0) == 0x80) ++next;
      offset = next;
    }
  }
}

// ---- one Split step over one piece

// Cut s[piece] by the step; appends the resulting non-empty pieces to `out`.
static void split_piece(const SplitStep& step, std::string_view text, Piece piece,
                        std::vector<Piece>& matches, std::vector<Piece>& out) {
  matches.clear();
  regex_find_all(*step.regex, text.substr(piece.begin, piece.end - piece.begin), matches);
  const size_t len = piece.end - piece.begin;

  // Isolated (what real files use): matches and gaps alike become pieces
  if (step.behavior == SplitBehavior::Isolated) {
    size_t prev = 0;
    for (const Piece& m : matches) {
      if (m.begin > prev) out.push_back({piece.begin + prev, piece.begin + m.begin});
      out.push_back({piece.begin + m.begin, piece.begin + m.end});
      prev = m.end;
    }
    if (prev < len) out.push_back({piece.begin + prev, piece.end});
    return;
  }

  // the piece as alternating (range, is_delimiter) parts covering it
  struct Part {
    size_t b, e;
    bool delim;
  };
  thread_local std::vector<Part> parts;
  parts.clear();
  size_t prev = 0;
  for (const Piece& m : matches) {
    if (m.begin > prev) parts.push_back({prev, m.begin, step.invert});
    parts.push_back({m.begin, m.end, !step.invert});
    prev = m.end;
  }
  if (prev < len) parts.push_back({prev, len, step.invert});

  // delimiters removed, isolated or glued to a neighbour
  const size_t base = out.size();
  bool glue_next = false;  // MergedWithNext: the last delimiter waits for the next part
  for (size_t i = 0; i < parts.size(); ++i) {
    const Part& p = parts[i];
    Piece r{piece.begin + p.b, piece.begin + p.e};
    switch (step.behavior) {
      case SplitBehavior::Removed:
        if (!p.delim) out.push_back(r);
        break;
      case SplitBehavior::Isolated:
        out.push_back(r);
        break;
      case SplitBehavior::MergedWithPrevious:
        if (p.delim && out.size() > base && i > 0 && !parts[i - 1].delim)  // likewise, backwards
          out.back().end = r.end;
        else
          out.push_back(r);
        break;
      case SplitBehavior::MergedWithNext:
        if (glue_next && !p.delim)  // a delimiter joins the next part unless that is a delimiter too
          out.back().end = r.end;
        else
          out.push_back(r);
        glue_next = p.delim;
        break;
      case SplitBehavior::Contiguous:
        if (p.delim && i > 0 && parts[i - 1].delim && out.size() > base)
          out.back().end = r.end;
        else
          out.push_back(r);
        break;
    }
  }
}

// ---- the GPT-2 pattern of ByteLevel use_regex

static const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// ---- parsing

static SplitBehavior behavior_from_json(const nlohmann::json& j, const std::string& where) {
  const std::string s = j.is_string() ? j.get<std::string>() : j.dump();
  if (s == "Removed") return SplitBehavior::Removed;
  if (s == "Isolated") return SplitBehavior::Isolated;
  if (s == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (s == "Contiguous") return SplitBehavior::Contiguous;
  fail(where, "unknown behavior " + s,
       "use Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
}

static bool bool_field(const nlohmann::json& j, const char* key, bool dflt, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if (!j[key].is_boolean())
    fail(where + "." + key, "expected true or false, got " + j[key].dump(), "write a boolean");
  return j[key].get<bool>();
}

static void add_step(PreTokenizer& p, const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    fail(where, "expected an object with a \"type\"",
         "write {\"type\": \"Split\" | \"ByteLevel\" | \"Sequence\", ...}");
  const std::string type = j["type"];
  if (p.byte_level)
    fail(where + ".type", type + " after ByteLevel is not supported",
         "ByteLevel must be the last pre-tokenizer (as in byte-level BPE files)");
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      fail(where + ".pretokenizers", "missing or not an array", "write \"pretokenizers\": [...]");
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i)
      add_step(p, j["pretokenizers"][i], fmt::format("{}.pretokenizers[{}]", where, i));
  } else if (type == "Split") {
    SplitStep s;
    const auto& pat = j.value("pattern", nlohmann::json());
    if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()) {
      s.source = pat["Regex"];
      s.regex = regex_compile(s.source, false, where + ".pattern.Regex");
    } else if (pat.is_object() && pat.contains("String") && pat["String"].is_string()) {
      s.source = pat["String"];
      s.regex = regex_compile(s.source, true, where + ".pattern.String");
    } else {
      fail(where + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}, got " + pat.dump(),
           "write one of the two");
    }
    if (!j.contains("behavior"))
      fail(where + ".behavior", "missing", "write e.g. \"behavior\": \"Isolated\"");
    s.behavior = behavior_from_json(j["behavior"], where + ".behavior");
    s.invert = bool_field(j, "invert", false, where);
    p.splits.push_back(std::move(s));
  } else if (type == "ByteLevel") {
    p.byte_level = true;
    p.add_prefix_space = bool_field(j, "add_prefix_space", true, where);
    p.byte_level_regex = bool_field(j, "use_regex", true, where);
    // trim_offsets only moves offsets; encode returns no offsets
  } else {
    fail(where + ".type", "pre-tokenizer " + type + " is not supported",
         "phasescope reads byte-level BPE files: Sequence of Split and ByteLevel");
  }
}

PreTokenizer pretokenizer_from_json(const nlohmann::json& j, const std::string& where) {
  PreTokenizer p;
  if (j.is_null()) fail(where, "is null", "a byte-level BPE file needs a ByteLevel pre-tokenizer");
  add_step(p, j, where);
  if (!p.byte_level)
    fail(where, "has no ByteLevel step",
         "phasescope reads byte-level BPE files: end the pre-tokenizer with ByteLevel");
  if (p.byte_level_regex) {
    SplitStep s;
    s.source = kGpt2Pattern;
    s.regex = regex_compile(s.source, false, where + " (ByteLevel use_regex)");
    p.splits.push_back(std::move(s));  // runs after the prefix space, see pretokenize()
  }
  return p;
}

// ---- running

// ByteLevel add_prefix_space: HF and the JS reference prepend a space to every piece that does not
// start with one (before ByteLevel's own regex, when it has one).
static void prefix_spaces(std::string& buffer, std::vector<Piece>& pieces) {
  std::string spaced;
  spaced.reserve(buffer.size() + pieces.size());
  for (Piece& c : pieces) {
    const size_t b = spaced.size();
    if (buffer[c.begin] != ' ') spaced += ' ';
    spaced.append(buffer, c.begin, c.end - c.begin);
    c = {b, spaced.size()};
  }
  buffer.swap(spaced);
}

void pretokenize(const PreTokenizer& p, std::string_view text, std::string& buffer, std::vector<Piece>& out) {
  buffer.assign(text);
  out.clear();
  if (text.empty()) return;
  thread_local std::vector<Piece> cur, next, matches;  // scratch kept between calls
  cur.assign(1, Piece{0, buffer.size()});
  const size_t n_user = p.splits.size() - (p.byte_level_regex ? 1 : 0);  // Split steps from the file
  for (size_t k = 0; k < p.splits.size(); ++k) {
    if (k == n_user && p.add_prefix_space) prefix_spaces(buffer, cur);
    next.clear();
    for (const Piece& c : cur) split_piece(p.splits[k], buffer, c, matches, next);
    cur.swap(next);
  }
  if (n_user == p.splits.size() && p.add_prefix_space) prefix_spaces(buffer, cur);
  out.assign(cur.begin(), cur.end());
}

std::string pretokenizer_describe(const PreTokenizer& p) {
  std::string s;
  const size_t n_user = p.splits.size() - (p.byte_level_regex ? 1 : 0);
  for (size_t k = 0; k < n_user; ++k) {
    // the pattern's first characters, enough to tell the files apart
    std::string src = p.splits[k].source;
    size_t cut = 0;
    for (int chars = 0; cut < src.size() && chars < 16; ++chars) {
      ++cut;
      while (cut < src.size() && (static_cast<unsigned char>(src[cut]) & 0xC0) == 0x80) ++cut;
    }
    if (cut < src.size()) src = src.substr(0, cut) + "...";
    for (char& c : src)
      if (c == '\r' || c == '\n') c = ' ';
    s += fmt::format("Split(/{}/{}) + ", src, p.splits[k].invert ? " invert" : "");
  }
  s += fmt::format("ByteLevel(prefix_space={}, regex={})", p.add_prefix_space, p.byte_level_regex);
  return s;
}

}  // namespace phasescope
