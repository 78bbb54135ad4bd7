// cmd_audit.cpp — `phasescope audit --base-url URL [--model NAME] [--tokenizer tokenizer.json] [--stride S]
// [--context T] --out DIR`: the served model's phase card and its engine's invariance, in one card.json
// (audit/audit.h does the work; `phasescope gate` reads the card).
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "audit/audit.h"
#include "core/runtime.h"
#include "tools/commands.h"
#include "tools/http_flags.h"

namespace phasescope {

void add_audit_command(CLI::App& app) {
  struct Args {
    HttpArgs http;
    AuditOptions opt;
  };
  auto a = std::make_shared<Args>();
  auto* cmd =
      app.add_subcommand("audit", "a served model's phase card and its engine's invariance (card.json)");
  add_http_flags(cmd, a->http, true);
  cmd->add_option("--stride", a->opt.S, "the engine's compression stride S")->capture_default_str();
  cmd->add_option("--context", a->opt.needle.context,
                  "tokens per needle prompt (default: the server's context)");
  cmd->add_option("--samples-per-group", a->opt.needle.samples_per_group, "needle prompts per residue")
      ->capture_default_str();
  cmd->add_option("--seed", a->opt.needle.seed, "seed of the needle's records and shifts")
      ->capture_default_str();
  cmd->add_flag("--fresh", a->opt.fresh,
                "start the needle's, query-phase's and the flip sweep's journals over");
  cmd->add_option("--out", a->opt.out,
                  "output directory (card.json, card.html, needle/, query-phase/, flip/)")
      ->required();
  cmd->callback([a, cmd] {
    std::cout << "runtime: " << runtime_describe(runtime_init()) << "\n";
    ProbeConnectOptions co = http_connect_options(a->http);
    co.echo_on_phasescope = true;
    ProbeConnection c = probe_connect(co);
    a->opt.given.context = cmd->count("--context") > 0;
    a->opt.tokenizer_path = a->http.tokenizer;
    a->opt.log = &std::cout;
    const PhaseCard card = audit_run(c, a->opt);
    std::cout << audit_summary(card) << "wrote " << a->opt.out << "/card.json, card.html\n";
  });
}

}  // namespace phasescope
