// Package model is the transformer forward of one rank: embedding, RMSNorm,
// MLA attention with the DSA lightning indexer over the paged KV cache, the
// dense SwiGLU MLP, the final norm and the LM head. It also names, creates
// (seeded random weights) and loads checkpoints under HF tensor names.
//
// Every step buffer is sized when a Runner is built and never grows; a step
// writes its own KV into the cache before any of its rows attend. The package
// must never schedule requests, sample tokens or talk to other ranks itself.
package model
