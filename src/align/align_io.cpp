// align_io.cpp — the align command's JSONL: parse a line, align it with a neutral token that survives the
// tokenizer round trip, write the output line.
#include "align/align_io.h"

#include <fmt/format.h>

#include <sstream>

#include "core/check.h"
#include "core/io.h"
#include "core/json_fields.h"

namespace phasescope {

namespace {

const char* kFix =
    "write {\"ids\": [...], \"spans\": [[begin, end]]} or {\"segments\": [{\"text\": ..., \"mark\": true}]} "
    "(docs/align.md)";

std::vector<AlignSpan> spans_of(const nlohmann::json& list, const std::string& where) {
  if (!list.is_array()) fail(where, "expected a list of [begin, end] or [begin, end, anchor]", kFix);
  std::vector<AlignSpan> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::vector<int> v =
        json_as<std::vector<int>>(list[i], where + "[" + std::to_string(i) + "]", kFix);
    if (v.size() != 2 && v.size() != 3)
      fail(where + "[" + std::to_string(i) + "]", "expected [begin, end] or [begin, end, anchor]", kFix);
    out.push_back(AlignSpan{v[0], v[1], v.size() == 3 ? v[2] : 0});
  }
  return out;
}

bool survives(const Tokenizer& tok, const std::vector<int>& ids) {
  return tok.encode(tok.decode(ids)) == ids;
}

}  // namespace

AlignInput align_input_parse(const nlohmann::json& j, const Tokenizer* tok, const std::string& where) {
  if (!j.is_object()) fail(where, "is not a JSON object", kFix);
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "id" && it.key() != "ids" && it.key() != "spans" && it.key() != "segments")
      fail(json_where(where, it.key()), "is not an input field", kFix);
  AlignInput in;
  if (j.contains("id")) in.id = j.at("id");
  if (j.contains("ids") == j.contains("segments"))
    fail(where, "needs exactly one of 'ids' (with 'spans') or 'segments'", kFix);
  if (j.contains("ids")) {
    in.ids = json_get<std::vector<int>>(j, "ids", where, kFix);
    in.spans = spans_of(json_at(j, "spans", where, kFix), json_where(where, "spans"));
    return in;
  }
  if (!tok) fail(where, "has text segments but no tokenizer was given", "pass --tokenizer tokenizer.json");
  const nlohmann::json& segs = j.at("segments");
  if (!segs.is_array()) fail(json_where(where, "segments"), "expected a list", kFix);
  for (size_t i = 0; i < segs.size(); ++i) {
    const std::string w = json_where(where, "segments") + "[" + std::to_string(i) + "]";
    const std::vector<int> ids = tok->encode(json_get<std::string>(segs[i], "text", w, kFix));
    if (json_get_or<bool>(segs[i], "mark", false, w, kFix)) {
      if (ids.empty()) fail(w, "is marked but encodes to no tokens", "mark a segment with text in it");
      in.spans.push_back(AlignSpan{int64_t(in.ids.size()), int64_t(in.ids.size() + ids.size()),
                                   json_get_or<int64_t>(segs[i], "anchor", 0, w, kFix)});
    }
    in.ids.insert(in.ids.end(), ids.begin(), ids.end());
  }
  return in;
}

std::vector<int> align_neutral_candidates(const std::vector<int>& given, const PhaseCard& card,
                                          const Tokenizer* tok) {
  if (!given.empty()) return given;
  if (!card.neutral_tokens.empty()) return card.neutral_tokens;
  std::vector<int> out;
  if (tok)
    for (const char* s : {"\n", " ", "\t", ".", ",", ";", "|", " |", " ."}) {
      const std::vector<int> ids = tok->encode(s);
      if (ids.size() == 1) out.push_back(ids[0]);
    }
  if (out.empty())
    fail("align neutral tokens", "none known: no --neutral, none in the card, and no tokenizer",
         "pass --neutral ID (a whitespace or newline token) or --tokenizer tokenizer.json");
  return out;
}

AlignLineResult align_line(const AlignInput& in, const PhaseCard& card, const AlignJobOptions& opt,
                           const std::string& where) {
  AlignOptions o = opt.align;
  o.phase_order = card.phase_order;
  const bool check = opt.tok && survives(*opt.tok, in.ids);  // a prompt that does not survive on its own
                                                             // is reported with roundtrip false
  std::string tried;
  for (int neutral : opt.neutral) {
    o.neutral = {neutral};
    AlignLineResult r;
    try {
      r.prompt = align_prompt(in.ids, in.spans, card.grid, o);
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    r.neutral = neutral;
    r.roundtrip = check && survives(*opt.tok, r.prompt.tokens);
    if (!check || r.roundtrip) return r;
    tried += (tried.empty() ? "" : ", ") + std::to_string(neutral);
  }
  fail(
      where, "no neutral token (" + tried + ") keeps the aligned prompt's tokens through decode and encode",
      "pass --neutral with a token that does not merge with its neighbours, or send token ids to the server");
}

nlohmann::json align_output_json(const AlignInput& in, const AlignLineResult& r, const Tokenizer* tok) {
  nlohmann::json spans = nlohmann::json::array();
  for (const AlignSpan& s : r.prompt.spans) spans.push_back({s.begin, s.end});
  nlohmann::json j = {{"id", in.id},          {"ids", r.prompt.tokens},      {"added", r.prompt.added},
                      {"spans", spans},       {"anchors", r.prompt.anchors}, {"phases", r.prompt.phases},
                      {"neutral", r.neutral}, {"roundtrip", r.roundtrip}};
  if (tok) j["text"] = tok->decode(r.prompt.tokens);
  return j;
}

AlignFileSummary align_file(const std::string& in_path, const std::string& out_path, const PhaseCard& card,
                            const AlignJobOptions& opt) {
  const std::vector<std::string> lines =
      io_read_lines(in_path, "pass a JSONL file of prompts (docs/align.md)");
  AlignFileSummary sum;
  std::ostringstream out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{} line {}", in_path, i + 1);
    const AlignInput in = align_input_parse(json_parse_or_fail(lines[i], where, kFix), opt.tok, where);
    const AlignLineResult r = align_line(in, card, opt, where);
    out << align_output_json(in, r, opt.tok).dump() << "\n";
    sum.prompts++;
    sum.spans += int64_t(in.spans.size());
    sum.added += r.prompt.added;
  }
  io_write_atomic(out_path, out.str());
  return sum;
}

}  // namespace phasescope
