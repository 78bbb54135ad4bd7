// explain.h — why a checkpoint is weak at some phases: the paper's three instruments (§1.6) on any
// phasescope checkpoint, on the same seeded lookup layout the evaluation uses.
//   knockout: per layer (and per KV head when a layer has several), the outputs of the query heads that
//             read it, at the final query position only, are replaced by their mean over a disjoint
//             calibration set; result = 100 x (knockout - clean) / clean accuracy per phase r = t % S.
//   gates:    per compressed branch (K and V separately; DeepSeek's one K = V compressor as "kv"): static
//             concentration exp(H(E[alpha])), per-window concentration E[exp(H(alpha))] (1 = one-hot ..
//             W = uniform) and the profile g(r) = gate mass at phase r / uniform share (1/S).
//   cycling:  (chunked W = S layers) the gate parameters (Z_i, b_i) rolled by delta along the offset axis,
//             payload maps fixed; A_delta(r) against A_0((r - delta) mod S), R^2 with and without the
//             boundary phase S - 1.
// Every accuracy (clean, each knockout, each cycling delta) is scored through the scoring engine
// (eval/scoring.h) into its own journal under out_dir/journals/, bound to the model's weights hash, the
// layout and the condition: a rerun resumes them, and every per-phase accuracy carries its 95% Wilson
// interval.
// Phase convention: r = target_pos % S, target_pos = absolute position of the target record's key.
// The pure measures are in measures.h, the files, plots and report in explain_report.h.
// Not here: training, the evaluation journal or its statistics (eval/), drawing (report/).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "eval/layout.h"
#include "explain/measures.h"
#include "model/config.h"

namespace phasescope {

class DecoderImpl;
class Decoder;
class Backend;

struct ExplainOptions {
  int64_t samples = 480;       // evaluation prompts (whole paired blocks of R)
  int64_t calib_samples = 96;  // calibration prompts (another seed): head means, gate statistics
  int R = 24;                  // layout residues (a multiple of every S in use); results fold to r % S
  PadProtocol protocol = PadProtocol::Prefix;
  uint64_t seed = 1;  // evaluation layout; calibration uses seed + 7919
  std::vector<int> deltas = {-3, -2, -1, 1, 2, 3};
  int batch = 16;
  bool fresh = false;  // start every condition's journal over (else resume those of this model)
  bool report = true;  // PNGs + report.html (needs gnuplot)
  std::ostream* log = nullptr;
};

struct KnockoutRow {
  std::string label;            // "L0" or "L0.kv1"
  int layer = 0, kv_head = -1;  // kv_head -1: every head of the layer
  std::vector<int> heads;       // query heads replaced
  PhaseAccuracy acc;
  std::vector<double> rel;  // (S) 100 x (knockout - clean) / clean; NaN where clean is 0
};

struct GateStats {
  int layer = 0;
  std::string branch;  // "k", "v" or "kv"
  int kv_head = 0;
  int W = 0, S = 0;
  double static_conc = 0;       // exp(H(E[alpha])), averaged over channels for vector gates
  double window_conc = 0;       // E[exp(H(alpha))]
  std::vector<double> profile;  // (S) g(r)
  int peak = 0;                 // argmax_r g(r)
};

struct CyclingRow {
  int layer = -1;  // -1: every W = S chunked layer rolled together
  int delta = 0;
  PhaseAccuracy acc;
  std::vector<double> predicted;  // (S) A_0((r - delta) mod S)
  double r2 = 0, r2_no_boundary = 0;
};

struct ExplainResults {
  std::string model;
  int S = 8;
  int64_t samples = 0, calib_samples = 0;
  PhaseAccuracy clean;
  std::vector<KnockoutRow> knockouts;
  std::vector<GateStats> gates;
  std::vector<CyclingRow> cycling;
  std::string cycling_note;  // why cycling was skipped, if it was
};

// Run all three instruments and write into out_dir: explain.json, knockout.csv, gates.csv,
// cycling.csv, and (opt.report) knockout.png, gate_profiles.png, cycling.png, report.html.
// The model's weights are left exactly as they were.
// `model` is shared, not copied: knockout hooks and rolled gates act on it, and are undone.
ExplainResults explain_run(const Decoder& model, const Preset& preset, const ExplainOptions& opt,
                           const std::string& out_dir);

// ---------------------------------------------------------------------------------------------
// Pieces, exposed for tests.

// Roll every gate parameter (<branch>_gate_w, <branch>_gate_b) of chunked layers with W == S by delta
// along the offset axis (layer -1: all of them); payload maps untouched. Returns the layers rolled.
std::vector<int> gate_cycle(DecoderImpl& model, int delta, int layer = -1);

// Score the layout's samples with `backend` under `condition` ("clean", "knockout L0", ...) through the
// scoring engine into journal_path (resumed when it is this run's; fresh: started over), and return
// the accuracy per phase; `correct` (optional) receives the outcome of each sample in layout order.
PhaseAccuracy explain_accuracy(Backend& backend, const LayoutDesign& design, int S, const std::string& model,
                               const std::string& condition, const std::string& journal_path, bool fresh,
                               std::vector<int>* correct = nullptr);

}  // namespace phasescope
