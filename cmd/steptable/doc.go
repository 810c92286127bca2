// Command steptable turns the output of one or more runs of the model
// package's BenchmarkStep into the Markdown tables of docs/performance.md:
// per case the median and range over the runs of tokens/s and of the
// roofline fractions, the read and FMA probes, and for every two-thread case
// with a one-thread counterpart both its speed-up and the machine's own (how
// much faster the two-thread probes say the same step could run), and the
// first as a share of the second, which is the two-thread step's roofline
// fraction over the one-thread step's. A decode case also shows the ceiling
// of a step that runs its parts one after another: the whole-step roofline
// over the sum of the parts' rooflines, the largest whole-step fraction such
// a step reaches with every part at its own roofline. A decode case with
// fp8 weights also shows its fraction of the whole-step roofline with the
// cores' fp8 product rates as the compute ceiling of its fp8 products
// (fp8-roofline), and a two-thread one the machine's speed-up by that
// roofline with the step's share of it. A run on a
// shared host moves the probes between runs, so the second ratio is what the
// first is to be read against (a memory-bound step cannot gain more than the
// read bandwidth does).
//
//	go test -c -o /tmp/model.test ./model
//	for r in 1 2 3 4 5; do /tmp/model.test -test.run XXX -test.bench 'Step/.*/decode' -test.benchtime 20x -test.timeout 0; done > /tmp/steps.log
//	go run ./cmd/steptable /tmp/steps.log
//
// It must never print a value the input does not hold or imply: a case
// without a metric shows a dash, and a ratio needs both of its cases. It
// reads its input line by line with a bounded line length and ignores every
// line that is not a BenchmarkStep result.
package main
