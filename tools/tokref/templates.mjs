// Renders the chat templates of the template tests with @huggingface/jinja
// (Hugging Face's JavaScript implementation of Jinja for chat templates),
// given the variables vLLM gives Hugging Face's apply_chat_template:
// content as a string ("" for null), tool-call arguments parsed from JSON,
// tools and documents as sent, chat_template_kwargs as extra variables,
// and the tokenizer's special-token strings.
//
//   cd tools/tokref && npm ci && node templates.mjs
//   node templates.mjs --templates DIR --out FILE   (any other *.jinja files)
//
// Inputs:  tokenizer/testdata/templates/conversations.json
//          the chat templates of testdata/families/qwen3 and
//          data/deepseek-v3, and testdata/templates/*.jinja
// Output:  tokenizer/testdata/templates/reference.json
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const tdir = path.join(root, "tokenizer/testdata/templates");
const arg = (name) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};

const tokenString = (t) => (t == null ? undefined : typeof t === "string" ? t : t.content);
const fromConfig = (p) => {
  const c = JSON.parse(fs.readFileSync(p, "utf8"));
  return { source: c.chat_template, specials: { bos_token: tokenString(c.bos_token), eos_token: tokenString(c.eos_token), pad_token: tokenString(c.pad_token), unk_token: tokenString(c.unk_token) } };
};

const templates = {};
const extraDir = arg("--templates");
if (extraDir) {
  for (const f of fs.readdirSync(extraDir).filter((f) => f.endsWith(".jinja"))) {
    templates[f.replace(/\.jinja$/, "")] = { source: fs.readFileSync(path.join(extraDir, f), "utf8"), specials: {} };
  }
} else {
  templates.qwen3 = fromConfig(path.join(root, "tokenizer/testdata/families/qwen3/tokenizer_config.json"));
  templates["deepseek-v3"] = fromConfig(path.join(root, "tokenizer/data/deepseek-v3/tokenizer_config.json"));
  for (const f of fs.readdirSync(tdir).filter((f) => f.endsWith(".jinja"))) {
    templates[f.replace(/\.jinja$/, "")] = { source: fs.readFileSync(path.join(tdir, f), "utf8"), specials: {} };
  }
}

const conversations = JSON.parse(fs.readFileSync(path.join(tdir, "conversations.json"), "utf8"));
// vLLM's view of a message.
const parseArgs = (s) => {
  try {
    return JSON.parse(s);
  } catch {
    return {}; // vLLM: empty or invalid JSON becomes {}
  }
};
const asVLLM = (m) => {
  const out = { role: m.role, content: m.content == null ? "" : m.content };
  if (m.tool_calls && m.tool_calls.length > 0) {
    out.tool_calls = m.tool_calls.map((c) => {
      const call = {};
      if (c.id) call.id = c.id;
      call.type = c.type || "function";
      call.function = { name: c.function.name, arguments: parseArgs(c.function.arguments) };
      return call;
    });
  }
  if (m.reasoning_content != null) {
    out.reasoning = m.reasoning_content;
    out.reasoning_content = m.reasoning_content;
  }
  if (m.tool_call_id) out.tool_call_id = m.tool_call_id;
  if (m.name) out.name = m.name;
  return out;
};

const result = { generator: "@huggingface/jinja 0.5.11 via tools/tokref/templates.mjs", templates: {} };
for (const [name, t] of Object.entries(templates)) {
  const tpl = new Template(t.source);
  result.templates[name] = conversations.map((c) => {
    const vars = {
      ...Object.fromEntries(Object.entries(t.specials).filter(([, v]) => v !== undefined)),
      ...(c.kwargs || {}),
      messages: c.messages.map(asVLLM),
      tools: c.tools ?? null,
      documents: c.documents ?? null,
      add_generation_prompt: c.add_generation_prompt,
    };
    try {
      const rendered = tpl.render(vars);
      // JavaScript concatenates a string and an object where Python raises
      // TypeError; record what Python does.
      if (rendered.includes("[object Object]") || rendered.includes("[object Map]")) return { error: "can only concatenate str (not dict) to str" };
      return { rendered };
    } catch (e) {
      return { error: String(e.message || e) };
    }
  });
}
const out = arg("--out") || path.join(tdir, "reference.json");
fs.writeFileSync(out, JSON.stringify(result, null, 1) + "\n");
console.log(`rendered ${conversations.length} conversations with ${Object.keys(templates).length} templates`);
