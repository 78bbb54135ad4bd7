// check_corpus.mjs — a built corpus's held-out shard against HF's own library: every validation document
// is encoded by npm `tokenizers` (its Rust core) under DIR/tokenizer.json, and the ids must be the ones
// phasescope wrote into DIR/val.bin at the document's offset (after its boundary token). The unit test
// (tests/corpus_test.cpp) does the same on a tiny corpus; this is the check of a real one.
//   node tests/js/check_corpus.mjs DIR [--split val|train]
// Bible books (paths "...#Book") are read back through the `bible` program, .gz files are gunzipped.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";

const require = createRequire(import.meta.url);
const { Tokenizer } = require("tokenizers");

const dir = process.argv[2];
const split = process.argv[3] === "--split" ? process.argv[4] : "val";
if (!dir) {
  console.error("usage: node check_corpus.mjs DIR [--split val|train]");
  process.exit(2);
}
const manifest = JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8"));
const tok = Tokenizer.fromFile(join(dir, "tokenizer.json"));
const shardBytes = readFileSync(join(dir, manifest.splits[split].file));
const shard = new Uint16Array(shardBytes.buffer, shardBytes.byteOffset, shardBytes.length / 2);

// the bible's books, as corpus_sources.cpp splits the `bible` program's text
let books = null;
function bibleBook(name) {
  if (books === null) {
    books = {};
    const text = execFileSync("bible", ["-l1000", "Gen1:1-Rev22:21"], { maxBuffer: 1 << 26, stdio: ["ignore", "pipe", "ignore"] }).toString("utf8");
    let book = null;
    for (const line of text.split("\n")) {
      const m = /^(\S.*) (\d+)$/.exec(line);
      if (m && m[2] === "1") (book = m[1]), (books[book] = "");
      if (book !== null && !(books[book] === "" && line === "")) books[book] += line + "\n";
    }
    for (const b of Object.keys(books)) books[b] = books[b].replace(/\n+$/, "\n");
  }
  return books[name];
}

let docs = 0, tokens = 0, bad = 0;
for (const d of manifest.documents) {
  if (d.split !== split) continue;
  const hash = d.path.indexOf("#");
  const text = hash >= 0 ? bibleBook(d.path.slice(hash + 1))
             : d.path.endsWith(".gz") ? gunzipSync(readFileSync(d.path)).toString("utf8")
             : readFileSync(d.path, "utf8");
  const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
  const ok = shard[d.offset] === manifest.boundary_id && ids.length === d.tokens &&
             ids.every((id, i) => shard[d.offset + 1 + i] === id);
  if (!ok && bad++ < 5) console.error(`differs: ${d.path} (offset ${d.offset}, ${ids.length} ids vs ${d.tokens})`);
  docs += 1;
  tokens += ids.length;
}
console.log(`${dir} ${split}: ${docs} documents, ${tokens} tokens; HF's ids equal the shard's on ${docs - bad}`);
process.exit(bad === 0 ? 0 : 1);
