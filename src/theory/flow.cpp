// flow.cpp — see flow.h. The gradient-descent loop, the read-off of heads, seeds and sweeps.
#include "theory/flow.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "core/check.h"
#include "theory/rng.h"

namespace phasescope {

using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// True when every head's mean key and value distributions put >= mass on their argmax.
static bool all_heads_concentrated(const TheoryGateStats& st, int M, int S, double mass) {
  for (int h = 0; h < M; ++h) {
    const auto k = st.key_mean.begin() + h * S, v = st.value_mean.begin() + h * S;
    if (*std::max_element(k, k + S) < mass || *std::max_element(v, v + S) < mass) return false;
  }
  return true;
}

static TheoryPoint make_point(int step, double loss, const TheoryGateStats& st) {
  TheoryPoint p;
  p.step = step;
  p.loss = loss;
  p.key = st.key_mean;
  p.value = st.value_mean;
  return p;
}

// Read each head off the final statistics, then coverage and collisions across heads.
static void read_off_heads(const TheoryConfig& cfg, const TheoryGateStats& st, TheorySeedRun& run) {
  const int M = cfg.heads, S = cfg.S;
  run.heads.assign(M, TheoryHead{});
  std::map<int, std::vector<int>> by_offset;  // key offset -> retrieval heads selecting it
  for (int h = 0; h < M; ++h) {
    TheoryHead& hd = run.heads[h];
    const double* k = &st.key_mean[static_cast<size_t>(h) * S];
    const double* v = &st.value_mean[static_cast<size_t>(h) * S];
    hd.key_offset = static_cast<int>(std::max_element(k, k + S) - k);
    hd.value_offset = static_cast<int>(std::max_element(v, v + S) - v);
    hd.key_mass = k[hd.key_offset];
    hd.value_mass = v[hd.value_offset];
    hd.key_min = st.key_min[static_cast<size_t>(h) * S + hd.key_offset];
    hd.value_min = st.value_min[static_cast<size_t>(h) * S + hd.value_offset];
    hd.retrieval = hd.key_mass >= cfg.onehot && hd.value_mass >= cfg.onehot && hd.key_offset <= S - 2 &&
                   hd.value_offset == hd.key_offset + 1;
    if (hd.retrieval) by_offset[hd.key_offset].push_back(h);
  }
  for (int r = 0; r < S - 1; ++r) (by_offset.count(r) ? run.covered : run.uncovered).push_back(r);
  for (const auto& kv : by_offset)
    if (kv.second.size() >= 2) run.collisions.push_back(kv.second);
  run.converged =
      std::all_of(run.heads.begin(), run.heads.end(), [](const TheoryHead& h) { return h.retrieval; });
  run.distinct = run.converged && run.collisions.empty();
  run.all_covered = static_cast<int>(run.covered.size()) == S - 1;
}

TheorySeedRun theory_simulate(const TheoryConfig& cfg, uint64_t seed, bool record_trajectory) {
  theory_validate(cfg);
  const auto t0 = Clock::now();
  TheorySeedRun run;
  run.seed = seed;
  run.loss_exact = theory_loss_is_exact(cfg);

  // the model: embeddings and initial gates, each from its own stream of the seed
  const TheoryEmbeddings emb =
      theory_make_embeddings(cfg.N, cfg.kappa, cfg.epsilon, theory_stream(seed, THEORY_STREAM_EMBEDDINGS));
  TheoryGates gates = theory_gates_init(cfg, emb.D, theory_stream(seed, THEORY_STREAM_INIT));

  // the contexts: the canonical S-1 when the loss is exact, else fresh draws at every step
  const std::vector<TheoryContext> canonical = theory_canonical_contexts(cfg);
  TheoryContextSampler train(cfg.N, cfg.S, cfg.L, theory_stream(seed, THEORY_STREAM_TRAIN));

  // gradient descent: theta <- theta - lr * grad, until `steps` or until every head has concentrated
  TheoryGates grad;
  TheoryGateStats st;
  for (int step = 0;; ++step) {
    const std::vector<TheoryContext> batch = run.loss_exact ? canonical : train.draw(cfg.batch);
    const double loss = theory_batch_loss(cfg, emb, gates, batch, &grad, &st);
    const bool done = step >= cfg.steps ||
                      (cfg.stop_mass > 0.0 && all_heads_concentrated(st, cfg.heads, cfg.S, cfg.stop_mass));
    const bool record_now = step == 0 || done || (cfg.record_every > 0 && step % cfg.record_every == 0);
    if (record_trajectory && record_now) run.trajectory.push_back(make_point(step, loss, st));
    if (done) {
      run.steps_run = step;
      break;
    }
    for (size_t i = 0; i < gates.key.size(); ++i) gates.key[i] -= cfg.lr * grad.key[i];
    for (size_t i = 0; i < gates.value.size(); ++i) gates.value[i] -= cfg.lr * grad.value[i];
  }

  // the final loss and distributions: exact, or on a fixed seeded evaluation sample
  std::vector<double> losses;
  if (run.loss_exact) {
    run.loss = theory_batch_loss(cfg, emb, gates, canonical, nullptr, &st);
  } else {
    TheoryContextSampler eval(cfg.N, cfg.S, cfg.L, theory_stream(seed, THEORY_STREAM_EVAL));
    run.loss = theory_batch_loss(cfg, emb, gates, eval.draw(cfg.eval_contexts), nullptr, &st, &losses);
    double var = 0.0;
    for (double l : losses) var += (l - run.loss) * (l - run.loss);
    const double n = static_cast<double>(losses.size());
    run.loss_stderr = n > 1 ? std::sqrt(var / (n - 1) / n) : 0.0;
  }
  read_off_heads(cfg, st, run);
  run.seconds = seconds_since(t0);
  return run;
}

double theory_independent_distinct(int S, int heads) {
  const int phases = S - 1;
  if (heads > phases) return 0.0;
  double p = 1.0;
  for (int i = 0; i < heads; ++i) p *= static_cast<double>(phases - i) / phases;
  return p;
}

TheoryRun theory_run_seeds(const TheoryConfig& cfg, int seeds, uint64_t first_seed, bool record_trajectory,
                           int threads) {
  if (seeds < 1) fail("theory --seeds", "need at least one seed", "use e.g. --seeds 20");
  if (threads < 1) fail("theory --threads", "need at least one thread", "use e.g. --threads 1");
  theory_validate(cfg);
  TheoryRun out;
  out.cfg = cfg;
  out.seeds.resize(seeds);

  // workers take the next seed index until none is left; an exception stops the run after the join
  std::atomic<int> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&]() {
    for (int k = next++; k < seeds; k = next++) {
      try {
        out.seeds[k] = theory_simulate(cfg, first_seed + k, record_trajectory);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min(threads, seeds); ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);

  const double n = static_cast<double>(seeds);
  for (const auto& s : out.seeds) {
    out.frac_converged += s.converged / n;
    out.frac_distinct += s.distinct / n;
    out.frac_all_covered += s.all_covered / n;
    out.collision_rate += !s.collisions.empty() / n;
    out.mean_loss += s.loss / n;
    out.seconds_per_sim += s.seconds / n;
  }
  out.baseline_distinct = theory_independent_distinct(cfg.S, cfg.heads);
  return out;
}

// ----------------------------------------------------------------------------------------------
// sweeps

std::vector<TheoryConfig> theory_plan(const TheoryConfig& base, const TheoryAxes& axes, bool sweep,
                                      std::vector<std::string>* skipped) {
  // an empty axis means "the base value"
  auto ints = [](const std::vector<int>& v, int def) { return v.empty() ? std::vector<int>{def} : v; };
  auto reals = [](const std::vector<double>& v, double def) {
    return v.empty() ? std::vector<double>{def} : v;
  };
  const std::vector<int> Ns = ints(axes.N, base.N), Ss = ints(axes.S, base.S),
                         Ms = ints(axes.heads, base.heads);
  const std::vector<double> rhos = reals(axes.rho, base.rho), epss = reals(axes.epsilon, base.epsilon);
  if (!sweep && (Ns.size() > 1 || Ss.size() > 1 || Ms.size() > 1 || rhos.size() > 1 || epss.size() > 1))
    fail("theory", "a list of values was given for a single run", "add --sweep to run every combination");

  std::vector<TheoryConfig> out;
  for (int N : Ns)
    for (int S : Ss)
      for (int M : Ms)
        for (double rho : rhos)
          for (double eps : epss) {
            TheoryConfig c = base;
            c.N = N;
            c.S = S;
            c.heads = M;
            c.rho = rho;
            c.epsilon = eps;
            try {
              theory_validate(c);
              out.push_back(c);
            } catch (const Error& e) {
              if (!sweep) throw;
              if (skipped) skipped->push_back(e.what());
            }
          }
  if (out.empty())
    fail("theory --sweep", "no combination of the given values is valid",
         "see the skipped list; "
         "keep heads < S and L*S <= N");
  return out;
}

TheorySweep theory_run_sweep(const TheoryConfig& base, const TheoryAxes& axes, int seeds, uint64_t first_seed,
                             int threads,
                             const std::function<void(const TheoryRun&, int done, int total)>& progress) {
  const auto t0 = Clock::now();
  TheorySweep sw;
  sw.axes = axes;
  const std::vector<TheoryConfig> grid = theory_plan(base, axes, true, &sw.skipped);
  if (axes.N.size() > 1) sw.swept.push_back("N");
  if (axes.S.size() > 1) sw.swept.push_back("S");
  if (axes.heads.size() > 1) sw.swept.push_back("heads");
  if (axes.rho.size() > 1) sw.swept.push_back("rho");
  if (axes.epsilon.size() > 1) sw.swept.push_back("epsilon");
  for (size_t i = 0; i < grid.size(); ++i) {
    sw.runs.push_back(theory_run_seeds(grid[i], seeds, first_seed, false, threads));
    if (progress) progress(sw.runs.back(), static_cast<int>(i + 1), static_cast<int>(grid.size()));
  }
  sw.seconds = seconds_since(t0);
  return sw;
}

}  // namespace phasescope
