// Runs tokenizer.json regexes the way transformers.js does (JavaScript RegExp with the "gu" flags, after
// rewriting the (?i:...) group JavaScript lacks) and prints every match, for the Go pattern tests.
//
// Request:  {"patterns": ["..."], "texts": ["..."]}
// Response: [[["match", ...] per text] per pattern]
"use strict";
const fs = require("fs");

// The rewrite transformers.js applies (PROBLEMATIC_REGEX_MAP in its tokenizers.js).
const rewrites = [
  ["(?i:'s|'t|'re|'ve|'m|'ll|'d)", "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))"],
];

const req = JSON.parse(fs.readFileSync(0, "utf8"));
const out = req.patterns.map((p) => {
  for (const [from, to] of rewrites) p = p.replaceAll(from, to);
  const re = new RegExp(p, "gu");
  return req.texts.map((t) => Array.from(t.matchAll(re), (m) => m[0]).filter((m) => m.length > 0));
});
process.stdout.write(JSON.stringify(out));
