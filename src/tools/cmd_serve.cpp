// cmd_serve.cpp — `phasescope serve --checkpoint DIR [--host 127.0.0.1] [--port 8000] ...`: an
// OpenAI-compatible HTTP server over one checkpoint until SIGTERM or Ctrl-C (serve/server.h).
#include <iostream>

#include "core/runtime.h"
#include "serve/server.h"
#include "tools/commands.h"

namespace phasescope {

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto verbose = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server over a checkpoint (completions, chat, tokenize)");
  cmd->add_option("--checkpoint", o->checkpoint, "checkpoint directory (or .safetensors file)")->required();
  cmd->add_option("--host", o->host, "address to bind (loopback unless told otherwise)")
      ->capture_default_str();
  cmd->add_option("--port", o->port, "port (0 = any free port)")->capture_default_str();
  cmd->add_option("--model-name", o->model_name,
                  "model name requests use (default: the checkpoint's preset name)");
  cmd->add_option("--max-model-len", o->max_model_len,
                  "prompt + max_tokens limit; longer requests are refused (default: the preset's seq_len)");
  cmd->add_option("--max-batch", o->max_batch, "sequences per forward pass (1 = unbatched)")
      ->capture_default_str();
  cmd->add_option("--batch-window-ms", o->batch_window_ms, "when idle, gather requests for this long")
      ->capture_default_str();
  cmd->add_flag("!--no-kv-cache", o->kv_cache,
                "generate without the KV cache: the whole forward over each sequence per token (the "
                "reference path; default: prefill once, then one cached decode step per token)");
  cmd->add_option(
         "--http-threads", o->http_threads,
         "connections open at once (a thread each, started as they arrive); one more gets 503 server_busy")
      ->capture_default_str();
  cmd->add_option("--timeout-s", o->timeout_s,
                  "a request (head and body) must arrive whole within this many seconds (else 408); also the "
                  "write timeout")
      ->capture_default_str();
  cmd->add_flag("--log-requests", *verbose, "print one line per request");
  cmd->add_option("--align-spans", o->align_card,
                  "card.json: completions may mark phasescope_spans, aligned to the card's strongest phases "
                  "before prefill (docs/align.md)");
  cmd->callback([o, verbose] {
    std::cout << "runtime: " << runtime_describe(runtime_init()) << "\n";
    if (*verbose) o->log = &std::cout;
    serve_until_signal(*o, std::cout);
  });
}

}  // namespace phasescope
