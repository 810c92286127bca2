// Package checkpoints holds the checkpoints built into the cpmla binary:
// small models of the real architecture, trained, in the published Hugging
// Face layout (config.json, model.safetensors.index.json and its shard,
// tokenizer.json, tokenizer_config.json with the chat template), embedded
// with go:embed so that `--model NAME` works from a fresh clone with no
// file outside the repository.
//
//   - cpmla-tiny: glm_moe_dsa with GLM-5's 576/512 MLA latent, 4 heads, the
//     DSA indexer (top-k 128), one dense and two MoE layers (8 routed experts of
//     width 128, 2 per token, one shared expert, noaux_tc routing), one MTP
//     layer, a byte-level BPE vocabulary of 512 with <|endoftext|>,
//     <|user|>, <|assistant|> and <|system|>, bf16 weights. It was trained
//     (tools/train) on synthetic tasks with computable answers: one- and
//     two-step arithmetic word problems answered in GSM8K's format (the
//     working column by column, then "#### N"), the pass key hidden in a haystack of up to 4096
//     tokens, name lookups and copying. What it scores on them is measured
//     by `cpmla eval` (docs/verification.md).
//   - cpmla-tiny-fp8: the same weights block-quantized to F8_E4M3 with
//     weight_scale_inv, as published fp8 checkpoints are.
//
// The package only hands out the files (Open); reading them belongs to the
// config, safetensors and tokenizer packages. It must never write the files
// anywhere or hand out a writable view of them, and must stay free of
// imports from the rest of cpmla (config imports it).
package checkpoints
