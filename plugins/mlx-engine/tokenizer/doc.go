// Package tokenizer turns text into token ids and back for the models the MLX engine serves, reading the
// tokenizer.json (and tokenizer_config.json) that Hugging Face and mlx-community model directories ship.
//
// Why our own: the engine is pure Go, and a model only answers sensibly when its prompt is cut into exactly the
// ids it was trained on. So the goal is id-for-id agreement with the reference implementations, checked by the
// tests against @lenml/tokenizers (a port of transformers.js) on the real Llama 2 / Mistral, Llama 3 and Qwen 3
// files and a corpus of scripts, whitespace, numbers, code and emoji.
//
// What it reads: BPE models, both byte-level (GPT-2 alphabet, Llama 3's ignore_merges, Qwen) and
// SentencePiece-style (the "▁" convention, byte_fallback, fuse_unk, unk); the normalizers Sequence, Prepend,
// Replace, NFC/NFD/NFKC/NFKD, Lowercase and Strip; the pre-tokenizers Sequence, Split (all five behaviours,
// invert), ByteLevel, Metaspace, Digits and WhitespaceSplit; the post-processors TemplateProcessing, ByteLevel,
// Bert/RobertaProcessing and Sequence; the decoders Sequence, Replace, ByteFallback, Fuse, Strip, ByteLevel and
// Metaspace; added tokens with lstrip, rstrip, single_word and normalized. Anything else fails at load with
// an error that names it.
//
// Regexes: the Split patterns of GPT-2, Llama 3 and Qwen 2/3 use lookahead, which Go's RE2 cannot run. They are
// recognised by their exact text and run by hand-written matchers (pattern.go), which the tests compare with
// JavaScript's RegExp on thousands of random strings. Other regexes run on RE2 after \s is widened to
// JavaScript's meaning; a regex RE2 cannot express is refused at load.
//
// Decoding is a chain of streaming stages (decoder.go): Decode and the incremental Stream run the same code, so
// the text a Stream releases token by token always adds up to Decode of the same ids, it never releases half a
// UTF-8 character, and each token costs O(1) amortized work.
//
// Where the references disagree, this package follows transformers.js for what the real test files use and
// the Rust tokenizers elsewhere:
//   - \s means JavaScript's whitespace (includes U+FEFF, excludes U+0085); Oniguruma differs on those two.
//   - Letters and numbers follow Go's Unicode tables (15.0); Node's may be newer for recently added characters.
//   - Invalid UTF-8 from byte tokens becomes U+FFFD per maximal subpart (TextDecoder, from_utf8_lossy); the Rust
//     ByteFallback decoder writes one U+FFFD per byte.
//   - An added token interrupts a byte-level run when decoding (transformers.js); Rust joins the bytes around it.
//   - The Metaspace decoder drops every "▁" of the first token unless prepend_scheme is "never" (Rust).
//   - Split honours all behaviours, Metaspace its split flag, added tokens single_word and normalized (Rust);
//     transformers.js ignores them. The files under test do not use them; the goldens in testdata/golden do.
//   - clean_up_tokenization_spaces is never applied: it rewrites " ." as "." and would corrupt generated code.
//   - BOS/EOS come from tokenizer.json's post-processor only; tokenizer_config's add_bos_token is not consulted,
//     as for transformers' fast tokenizers.
//
// A Tokenizer is safe for concurrent use. It caches the ids of recently seen words in a bounded, sharded cache.
package tokenizer
