// Package jinja parses and renders the subset of the Jinja2 template
// language that model chat templates (tokenizer_config.json's
// chat_template, chat_template.jinja) use: output expressions,
// if/elif/else, for loops with loop variables, filters and else branches,
// set (including namespace attributes), macros with default and keyword
// arguments, comments, whitespace control (`{%-`, `-%}`),
// string/number/list/dict literals, arithmetic, comparisons, boolean logic,
// the ternary operator, member and index access and slices, Jinja2's tests
// (defined, none, string, mapping, iterable, odd, divisibleby, in, …) and
// filters (default, join, length, trim, tojson, map, selectattr, reject,
// reverse, int, title, …), Python's string and dict methods (strip, split
// with maxsplit, startswith, items, get, …), and the functions namespace,
// range, raise_exception and Hugging Face's strftime_now.
//
// Templates are parsed once (Parse) and rendered many times (Render); a
// Template is immutable and safe for concurrent use. The environment follows
// the one Hugging Face transformers renders chat templates with:
// trim_blocks and lstrip_blocks are on, undefined values render as the
// empty string, attribute access on an undefined value is an error, dicts
// keep their insertion order (Dict, FromJSON), and tojson is Python's
// json.dumps (ensure_ascii=False, no sorted keys). Values print as Python
// prints them (True, None, 1.0, ['a']).
//
// A template may come from an untrusted checkpoint: Parse refuses
// templates over MaxTemplateBytes and nesting deeper than 100, and a render
// is bounded in output bytes, loop iterations plus macro calls, and macro
// depth (Limits; ErrOutputLimit, ErrIterationLimit, ErrDepthLimit).
//
// The package must never evaluate anything outside its own interpreter
// (no reflection on Go values handed in beyond maps, slices and scalars),
// never touch the file system or network, never exceed its Limits, and
// never silently ignore a construct it does not support: Parse refuses it
// with the construct's name and position.
package jinja
