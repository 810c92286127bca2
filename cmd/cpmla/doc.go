// Command cpmla runs, verifies, serves, benchmarks and plans sparse-MLA
// inference. Each subcommand lives in its own file and registers itself.
//
// Every command checks its flags before anything is loaded, allocated or
// bound, the same way wherever a flag appears (limits.go: parallel sizes,
// counts and durations bounded; the start-up's weights, step buffers,
// caches and prompts checked against the memory this process may use), and
// refuses positional arguments it does not take. An error is one line on
// stderr, prefixed "cpmla:", naming the flag, the values and a setting that
// works.
//
// The command layer parses flags and prints results; it must never hold
// model math, scheduling or collective logic of its own.
package main
