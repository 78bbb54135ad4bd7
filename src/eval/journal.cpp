// journal.cpp — see journal.h.
#include "eval/journal.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/check.h"
#include "core/io.h"
#include "core/json_fields.h"

namespace phasescope {

nlohmann::json journal_record_to_json(const JournalRecord& r) {
  nlohmann::json topk = nlohmann::json::array();
  for (const auto& [tok, lp] : r.topk) topk.push_back({tok, lp});
  nlohmann::json j;
  j["id"] = r.id;
  j["seed"] = r.seed;
  j["base"] = r.base;
  j["cluster"] = r.cluster;
  j["R"] = r.R;
  j["residue"] = r.residue;
  j["target_pos"] = r.target_pos;
  j["query_pos"] = r.query_pos;
  j["prompt_len"] = r.prompt_len;
  j["shift"] = r.shift;
  j["expected"] = r.expected;
  j["answer"] = r.answer;
  j["correct"] = r.correct();  // for people reading the file; statistics recompute it
  j["logprob"] = std::isfinite(r.logprob) ? nlohmann::json(r.logprob) : nlohmann::json(nullptr);
  j["topk"] = topk;
  j["ms"] = r.ms;
  j["error"] = r.error;
  j["protocol"] = r.protocol;
  j["model"] = r.model;
  j["layout"] = r.layout;
  j["tokens_hash"] = r.tokens_hash;
  if (!r.expected_seq.empty()) j["expected_seq"] = r.expected_seq;
  if (!r.answer_seq.empty()) j["answer_seq"] = r.answer_seq;
  if (!r.logprob_seq.empty()) {
    nlohmann::json lps = nlohmann::json::array();
    for (double lp : r.logprob_seq)
      lps.push_back(std::isfinite(lp) ? nlohmann::json(lp) : nlohmann::json(nullptr));
    j["logprob_seq"] = lps;
  }
  if (!r.expected_text.empty()) j["expected_text"] = r.expected_text;
  return j;
}

JournalRecord journal_record_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail(where, "a journal line must be a JSON object", "delete the line or the journal");
  static const std::string fix =
      "this is not a phasescope journal line; delete the journal (or the line) and rerun";
  auto number_or_nan = [&](const nlohmann::json& v, const char* key) {
    return json_number_or_nan(v, json_where(where, key), fix);
  };
  JournalRecord r;
  r.id = json_get<int64_t>(j, "id", where, fix);
  r.seed = json_get<uint64_t>(j, "seed", where, fix);
  r.base = json_get<int>(j, "base", where, fix);
  r.cluster = json_get<std::string>(j, "cluster", where, fix);
  r.R = json_get<int>(j, "R", where, fix);
  r.residue = json_get<int>(j, "residue", where, fix);
  r.target_pos = json_get<int64_t>(j, "target_pos", where, fix);
  r.query_pos = json_get<int64_t>(j, "query_pos", where, fix);
  r.prompt_len = json_get<int64_t>(j, "prompt_len", where, fix);
  r.shift = json_get_or<int>(j, "shift", 0, where, fix);
  r.expected = json_get<int>(j, "expected", where, fix);
  r.answer = json_get<int>(j, "answer", where, fix);
  r.logprob = number_or_nan(json_at(j, "logprob", where, fix), "logprob");
  for (const auto& e : json_at(j, "topk", where, fix)) {  // [[token, logprob or null], ...]
    if (!e.is_array() || e.size() != 2)
      fail(json_where(where, "topk"), "expected [token, logprob] pairs", fix);
    r.topk.emplace_back(json_as<int>(e[0], json_where(where, "topk"), fix), number_or_nan(e[1], "topk"));
  }
  r.ms = json_get<double>(j, "ms", where, fix);
  r.error = json_get<std::string>(j, "error", where, fix);
  r.protocol = json_get<std::string>(j, "protocol", where, fix);
  r.model = json_get<std::string>(j, "model", where, fix);
  r.layout = json_get_or<std::string>(j, "layout", "", where, fix);
  r.tokens_hash = json_get_or<std::string>(j, "tokens_hash", "", where, fix);
  r.expected_seq = json_get_or<std::vector<int>>(j, "expected_seq", {}, where, fix);
  r.answer_seq = json_get_or<std::vector<int>>(j, "answer_seq", {}, where, fix);
  if (json_present(j, "logprob_seq"))
    for (const auto& e : j.at("logprob_seq")) r.logprob_seq.push_back(number_or_nan(e, "logprob_seq"));
  r.expected_text = json_get_or<std::string>(j, "expected_text", "", where, fix);
  if (r.R < 1 || r.residue < 0 || r.residue >= r.R || r.target_pos % r.R != r.residue)
    fail(where, fmt::format("residue {} does not match target_pos {} mod R {}", r.residue, r.target_pos, r.R),
         "the journal is corrupt or was edited; delete it and rerun");
  return r;
}

JournalLoad journal_load(const std::string& path) {
  JournalLoad out;
  if (!io_exists(path)) return out;
  const std::string text = io_read_text(path, "check the --out folder's permissions");
  const size_t last_nl = text.rfind('\n');
  const size_t complete = last_nl == std::string::npos ? 0 : last_nl + 1;
  out.torn_bytes = static_cast<int64_t>(text.size() - complete);

  std::unordered_map<int64_t, size_t> index;  // id -> position in out.records
  std::vector<std::string> bad;               // every line that is not a record, reported at once
  size_t start = 0;
  int64_t line_no = 0;
  while (start < complete) {
    const size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    nlohmann::json j;
    try {
      j = json_parse_bounded(line);
    } catch (const JsonInputError&) {
      bad.push_back(where + " is not valid JSON (a complete line, so not a torn write)");
      continue;
    }
    if (line_no == 1 && j.is_object() && j.contains("journal_identity")) {
      const nlohmann::json& id = j["journal_identity"];
      if (!id.is_object()) fail(where, "journal_identity must be an object", "delete the journal and rerun");
      for (const auto& [k, v] : id.items()) out.identity[k] = v.is_string() ? v.get<std::string>() : v.dump();
      out.has_identity = true;
      continue;
    }
    JournalRecord r;
    try {
      r = journal_record_from_json(j, where);
    } catch (const Error& e) {
      bad.push_back(e.what());
      continue;
    }
    ++out.lines;
    if (!r.scored()) ++out.error_lines;
    auto it = index.find(r.id);
    if (it == index.end()) {
      index.emplace(r.id, out.records.size());
      out.records.push_back(std::move(r));
      continue;
    }
    JournalRecord& old = out.records[it->second];
    if (old.scored()) {
      if (r.scored()) ++out.duplicate_lines;  // keep the first answer
    } else {
      old = std::move(r);  // an earlier failure is superseded by a later answer (or a later failure)
    }
  }
  if (!bad.empty()) {
    std::string list;
    for (size_t i = 0; i < bad.size() && i < 20; ++i) list += (i ? "; " : "") + bad[i];
    if (bad.size() > 20) list += fmt::format("; and {} more", bad.size() - 20);
    fail(path, fmt::format("{} line(s) are not journal records: {}", bad.size(), list),
         "the journal was edited or corrupted; delete these lines (or the journal) and rerun");
  }
  return out;
}

JournalWriter::JournalWriter(const std::string& path, const JournalIdentity& identity) : path_(path) {
  // cut a torn tail so the next line starts on a fresh line
  const bool exists = io_exists(path);
  const std::string text = exists ? io_read_text(path) : std::string();
  size_t size = text.size();
  if (exists && !text.empty() && text.back() != '\n') {
    const size_t last_nl = text.rfind('\n');
    const size_t keep = last_nl == std::string::npos ? 0 : last_nl + 1;
    torn_cut_ = static_cast<int64_t>(text.size() - keep);
    size = keep;
    if (::truncate(path.c_str(), static_cast<off_t>(keep)) != 0)
      fail(path, std::string("cannot cut the torn last line (") + std::strerror(errno) + ")",
           "check that the journal is writable");
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail(path, std::string("cannot open the journal for appending (") + std::strerror(errno) + ")",
         "check that the --out folder exists and is writable");
  if (size == 0) {  // a new journal: its identity first
    nlohmann::json id = nlohmann::json::object();
    for (const auto& [k, v] : identity) id[k] = v;
    const std::string line = nlohmann::json{{"journal_identity", id}}.dump() + "\n";
    io_write_all(fd_, line.data(), line.size(), path_);
  }
}

JournalWriter::~JournalWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void JournalWriter::append(const JournalRecord& r) {
  const std::string line = journal_record_to_json(r).dump() + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t w = ::write(fd_, line.data() + done, line.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(path_, std::string("cannot append to the journal (") + std::strerror(errno) + ")",
           "check free disk space; rerunning resumes from the last complete line");
    }
    done += static_cast<size_t>(w);
  }
}

void JournalWriter::sync() {
  if (::fdatasync(fd_) != 0 && errno != EINVAL)
    fail(path_, std::string("cannot sync the journal (") + std::strerror(errno) + ")", "check the disk");
}

}  // namespace phasescope
