// Package jinja parses and renders the subset of the Jinja2 template
// language that model chat templates (tokenizer_config.json's
// chat_template) use: output expressions, if/elif/else, for loops with
// loop variables and else branches, set (including namespace attributes),
// comments, whitespace control (`{%-`, `-%}`), string/number/list/dict
// literals, arithmetic, comparisons, boolean logic, the ternary operator,
// member and index access, a fixed set of tests, filters, string and dict
// methods, and the functions namespace, range and raise_exception.
//
// Templates are parsed once (Parse) and rendered many times (Render); a
// Template is immutable and safe for concurrent use. The environment follows
// the one Hugging Face transformers renders chat templates with:
// trim_blocks and lstrip_blocks are on, undefined values render as the
// empty string, and attribute access on an undefined value is an error.
//
// The package must never evaluate anything outside its own interpreter
// (no reflection on Go values handed in beyond maps, slices and scalars),
// never touch the file system or network, and never silently ignore a
// construct it does not support: Parse refuses it with the construct's name
// and position.
package jinja
