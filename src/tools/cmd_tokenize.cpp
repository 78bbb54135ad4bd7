// cmd_tokenize.cpp — `phasescope tokenize --tokenizer PATH/tokenizer.json [FILE]`: UTF-8 text from
// FILE or standard input -> its ids as one JSON array; with --jsonl, JSON lines with a "text" field ->
// one {"ids": [...]} line each, in order (for checking prompt files in bulk).
// No special tokens are added unless --add-bos; special tokens written in the text are recognised.
// Not a place for logic: tokenizer/tokenize_io.h does the work.
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include "core/check.h"
#include "tokenizer/tokenize_io.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands.h"

namespace phasescope {

namespace {

struct TokenizeArgs {
  std::string tokenizer;  // tokenizer.json
  std::string input;      // "" or "-": standard input
  bool jsonl = false;
  TokenizeOptions options;
};

void run_tokenize(const TokenizeArgs& a) {
  // the tokenizer
  const Tokenizer tok = Tokenizer::load(a.tokenizer);

  // the input
  const bool from_stdin = a.input.empty() || a.input == "-";
  std::ifstream file;
  if (!from_stdin) {
    file.open(a.input, std::ios::binary);
    if (!file)
      fail(a.input, "cannot open the file", "pass a readable UTF-8 text file, or - for standard input");
  }
  std::istream& in = from_stdin ? std::cin : file;
  const std::string name = from_stdin ? "<stdin>" : a.input;

  // JSON lines: one {"ids": [...]} per record, streamed
  if (a.jsonl) {
    tokenize_jsonl(tok, in, name, std::cout, a.options);
    return;
  }

  // one text: all of it, as it is (no newline stripped)
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::cout << ids_json(tokenize_text(tok, text, a.options, name)) << "\n";
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand(
      "tokenize", "print the token ids of UTF-8 text (HuggingFace tokenizer.json, byte-level BPE)");
  cmd->add_option("--tokenizer", a->tokenizer, "path of a tokenizer.json")->required();
  cmd->add_option("input", a->input, "text file (default: standard input)");
  cmd->add_flag("--jsonl", a->jsonl,
                "input is JSON lines with a \"text\" field; output one {\"ids\": [...]} line each");
  cmd->add_flag("--add-bos", a->options.add_bos,
                "prepend the BOS token (as the HF Python tokenizer does for DeepSeek)");
  cmd->callback([a] { run_tokenize(*a); });
}

}  // namespace phasescope
