// Reference tokenizer for the Go tests: reads a JSON request on stdin, answers with @lenml/tokenizers
// (a port of transformers.js) on stdout. Run with testdata/node as the working directory.
//
// Request:  {"dir": "<dir with tokenizer.json and tokenizer_config.json>",
//            "texts": ["..."], "decode": [[1, 2, 3], ...]}
// Response: {"encode": [{"special": [ids], "plain": [ids], "decoded": "...", "decoded_skip": "..."}],
//            "decode": [{"plain": "...", "skip": "..."}]}
// "special" is encode(text) with add_special_tokens, "plain" without; "decoded" decodes "special" as is and
// "decoded_skip" with skip_special_tokens. No clean_up_tokenization_spaces: the Go tokenizer never applies it.
"use strict";
const fs = require("fs");
const path = require("path");
// Resolve packages from the working directory (testdata/node), not from this file's directory.
const requireFixture = require("module").createRequire(path.join(process.cwd(), "package.json"));
const { TokenizerLoader } = requireFixture("@lenml/tokenizers");

const req = JSON.parse(fs.readFileSync(0, "utf8"));
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(req.dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(req.dir, "tokenizer_config.json"), "utf8")),
});

function decode(ids, skip) {
  if (ids.length === 0) return ""; // transformers.js refuses empty input; an empty decode is "".
  return tok.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false });
}

const out = { encode: [], decode: [] };
for (const text of req.texts || []) {
  const special = tok.encode(text, { add_special_tokens: true });
  const plain = tok.encode(text, { add_special_tokens: false });
  out.encode.push({ special, plain, decoded: decode(special, false), decoded_skip: decode(special, true) });
}
for (const ids of req.decode || []) {
  out.decode.push({ plain: decode(ids, false), skip: decode(ids, true) });
}
process.stdout.write(JSON.stringify(out));
