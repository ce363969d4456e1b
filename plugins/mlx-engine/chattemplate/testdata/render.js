// Renders chat templates with @huggingface/jinja, the reference for the Go chattemplate tests. Variables are
// passed as transformers.js apply_chat_template passes them: messages, add_generation_prompt, tools (null),
// documents (null) and the special tokens. Run with testdata/node as the working directory.
//
// Request:  {"templates": [{"name": "...", "template": "...", "bos_token": "...", "eos_token": "..."}],
//            "conversations": [{"name": "...", "messages": [...], "tools": [...], "vars": {...}}]}
// Response: {"now": ms since the epoch, taken before rendering (strftime_now's date, for the Go side to use),
//            "renderings": [{"template": "...", "conversation": "...", "add_generation_prompt": bool,
//                            "output": "..."} or {..., "error": "..."}]}
"use strict";
const fs = require("fs");
const path = require("path");
// Resolve packages from the working directory (testdata/node), not from this file's directory.
const requireFixture = require("module").createRequire(path.join(process.cwd(), "package.json"));
const { Template } = requireFixture("@huggingface/jinja");

const req = JSON.parse(fs.readFileSync(0, "utf8"));
const now = Date.now();
const out = [];
for (const t of req.templates) {
  const tmpl = new Template(t.template);
  for (const c of req.conversations) {
    for (const agp of [false, true]) {
      const r = { template: t.name, conversation: c.name, add_generation_prompt: agp };
      try {
        r.output = tmpl.render({
          messages: c.messages,
          add_generation_prompt: agp,
          tools: c.tools ?? null,
          documents: null,
          bos_token: t.bos_token,
          eos_token: t.eos_token,
          ...(c.vars || {}),
        });
      } catch (e) {
        r.error = String(e.message || e);
      }
      out.push(r);
    }
  }
}
process.stdout.write(JSON.stringify({ now, renderings: out }));
