// cmd_corpus.cpp — `phasescope corpus build --out DIR [--vocab 16384] [--sources a,b,...]` assembles the
// language models' corpus (manifest, tokenizer.json, token shards) from text Debian ships;
// `phasescope corpus info DIR` verifies one and prints its sources, sizes, token counts and lookup words.
// Not a place for logic: data/corpus.h does the work.
#include <iostream>
#include <memory>
#include <string>

#include "data/corpus.h"
#include "tools/commands.h"

namespace phasescope {

void add_corpus_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("corpus", "the language models' text corpus: build one, or describe one");
  cmd->require_subcommand(1);

  // build
  auto o = std::make_shared<CorpusBuildOptions>();
  std::string builtins;
  for (const std::string& s : corpus_builtin_sources()) builtins += (builtins.empty() ? "" : ", ") + s;
  auto* build = cmd->add_subcommand("build", "gather the documents, train the BPE, write the token shards");
  build->add_option("--out", o->out, "the corpus folder (e.g. runs/corpus)")->required();
  build->add_option("--vocab", o->vocab_size, "BPE vocabulary, boundary token included (300 to 30000)");
  build
      ->add_option("--sources", o->sources,
                   "built-in sources (" + builtins + ") or files/folders; default: all")
      ->delimiter(',');
  build->add_option("--seed", o->seed, "mixed into the hash that splits documents");
  build->add_option("--val-fraction", o->val_fraction, "share of documents held out for validation");
  build->add_option("--lookup-words", o->lookup_words, "lookup keys and names to choose, each");
  build->callback([o] {
    // build, logging each step
    corpus_build(*o, &std::cerr);
    // then show what was written, verified as training will open it
    std::cout << corpus_describe(o->out);
  });

  // info
  auto dir = std::make_shared<std::string>();
  auto* info =
      cmd->add_subcommand("info", "verify a corpus folder and print its sources, sizes and lookup words");
  info->add_option("dir", *dir, "the corpus folder")->required();
  info->callback([dir] { std::cout << corpus_describe(*dir); });
}

}  // namespace phasescope
