// commands.h — one function per CLI subcommand; each adds itself to the app and, when chosen,
// tells a short story over library calls. Logic lives in the library, never here.
#pragma once
#include <CLI/CLI.hpp>

namespace phasescope {

// A numeric range check that prints nothing of its own in --help (CLI11 renders "INT:INT in [1 - 512]");
// the option's help text states the range instead.
template <class T>
CLI::Validator in_range(T lo, T hi) {
  return CLI::Range(lo, hi).description("");
}

void add_zoo_command(CLI::App& app);  // smoke run of the attention zoo (cmd_zoo.cpp)
void add_kv_memory_command(CLI::App& app);
void add_generate_command(CLI::App& app);  // greedy generation with the KV cache (cmd_generate.cpp)  //
                                           // KV-cache bytes per token of each design (cmd_kv_memory.cpp)
void add_theory_command(CLI::App& app);    // idealized retrieval model, gradient flow (cmd_theory.cpp)
void add_train_command(CLI::App& app);     // train a preset; list presets (cmd_train.cpp)
void add_launch_command(
    CLI::App& app);                    // N data-parallel ranks of a command on this machine (cmd_launch.cpp)
void add_eval_command(CLI::App& app);  // phase-stratified evaluation of a checkpoint (cmd_eval.cpp)
void add_reproduce_command(CLI::App& app);  // the main job (cmd_reproduce.cpp)
void add_study_command(CLI::App& app);      // the paper's grid across seeds, findings judged (cmd_study.cpp)
void add_explain_command(CLI::App& app);    // knockouts, gate profiles, gate cycling (cmd_explain.cpp)
void add_tokenize_command(CLI::App& app);   // text -> token ids with a tokenizer.json (cmd_tokenize.cpp)
void add_corpus_command(CLI::App& app);     // the language models' corpus: build, info (cmd_corpus.cpp)
void add_serve_command(CLI::App& app);      // OpenAI-compatible HTTP server over a checkpoint (cmd_serve.cpp)
void add_probe_command(CLI::App& app);  // needle / flip probes of a served model over HTTP (cmd_probe.cpp)
void add_align_command(CLI::App& app);  // place marked spans on a model's strong phases (cmd_align.cpp)
void add_align_study_command(CLI::App& app);  // alignment measured per phase (cmd_align_study.cpp)
void add_audit_command(CLI::App& app);        // a served model's phase card and engine checks (cmd_audit.cpp)
void add_gate_command(CLI::App& app);         // a card against a release's conditions (cmd_gate.cpp)
void add_v4_command(CLI::App& app);  // real DeepSeek-V4 checkpoints: one layer, static gates (cmd_v4.cpp)

}  // namespace phasescope
