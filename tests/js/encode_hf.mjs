// encode_hf.mjs — the ids HF's own library (npm `tokenizers`, its Rust core) gives texts under a
// tokenizer.json, for tests/corpus_test.cpp's conformance check of a trained corpus tokenizer.
//   node tests/js/encode_hf.mjs TOKENIZER.json TEXTS.json   (TEXTS.json: a JSON array of strings)
// prints one JSON array of id arrays, without special tokens added (as phasescope's encode).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { Tokenizer } = require("tokenizers");

const [tokenizerPath, textsPath] = process.argv.slice(2);
if (!tokenizerPath || !textsPath) {
  console.error("usage: node encode_hf.mjs TOKENIZER.json TEXTS.json");
  process.exit(2);
}
const tok = Tokenizer.fromFile(tokenizerPath);
const texts = JSON.parse(readFileSync(textsPath, "utf8"));
const out = [];
for (const text of texts) out.push(Array.from((await tok.encode(text, null, { addSpecialTokens: false })).getIds()));
console.log(JSON.stringify(out));
