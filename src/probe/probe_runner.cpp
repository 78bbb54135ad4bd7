// probe_runner.cpp — see probe_runner.h.
#include "probe/probe_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <ostream>
#include <unordered_map>

#include "core/check.h"

namespace phasescope {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Identity {
  std::string model, layout, tokens_hash;
};

}  // namespace

std::string probe_hash_hex(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

ProbeRunSummary probe_run_journal(Backend& backend, int64_t n, const std::function<ProbeSample(int64_t)>& render,
                                  const std::string& journal_path, const ProbeRunOptions& opt) {
  std::ostream* log = opt.log;
  ProbeRunSummary sum;
  sum.total = n;

  // what every sample is (rendered once, only its identity kept), and what the journal already holds
  std::unordered_map<int64_t, int64_t> index_of;  // sample id -> index
  std::vector<Identity> ident(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    ProbeSample s = render(i);
    ident[size_t(i)] = {s.rec.model, s.rec.layout, s.rec.tokens_hash};
    if (!index_of.emplace(s.rec.id, i).second) PS_ASSERT(false, fmt::format("duplicate sample id {}", s.rec.id));
  }
  const JournalLoad jl = journal_load(journal_path);
  const std::string fix = "use a fresh --out folder for another model, tokenizer or design, or delete " + journal_path +
                          " to start this one over";
  std::vector<char> done(static_cast<size_t>(n), 0);
  for (const JournalRecord& r : jl.records) {
    auto it = index_of.find(r.id);
    if (it == index_of.end())
      fail(journal_path, fmt::format("sample {} is not part of this design", r.id), fix);
    const Identity& id = ident[size_t(it->second)];
    if (r.model != id.model || r.layout != id.layout)
      fail(journal_path,
           fmt::format("sample {} was written by another run (model '{}', layout '{}'); this run is model '{}', "
                       "layout '{}'",
                       r.id, r.model, r.layout, id.model, id.layout),
           fix);
    if (r.tokens_hash != id.tokens_hash)
      fail(journal_path,
           fmt::format("sample {} had other prompt tokens (the tokenizer or the server changed)", r.id), fix);
    if (r.scored()) done[size_t(it->second)] = 1;
  }
  std::vector<int64_t> todo;
  for (int64_t i = 0; i < n; ++i)
    if (!done[size_t(i)]) todo.push_back(i);
  sum.resumed = n - static_cast<int64_t>(todo.size());
  JournalWriter writer(journal_path);
  if (log) {
    if (writer.torn_bytes_cut() > 0)
      *log << fmt::format("journal: cut a torn last line ({} bytes) left by an interrupted run\n", writer.torn_bytes_cut());
    *log << fmt::format("{}: {} samples, {} already journaled, {} to score with {}\n", opt.what, n, sum.resumed,
                        todo.size(), backend.describe());
  }

  // score in batches of whole samples (every token of a sample's answer in the same batch)
  const size_t max_req = static_cast<size_t>(std::max(1, backend.max_batch()));
  const auto t0 = Clock::now();
  auto last_print = t0;
  int failed_batches = 0;
  std::string last_error;
  size_t next = 0;
  while (next < todo.size()) {
    std::vector<ProbeSample> batch;
    std::vector<ScoreRequest> reqs;
    int64_t tokens = 0;
    while (next < todo.size()) {
      ProbeSample s = render(todo[next]);
      PS_ASSERT(!s.answer.empty(), "a probe sample needs at least one answer token");
      const int64_t cost = int64_t(s.prompt.size() + s.answer.size()) * int64_t(s.answer.size());
      if (!batch.empty() && (reqs.size() + s.answer.size() > max_req || tokens + cost > opt.max_batch_tokens)) break;
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
    reqs.clear();
    const double batch_ms = 1000 * seconds_since(tb);
    int64_t answered = 0;
    size_t k = 0;
    for (ProbeSample& s : batch) {
      JournalRecord r = std::move(s.rec);
      const size_t A = s.answer.size();
      if (!batch_error.empty()) {
        r.error = batch_error;
        r.ms = batch_ms / double(batch.size());
      } else {
        for (size_t a = 0; a < A; ++a) {
          const ScoreResult& q = out[k + a];
          if (r.error.empty() && !q.error.empty()) r.error = q.error;
          if (r.error.empty() && q.top1 < 0) r.error = "backend returned no top-1 token";
          r.ms += q.ms;
        }
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
      *log << fmt::format("  {}/{} scored ({} resumed), {} failed, {:.1f} samples/s, {:.0f} s elapsed, eta {:.0f} s\n",
                          sum.resumed + sum.scored, n, sum.resumed, sum.failed, rate, el,
                          double(todo.size() - next) / std::max(rate, 1e-9));
    }
    if (failed_batches >= opt.max_failed_batches)
      fail(opt.what + " (" + backend.describe() + ")",
           fmt::format("the backend failed on {} consecutive batches; last error: {}", failed_batches, last_error),
           "check the server, then rerun the same command: the " + std::to_string(sum.resumed + sum.scored) +
               " samples scored so far are kept in " + journal_path);
  }
  sum.wall_s = seconds_since(t0);
  if (log && sum.failed > 0)
    *log << fmt::format("{}: {} samples failed and are left out (last error: {}); rerun to retry them\n", opt.what,
                        sum.failed, last_error);
  return sum;
}

}  // namespace phasescope
