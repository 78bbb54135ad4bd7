// commands.h — one function per CLI subcommand; each adds itself to the app and, when chosen,
// tells a short story over library calls. Logic lives in the library, never here.
#pragma once
#include <CLI/CLI.hpp>

namespace phasescope {

void add_zoo_command(CLI::App& app);     // smoke run of the attention zoo (cmd_zoo.cpp)
void add_theory_command(CLI::App& app);
void add_train_command(CLI::App& app);   // train a preset; list presets (cmd_train.cpp)
void add_eval_command(CLI::App& app);
void add_reproduce_command(CLI::App& app);  // the main job (cmd_reproduce.cpp)    // phase-stratified evaluation of a checkpoint (cmd_eval.cpp)  // idealized retrieval model, gradient flow (cmd_theory.cpp)
void add_probe_command(CLI::App& app);      // needle / flip probes of a served model over HTTP (cmd_probe.cpp)

}  // namespace phasescope
