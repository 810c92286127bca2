// Package safetensors reads and writes Hugging Face safetensors checkpoints:
// single files and sharded directories (model.safetensors.index.json).
//
// A file is memory-mapped read-only and every tensor's Data is a zero-copy
// view into the mapping (when mmap is unavailable the file is read into
// memory instead). Views stay valid until the File or Checkpoint is closed
// and must never be written to: the mapping is read-only and writing to it
// faults. OpenFS reads a checkpoint from an fs.FS (one embedded in the
// binary): each file is read into memory after its size is checked, and the
// index may name only files at the root.
//
// Opening validates the whole header before any tensor is handed out: the
// 8-byte little-endian header length is at most MaxHeaderBytes and fits the
// file; the header is one UTF-8 JSON object without duplicate keys;
// "__metadata__", if present, maps strings to strings; every tensor names a
// known dtype, a shape of non-negative dimensions whose element and byte
// counts do not overflow, and data_offsets [begin, end] inside the data
// section with end − begin equal to the byte size; no two tensors overlap.
// Gaps between tensors are accepted (the Hugging Face reader is stricter and
// requires contiguous data); this package's writer never produces them.
//
// Supported dtypes are F32, F16, BF16, I32, I64, U8 and F8_E4M3 (the OCP
// float8_e4m3fn format DeepSeek checkpoints use). Any other dtype name,
// including spellings such as "F8_E4M3FN", is refused by name: the engine
// never guesses what unknown bytes mean.
//
// The writer produces files the Hugging Face reader accepts: header keys
// sorted by name, header padded with spaces to a multiple of 8 bytes, and a
// contiguous data section ordered by element size (largest first) and then
// by name, so that every tensor starts at a multiple of its element size and
// F32/I32 views of files written here are always aligned.
//
// The package must never interpret tensor names (model structure belongs to
// the model package), never convert or copy data behind the caller's back
// (views are views; ToF32 is the explicit conversion), and never accept a
// header it has not fully validated.
package safetensors
