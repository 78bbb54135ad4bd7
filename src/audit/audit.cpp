// audit.cpp — the needle design, the five checks in order, and the card (audit.h).
#include "audit/audit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <ostream>

#include "audit/flip_check.h"
#include "audit/invariance.h"
#include "audit/query_phase.h"
#include "core/build_info.h"
#include "core/check.h"
#include "core/io.h"
#include "core/json_fields.h"
#include "core/sha256.h"
#include "eval/card_report.h"
#include "eval/results.h"

namespace phasescope {

namespace {

std::string ids_sha(const std::vector<int>& ids) { return sha256_hex(ids.data(), ids.size() * sizeof(int)); }

nlohmann::json needle_check(const EvalResults& r) {
  const Stats& s = r.stats;
  std::string verdict, reason;
  if (s.mean < 0.05) {
    verdict = "inconclusive";
    reason = fmt::format("the model answers {:.1f}% of the needles: too few to show a phase dependence",
                         100 * s.mean);
  } else if (s.p_value < 0.01 && s.gap >= 0.10) {
    verdict = "fail";
    reason =
        fmt::format("accuracy depends on the target's residue: gap {:.1f} points (p = {:.2g}, period {})",
                    100 * s.gap, s.p_value, s.period.P);
  } else if (s.p_value >= 0.05) {
    verdict = "pass";
    reason =
        fmt::format("no phase dependence detected (gap {:.1f} points, p = {:.2g})", 100 * s.gap, s.p_value);
  } else {
    verdict = "inconclusive";
    reason = fmt::format("gap {:.1f} points with p = {:.2g}: between the thresholds", 100 * s.gap, s.p_value);
  }
  return card_check_json(
      "needle-phase", verdict, reason,
      "The position-matched needle by the target key's residue: inconclusive when the model "
      "answers fewer than 5% of the needles; else fail when the independence test gives "
      "p < 0.01 and the gap is >= 10 points; pass when p >= 0.05; else inconclusive.",
      {{"mean", json_number_or_null(s.mean)},
       {"worst", json_number_or_null(s.worst)},
       {"best", json_number_or_null(s.best)},
       {"gap", json_number_or_null(s.gap)},
       {"p_value", json_number_or_null(s.p_value)},
       {"period", s.period.P},
       {"n", s.n_scored}});
}

// The chat template, if any: the file, its text and sha256, the kwargs sent, and the frame in tokens.
nlohmann::json chat_provenance(ProbeConnection& c) {
  if (c.backend->options().api != ApiKind::Chat) return nullptr;
  const auto [offset, total] = c.backend->chat_overhead();
  nlohmann::json j = {{"template_offset", offset},
                      {"template_total", total},
                      {"chat_template_kwargs", c.backend->options().chat_template_kwargs}};
  if (c.chat_template) {
    j["source"] = c.chat_template->source;
    j["sha256"] = c.chat_template->sha256;
    j["text"] = c.chat_template->text;
    j["measured_by"] = "the template rendered by jinja2, tokenized by " + c.tokens->describe();
  } else {
    j["measured_by"] =
        c.backend->options().template_offset >= 0 ? "--template-offset" : "the server's chat tokenize";
  }
  return j;
}

}  // namespace

PhaseCard audit_run(ProbeConnection& c, const AuditOptions& opt) {
  std::ostream* log = opt.log;
  io_make_dirs(opt.out);
  // the needle, leaving room for the query-phase insertions
  NeedleSpec spec = needle_spec_for(c, opt.needle, opt.given, log);
  spec.context -= 2 * opt.S;
  spec.R = std::max(spec.R, 2 * opt.S);
  const NeedleDesign d = needle_build(spec, *c.tokens, log);
  if (log) *log << needle_format_design(d);

  // needle-phase (resumable)
  NeedleRunOptions ro;
  ro.model = c.model.id;
  ro.S = opt.S;
  ro.fresh = opt.fresh;
  ro.log = log;
  const EvalResults needle = needle_run(*c.backend, d, ro, opt.out + "/needle");

  // probes from the needle's prompts, spread over its base examples
  const int64_t n_samples = d.samples();
  auto sample = [&](int64_t k, int64_t count) {
    return needle_render(d, (k * n_samples) / std::max<int64_t>(1, count), c.model.id);
  };
  const int filler = d.vocab.filler.at(0);
  std::vector<InvarianceProbe> inv;
  std::vector<QueryPhaseProbe> qp;
  nlohmann::json hashes = nlohmann::json::array();
  for (int64_t k = 0; k < opt.invariance_probes; ++k) {
    const ScoringSample s = sample(k, opt.invariance_probes);
    InvarianceProbe p;
    p.prompt = s.prompt;
    p.answer = s.answer.at(0);
    p.sibling.assign(p.prompt.begin(), p.prompt.begin() + std::ptrdiff_t(3 * p.prompt.size() / 4));
    p.sibling.resize(p.prompt.size(), filler);
    hashes.push_back(ids_sha(p.prompt));
    inv.push_back(std::move(p));
  }
  const int64_t tail = int64_t(d.vocab.question.size()) + spec.key_tokens + int64_t(d.vocab.separator.size());
  for (int64_t k = 0; k < opt.query_probes; ++k) {
    const ScoringSample s = sample(k, opt.query_probes);
    QueryPhaseProbe q;
    q.prompt = s.prompt;
    q.answer = s.answer.at(0);
    q.question_at = int64_t(q.prompt.size()) - tail;
    if (q.question_at < 1 || !std::equal(d.vocab.question.begin(), d.vocab.question.end(),
                                         q.prompt.begin() + std::ptrdiff_t(q.question_at)))
      fail("audit query-phase",
           "the needle prompt does not end with its question, key and separator as built",
           "this is a bug in the needle design; report it with the server and tokenizer");
    hashes.push_back(ids_sha(q.prompt));
    qp.push_back(std::move(q));
  }
  if (log)
    *log << fmt::format("engine checks: {} invariance probes, {} query-phase probes x {} lengths\n",
                        inv.size(), qp.size(), 2 * opt.S);
  const InvarianceReport ir = audit_invariance(*c.backend, inv, InvarianceOptions{});
  QueryPhaseOptions qo;
  qo.S = opt.S;
  qo.neutral = filler;
  qo.journal = opt.out + "/query-phase/journal.jsonl";
  qo.model = c.model.id;
  qo.fresh = opt.fresh;
  qo.log = log;
  io_make_dirs(opt.out + "/query-phase");
  const QueryPhaseResult q = audit_query_phase(*c.backend, qp, qo);

  // flip (resumable); a sweep that cannot be built in this server's tokens is inconclusive, not the end
  // of an audit whose other checks are done
  nlohmann::json flip_json;
  std::string flip_fingerprint;
  std::optional<FlipDesign> fd;
  try {
    fd = flip_build(audit_flip_spec(c.model.token_space, opt.S), *c.tokens, log);
  } catch (const Error& e) {
    // a server that stopped answering is the audit's error (rerun to resume), not the sweep's
    c.tokens->encode("flip");
    flip_json = flip_check_unbuilt_json(e.what());
  }
  if (fd) {
    FlipRunOptions fo;
    fo.model = c.model.id;
    fo.fresh = opt.fresh;
    fo.log = log;
    fo.require_comparison = false;
    const FlipResult flip = flip_run(*c.backend, *fd, fo, opt.out + "/flip");
    flip_json = flip_check_json(flip, flip_check(flip, spec.seed), opt.S);
    flip_fingerprint = fd->fingerprint;
  }

  // the card
  CardGrid g;
  g.period = spec.R % opt.S == 0 ? opt.S : spec.R;
  g.prompt_offset = spec.position_offset;
  g.note = "audit: positions count the server's own tokens before the prompt (a chat template's)";
  PhaseCard card = card_from_results(needle, g, spec.seed);
  card.source = "audit";
  card.model = c.model.id;
  card.checks =
      nlohmann::json::array({needle_check(needle), invariance_check_json(ir.batch),
                             invariance_check_json(ir.prefix_cache), query_phase_check_json(q), flip_json});
  if (!opt.tokenizer_path.empty()) card.tokenizer_sha256 = sha256_file(opt.tokenizer_path);
  card.provenance = {{"server_model", {{"id", c.model.id}, {"max_model_len", c.model.max_model_len}}},
                     {"backend", c.backend->describe()},
                     {"tokens", c.tokens->describe()},
                     {"needle_fingerprint", d.fingerprint},
                     {"flip_fingerprint", flip_fingerprint},
                     {"probe_prompt_sha256", hashes},
                     {"chat_template", chat_provenance(c)},
                     {"commit", build_commit()}};
  card_write(card, opt.out + "/card.json");
  card_write_html(card, opt.out + "/card.html");
  return card;
}

std::string audit_summary(const PhaseCard& card) {
  std::string s = fmt::format("audit of {}: needle mean {:.1f}%, worst {:.1f}%, gap {:.1f} points\n",
                              card.model, 100 * card.mean, 100 * card.worst, 100 * card.gap);
  for (const auto& c : card.checks)
    s += fmt::format("  {:<24} {:<12} {}\n", c.value("name", ""), c.value("verdict", ""),
                     c.value("reason", ""));
  return s;
}

}  // namespace phasescope
