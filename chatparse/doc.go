// Package chatparse splits the text a chat model generates into reasoning,
// content and tool calls, the way vLLM's --reasoning-parser and
// --tool-call-parser do for the GLM and DeepSeek-V3.2 families, both for a
// whole response and for a stream.
//
// Parsers (vLLM's names):
//   - reasoning "deepseek_r1" and "glm45": the text is reasoning until the
//     first </think> and content after it; a <think> before that point is
//     dropped (chat templates often open it in the prompt). For "glm45",
//     chat_template_kwargs with enable_thinking or thinking false (and
//     neither true) makes everything content, as vLLM does; "deepseek_v3"
//     (DeepSeek-V3.1/V3.2) is the same split when thinking or
//     enable_thinking is true and all content otherwise.
//   - tool calls "glm45" (GLM-4.5/4.6: the name is the first line) and
//     "glm47" (GLM-4.7/5: the name ends at the first <arg_key>):
//     <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>.
//     A value whose schema type is "string" is kept as written; any other
//     is read as JSON, then as a Python literal, else kept as (stripped)
//     text. Content is the text before the first call, null when it is
//     empty or only whitespace.
//   - tool calls "deepseek_v32": <｜DSML｜function_calls> blocks of
//     <｜DSML｜invoke name="…"> with <｜DSML｜parameter name="…"
//     string="true|false">; string="true" values are kept as written,
//     others are coerced to the schema's types (null, integer, number,
//     boolean, object, array, string, in that order), a lone "arguments"
//     or "input" wrapper the schema does not name is unwrapped. Content is
//     the text before the first block, null when there is none.
//
// Arguments are a JSON object text written as Python's
// json.dumps(ensure_ascii=False) writes it (", " and ": " separators,
// floats as Python's repr), so they are byte-identical to vLLM's.
//
// Use: the server makes one Parser per generated choice with New, passing
// the request's tools and chat_template_kwargs, and only a ToolParser when
// tool calls are to be parsed for this request (auto tool choice is on,
// the request has tools and tool_choice is not "none"). The text it feeds
// must be detokenized with special tokens kept (<think>, <tool_call> and
// the DSML markers are added tokens, some marked special). Each Feed
// returns a Delta: reasoning text, content text, and tool-call deltas (the
// first for a call has Index, ID and Name; later ones append to its
// arguments). Close returns what was held back; Result then returns the
// non-streaming Message (reasoning, content, tool calls with the same ids
// as streamed). Finish reason "tool_calls" applies when Result has calls.
// Parse does the same for a whole text at once.
//
// Streaming releases text as soon as no tag can still start in it, streams
// string argument values character by character and other values when
// they are complete. For output that ends outside a tool call, with
// distinct argument names, the streamed arguments of each call
// concatenate to exactly its Result arguments (the tests hold this on
// random outputs cut at random points). Where vLLM's own non-streaming and
// streaming paths disagree on malformed output, this package documents its
// choice: a value whose </arg_value> is missing before </tool_call> is
// kept (vLLM's streaming path does so); a call with an empty name is no
// call; a value JSON cannot hold (NaN, Infinity, sets, bytes, complex
// numbers) stays text instead of making the arguments invalid JSON.
//
// The package must never allocate more than a constant factor of the text
// it was fed, never take more than linear time in it however it is cut
// (scans resume where they stopped), and never panic on any input (it is
// fuzzed).
package chatparse
