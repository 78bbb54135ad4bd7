// align_study.cpp — card, then the four modes under both protocols per checkpoint, then the goal per row and
// the outputs (align_study.h).
#include "jobs/align_study.h"

#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>

#include "align/align_layout.h"
#include "core/build_info.h"
#include "core/csv.h"
#include "core/io.h"
#include "core/json_fields.h"
#include "data/tasks.h"
#include "eval/card.h"
#include "eval/model_backend.h"
#include "eval/runner.h"
#include "model/load.h"
#include "probe/probe_setup.h"
#include "serve/server.h"

namespace phasescope {

namespace {

struct Mode {
  std::string name;  // "none", "align", "repeat x2", "repeat x3", and the controls
  std::string align_mode;
  int copies = 2;
  bool weakest = false;  // a control: the same padding aimed at the card's weakest phases
};

const std::vector<Mode>& modes() {
  static const std::vector<Mode> m = {{"none", "", 2},
                                      {"align", "align", 2},
                                      {"repeat x2", "repeat", 2},
                                      {"repeat x3", "repeat", 3},
                                      {"control: align weakest", "align", 2, true},
                                      {"control: repeat x2 weakest", "repeat", 2, true}};
  return m;
}

std::string slug(const std::string& s) {
  std::string o;
  for (char c : s)
    if (c != ':') o += (c == ' ') ? '-' : c;
  return o;
}

AlignStudyRow row_of(const EvalResults& r, const Preset& p, const Mode& m, const std::string& backend,
                     const PhaseCard& card) {
  AlignStudyRow row;
  row.model = p.name;
  row.seed = p.train.seed;
  row.protocol = r.meta.protocol;
  row.mode = m.name;
  row.backend = backend;
  row.worst = r.stats.worst;
  row.mean = r.stats.mean;
  row.best = r.stats.best;
  row.gap = r.stats.gap;
  row.mean_lo = r.stats.mean_ci.lo;
  row.mean_hi = r.stats.mean_ci.hi;
  row.worst_residue = r.stats.worst_residue;
  row.added_tokens_mean = r.meta.added_mean;
  row.n = r.stats.n_scored;
  row.prompt_len = r.meta.prompt_len;
  row.strongest_phase = card.strongest_phase;
  row.period = card.grid.period;
  return row;
}

// Pooled accuracy of the residues whose target needed k inserted tokens (align puts every target on one
// phase: the card's strongest, or its weakest for the control).
std::vector<double> by_added(const EvalResults& r, const PhaseCard& card, bool weakest) {
  const int P = card.grid.period;
  const int target = weakest ? card.phase_order.back() : card.phase_order.front();
  std::vector<int64_t> n(size_t(P), 0), correct(size_t(P), 0);
  for (const ResidueStat& x : r.stats.per_residue) {
    const int k = (target - card_phase(card.grid, x.residue) + P) % P;
    n[size_t(k)] += x.n;
    correct[size_t(k)] += x.correct;
  }
  std::vector<double> out;
  for (int k = 0; k < P; ++k)
    out.push_back(n[size_t(k)] ? double(correct[size_t(k)]) / double(n[size_t(k)]) : std::nan(""));
  return out;
}

void judge(std::vector<AlignStudyRow>* rows) {
  for (AlignStudyRow& r : *rows) {
    if (r.mode == "none" || r.mode.rfind("control", 0) == 0) continue;  // controls are not remedies
    for (const AlignStudyRow& base : *rows)
      if (base.mode == "none" && base.model == r.model && base.seed == r.seed &&
          base.protocol == r.protocol && base.backend == r.backend) {
        r.judged = true;
        r.worst_ok = r.worst >= 0.9 * base.best;
        r.mean_ok = r.mean >= base.mean_lo;
      }
  }
}

nlohmann::json study_numbers(const std::vector<double>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (double x : v) a.push_back(json_number_or_null(x));
  return a;
}

nlohmann::json row_json(const AlignStudyRow& r) {
  return {{"model", r.model},
          {"seed", r.seed},
          {"protocol", r.protocol},
          {"mode", r.mode},
          {"backend", r.backend},
          {"worst", json_number_or_null(r.worst)},
          {"mean", json_number_or_null(r.mean)},
          {"best", json_number_or_null(r.best)},
          {"gap", json_number_or_null(r.gap)},
          {"mean_ci", {json_number_or_null(r.mean_lo), json_number_or_null(r.mean_hi)}},
          {"worst_residue", r.worst_residue},
          {"added_tokens_mean", r.added_tokens_mean},
          {"n", r.n},
          {"prompt_len", r.prompt_len},
          {"card_strongest_phase", r.strongest_phase},
          {"card_period", r.period},
          {"acc_by_added", r.acc_by_added.empty() ? nlohmann::json(nullptr) : study_numbers(r.acc_by_added)},
          {"goal", r.judged ? nlohmann::json{{"worst_ok", r.worst_ok},
                                             {"mean_ok", r.mean_ok},
                                             {"met", r.worst_ok && r.mean_ok}}
                            : nlohmann::json(nullptr)}};
}

std::string table_md(const std::vector<AlignStudyRow>& rows) {
  std::string s =
      "| model | seed | protocol | backend | mode | worst | mean [95%] | gap | added | goal |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const AlignStudyRow& r : rows)
    s += fmt::format("| {} | {} | {} | {} | {} | {:.1f} | {:.1f} [{:.1f}, {:.1f}] | {:.1f} | {:.2f} | {} |\n",
                     r.model, r.seed, r.protocol, r.backend, r.mode, 100 * r.worst, 100 * r.mean,
                     100 * r.mean_lo, 100 * r.mean_hi, 100 * r.gap, r.added_tokens_mean,
                     !r.judged                 ? "-"
                     : r.worst_ok && r.mean_ok ? "met"
                                               : fmt::format("missed ({}{})", r.worst_ok ? "" : "worst",
                                                             r.mean_ok    ? ""
                                                             : r.worst_ok ? "mean"
                                                                          : ", mean"));
  return s;
}

// Accuracy by inserted tokens, one line per align row and its control.
std::string by_added_md(const std::vector<AlignStudyRow>& rows) {
  std::string s =
      "\n| model | seed | protocol | backend | mode | accuracy (%) by tokens inserted before the target, k = "
      "0, 1, ... |\n"
      "|---|---|---|---|---|---|\n";
  for (const AlignStudyRow& r : rows) {
    if (r.acc_by_added.empty()) continue;
    std::string cells;
    for (double a : r.acc_by_added)
      cells += (cells.empty() ? "" : " · ") +
               (std::isfinite(a) ? fmt::format("{:.1f}", 100 * a) : std::string("-"));
    s += fmt::format("| {} | {} | {} | {} | {} | {} |\n", r.model, r.seed, r.protocol, r.backend, r.mode,
                     cells);
  }
  return s;
}

std::string csv_of(const std::vector<AlignStudyRow>& rows) {
  CsvTable t;
  t.header = {"model",   "seed",          "protocol",          "backend", "mode",
              "worst",   "mean",          "mean_lo",           "mean_hi", "best",
              "gap",     "worst_residue", "added_tokens_mean", "n",       "prompt_len",
              "goal_met"};
  for (const AlignStudyRow& r : rows)
    t.rows.push_back({r.model, std::to_string(r.seed), r.protocol, r.backend, r.mode, csv_num(r.worst),
                      csv_num(r.mean), csv_num(r.mean_lo), csv_num(r.mean_hi), csv_num(r.best),
                      csv_num(r.gap), std::to_string(r.worst_residue), csv_num(r.added_tokens_mean),
                      std::to_string(r.n), std::to_string(r.prompt_len),
                      r.judged ? (r.worst_ok && r.mean_ok ? "yes" : "no") : ""});
  return csv_text(t);
}

// One model: its card, then every protocol x mode through `backend`.
void measure(Backend& backend, const std::string& backend_name, const Preset& p, const PhaseCard* card_in,
             const AlignStudyOptions& opt, const std::string& dir, PhaseCard* card_out,
             std::vector<AlignStudyRow>* rows) {
  const int64_t samples = int64_t(opt.per_residue) * opt.R;
  const int period = display_stride(p);
  const int pad = layout_align_pad(opt.R, opt.R % period == 0 ? period : opt.R, 3);
  if (!card_in) {
    EvalOptions co = eval_options_for(p, PadProtocol::Prefix, samples, opt.R, opt.card_seed);
    co.layout.pad = pad;
    co.report = false;
    co.log_layout = false;
    co.log = opt.log;
    const EvalResults cr = run_eval(backend, co, dir + "/card");
    eval_write_card(cr, co, dir + "/card.json");
    *card_out = card_read(dir + "/card.json");
  }
  const PhaseCard& card = card_in ? *card_in : *card_out;
  for (PadProtocol proto : {PadProtocol::Prefix, PadProtocol::InSequence})
    for (const Mode& m : modes()) {
      EvalOptions o = eval_options_for(p, proto, samples, opt.R, opt.eval_seed);
      o.report = false;
      o.log_layout = false;
      o.log = opt.log;
      eval_set_pad_and_align(&o, pad, m.align_mode.empty() ? "" : dir + "/card.json", m.align_mode, m.copies,
                             m.weakest);
      if (opt.log)
        *opt.log << fmt::format("== {} · {} · {} · {}\n", p.name, pad_protocol_name(proto), m.name,
                                backend_name);
      const EvalResults r = run_eval(
          backend, o, dir + "/" + backend_name + "/" + pad_protocol_name(proto) + "/" + slug(m.name));
      rows->push_back(row_of(r, p, m, backend_name, card));
      if (m.align_mode == "align") rows->back().acc_by_added = by_added(r, card, m.weakest);
    }
}

}  // namespace

std::string align_study_rule() {
  return "Each model's card is measured on prompts of card_seed (prefix protocol); every row is judged on "
         "prompts "
         "of eval_seed, all rows of a model at one prompt length (pad for 3 copies). A row with alignment "
         "meets "
         "the goal when its worst-residue accuracy >= 0.9 x the best residue of the unaligned row (same "
         "model, "
         "seed, protocol, backend) and its mean >= that unaligned row's lower 95% bound (cluster bootstrap).";
}

std::vector<AlignStudyRow> align_study_run(const AlignStudyOptions& opt) {
  std::vector<AlignStudyRow> rows;
  for (const AlignStudyModel& am : opt.models) {
    LoadedModel m = model_load(am.checkpoint);
    const Preset p = m.preset;
    const std::string dir = opt.out + "/runs/" + fmt::format("{}@{}", p.name, p.train.seed);
    io_make_dirs(dir);
    PhaseCard card;
    {
      ModelBackend backend(model_load(am.checkpoint), p.name);
      measure(backend, "in-process", p, nullptr, opt, dir, &card, &rows);
    }
    if (am.http) {
      ServeOptions so;
      so.checkpoint = am.checkpoint;
      so.port = 0;
      so.max_model_len = 4096;
      Server server(so);
      ProbeConnectOptions co;
      co.http.base_urls = {server.url()};
      co.api.model = server.model_id();
      co.tokens = false;
      co.api.bos_id = task_vocab(p.task).bos();
      ProbeConnection c = probe_connect(co);
      measure(*c.backend, "http", p, &card, opt, dir, &card, &rows);
    }
  }
  judge(&rows);
  nlohmann::json j = {{"schema", "phasescope.align.results"}, {"version", 1},
                      {"rule", align_study_rule()},           {"commit", build_commit()},
                      {"per_residue", opt.per_residue},       {"R", opt.R},
                      {"card_seed", opt.card_seed},           {"eval_seed", opt.eval_seed},
                      {"rows", nlohmann::json::array()}};
  for (const AlignStudyRow& r : rows) j["rows"].push_back(row_json(r));
  io_write_atomic(opt.out + "/results.json", j.dump(1) + "\n");
  io_write_atomic(opt.out + "/results.csv", csv_of(rows));
  io_write_atomic(opt.out + "/table.md", table_md(rows) + by_added_md(rows));
  return rows;
}

}  // namespace phasescope
