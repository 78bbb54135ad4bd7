// phasescope.cpp — the CLI: set up the runtime, register the subcommands, run one.
// Every error that reaches here is a phasescope::Error (or a library exception) and is printed
// as one line on stderr with exit code 1. Not a place for logic: see commands.h.
#include <cstdio>
#include <exception>

#include "core/check.h"
#include "core/runtime.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  // process-wide set-up: all cores, allocator tuned
  phasescope::runtime_init();

  // the subcommands
  CLI::App app{"phasescope: find, explain and fix phase sensitivity in chunked KV-cache compression"};
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();  // every --help shows each option's default
  app.footer("Environment: PHASESCOPE_THREADS=N sets the compute threads (default: all cores; tests use 1).");
  phasescope::add_zoo_command(app);
  phasescope::add_kv_memory_command(app);
  phasescope::add_generate_command(app);
  phasescope::add_train_command(app);
  phasescope::add_launch_command(app);
  phasescope::add_eval_command(app);
  phasescope::add_explain_command(app);
  phasescope::add_reproduce_command(app);
  phasescope::add_study_command(app);
  phasescope::add_theory_command(app);
  phasescope::add_tokenize_command(app);
  phasescope::add_corpus_command(app);
  phasescope::add_serve_command(app);
  phasescope::add_probe_command(app);
  phasescope::add_align_command(app);
  phasescope::add_align_study_command(app);
  phasescope::add_audit_command(app);
  phasescope::add_gate_command(app);
  phasescope::add_v4_command(app);

  // run the chosen one
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "phasescope: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
