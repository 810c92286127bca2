// Generates the reference ids of the tokenizer-family tests with Hugging
// Face's own tokenizers library (the Rust implementation, through its
// official Node bindings, npm package "tokenizers").
//
//   cd tools/tokref && npm ci && node families.mjs
//
// Inputs:  tokenizer/testdata/families/<name>/tokenizer.json.gz (+ config)
//          tokenizer/data/deepseek-v3/tokenizer.json
//          tokenizer/testdata/corpus.json
// Outputs: tokenizer/testdata/families/corpus.json (the corpus above plus
//          generated long, multilingual and adversarial texts)
//          tokenizer/testdata/families/reference.json.gz
//
// For every text and family three encodings are recorded:
//   with    encode(text, add_special_tokens=True)
//   without encode(text, add_special_tokens=False): added and special
//           tokens in the text are still matched
//   plain   encode(text, add_special_tokens=False) by a copy of the
//           tokenizer with no added tokens, so their strings are plain text
// and decode(with, skip_special_tokens=False) for texts under 2,000 bytes.
//
// One rule of Hugging Face transformers is applied on top of the library:
// LlamaTokenizerFast (DeepSeek-V3's class) rebuilds the post-processor from
// tokenizer_config.json's add_bos_token / add_eos_token, so there "with"
// is [bos] + without (+ [eos]).
//
// "llama3-pipeline" is the cl100k vocabulary run through Llama 3's
// pipeline options (its Isolated split, ignore_merges, a Sequence
// post-processor with a TemplateProcessing BOS); the Go test applies the
// same patch (llama3Pipeline in families_test.go).
import { Tokenizer } from "tokenizers";
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const famDir = path.join(root, "tokenizer/testdata/families");

const readGz = (p) => zlib.gunzipSync(fs.readFileSync(p)).toString("utf8");

// llama3Pipeline patches a cl100k tokenizer.json with Llama 3's options.
function llama3Pipeline(tj) {
  const t = structuredClone(tj);
  t.pre_tokenizer = {
    type: "Sequence",
    pretokenizers: [
      {
        type: "Split",
        pattern: { Regex: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
        behavior: "Isolated",
        invert: false,
      },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  };
  const bos = t.added_tokens.find((a) => a.content === "<|endoftext|>");
  t.post_processor = {
    type: "Sequence",
    processors: [
      { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
      {
        type: "TemplateProcessing",
        single: [{ SpecialToken: { id: bos.content, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
        pair: [
          { SpecialToken: { id: bos.content, type_id: 0 } },
          { Sequence: { id: "A", type_id: 0 } },
          { SpecialToken: { id: bos.content, type_id: 1 } },
          { Sequence: { id: "B", type_id: 1 } },
        ],
        special_tokens: { [bos.content]: { id: bos.content, ids: [bos.id], tokens: [bos.content] } },
      },
    ],
  };
  t.model.ignore_merges = true;
  return t;
}

const configs = {
  "deepseek-v3": JSON.parse(fs.readFileSync(path.join(root, "tokenizer/data/deepseek-v3/tokenizer_config.json"), "utf8")),
};
const families = {
  "deepseek-v3": JSON.parse(fs.readFileSync(path.join(root, "tokenizer/data/deepseek-v3/tokenizer.json"), "utf8")),
  qwen3: JSON.parse(readGz(path.join(famDir, "qwen3/tokenizer.json.gz"))),
  gpt35turbo: JSON.parse(readGz(path.join(famDir, "gpt35turbo/tokenizer.json.gz"))),
  gpt4o: JSON.parse(readGz(path.join(famDir, "gpt4o/tokenizer.json.gz"))),
};
families["llama3-pipeline"] = llama3Pipeline(families.gpt35turbo);

// A seeded generator, so the corpus is the same on every run.
let seed = 20260601;
const rand = () => {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pick = (a) => a[Math.floor(rand() * a.length)];

const scripts = [
  "The quick brown fox jumps over the lazy dog. It's 3:45 p.m.; we'll see, won't we?",
  "Съешь же ещё этих мягких французских булок, да выпей чаю.",
  "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
  "نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر ومغلف بجلد أزرق",
  "דג סקרן שט בים מאוכזב ולפתע מצא חברה",
  "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम",
  "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน",
  "天地玄黄，宇宙洪荒。日月盈昃，辰宿列张。我能吞下玻璃而不伤身体。",
  "다람쥐 헌 쳇바퀴에 타고파. 키스의 고유조건은 입술끼리 만나야 하고",
  "いろはにほへと ちりぬるを わかよたれそ つねならむ カタカナ ｶﾀｶﾅ",
  "func main() {\n\tfor i := 0; i < 10; i++ {\n\t\tfmt.Println(i * i)\n\t}\n}\n",
  "def f(x):\n    return {'a': [1, 2.5, None], \"b\": x ** 2}  # comment\n",
  "Über Größe: naïve façade, coöperate; Ærøskøbing, İstanbul, ß→SS, ǅ.",
];
const emoji = ["👨‍👩‍👧‍👦", "🇫🇷🇯🇵", "👍🏽", "1️⃣", "❤️", "🏳️‍🌈", "👩🏻‍💻", "🫠", "😀😃😄", "🧑‍🤝‍🧑", "☺︎"];
const odd = [
  "e\u0301\u0301\u0301", "\u1100\u1161\u11a8 \u1112\u1161\u11ab", "A\u030a vs \u00c5 vs \u212b", "zero\u200bwidth\u200d\ufeffjoin",
  "\u202ertl\u202c \u200f", "line\u2028sep\u2029para", "\u0000nul\u0001\u001f\u007f", "\ud800lone\udfff", "\uffff\ufffe\uf8ff",
  "𝐀𝐁𝐂 𝔸𝔹 𝟙𝟚", "'ſ 'K 'S 'LL 'Re", "ﬁ ﬂ ㈱ ① ½", "\u00a0nbsp\u3000ideo\u2009thin", "x\u0308\u0323", "ｆｕｌｌｗｉｄｔｈ",
];
const digits = ["1", "12", "123", "1234", "12345678901234567890", "٠١٢٣٤٥", "１２３", "²³¹", "3.14159", "1,000,000", "0x7fff", "1e-9"];
const spaces = (n) => pick([" ", "\t", "\n", "\r\n", "  \n"]).repeat(n);

function specialsOf(tj) {
  return tj.added_tokens.map((a) => a.content).filter((c) => c.length > 2);
}
function lookAlikes(tok) {
  const inner = tok.slice(1, -1);
  return [
    tok, ` ${tok} `, tok + tok, tok.slice(0, -1), tok.slice(1), `<${inner}`, `${inner}>`, tok.toUpperCase(),
    tok.replace("<", "＜").replace(">", "＞"), `<${tok}>`, `${tok}\n${tok}`, tok.split("").join(" "),
  ];
}

const base = JSON.parse(fs.readFileSync(path.join(root, "tokenizer/testdata/corpus.json"), "utf8"));
const extra = [];
for (let i = 0; i < 12; i++) {
  let s = "";
  while (s.length < 2000 + 6000 * rand()) {
    s += pick([pick(scripts), pick(emoji), pick(odd), pick(digits), spaces(1 + Math.floor(rand() * 5))]) + pick([" ", "", "\n", "  "]);
  }
  extra.push(s);
}
for (const s of [...emoji, ...odd, ...digits]) extra.push(s, ` ${s} ${s}`);
for (const n of [1, 2, 3, 7, 16, 64, 300]) {
  extra.push(" ".repeat(n), "\n".repeat(n), "\t".repeat(n), "a" + " ".repeat(n) + "b", "x\r\n".repeat(n), ("ab ".repeat(n)).trim());
}
for (let n = 1; n <= 40; n += 3) extra.push("9".repeat(n), "word" + "7".repeat(n) + "word");
const specials = new Set();
for (const tj of Object.values(families)) for (const s of specialsOf(tj).slice(0, 12)) specials.add(s);
for (const s of ["<｜User｜>", "<｜Assistant｜>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>"]) specials.add(s);
for (const tok of specials) extra.push(...lookAlikes(tok).map((v) => `x${v}y ${v}`));
extra.push("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>");
const corpus = [...base, ...extra];
fs.writeFileSync(path.join(famDir, "corpus.json"), JSON.stringify(corpus, null, 0) + "\n");

const out = { generator: "tokenizers 0.23.2 (Hugging Face, Node bindings) via tools/tokref/families.mjs", families: {} };
for (const [name, tj] of Object.entries(families)) {
  const full = Tokenizer.fromString(JSON.stringify(tj));
  const plain = Tokenizer.fromString(JSON.stringify({ ...tj, added_tokens: [] }));
  const cfg = configs[name] || {};
  const llamaClass = cfg.tokenizer_class === "LlamaTokenizerFast" || cfg.tokenizer_class === "LlamaTokenizer";
  const tokenID = (t) => full.tokenToId(typeof t === "string" ? t : t.content);
  const entries = [];
  for (const text of corpus) {
    let withIds = (await full.encode(text, null, { addSpecialTokens: true })).getIds();
    if (llamaClass) {
      withIds = (await full.encode(text, null, { addSpecialTokens: false })).getIds();
      if (cfg.add_bos_token) withIds = [tokenID(cfg.bos_token), ...withIds];
      if (cfg.add_eos_token) withIds = [...withIds, tokenID(cfg.eos_token)];
    }
    const e = {
      with: withIds,
      without: (await full.encode(text, null, { addSpecialTokens: false })).getIds(),
      plain: (await plain.encode(text, null, { addSpecialTokens: false })).getIds(),
    };
    if (Buffer.byteLength(text) < 2000) e.decoded = await full.decode(withIds, false);
    entries.push(e);
  }
  out.families[name] = entries;
  console.log(`${name}: ${entries.length} texts`);
}
fs.writeFileSync(path.join(famDir, "reference.json.gz"), zlib.gzipSync(JSON.stringify(out), { level: 9 }));
