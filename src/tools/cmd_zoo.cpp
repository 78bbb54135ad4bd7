// cmd_zoo.cpp — `phasescope zoo`: the attention zoo's smoke run (see attention/zoo.h).
#include <fmt/format.h>

#include "attention/zoo.h"
#include "core/check.h"
#include "core/runtime.h"
#include "tools/commands.h"

namespace phasescope {

void add_zoo_command(CLI::App& app) {
  auto opt = std::make_shared<ZooOptions>();
  auto* cmd = app.add_subcommand("zoo", "check every attention kind against its loop reference and time it");
  cmd->add_option("--check-tokens", opt->check_tokens,
                  "sequence length for the reference comparison, in [1, 512]")
      ->check(in_range(1, 512));
  cmd->add_option("--time-tokens", opt->time_tokens, "sequence length for the timing, in [1, 2^20]")
      ->check(in_range(1, 1 << 20));
  cmd->add_option("--batch", opt->batch, "batch size for the timing, in [1, 1024]")->check(in_range(1, 1024));
  cmd->add_option("--seed", opt->seed, "random seed");
  cmd->callback([opt] {
    // what this process runs with
    fmt::print("runtime: {}\n", runtime_describe(runtime_init()));

    // every kind: reference check and timing
    auto rows = zoo_run(*opt);
    fmt::print("{}", zoo_table(rows));

    // a mismatch is a failure of the build, not a number to shrug at
    for (const auto& r : rows)
      if (!(r.max_rel_err < 1e-9))
        fail("zoo",
             fmt::format("kind {} differs from its reference (rel. err {:.2e})", r.kind, r.max_rel_err),
             "run the tests (scripts/test.sh) to locate the fault");
    fmt::print("all {} kinds match their loop reference (fp64, rel. err < 1e-9)\n", rows.size());
  });
}

}  // namespace phasescope
