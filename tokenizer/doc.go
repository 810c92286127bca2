// Package tokenizer turns text into token ids and back for the models cpmla
// serves, reading Hugging Face tokenizer.json / tokenizer_config.json /
// chat_template.jinja files.
//
// It implements byte-level BPE as those files describe it: the vocabulary
// and the ranked merges (both the "a b" and the ["a", "b"] spelling,
// ignore_merges), the NFC/NFD/NFKC/NFKD normalizers, added tokens matched
// before any splitting (leftmost, then longest first; normalized ones in the
// normalized text), the Sequence / Split / ByteLevel pre-tokenizers, the
// BOS/EOS rule of the configuration or a TemplateProcessing post-processor
// (alone or in a Sequence), and the ByteLevel decoder. The DeepSeek-V3
// tokenizer is embedded (data/deepseek-v3, MIT licence beside it), so a
// binary tokenizes with no external files; a checkpoint directory with its
// own tokenizer.json takes precedence (ForCheckpoint). The chat template
// (chat_template.jinja, else tokenizer_config.json's, or WithChatTemplate)
// is parsed once by the jinja sub-package and rendered per request with
// what vLLM gives it (RenderChat, EncodeChatInput). StreamDecoder turns
// generated ids into text pieces that never split a character.
// EncodeLimited encodes untrusted text and stops as soon as it provably has
// more tokens than allowed.
//
// The split patterns of DeepSeek-V3, Llama 3 (cl100k, GLM-4), Qwen2, GPT-4o (o200k) and of
// the byte-level pre-tokenizer run on hand-written matchers (scan.go) that
// are exact rewrites of the patterns; any other pattern runs on
// github.com/dlclark/regexp2, which supports the look-ahead these patterns
// use. The tests hold the two paths equal (also under fuzzing), and the ids
// of five tokenizer families equal to Hugging Face's tokenizers library on
// long, multilingual and adversarial texts (testdata/families, written by
// tools/tokref/families.mjs).
//
// Invariants:
//   - For byte-level tokenizers, Decode(Encode(s, false), false) == s for
//     every string s, including invalid UTF-8 (every byte has a symbol), so
//     Encode never drops or reorders input bytes (normalizers aside).
//   - With ParseSpecial off, added-token strings in text are not matched;
//     for the embedded tokenizer no added-token id comes out of plain text
//     (untrusted text cannot inject control tokens).
//   - The concatenated output of a StreamDecoder equals Decode(ids, true)
//     (Decode(ids, false) for one that keeps special tokens).
//   - EncodeLimited returns EncodeWith's ids when they fit the limit and
//     ErrTooManyTokens otherwise.
//
// The package must never compile a pattern or a template per call, never
// read files after loading, never allocate a table a file asks for before
// checking its size, never guess at a tokenizer.json feature it does not
// implement (unknown normalizers, pre-tokenizers, decoders,
// post-processors and BPE options are refused at load time, naming the
// feature and what is supported), and never silently change the ids of a
// supported tokenizer: reference parity is the contract.
package tokenizer
