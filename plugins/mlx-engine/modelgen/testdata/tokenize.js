// Loads a generated tokenizer.json + tokenizer_config.json with @lenml/tokenizers (a faithful port of the
// Hugging Face tokenizers used by transformers.js) and reports encodings, decodings and a rendered chat template.
// stdin: {"dir": "...", "texts": ["..."], "messages": [{"role": "...", "content": "..."}]}
const fs = require("fs");
const path = require("path");
// Resolve from the working directory (testdata/node), where the pinned packages are installed.
const { TokenizerLoader } = require(require.resolve("@lenml/tokenizers", { paths: [process.cwd()] }));

const input = JSON.parse(fs.readFileSync(0, "utf8"));
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(input.dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(input.dir, "tokenizer_config.json"), "utf8")),
});
const out = { ids: [], decoded: [] };
for (const text of input.texts) {
  const ids = tokenizer.encode(text, { add_special_tokens: false });
  out.ids.push(ids);
  out.decoded.push(tokenizer.decode(ids));
}
out.chat = tokenizer.apply_chat_template(input.messages, { tokenize: false, add_generation_prompt: true });
out.chatIds = tokenizer.apply_chat_template(input.messages, { tokenize: true, add_generation_prompt: true });
process.stdout.write(JSON.stringify(out));
