// train_bpe.mjs — trains the corpus's byte-level BPE with HF's own library (npm `tokenizers`, its Node
// binding, pinned in package.json) and writes a standard tokenizer.json. Called by `phasescope corpus
// build` (src/data/corpus.cpp); not a test.
//   node tests/js/train_bpe.mjs --input TRAIN.txt [--input ...] --vocab 8192 --special "<|endoftext|>" --out tokenizer.json
// The tokenizer: Qwen3's pre-tokenizer (its Split regex, then ByteLevel), no normalizer, BPE model,
// ByteLevel decoder. Ids: 0-255 are the 256 bytes (id b = byte b, every byte encodable even when the
// training text never used it), then the merges' new tokens in the order the trainer learned them,
// then the special token, last: vocab = 256 + merged tokens + 1 = --vocab exactly.
// Why truncation: the Node binding exposes no trainer options (Tokenizer.train(files) uses the model's
// default BpeTrainer: 30,000 tokens, min_frequency 0), so this trains to that size and keeps the first
// merges. The trainer's merge loop is greedy (the most frequent pair first, ties by pair) and never looks
// at the target size, so its first K merges are the ones a trainer with a smaller vocab_size would stop
// at. The trainer reads its files line by line (each line one sequence), so no merge spans a newline
// followed by more text; encoding applies the regex to whole documents as HF does.
// Deterministic: the same input gives a byte-identical file (the C++ test checks it by building twice).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

const require = createRequire(import.meta.url);
const { Tokenizer } = require("tokenizers");

// ---- arguments
const args = { input: [], vocab: 8192, special: "<|endoftext|>", out: "" };
for (let i = 2; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, ""), value = process.argv[i + 1];
  if (value === undefined || !(key in args)) {
    console.error(`train_bpe: unknown or incomplete argument ${process.argv[i]}`);
    process.exit(2);
  }
  if (key === "input") args.input.push(value);
  else args[key] = key === "vocab" ? Number(value) : value;
}
if (args.input.length === 0 || !args.out || !Number.isInteger(args.vocab) || args.vocab < 258) {
  console.error("train_bpe: need --input FILE, --out PATH and an integer --vocab >= 258");
  process.exit(2);
}

// ---- the pipeline, as a tokenizer.json with an empty BPE model
const PRE_TOKENIZER = {
  type: "Sequence",
  pretokenizers: [
    {
      type: "Split",
      pattern: {
        Regex:
          "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
      },
      behavior: "Isolated",
      invert: false,
    },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
  ],
};
const DECODER = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false };
const config = (vocab, merges, added) => ({
  version: "1.0",
  truncation: null,
  padding: null,
  added_tokens: added,
  normalizer: null,
  pre_tokenizer: PRE_TOKENIZER,
  post_processor: null,
  decoder: DECODER,
  model: {
    type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges,
  },
});

// ---- train (the library's default trainer), then read its merges back from its own saved file
const trainer = Tokenizer.fromString(JSON.stringify(config({}, [], [])));
trainer.train(args.input);
const scratch = mkdtempSync(join(tmpdir(), "train_bpe-"));
trainer.save(join(scratch, "trained.json"));
const trained = JSON.parse(readFileSync(join(scratch, "trained.json"), "utf8"));
rmSync(scratch, { recursive: true, force: true });
const learned = trained.model.merges.map((m) => (Array.isArray(m) ? m : m.split(" ")));

// ---- the byte alphabet: GPT-2's byte -> character map, id b for byte b
const byteChars = [];
{
  const printable = (b) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  let n = 0;
  for (let b = 0; b < 256; ++b) byteChars.push(String.fromCodePoint(printable(b) ? b : 256 + n++));
}
const vocab = {};
byteChars.forEach((c, b) => (vocab[c] = b));
let size = 256;

// ---- the first merges, until the vocabulary (with the special token) is full
const target = args.vocab - 1;
const merges = [];
for (const [a, b] of learned) {
  if (size >= target) break;
  if (!(a in vocab) || !(b in vocab)) throw new Error(`merge ${a} ${b} uses a token not yet made`);
  merges.push([a, b]);
  if (!((a + b) in vocab)) vocab[a + b] = size++;
}
const made = size;
if (made < target) {
  console.error(`train_bpe: the training text gives only ${made - 256} merged tokens; --vocab ${args.vocab} needs ` +
                `${target - 256} (at most --vocab ${made + 1} fits)`);
  process.exit(3);
}

// ---- the final tokenizer, written by the library itself (its canonical serialization)
const special = { id: made, content: args.special, single_word: false, lstrip: false, rstrip: false,
                  normalized: false, special: true };
const final = Tokenizer.fromString(JSON.stringify(config(vocab, merges, [special])));
if (final.getVocabSize(true) !== args.vocab || final.tokenToId(args.special) !== made)
  throw new Error(`the written tokenizer has ${final.getVocabSize(true)} tokens, expected ${args.vocab}`);
final.save(args.out, true);
console.log(`train_bpe: ${learned.length} merges learned, ${merges.length} kept, vocab ${args.vocab}, ` +
            `${args.special} = ${made}`);
