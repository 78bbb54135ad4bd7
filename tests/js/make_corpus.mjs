// make_corpus.mjs — writes the tokenizer conformance corpus (seeded, so the output is stable):
//   tests/data/tokenizer_corpus.jsonl               hand-written hard cases + generated combinations
//   tests/data/tokenizer_corpus_js_divergent.jsonl  texts where the JS reference is known to differ
//                                                   from HF's Rust library (checked against the latter)
// Each line: {"id": n, "kind": "...", "text": "..."}. Not the ids: encode_reference.mjs adds those.
// Characters are drawn from scripts and emoji of Unicode <= 14 (PCRE2 10.42's tables; the JS reference
// has Unicode 17, HF's Oniguruma ~15), so a newer character's class is not what a row tests.
// Run: node tests/js/make_corpus.mjs   (then node tests/js/encode_reference.mjs)
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const DATA = join(dirname(fileURLToPath(import.meta.url)), "..", "data");

// ---- seeded PRNG (mulberry32): the corpus is a pure function of this seed
let seed = 20240505;
function rand() {
  seed |= 0;
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const digits = (n, set = "0123456789") => Array.from({ length: n }, () => pick([...set])).join("");

// ---- pools of fragments, one per kind of text the issue lists
const POOL = {
  english: [
    "Hello, world!", "The quick brown fox jumps over the lazy dog.", "I'm sure they'll say it's fine, but we'd better check.",
    "DON'T SHOUT; I'VE HEARD YOU'RE RIGHT.", "it’s a curly apostrophe’s day", "e.g. i.e. etc. vs. Mr. Dr.",
    "state-of-the-art", "New York City", "COVID-19", "well...", "Wait—what?", "\"quoted\" and 'single'",
    "naïve café résumé", "A/B testing", "(parenthetical)", "#hashtag @mention", "user@example.com",
    "https://example.org/path?q=1&x=%20y#frag", "C:\\Users\\me\\file.txt", "/usr/local/bin/phasescope",
  ],
  code: [
    "def f(x):\n    return x ** 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "const x = await fetch(`${base}/api`);", "#include <vector>\nint main() { return 0; }",
    "if __name__ == \"__main__\":\n\tmain()", "SELECT id, name FROM users WHERE age >= 18;",
    "<div class=\"a\"><span>hi</span></div>", "{\"key\": [1, 2.5, null, true], \"s\": \"\\u00e9\"}",
    "x => x.map((y) => y * 2).filter(Boolean)", "fn main() { println!(\"{}\", 1 << 20); }",
    "std::unordered_map<std::string, int> m;", "ls -la | grep '\\.cpp$' && echo ok", "a != b && c <= d || !e",
    "    indented four\n\tindented tab\n", "// comment\n/* block */", "x+=1;y-=2;z*=3;w/=4;", "0x1F 0b1010 1e-9 3.14f",
    "^[A-Za-z_][A-Za-z0-9_]*$", "__init__ __dunder__", "snake_case camelCase PascalCase kebab-case",
  ],
  cjk: [
    "你好，世界！", "我爱北京天安门。", "机器学习和深度学习", "東京は日本の首都です。", "ひらがなとカタカナ", "コンピューター",
    "한국어 텍스트입니다", "안녕하세요", "漢字かな交じり文", "中文标点：“引号”、《书名》", "繁體中文測試", "龥龢齉",
  ],
  arabic: [
    "مرحبا بالعالم", "العربية لغة جميلة", "الرقم ٠١٢٣٤٥٦٧٨٩", "سنة ١٤٤٥ هجرية", "۰۱۲۳۴۵۶۷۸۹ فارسی", "שלום עולם",
    "עברית עם ניקוד: שָׁלוֹם", "السعر ٢٥٫٥٠ ريال",
  ],
  other_scripts: [
    "Привет, мир!", "Съешь же ещё этих мягких французских булок", "Γειά σου Κόσμε", "नमस्ते दुनिया", "हिन्दी में लिखा है",
    "สวัสดีชาวโลก", "Tiếng Việt có dấu", "İstanbul ılık ŞĞÜ", "Ελληνικά ΑΒΓ αβγ", "ქართული", "Հայերեն", "বাংলা লেখা",
    "தமிழ்", "ᚠᚢᚦᚨᚱᚲ", "Ø æ å ß ẞ œ", "ǅ ǈ ǋ titlecase",
  ],
  emoji: [
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇯🇵🇺🇸", "1️⃣2️⃣#️⃣", "❤️", "🧑🏿‍💻", "👩‍❤️‍💋‍👨", "🤷‍♀️", "😂😂😂",
    "🎉 party", "🐍🦀", "✅❌⚠️", "☃", "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
  ],
  combining: [
    "e\u0301", "n\u0303o", "a\u0308\u0304", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a",
    "\u1100\u1161\u11a8", "A\u030a", "\u212b", "\u0041\u0300\u0316", "o\u0328\u0304", "ệ vs e\u0323\u0302",
    "\u0915\u094d\u0937", "\u00c5\u0301", "q\u0307\u0323", "\u0301 leading mark", "\uff76\uff9e", "\u2126 ohm",
  ],
  whitespace: [
    " ", "  ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n ", "\u00a0", "\u3000", "\u2002\u2003",
    "\u2028", "\u2029", "\u202f", "\u205f", "  \t \n", "\n   \n", "\v\f",
  ],
  numbers: [
    "0", "42", "1234567890", "3.14159265358979323846", "1,000,000", "1_000_000", "-273.15", "+1 (555) 010-9999",
    "2024-05-05T12:34:56Z", "v1.2.3-rc.4", "０１２３４５", "ⅠⅡⅢⅣ", "½ ¾ ⅞", "²³¹", "①②③", "١٢٣456",
  ],
  lookalikes: [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|", "< |im_end| >", "<|IM_START|>", "<<|endoftext|>>",
    "<|endoftext|><|endoftext|>", "<think>", "</think>", "<tool_call>", "<|fim_prefix|>", "<|fim_pad|", "<|box_start|>",
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<|begin_of_sentence|>", "<｜begin_of_sentence｜>", "<｜User｜>",
    "<｜Assistant｜>", "<｜place▁holder▁no▁7｜>", "<｜place▁holder▁no▁9999｜>", "<｜tool▁sep｜>", "<|EOT|>", "<s>", "</s>",
    "<｜▁pad▁｜>", "<|User|>", "<unk>", "[INST]", "<<SYS>>",
  ],
};

// ---- hand-written hard cases (each one a reason)
const HAND = [
  "", " ", "a", "\n", "  leading spaces", "trailing spaces   ", "   ", "\t\t\tindent", "a\r\nb\r\nc", "\r\n\r\n\r\n",
  "line1\n\n\nline2", "tabs\tand\tspaces  mixed \t ", "word\u00a0nbsp", "ideographic\u3000space", "x\u2028y\u2029z",
  "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D", "it'S I'M WE'LL", "''''", "'hello'", "rock 'n' roll",
  "1", "12", "123", "1234", "12345", "123456789012345678901234567890", digits(120), "3.1415926535897932384626433832795028841971",
  "٠١٢٣٤٥٦٧٨٩٠١٢٣٤٥٦٧٨٩", "۱۲۳۴۵۶۷۸۹۰", "١٢٣abc٤٥٦", "٣٫١٤", "०१२३४५६७८९", "๑๒๓", "１２３４５６７",
  "abc123def456", "a1b2c3d4e5", "v2.0.0", "x=1+2*3/4-5", "$100.00", "€1.234,56", "100%", "1e10 1E-5",
  "你好world你好", "中文English混合123", "日本語のテキスト、句読点。", "ｶﾀｶﾅ半角", "ＡＢＣ全角", "ㄅㄆㄇ", "한글과漢字",
  "e\u0301e\u0301e\u0301", "cafe\u0301 vs caf\u00e9", "\u1112\u1161\u11ab\u1100\u1173\u11af", "Å vs A\u030a vs \u212b",
  "\u0301", "\u0300\u0301\u0302", "a\u0338", "\ufb01 ligature", "ﬀﬁﬂ", "\u00bd", "K\u0301",
  "👨‍👩‍👧‍👦👨‍👩‍👧‍👦", "🏳️‍🌈🏳️‍⚧️", "🇺🇳🇪🇺", "👋🏻👋🏼👋🏽👋🏾👋🏿", "1️⃣", "#️⃣*️⃣", "\u200d", "a\u200db", "\u200b zero width",
  "emoji😀inside", "😀 😀  😀", "!!!???", "......", "—–-", "«»‹›", "¿¡", "©®™", "→←↑↓", "∑∫∂√∞≠≤≥", "♠♥♦♣",
  "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>",
  "<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜>Hi there<｜end▁of▁sentence｜>",
  "text<|endoftext|>more", "<|im_start|><|im_start|>", "<|im_start|>>", "<<|im_start|>", "|im_start|", "<|im_",
  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
  "<think>\nreasoning\n</think>\n\nanswer", "<think></think>", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
  "<｜place▁holder▁no▁0｜><｜place▁holder▁no▁795｜>", "<｜place▁holder▁no▁1｜>0", "<|fim_prefix|>def<|fim_suffix|>\n<|fim_middle|>",
  "<s>[INST] hi [/INST]", "< s >", "&lt;|im_start|&gt;",
  "    def __init__(self):\n        self.x = 0\n\n    def run(self):\n        pass\n",
  "int main(){\r\n\treturn 0;\r\n}\r\n", "{\n  \"a\": 1,\n  \"b\": [\n    2,\n    3\n  ]\n}", "```python\nprint('hi')\n```",
  "| a | b |\n|---|---|\n| 1 | 2 |", "$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$", "- item\n- item\n  - nested",
  "<!DOCTYPE html>\n<html lang=\"en\">", "SELECT * FROM t;\n\n\n-- comment", "a\\nb\\tc", "\\\\server\\share",
  " \n \n \n", "\n\n\n\n\n\n\n\n", "                                        ", "\t \t \t", " a", "  a", "   a", "a ", "a  ", "a\n ", " \na",
  "The year 2024 had 366 days; 1,234,567.89 units were sold.", "Phone: +44 20 7946 0958", "IPv6 ::1 and 192.168.0.1",
  "Über Straße Öl", "ŁÓDŹ łódź", "ČŠŽ čšž", "Ærø", "İi Iı", "ﬃ", "Ⅻ", "ǲ", "ß→SS", "ΣΑΣ σας",
];

// ---- texts on which the JS reference's regexes differ from HF's (Oniguruma) in what they match; the
// ids differ only where BPE does not happen to hide it (encode_reference.mjs records which). The C++
// tokenizer follows HF here, so these rows are checked against HF's Rust library, not the JS reference.
const JS_DIVERGENT = [
  ["BOM inside text: JS counts U+FEFF as \\s, Oniguruma (HF) does not", "a\ufeff\ufeff!"],
  ["BOM after spaces", "a  \ufeff"],
  ["BOM run", "x \ufeff\ufeff\ufeff y"],
  ["NEL U+0085: whitespace in HF (White_Space), not in JS", "x \u0085\u0085y"],
  ["NEL at the end", "end\u0085"],
  ["long s after an apostrophe: HF's (?i:'s) matches U+017F, JS's [sS] rewrite does not", "'\u017fa 'S"],
  ["long s contraction", "it'\u017f"],
  ["U+180E: PCRE2's \\s has it, HF's does not (the C++ side spells \\s out)", "a\u180e b"],
  ["U+180E run", "x\u180e\u180ey"],
  ["U+180E after a space", "a \u180e"],
];

// ---- generated combinations
function fragment() {
  const r = rand();
  if (r < 0.07) return digits(int(1, 40));
  if (r < 0.1) return digits(int(1, 25), "٠١٢٣٤٥٦٧٨٩");
  if (r < 0.13) return pick(POOL.whitespace).repeat(int(1, 6));
  if (r < 0.15) return pick(["!", "?", ".", "=", "-", "*", "#", "~"]).repeat(int(2, 12));
  const kinds = Object.keys(POOL);
  return pick(POOL[pick(kinds)]);
}
const SEPARATORS = ["", " ", " ", " ", "  ", "\n", "\r\n", "\t", "\n\n", ", ", " \r\n ", "\u3000"];

const rows = [];
const add = (kind, text) => rows.push({ id: rows.length, kind, text });
for (const t of HAND) add("hand", t);
for (const [kind, list] of Object.entries(POOL)) for (const t of list) add(kind, t);
for (let i = 0; i < 330; ++i) {
  const n = int(2, 7);
  let s = fragment();
  for (let k = 1; k < n; ++k) s += pick(SEPARATORS) + fragment();
  add("mix", s);
}
// a few long texts: every pool joined, so BPE sees long pieces and long whitespace/digit runs
for (let i = 0; i < 6; ++i) {
  let s = "";
  for (let k = 0; k < 60; ++k) s += fragment() + pick(SEPARATORS);
  add("long", s);
}
add("long", " ".repeat(3000));
add("long", "\n".repeat(500) + "x");
add("long", digits(2000));
add("long", "a".repeat(4000));
add("long", "ab".repeat(1500) + "你".repeat(300));

writeFileSync(join(DATA, "tokenizer_corpus.jsonl"), rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
writeFileSync(
  join(DATA, "tokenizer_corpus_js_divergent.jsonl"),
  JS_DIVERGENT.map(([why, text], id) => JSON.stringify({ id, kind: why, text })).join("\n") + "\n",
);
console.log(`wrote ${rows.length} corpus rows and ${JS_DIVERGENT.length} JS-divergent rows to ${DATA}`);
