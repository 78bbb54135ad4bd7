// cmd_align.cpp — `phasescope align --card card.json --input prompts.jsonl --out aligned.jsonl
// [--mode align|repeat|both] [--copies K] [--tokenizer tokenizer.json] [--neutral ID]... [--max-added N]
// [--context T]`: put each marked span's anchor on the card's strongest phase with the fewest neutral
// tokens, or repeat it at positions that cover the strongest phases. The work is align/align_io.h's.
#include <fmt/format.h>

#include <memory>
#include <optional>

#include "align/align_io.h"
#include "tools/commands.h"

namespace phasescope {

void add_align_command(CLI::App& app) {
  struct Args {
    std::string card, input, out, tokenizer, mode = "align";
    int copies = 2;
    std::vector<int> neutral;
    int64_t max_added = -1, context = 0;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("align", "place marked spans on a model's strong phases (docs/align.md)");
  cmd->add_option("--card", a->card, "the model's card.json (phasescope eval or audit)")->required();
  cmd->add_option("--input", a->input, "prompts, one JSON object per line (docs/align.md)")->required();
  cmd->add_option("--out", a->out, "aligned prompts (JSONL)")->required();
  cmd->add_option("--mode", a->mode, "align | repeat | both")
      ->check(CLI::IsMember({"align", "repeat", "both"}));
  cmd->add_option("--copies", a->copies, "repeat / both: positions per span, the original included")
      ->check(in_range(2, 4096));
  cmd->add_option("--tokenizer", a->tokenizer,
                  "tokenizer.json: text segments in, text out, and the round trip checked");
  cmd->add_option("--neutral", a->neutral,
                  "padding token ids to try, in order (default: the card's, else "
                  "the tokenizer's newline, space, tab)");
  cmd->add_option("--max-added", a->max_added, "most tokens a prompt may gain (-1 = no limit)");
  cmd->add_option("--context", a->context, "the model's context in tokens (0 = unchecked)");
  cmd->callback([a] {
    const PhaseCard card = card_read(a->card);
    std::optional<Tokenizer> tok;
    if (!a->tokenizer.empty()) tok = Tokenizer::load(a->tokenizer);
    AlignJobOptions o;
    o.align.mode = align_mode_parse(a->mode, "--mode");
    o.align.copies = a->copies;
    o.align.max_added = a->max_added;
    o.align.context = a->context;
    o.tok = tok ? &*tok : nullptr;
    o.neutral = align_neutral_candidates(a->neutral, card, o.tok);
    const AlignFileSummary s = align_file(a->input, a->out, card, o);
    fmt::print(
        "aligned {} prompts ({} spans) to phase {} of {} ({} mode): {} tokens added, {:.2f} per prompt "
        "-> {}\n",
        s.prompts, s.spans, card.strongest_phase, card.grid.period, a->mode, s.added,
        s.prompts ? double(s.added) / double(s.prompts) : 0.0, a->out);
  });
}

}  // namespace phasescope
