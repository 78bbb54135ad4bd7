// flow.h — gradient flow on the idealized retrieval model (idealized.h), and what it ends in.
// Gradient flow is approximated by small fixed steps of gradient descent with the analytic gradient,
// from gates drawn uniform in a ball of radius rho. The gradient is exact when the population loss is
// (static gates, epsilon = 0); otherwise each step draws a fresh seeded batch of contexts (stochastic
// steps whose mean is the population gradient). Then every head is read off: the offset its key
// selects, its masses, whether it is a retrieval head (key one-hot at r <= S-2, value one-hot at
// r+1), and the run's collisions and uncovered phases. Sweeps repeat this over a grid of configs.
// Not here: printing, files or plots (report.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "theory/idealized.h"

namespace phasescope {

// One recorded point of a trajectory (M = heads, S = offsets).
struct TheoryPoint {
  int step = 0;
  double loss = 0;                 // exact population loss, or the step's batch mean when sampled
  std::vector<double> key, value;  // (M, S) mean p^K_h(r), p^V_h(r) over the batch's contexts and chunks
};

// What one head ends as.
struct TheoryHead {
  int key_offset = 0, value_offset = 0;  // argmax of the mean distributions
  double key_mass = 0, value_mass = 0;   // mean mass at the argmax
  double key_min = 0, value_min = 0;     // min over the evaluation contexts and chunks of that mass
  bool retrieval = false;                // key_mass, value_mass >= onehot, key <= S-2, value = key + 1
};

// One simulation (one seed).
struct TheorySeedRun {
  uint64_t seed = 0;
  std::vector<TheoryHead> heads;             // (M)
  std::vector<int> covered;                  // within-window phases r* (0..S-2) some retrieval head selects
  std::vector<int> uncovered;                // the other phases in 0..S-2
  std::vector<std::vector<int>> collisions;  // groups of >= 2 retrieval heads selecting the same offset
  bool converged = false;                    // every head is a retrieval head
  bool distinct = false;                     // converged and no collision: m distinct phases covered
  bool all_covered = false;                  // every phase 0..S-2 covered (possible only when m = S-1)
  double loss = 0, loss_stderr = 0;          // final loss (stderr 0 when exact)
  bool loss_exact = false;
  int steps_run = 0;
  double seconds = 0;                   // wall time of this simulation
  std::vector<TheoryPoint> trajectory;  // empty unless recorded
};

// Simulate one seed. The seed fixes the init, the embeddings' perturbation and every batch.
TheorySeedRun theory_simulate(const TheoryConfig& cfg, uint64_t seed, bool record_trajectory);

// All seeds of one configuration, with the rates a table needs.
struct TheoryRun {
  TheoryConfig cfg;
  std::vector<TheorySeedRun> seeds;
  double frac_converged = 0;     // seeds whose every head is a retrieval head
  double frac_distinct = 0;      // seeds ending fully covered: m distinct phases (min(m, S-1) = m)
  double frac_all_covered = 0;   // seeds covering every within-window phase 0..S-2
  double collision_rate = 0;     // seeds with at least one collision
  double baseline_distinct = 0;  // P(distinct) if each head picked one of the S-1 phases independently
  double mean_loss = 0;
  double seconds_per_sim = 0;
};
// Seeds first_seed .. first_seed + seeds - 1, spread over `threads` threads; the results do not depend
// on `threads` (each seed is its own deterministic simulation).
TheoryRun theory_run_seeds(const TheoryConfig& cfg, int seeds, uint64_t first_seed, bool record_trajectory,
                           int threads = 1);

// (S-1)! / ((S-1-m)! (S-1)^m): the birthday-problem chance that m independent uniform choices among
// the S-1 within-window phases are distinct. What coverage would be with no interaction at all.
double theory_independent_distinct(int S, int heads);

// ----------------------------------------------------------------------------------------------
// sweeps

// The values to sweep; a config is run for every combination (Cartesian product).
struct TheoryAxes {
  std::vector<int> N, S, heads;
  std::vector<double> rho, epsilon;
};
// Expand the axes around `base`. Without `sweep` every axis must hold one value (else an Error saying
// to add --sweep). Combinations the model does not allow (m >= S, L*S > N) are skipped and described
// in `skipped`; an Error is thrown when nothing is left.
std::vector<TheoryConfig> theory_plan(const TheoryConfig& base, const TheoryAxes& axes, bool sweep,
                                      std::vector<std::string>* skipped);

struct TheorySweep {
  TheoryAxes axes;                 // what was asked for
  std::vector<std::string> swept;  // names of the axes with more than one value, e.g. {"N", "S"}
  std::vector<std::string> skipped;
  std::vector<TheoryRun> runs;  // one per config, seeds without trajectories
  double seconds = 0;           // wall time of the whole sweep
};
TheorySweep theory_run_sweep(const TheoryConfig& base, const TheoryAxes& axes, int seeds, uint64_t first_seed,
                             int threads,
                             const std::function<void(const TheoryRun&, int done, int total)>& progress);

}  // namespace phasescope
