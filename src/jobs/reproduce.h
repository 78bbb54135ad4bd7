// reproduce.h — the main job: train (or reuse) full-1kv, w8s8-1kv, w8s4-1kv and the DeepSeek-style kernel
// at laptop size, plus a matched control (full attention stopped where its accuracy in the evaluation's
// format reaches the DeepSeek-style kernel's prefix mean), evaluate each under both padding protocols, print
// them beside the paper's published numbers, judge the paper's headline (similar mean, far lower worst phase)
// by code, and write one combined report and OUT/reproduce.json. Every stage is resumable: a finished
// checkpoint is reused (a partial one resumes), a finished journal is only re-read. Not here: the training
// loop (train/), the evaluation (eval/); this file only sequences them.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace phasescope {

struct ReproduceOptions {
  std::string out;       // models/<name>/, eval/<name>/<protocol>/, report.html, reproduce.json; "" =
                         // runs/reproduce (--quick: runs/reproduce-quick)
  bool quick = false;    // tiny models and few samples: the pipeline end to end in minutes
  bool retrain = false;  // train from scratch even where a checkpoint exists
  std::vector<std::string> models = {"full-1kv", "w8s8-1kv", "w8s4-1kv", "deepseek-style"};
  // The matched control: full-1kv trained again into models/full-1kv-matched and stopped at the first
  // check whose held-out mean (the evaluation's prefix prompts) reaches this model's prefix mean less 1
  // point. "" (or a model not in `models`): no control.
  std::string matched_to = "deepseek-style";
  int64_t samples = 0;  // prompts per model and protocol (0 = the mode's default)
  int steps = 0;        // training steps per model (0 = the mode's default)
  bool explain = true;  // run explain/ on every model but the control: explain/<name>/ and a report section
};

// The paper's published prefix/in-sequence numbers for a run name (percent), where public.
struct PaperRow {
  std::string model, protocol;
  double mean = -1, worst = -1, gap = -1;  // -1 = not published
  std::string source;
};
std::vector<PaperRow> paper_rows();

// Runs the whole job; returns the path of the combined report.
std::string reproduce_run(const ReproduceOptions& opt);

}  // namespace phasescope
