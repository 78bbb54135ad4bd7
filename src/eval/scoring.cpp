// scoring.cpp — see scoring.h.
#include "eval/scoring.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <ostream>
#include <unordered_map>

#include "core/check.h"
#include "core/io.h"

namespace phasescope {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Identity {
  std::string tokens_hash;
  int64_t target_pos = 0;
};

}  // namespace

JournalIdentity scoring_identity(const std::string& model, const Backend& backend, const std::string& layout,
                                 const std::string& scoring) {
  return {{"model", model}, {"backend", backend.identity()}, {"layout", layout}, {"scoring", scoring}};
}

void scoring_check_identity(const JournalLoad& jl, const JournalIdentity& want, const std::string& path) {
  const std::string fix = "pass another --out folder for this run, or --fresh to start " + path + " over";
  if (!jl.has_identity) {
    if (!jl.records.empty())
      fail(path,
           "holds samples but no identity line (written by an older phasescope): it cannot be told which "
           "model, backend and layout scored them",
           fix);
    return;
  }
  for (const auto& [k, v] : want) {
    auto it = jl.identity.find(k);
    const std::string have = it == jl.identity.end() ? "(none)" : it->second;
    if (have != v)
      fail(path, fmt::format("belongs to another run: its {} is '{}', this run's is '{}'", k, have, v), fix);
  }
  for (const auto& [k, v] : jl.identity)
    if (!want.count(k))
      fail(path, fmt::format("belongs to another run: it records {} '{}', this run none", k, v), fix);
}

ScoringSummary scoring_run(Backend& backend, int64_t n, const std::function<ScoringSample(int64_t)>& render,
                           const std::string& journal_path, const ScoringOptions& opt) {
  std::ostream* log = opt.log;
  ScoringSummary sum;
  sum.total = n;

  // a fresh start removes the old journal; then what the journal holds must be this run's
  if (opt.fresh && io_exists(journal_path) && std::remove(journal_path.c_str()) != 0)
    fail(journal_path, "cannot remove the old journal for --fresh", "check the folder's permissions");
  const JournalLoad jl = journal_load(journal_path);
  scoring_check_identity(jl, opt.identity, journal_path);

  // what every sample is (rendered once, only its identity kept)
  std::unordered_map<int64_t, int64_t> index_of;  // sample id -> index
  std::vector<Identity> ident(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    ScoringSample s = render(i);
    ident[size_t(i)] = {s.rec.tokens_hash, s.rec.target_pos};
    if (!index_of.emplace(s.rec.id, i).second)
      PS_ASSERT(false, fmt::format("duplicate sample id {}", s.rec.id));
  }
  const std::string fix =
      "pass another --out folder for another design, or --fresh to start " + journal_path + " over";
  std::vector<char> done(static_cast<size_t>(n), 0);
  for (const JournalRecord& r : jl.records) {
    auto it = index_of.find(r.id);
    if (it == index_of.end())
      fail(journal_path, fmt::format("sample {} is not part of this design", r.id), fix);
    const Identity& id = ident[size_t(it->second)];
    if (r.tokens_hash != id.tokens_hash || r.target_pos != id.target_pos)
      fail(journal_path,
           fmt::format("sample {} had other prompt tokens or target position than this design gives it (the "
                       "tokenizer, the server or the layout changed)",
                       r.id),
           fix);
    if (r.scored()) done[size_t(it->second)] = 1;
  }
  std::vector<int64_t> todo;
  for (int64_t i = 0; i < n; ++i)
    if (!done[size_t(i)]) todo.push_back(i);
  sum.resumed = n - static_cast<int64_t>(todo.size());
  JournalWriter writer(journal_path, opt.identity);
  if (log) {
    if (writer.torn_bytes_cut() > 0)
      *log << fmt::format("journal: cut a torn last line ({} bytes) left by an interrupted run\n",
                          writer.torn_bytes_cut())
           << std::flush;
    *log << fmt::format("{}: {} samples, {} already journaled, {} to score with {}\n", opt.what, n,
                        sum.resumed, todo.size(), backend.describe())
         << std::flush;
  }

  // score in batches of whole samples (every token of a sample's answer in the same batch)
  const size_t max_req = static_cast<size_t>(std::max(1, backend.max_batch()));
  const auto t0 = Clock::now();
  auto last_print = t0;
  int failed_batches = 0;
  std::string last_error;
  size_t next = 0;
  while (next < todo.size()) {
    std::vector<ScoringSample> batch;
    std::vector<ScoreRequest> reqs;
    int64_t tokens = 0;
    while (next < todo.size()) {
      ScoringSample s = render(todo[next]);
      PS_ASSERT(!s.answer.empty(), "a sample needs at least one answer token");
      const int64_t cost = int64_t(s.prompt.size() + s.answer.size()) * int64_t(s.answer.size());
      if (!batch.empty() && (reqs.size() + s.answer.size() > max_req || tokens + cost > opt.max_batch_tokens))
        break;
      for (size_t k = 0; k < s.answer.size(); ++k) {
        ScoreRequest q;
        q.tokens = s.prompt;
        q.tokens.insert(q.tokens.end(), s.answer.begin(), s.answer.begin() + static_cast<std::ptrdiff_t>(k));
        q.answer = s.answer[k];
        reqs.push_back(std::move(q));
      }
      tokens += cost;
      s.prompt.clear();
      s.prompt.shrink_to_fit();
      batch.push_back(std::move(s));
      ++next;
    }
    const auto tb = Clock::now();
    std::vector<ScoreResult> out;
    std::string batch_error;
    try {
      out = backend.score(reqs);
      if (out.size() != reqs.size())
        batch_error = fmt::format("backend returned {} results for {} requests", out.size(), reqs.size());
    } catch (const std::exception& e) {
      batch_error = e.what();
    }
    const size_t k_total = std::max<size_t>(1, reqs.size());
    reqs.clear();
    const double batch_ms = 1000 * seconds_since(tb);
    int64_t answered = 0;
    size_t k = 0;
    for (ScoringSample& s : batch) {
      JournalRecord r = std::move(s.rec);
      const size_t A = s.answer.size();
      if (!batch_error.empty()) {
        r.error = batch_error;
        r.ms = batch_ms / double(batch.size());
      } else {
        double ms = 0;
        for (size_t a = 0; a < A; ++a) {
          const ScoreResult& q = out[k + a];
          if (r.error.empty() && !q.error.empty()) r.error = q.error;
          if (r.error.empty() && q.top1 < 0) r.error = "backend returned no top-1 token";
          ms += q.ms;
        }
        // the backend's own time for the sample, else its share of the batch's wall time
        r.ms = ms > 0 ? ms : batch_ms * double(A) / double(k_total);
        const ScoreResult& first = out[k];
        r.answer = first.top1;
        r.logprob = first.answer_logprob;
        r.topk = first.topk;
        if (A > 1) {
          r.expected_seq = s.answer;
          for (size_t a = 0; a < A; ++a) {
            r.answer_seq.push_back(out[k + a].top1);
            r.logprob_seq.push_back(out[k + a].answer_logprob);
          }
        }
      }
      k += A;
      if (r.scored()) {
        ++answered;
        ++sum.scored;
      } else {
        ++sum.failed;
        last_error = r.error;
      }
      writer.append(r);
    }
    writer.sync();
    failed_batches = answered == 0 ? failed_batches + 1 : 0;

    const bool last = next == todo.size();
    if (log && (last || seconds_since(last_print) >= 2.0)) {
      last_print = Clock::now();
      const double el = seconds_since(t0), rate = double(sum.scored + sum.failed) / std::max(el, 1e-9);
      *log
          << fmt::format(
                 "  {}/{} scored ({} resumed), {} failed, {:.1f} samples/s, {:.0f} s elapsed, eta {:.0f} s\n",
                 sum.resumed + sum.scored, n, sum.resumed, sum.failed, rate, el,
                 double(todo.size() - next) / std::max(rate, 1e-9))
          << std::flush;
    }
    if (failed_batches >= opt.max_failed_batches)
      fail(opt.what + " (" + backend.describe() + ")",
           fmt::format("the backend failed on {} consecutive batches; last error: {}", failed_batches,
                       last_error),
           "check the server, then rerun the same command: the " + std::to_string(sum.resumed + sum.scored) +
               " samples scored so far are kept in " + journal_path);
  }
  sum.wall_s = seconds_since(t0);
  sum.last_error = last_error;
  // no sample with an answer: no statistic, period or verdict can follow, so this is a failure
  if (n > 0 && sum.resumed + sum.scored == 0)
    fail(opt.what + " (" + backend.describe() + ")",
         fmt::format("no sample was scored: all {} failed; last error: {}", sum.failed, last_error),
         "fix what the last error names, then rerun the same command (failed samples are retried)");
  if (log && sum.failed > 0)
    *log << fmt::format("{}: {} samples failed and are left out (last error: {}); rerun to retry them\n",
                        opt.what, sum.failed, last_error)
         << std::flush;
  return sum;
}

}  // namespace phasescope
