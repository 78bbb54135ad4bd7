// cmd_generate.cpp — `phasescope generate --checkpoint DIR --prompt "bos k1 n1 k1" --max-tokens N
// [--no-cache] [--compare]`: greedy generation from a checkpoint with the KV cache; --compare also
// generates without it and checks the tokens agree, printing both timings.
#include <fmt/format.h>

#include "core/check.h"
#include "core/runtime.h"
#include "data/tasks.h"
#include "model/generate.h"
#include "model/load.h"
#include "serve/text_codec.h"
#include "tools/commands.h"

namespace phasescope {

void add_generate_command(CLI::App& app) {
  struct Args {
    std::string checkpoint, prompt;
    int max_tokens = 16;
    bool no_cache = false, compare = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("generate", "greedy generation from a checkpoint, with the KV cache");
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint directory (or .safetensors file)")->required();
  cmd->add_option("--prompt", a->prompt, "the prompt as token names, e.g. \"bos k1 n1 k1\"")->required();
  cmd->add_option("--max-tokens", a->max_tokens, "tokens to generate, in [1, 65536]")
      ->check(in_range(1, 65536))
      ->capture_default_str();
  cmd->add_flag("--no-cache", a->no_cache, "run the whole forward for every token (the reference path)");
  cmd->add_flag("--compare", a->compare, "generate both ways; the tokens must agree; print both timings");
  cmd->callback([a] {
    fmt::print("runtime: {}\n", runtime_describe(runtime_init()));
    LoadedModel m = model_load(a->checkpoint);
    const Vocab vocab = task_vocab(m.preset.task);
    std::vector<int> prompt;
    std::string error;
    if (!text_encode(vocab, a->prompt, &prompt, &error))
      fail("--prompt", error, "write token names separated by spaces: " + text_names_help(vocab));
    const GenerateResult r = generate_greedy(*m.model, prompt, a->max_tokens, !a->no_cache);
    fmt::print("{}{}\n", a->prompt, [&] {
      std::string s;
      for (int t : r.tokens) s += text_piece(vocab, t, false);
      return s;
    }());
    fmt::print("{}: first token {:.1f} ms (prompt of {} tokens), then {:.2f} ms per token\n",
               r.cached ? "with the KV cache" : "without a cache", r.prefill_ms, prompt.size(),
               r.per_token_ms);
    if (a->compare) {
      const GenerateResult other = generate_greedy(*m.model, prompt, a->max_tokens, a->no_cache);
      if (other.tokens != r.tokens)
        fail("generate --compare", "the cached and uncached paths generated different tokens",
             "report this: run tests/decode_test to locate it");
      fmt::print("{}: first token {:.1f} ms, then {:.2f} ms per token; same {} tokens\n",
                 other.cached ? "with the KV cache" : "without a cache", other.prefill_ms, other.per_token_ms,
                 other.tokens.size());
    }
  });
}

}  // namespace phasescope
