// Generates the reference data of the Go tokenizer tests with an
// independent implementation, @lenml/tokenizers (a port of the Hugging Face
// tokenizers pipeline to JavaScript, with its own Jinja engine).
//
//   cd tools/tokref && npm ci && node gen.mjs
//
// Inputs:  tokenizer/data/deepseek-v3/{tokenizer.json,tokenizer_config.json}
//          tokenizer/testdata/corpus.json (list of strings)
// Outputs: tokenizer/testdata/reference_ids.json
//          tokenizer/testdata/chat_reference.json
//
// Two rules are applied here rather than by the library, and the Go side
// implements them the same way:
//  - BOS: the library's LlamaTokenizer does not add BOS for a ByteLevel
//    post-processor, while Hugging Face transformers' LlamaTokenizerFast
//    prepends bos_token when tokenizer_config.json says add_bos_token. The
//    "special" ids are therefore [bos] + encode(text) with the library's own
//    special-token splitting when add_bos_token is true.
//  - Plain text: the "plain" ids encode the text with no added-token
//    matching at all (the library is built from a copy of tokenizer.json
//    with an empty added_tokens list), so "<｜User｜>" in text is spelled
//    with ordinary BPE pieces.
import { TokenizerLoader } from "@lenml/tokenizers";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const dataDir = path.join(root, "tokenizer/data/deepseek-v3");
const testdata = path.join(root, "tokenizer/testdata");

const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dataDir, "tokenizer.json"), "utf8"));
const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(dataDir, "tokenizer_config.json"), "utf8"));

const withAdded = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const plain = TokenizerLoader.fromPreTrained({
  tokenizerJSON: { ...tokenizerJSON, added_tokens: [] },
  tokenizerConfig,
});

const bosContent = typeof tokenizerConfig.bos_token === "string" ? tokenizerConfig.bos_token : tokenizerConfig.bos_token.content;
const bosID = withAdded.model.tokens_to_ids.get(bosContent);
if (bosID === undefined) throw new Error(`bos_token ${bosContent} not in vocabulary`);

const corpus = JSON.parse(fs.readFileSync(path.join(testdata, "corpus.json"), "utf8"));
const entries = corpus.map((text) => {
  const parsed = withAdded.encode(text, { add_special_tokens: false });
  return {
    text,
    special: tokenizerConfig.add_bos_token ? [bosID, ...parsed] : parsed,
    plain: plain.encode(text, { add_special_tokens: false }),
  };
});
fs.writeFileSync(
  path.join(testdata, "reference_ids.json"),
  JSON.stringify({ generator: "@lenml/tokenizers 3.7.2 via tools/tokref/gen.mjs", bos: bosID, entries }, null, 1) + "\n",
);

const toolCall = (name, args) => ({ type: "function", function: { name, arguments: args } });
const conversations = [
  [{ role: "user", content: "Hello!" }],
  [{ role: "system", content: "You are a helpful assistant." }, { role: "user", content: "What is 2+2?" }],
  [
    { role: "system", content: "Be brief." },
    { role: "user", content: "Name a color." },
    { role: "assistant", content: "Blue." },
    { role: "user", content: "Another one?" },
  ],
  [
    { role: "system", content: "First system prompt." },
    { role: "system", content: "Second system prompt." },
    { role: "user", content: "Hi" },
  ],
  [
    { role: "user", content: "多轮对话：你好" },
    { role: "assistant", content: "你好！有什么可以帮你？" },
    { role: "user", content: "讲个笑话 😀" },
    { role: "assistant", content: "Why did the tokenizer split? Because it had merge conflicts.\n\nDone." },
  ],
  [{ role: "user", content: "  spaces and\ttabs\nand newlines  " }],
  [
    { role: "user", content: "What's the weather in Paris?" },
    { role: "assistant", content: null, tool_calls: [toolCall("get_weather", "{\"city\": \"Paris\"}")] },
    { role: "tool", content: "{\"temp\": 21}" },
    { role: "assistant", content: "It is 21 degrees." },
  ],
  [
    { role: "user", content: "Weather in two cities?" },
    {
      role: "assistant",
      content: null,
      tool_calls: [toolCall("get_weather", "{\"city\": \"Oslo\"}"), toolCall("get_weather", "{\"city\": \"Rome\"}")],
    },
    { role: "tool", content: "cold" },
    { role: "tool", content: "warm" },
  ],
  [{ role: "assistant", content: "An assistant turn first." }, { role: "user", content: "ok" }],
  [],
  [{ role: "system", content: "Only a system prompt." }],
  [{ role: "user", content: "Literal markers <｜User｜> and {{ braces }} stay text." }],
];
const chats = [];
for (const messages of conversations) {
  for (const add_generation_prompt of [true, false]) {
    const rendered = withAdded.apply_chat_template(messages, { tokenize: false, add_generation_prompt });
    chats.push({ messages, add_generation_prompt, rendered });
  }
}
fs.writeFileSync(
  path.join(testdata, "chat_reference.json"),
  JSON.stringify({ generator: "@lenml/tokenizers 3.7.2 via tools/tokref/gen.mjs", chats }, null, 1) + "\n",
);
console.log(`wrote ${entries.length} id entries and ${chats.length} chat renderings`);
