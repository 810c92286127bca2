// Package config describes sparse-MLA model architectures (DeepSeek-V3.2,
// GLM-5 and their family): it reads HF config.json files, writes them back,
// and holds the built-in presets every command can name with --model.
//
// It must never load weights, touch the file system beyond config.json, or
// know about ranks: parallel layout and memory belong to other packages.
package config
