// Command cpmla runs, verifies, serves, benchmarks and plans sparse-MLA
// inference. Each subcommand lives in its own file and registers itself.
//
// The command layer parses flags and prints results; it must never hold
// model math, scheduling or collective logic of its own.
package main
