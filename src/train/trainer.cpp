// trainer.cpp — see trainer.h.
#include "train/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/string_utils.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/format.h"
#include "core/io.h"
#include "core/json_fields.h"
#include "data/tasks.h"
#include "dist/grad_sync.h"
#include "model/checkpoint.h"
#include "model/load.h"
#include "train/gate_penalty.h"

namespace phasescope {

using json = nlohmann::json;
namespace fs = std::filesystem;

double lr_at(const TrainConfig& t, int64_t step) {
  if (step < t.warmup) return t.lr * double(step + 1) / double(t.warmup);
  const double span = std::max<int64_t>(1, t.steps - t.warmup);
  const double f = std::min(1.0, double(step - t.warmup) / span);
  const double min_lr = t.lr * t.min_lr_ratio;
  return min_lr + 0.5 * (t.lr - min_lr) * (1.0 + std::cos(M_PI * f));
}

Batch make_batch(const std::vector<Example>& ex) {
  const int64_t B = int64_t(ex.size()), T = int64_t(ex[0].tokens.size());
  for (const Example& e : ex)
    PS_ASSERT(int64_t(e.tokens.size()) == T && int64_t(e.targets.size()) == T,
              "make_batch: rows differ in length");
  Batch b;
  b.tokens = torch::empty({B, T}, torch::kInt64);
  b.targets = torch::empty({B, T}, torch::kInt64);
  auto tk = b.tokens.accessor<int64_t, 2>();
  auto tg = b.targets.accessor<int64_t, 2>();
  for (int64_t i = 0; i < B; ++i)
    for (int64_t t = 0; t < T; ++t) {
      tk[i][t] = ex[size_t(i)].tokens[size_t(t)];
      tg[i][t] = ex[size_t(i)].targets[size_t(t)];
    }
  return b;
}

namespace {

std::string state_key(const torch::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

// Everything that must agree for a checkpoint to be resumed by this preset (all but train.steps).
json resume_identity(const Preset& p) {
  json j = preset_to_json(p);
  j["train"].erase("steps");
  j.erase("description");
  return j;
}

// `warm_start`: what the run's weights started from (train.init_from), or null; kept in every checkpoint.
void save_checkpoint(const std::string& dir, DecoderImpl& model, torch::optim::AdamW& opt,
                     const Preset& preset, int64_t step, const TaskStream& stream, double loss,
                     const json& warm_start = nullptr, int world_size = 1) {
  TensorMap tensors;
  json optim_steps = json::object();
  for (const auto& item : model.named_parameters()) {
    tensors["model." + item.key()] = item.value();
    auto it = opt.state().find(state_key(item.value()));
    if (it != opt.state().end()) {
      auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
      tensors["optim." + item.key() + ".exp_avg"] = st.exp_avg();
      tensors["optim." + item.key() + ".exp_avg_sq"] = st.exp_avg_sq();
      optim_steps[item.key()] = st.step();
    }
  }
  tensors["rng.torch"] = at::detail::getDefaultCPUGenerator().get_state();
  json header = {{"version", 1},
                 {"preset_name", preset.name},
                 {"preset", preset_to_json(preset)},
                 {"step", step},
                 {"optim_steps", optim_steps},
                 {"data_state", stream.state()},
                 {"data_rows", step * preset.train.batch},  // rows of the global batch drawn so far
                 {"world_size", world_size},
                 {"loss", loss},
                 {"model_hash", model_content_hash(model, preset)}};
  if (!warm_start.is_null()) header["warm_start"] = warm_start;
  safetensors_save(checkpoint_path(dir), tensors, header.dump());
}

// SIGINT / SIGTERM during training (TrainOptions::handle_signals): the first sets the flag, the loop
// saves a checkpoint after the step in progress and returns; a second one ends the process at once.
std::atomic<int> g_train_signal{0};
extern "C" void train_on_signal(int sig) {
  if (g_train_signal.exchange(sig) != 0) std::_Exit(128 + sig);
}

// Drop metrics rows past `step` (left by a run that stopped after logging but before its checkpoint)
// and temp files of saves a kill interrupted, so a resumed run neither repeats rows nor leaves litter.
void tidy_for_resume(const std::string& out_dir, int64_t step) {
  const std::string mpath = (fs::path(out_dir) / "metrics.jsonl").string();
  if (io_exists(mpath)) {
    std::string kept;
    bool dropped = false;
    for (const std::string& line : io_read_lines(mpath)) {
      json j;
      try {
        j = json_parse_bounded(line);
      } catch (const JsonInputError&) {
        dropped = true;  // a torn last row
        continue;
      }
      if (j.is_object() && j.value("step", int64_t(0)) > step) {
        dropped = true;
        continue;
      }
      kept += line + "\n";
    }
    if (dropped) io_write_atomic(mpath, kept);
  }
  io_remove_stale_temps(out_dir);  // a checkpoint, config.json or metrics rewrite cut by a kill
}

// The gradient's L2 norm per layer, before clipping: [L], layer l = every parameter whose module or
// name ends in l ("attn3.wq", "attn_norm3", "mlp_gate3", "shift3"); the embedding and final norm are
// in no layer. metrics.jsonl's grad_norm_layers: where the learning signal reaches, layer by layer.
std::vector<double> layer_grad_norms(DecoderImpl& model, int64_t n_layers) {
  std::vector<double> sq(size_t(n_layers), 0.0);
  for (const auto& item : model.named_parameters()) {
    const auto& g = item.value().grad();
    if (!g.defined()) continue;
    const std::string head = item.key().substr(0, item.key().find('.'));
    size_t i = head.size();
    while (i > 0 && std::isdigit(static_cast<unsigned char>(head[i - 1]))) --i;
    if (i == head.size()) continue;
    const int64_t l = std::stoll(head.substr(i));
    if (l < n_layers) sq[size_t(l)] += g.detach().pow(2).sum().item<double>();
  }
  for (double& v : sq) v = std::sqrt(v);
  return sq;
}

// Positions with a target in `rows`: the tokens a step's loss averages over.
int64_t scored_positions(const std::vector<Example>& rows) {
  int64_t n = 0;
  for (const Example& e : rows)
    for (int64_t t : e.targets) n += t >= 0;
  return n;
}

}  // namespace

void train_write_init(const Preset& preset_in, const std::string& out_dir) {
  Preset preset = preset_in;
  preset.model.vocab_size = task_vocab(preset.task).size();
  model_config_sync(preset.model, "preset " + preset.name);
  io_make_dirs(out_dir);
  torch::manual_seed(preset.train.seed);
  Decoder model(preset.model);
  torch::optim::AdamW optimizer(model->parameters(),
                                torch::optim::AdamWOptions(preset.train.lr));  // no state yet
  TaskStream stream(preset.task, preset.train.seed + 1);
  save_checkpoint(out_dir, *model, optimizer, preset, 0, stream, std::nan(""));
  io_write_atomic((fs::path(out_dir) / "config.json").string(), preset_to_json(preset).dump(2) + "\n");
}

namespace {

// n held-out rows of the preset's task at full size (lookup / mqar; text and mix use lookup; a language
// model's loss reads its corpus's validation split and its accuracy the lookup in its own vocabulary, a
// task it never trained on), drawn from seed, in batches of up to 32: what heldout_accuracy and
// heldout_loss score. `task` receives the task.
std::vector<std::vector<Example>> heldout_batches(const Preset& preset, int n, uint64_t seed,
                                                  TaskConfig* task, bool for_loss) {
  *task = preset.task;
  const Vocab v = task_vocab(*task);
  Corpus corpus;
  if (task->task == "corpus" && for_loss) corpus = corpus_open(task->corpus, CorpusVerify::kSizes);
  if (task->task == "mix" || task->task == "text" || (task->task == "corpus" && !for_loss))
    task->task = "lookup";
  std::mt19937_64 rng(seed);
  std::vector<std::vector<Example>> out;
  for (int start = 0; start < n; start += 32) {
    out.emplace_back();
    for (int i = start; i < std::min(n, start + 32); ++i)
      out.back().push_back(task->task == "corpus" ? corpus_example(*task, corpus.val, rng)
                           : task->task == "mqar" ? mqar_example(*task, v, rng)
                                                  : lookup_train_example(*task, v, task->n_records, rng));
  }
  return out;
}

}  // namespace

double heldout_accuracy(DecoderImpl& model, const Preset& preset, int n, uint64_t seed) {
  torch::NoGradGuard g;
  TaskConfig task;
  int64_t correct = 0, total = 0;
  for (const std::vector<Example>& ex : heldout_batches(preset, n, seed, &task, false)) {
    Batch b = make_batch(ex);
    auto pred = model.forward(b.tokens).argmax(-1);  // [B, T]
    for (size_t i = 0; i < ex.size(); ++i) {
      // lookup: the final answer only; mqar: every query
      std::vector<int64_t> qs = ex[i].query_pos;
      if (task.task == "lookup") qs = {qs.back()};
      for (int64_t q : qs) {
        correct += pred[int64_t(i)][q].item<int64_t>() == ex[i].targets[size_t(q)];
        ++total;
      }
    }
  }
  return total ? double(correct) / double(total) : 0.0;
}

double heldout_loss(DecoderImpl& model, const Preset& preset, int n, uint64_t seed) {
  torch::NoGradGuard g;
  TaskConfig task;
  double sum = 0;
  int64_t count = 0;
  for (const std::vector<Example>& ex : heldout_batches(preset, n, seed, &task, true)) {
    Batch b = make_batch(ex);
    const torch::Tensor logits = model.forward(b.tokens);  // [B, T, V]
    const torch::Tensor flat_t = b.targets.reshape({-1});
    const torch::Tensor ce = torch::nn::functional::cross_entropy(
        logits.reshape({flat_t.size(0), -1}).to(torch::kFloat64), flat_t,
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-1).reduction(torch::kSum));
    sum += ce.item<double>();
    count += (flat_t >= 0).sum().item<int64_t>();
  }
  return count ? sum / double(count) : std::nan("");
}

Preset dense_warmup_preset(const Preset& preset) {
  Preset d = preset;
  d.name = preset.name + "-dense-warmup";
  d.description = "dense twin of " + preset.name + " (dense warm-up)";
  d.train.dense_warmup_steps = 0;
  d.train.init_from.clear();
  auto densify = [&](AttnConfig& a) {
    if (attn_is_ds(a)) {
      a.kind = AttnKind::DsWindow;
      a.ratio = 0;
      a.index_topk = 0;
      a.window = std::max(a.window, preset.task.seq_len);
    } else {
      a.kind = AttnKind::Full;
      a.grid_offset = 0;
    }
  };
  for (AttnConfig& a : d.model.layers) densify(a);
  return preset_from_json(preset_to_json(d), "dense twin of preset " + preset.name);
}

TrainResult train_run(const Preset& preset_in, const TrainOptions& opt) {
  // data-parallel: this rank's place in the group; rank 0 alone logs and writes files
  DistGroup* dist = opt.dist && opt.dist->env.enabled() ? opt.dist.get() : nullptr;
  const int world = dist ? dist->size() : 1, rank = dist ? dist->rank() : 0;
  const bool leader = rank == 0;
  auto log = !leader   ? [](const std::string&) {}
             : opt.log ? opt.log
                       : [](const std::string& s) {
                           fmt::print("{}\n", s);
                           std::fflush(stdout);
                         };
  Preset preset = preset_in;
  preset.model.vocab_size = task_vocab(preset.task).size();
  model_config_sync(preset.model, "preset " + preset.name);
  const TrainConfig& tc = preset.train;
  if (tc.batch % world != 0)
    fail("WORLD_SIZE",
         fmt::format(
             "is {}, which does not divide the global batch train.batch = {} of preset '{}' (every rank "
             "trains on an equal slice of it)",
             world, tc.batch, preset.name),
         "start a number of ranks that divides train.batch, or set --batch to a multiple of the world size");
  io_make_dirs(opt.out_dir);
  if (leader)
    io_remove_stale_temps(opt.out_dir);  // writes a kill cut short, before any checkpoint existed too
  const std::string ckpt = checkpoint_path(opt.out_dir);

  // model, optimizer and data stream from the seed
  torch::manual_seed(tc.seed);
  Decoder model(preset.model);
  std::vector<torch::Tensor> decay, no_decay;  // no weight decay on norms, sinks, biases
  for (const auto& item : model->named_parameters())
    (item.value().dim() >= 2 ? decay : no_decay).push_back(item.value());
  auto adamw = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(tc.lr).betas({tc.beta1, tc.beta2}).weight_decay(wd));
  };
  torch::optim::AdamW optimizer({torch::optim::OptimizerParamGroup(decay, adamw(tc.weight_decay)),
                                 torch::optim::OptimizerParamGroup(no_decay, adamw(0.0))});
  TaskStream stream(preset.task, tc.seed + 1);

  // resume when a checkpoint of the same run is there
  TrainResult res;
  int64_t step = 0;
  json warm_start = nullptr;  // the header's record of train.init_from
  if (fs::exists(ckpt) && !opt.fresh) {
    CheckpointContents r = checkpoint_read(ckpt);
    Preset saved = preset_from_json(r.header["preset"], ckpt + " (embedded preset)");
    if (resume_identity(saved) != resume_identity(preset))
      fail(ckpt,
           "holds a checkpoint of a different configuration than preset '" + preset.name +
               "' (first difference at " +
               json_first_difference(resume_identity(saved), resume_identity(preset), "checkpoint",
                                     "this run") +
               ")",
           "use another --out directory, or --fresh to start over");
    checkpoint_load_weights(*model, r.tensors, ckpt);
    // optimizer moments: run one zero-gradient step to create the state objects, then overwrite them
    for (auto& item : model->named_parameters()) {
      auto ea = r.tensors.find("optim." + item.key() + ".exp_avg");
      auto es = r.tensors.find("optim." + item.key() + ".exp_avg_sq");
      if (ea == r.tensors.end() || es == r.tensors.end()) continue;
      auto st = std::make_unique<torch::optim::AdamWParamState>();
      st->step(r.header["optim_steps"].value(item.key(), int64_t(0)));
      st->exp_avg(ea->second.clone());
      st->exp_avg_sq(es->second.clone());
      optimizer.state()[state_key(item.value())] = std::move(st);
    }
    {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      gen.set_state(r.tensors.at("rng.torch"));
    }
    stream.set_state(r.header["data_state"].get<std::string>());
    step = r.header["step"].get<int64_t>();
    if (r.header.contains("warm_start")) warm_start = r.header["warm_start"];
    res.resumed = true;
    const int saved_world = r.header.value("world_size", 1);
    log(fmt::format("resuming {} from step {} ({}){}", preset.name, step, ckpt,
                    saved_world != world
                        ? fmt::format(", written by {} rank(s), now {}: the same global batch "
                                      "of {} rows goes on",
                                      saved_world, world, tc.batch)
                        : std::string()));
  }
  // dense warm-up: the dense twin first (its own folder, resumable), unless this run already has a checkpoint
  std::string warm_from = tc.init_from;
  double dense_seconds = 0;
  if (!res.resumed && tc.dense_warmup_steps > 0) {
    const std::string dense_dir = (fs::path(opt.out_dir) / "dense-warmup").string();
    TrainOptions dense_opt = opt;
    dense_opt.out_dir = dense_dir;
    dense_opt.stop_after = tc.dense_warmup_steps;
    dense_opt.before_step = nullptr;
    log(fmt::format("dense warm-up: {} steps of {}'s dense twin in {}", tc.dense_warmup_steps, preset.name,
                    dense_dir));
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    const torch::Tensor rng = gen.get_state();  // the nested run reseeds torch: keep this run's RNG
    const TrainResult d = train_run(dense_warmup_preset(preset), dense_opt);
    gen.set_state(rng);
    dense_seconds = d.seconds;
    if (d.nan_stop || d.interrupted) {
      TrainResult out = d;
      out.step = 0;
      out.message = "dense warm-up: " + d.message;
      return out;
    }
    if (d.step < tc.dense_warmup_steps)
      fail(dense_dir,
           fmt::format("the dense warm-up stopped at step {} of {}", d.step, tc.dense_warmup_steps),
           "run the same command again to resume it");
    warm_from = dense_dir;
  }
  if (!res.resumed && !warm_from.empty()) {
    // loading the source builds (and seeds) a second model: keep the torch RNG as a fresh run has it
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    const torch::Tensor rng = gen.get_state();
    const WarmStart w = model_warm_start(*model, warm_from);
    gen.set_state(rng);
    warm_start = {
        {"source", w.source},           {"source_hash", w.source_hash}, {"source_preset", w.source_preset},
        {"source_step", w.source_step}, {"copied", w.copied.size()},    {"kept", w.kept}};
    log(
        fmt::format("warm start from {} ({} at step {}, hash {}): {} parameters copied, {} kept at their "
                    "initialization{}",
                    w.source, w.source_preset, w.source_step, w.source_hash, w.copied.size(), w.kept.size(),
                    w.kept.empty() ? "" : " (" + fmt::format("{}", fmt::join(w.kept, ", ")) + ")"));
  }
  // every rank must run the same thing from the same weights before any gradient is summed
  std::unique_ptr<GradSync> grad_sync;
  if (dist) {
    const json identity = {{"preset", preset_to_json(preset)},
                           {"out_dir", fs::absolute(opt.out_dir).lexically_normal().string()},
                           {"fresh", opt.fresh},
                           {"stop_after", opt.stop_after},
                           {"start_step", step},
                           {"model_hash", model_content_hash(*model, preset)}};
    dist_check_identity(*dist, identity.dump(), "run (preset, seed, --out, starting checkpoint)");
    grad_sync = std::make_unique<GradSync>(model->parameters(), opt.dist);
    log(fmt::format("data-parallel: {} ranks, {} rows each of the global batch of {}, {} gradient buckets",
                    world, tc.batch / world, tc.batch, grad_sync->n_buckets()));
  }
  if (opt.fresh && leader) {
    std::error_code ec;
    fs::remove(fs::path(opt.out_dir) / "metrics.jsonl", ec);
  }
  if (leader) tidy_for_resume(opt.out_dir, step);
  if (tc.steps > 0 && tc.warmup >= tc.steps)
    log(fmt::format("warning: warmup ({} steps) >= steps ({}): the learning rate never reaches its peak {}",
                    tc.warmup, tc.steps, tc.lr));
  if (leader)
    io_write_atomic((fs::path(opt.out_dir) / "config.json").string(), preset_to_json(preset).dump(2) + "\n");
  std::ofstream metrics;
  if (leader) metrics.open((fs::path(opt.out_dir) / "metrics.jsonl").string(), std::ios::app);
  log(fmt::format("training {}: {}", preset.name, model_describe(*model)));

  // the loop
  const int64_t end = opt.stop_after >= 0 ? std::min<int64_t>(opt.stop_after, tc.steps) : tc.steps;
  auto t_start = std::chrono::steady_clock::now();
  auto t_window = t_start;
  int64_t window_tokens = 0;
  const int64_t first = step;
  res.step = step;
  model->train();
  if (step >= end) {  // nothing to train: say why instead of reporting a run
    res.message =
        tc.steps == 0 ? "train.steps is 0: nothing trained, no checkpoint written"
        : step >= tc.steps
            ? fmt::format("already complete at step {} ({} asked): nothing trained; {} is unchanged", step,
                          tc.steps, ckpt)
            : fmt::format("stopped at step {} as asked (stop_after); nothing trained", step);
    log(res.message);
  }
  if (opt.handle_signals) {
    g_train_signal = 0;
    std::signal(SIGINT, train_on_signal);
    std::signal(SIGTERM, train_on_signal);
  }
  // a diverged run stops here, before any optimizer step or save; `what` says what overflowed
  auto diverged = [&](const std::string& what) {
    res.nan_stop = true;
    res.message = fmt::format("{}: training stopped; the last good checkpoint ({}) is kept", what,
                              fs::exists(ckpt) ? ckpt : std::string("none written yet"));
    log(res.message);
  };
  while (step < end) {
    const double lr = lr_at(tc, step);
    for (auto& group : optimizer.param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    std::vector<Example> ex;
    for (int i = 0; i < tc.batch; ++i) ex.push_back(stream.next(step));
    double share = 1.0;  // data-parallel: this rank's share of the global batch's scored positions
    if (dist) {
      const int64_t all = scored_positions(ex), per = tc.batch / world;
      ex = std::vector<Example>(ex.begin() + rank * per, ex.begin() + (rank + 1) * per);
      share = double(scored_positions(ex)) / double(std::max<int64_t>(all, 1));
    }
    Batch b = make_batch(ex);

    optimizer.zero_grad();
    if (opt.before_step) opt.before_step(*model, step);
    // the task's loss (logged), and the gate penalties when asked for (each logged unweighted)
    torch::Tensor loss, penalty, entropy_term, coverage_term;
    {
      std::unique_ptr<GateCollector> gates;
      if (tc.gate_entropy_bonus > 0 || tc.gate_coverage_bonus > 0)
        gates = std::make_unique<GateCollector>(*model);
      loss = lm_loss_scored(*model, b.tokens, b.targets);  // logits only where a target is
      if (gates) {
        penalty = torch::zeros({}, loss.options());
        if (tc.gate_entropy_bonus > 0) {
          entropy_term = gate_entropy_penalty(gates->alphas());
          penalty = penalty + tc.gate_entropy_bonus * entropy_term;
        }
        if (tc.gate_coverage_bonus > 0) {
          coverage_term = gate_coverage_penalty(gates->gates());
          penalty = penalty + tc.gate_coverage_bonus * coverage_term;
        }
      }
    }
    double lv = loss.item<double>();
    torch::Tensor objective = penalty.defined() ? loss + penalty : loss;  // penalty: weighted by its lambdas
    if (dist) {  // summed over ranks: the global batch's mean loss, and the penalties' mean over ranks
      std::vector<torch::Tensor> total{torch::tensor({lv * share}, torch::kFloat64)};
      dist_allreduce_sum(*dist, total, fmt::format("loss all-reduce at step {}", step + 1));
      lv = total[0].item<double>();
      objective = loss * share + (penalty.defined() ? penalty / double(world) : torch::zeros_like(loss));
    }
    if (!std::isfinite(lv)) {
      diverged(fmt::format("loss became {} at step {}", lv, step + 1));
      break;
    }
    if (grad_sync) grad_sync->begin(fmt::format("gradient all-reduce at step {}", step + 1));
    objective.backward();
    if (grad_sync) grad_sync->finish();
    const bool log_row = (step + 1) % tc.log_every == 0 || step + 1 == end;
    const std::vector<double> layer_norms =
        log_row ? layer_grad_norms(*model, preset.model.n_layers) : std::vector<double>();
    // the global gradient norm (clipped when configured); an overflowing gradient stops the run too
    const double gnorm = torch::nn::utils::clip_grad_norm_(
        model->parameters(), tc.clip > 0 ? tc.clip : std::numeric_limits<double>::infinity());
    if (!std::isfinite(gnorm)) {
      diverged(fmt::format("gradient norm became {} at step {}", gnorm, step + 1));
      break;
    }
    optimizer.step();
    ++step;
    res.loss = lv;
    window_tokens += b.tokens.numel() * world;  // rows are shorter under a length curriculum

    // progress, evaluation, checkpoint
    const bool last = step == end;
    json row;
    if (step % tc.log_every == 0 || last) {
      auto now = std::chrono::steady_clock::now();
      const double win = std::chrono::duration<double>(now - t_window).count();
      const double elapsed = std::chrono::duration<double>(now - t_start).count();
      const double tok_s = window_tokens / std::max(win, 1e-9);
      const double eta = elapsed / double(step - first) * double(end - step);
      log(fmt::format("step {:>6}/{} loss {:.4f} lr {:.2e} {:.1f}k tok/s elapsed {} eta {}", step, tc.steps,
                      lv, lr, tok_s / 1e3, fmt_duration(elapsed), fmt_duration(eta)));
      row = {{"step", step},
             {"loss", lv},
             {"lr", lr},
             {"tok_s", tok_s},
             {"elapsed_s", elapsed},
             {"grad_norm", gnorm},
             {"grad_norm_layers", layer_norms}};
      if (entropy_term.defined()) row["gate_penalty"] = entropy_term.item<double>();
      if (coverage_term.defined()) row["gate_coverage"] = coverage_term.item<double>();
      t_window = now;
      window_tokens = 0;
    }
    const bool eval_now = tc.eval_every > 0 && (step % tc.eval_every == 0 || last);
    if (eval_now && leader) {
      model->eval();
      res.eval_acc = heldout_accuracy(*model, preset, tc.eval_examples, tc.seed + 7919);
      model->train();
    }
    bool stop_now = opt.handle_signals && g_train_signal != 0;
    bool stop_early = false;
    if (opt.stop_when && leader) {
      model->eval();
      stop_early = opt.stop_when(*model, step);
      model->train();
    }
    if (dist) {  // rank 0's evaluation and stop decision, and a signal any rank got, reach every rank
      std::vector<torch::Tensor> c{torch::tensor(
          {eval_now && leader ? res.eval_acc : 0.0, double(stop_early && leader), double(stop_now)},
          torch::kFloat64)};
      dist_allreduce_sum(*dist, c, fmt::format("step agreement at step {}", step));
      if (eval_now) res.eval_acc = c[0][0].item<double>();
      stop_early = c[0][1].item<double>() > 0;
      stop_now = c[0][2].item<double>() > 0;
    }
    if (eval_now) {
      log(fmt::format("step {:>6}/{} held-out {} accuracy {:.3f} ({} examples)", step, tc.steps,
                      preset.task.task != "corpus"   ? preset.task.task
                      : preset.task.lookup_ratio > 0 ? "lookup (in context, rows mixed into training)"
                                                     : "lookup (in context, never trained on)",
                      res.eval_acc, tc.eval_examples));
      if (row.is_null()) row = {{"step", step}};
      row["eval_acc"] = res.eval_acc;
    }
    if (!row.is_null() && leader) {
      metrics << row.dump() << "\n";
      metrics.flush();
    }
    if (step % tc.ckpt_every == 0 || last || stop_now || stop_early) {
      bool finite = true;
      for (const auto& p : model->parameters()) finite = finite && torch::isfinite(p).all().item<bool>();
      if (!finite) {  // never overwrite a good checkpoint with diverged weights
        diverged(fmt::format("weights became non-finite by step {}", step));
        break;
      }
      if (leader)
        save_checkpoint(opt.out_dir, *model, optimizer, preset, step, stream, lv, warm_start, world);
      res.step = step;
    }
    if (stop_early) {
      res.stopped_early = true;  // met on the last step too: the run then ends there anyway
      res.message = fmt::format("stopped at step {} of {} (stop condition met): checkpoint saved ({})", step,
                                tc.steps, ckpt);
      log(res.message);
      break;
    }
    if (stop_now) {
      res.interrupted = true;
      res.message = fmt::format(
          "interrupted by signal {} at step {}: checkpoint saved ({}); run the same command "
          "to resume",
          int(g_train_signal), step, ckpt);
      log(res.message);
      break;
    }
  }
  if (opt.handle_signals) {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
  }
  res.trained = step - first;
  res.seconds =
      dense_seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  if (!res.nan_stop) res.step = step;
  return res;
}

}  // namespace phasescope
