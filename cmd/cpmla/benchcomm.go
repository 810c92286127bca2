package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
	"github.com/cpmla/cpmla/comm/mpi"
	"github.com/cpmla/cpmla/plan"
)

func init() { register(newBenchParentWithComm) }

// newBenchParentWithComm returns the `bench` command with `bench comm`.
// Other files build their own `bench` parent for their subcommands; two
// root commands of one name would shadow each other, so this one adopts the
// subcommands of every other registered `bench` and hides that duplicate
// (its constructor is wrapped in place before the root adds it).
func newBenchParentWithComm() *cobra.Command {
	bench := &cobra.Command{Use: "bench", Short: "Benchmarks of the engine and its collectives",
		Annotations: map[string]string{benchParentMark: "true"}}
	bench.AddCommand(newBenchCommCmd())
	if adoptingBench { // called from the loop below: this is the probe of our own slot
		return bench
	}
	adoptingBench = true
	defer func() { adoptingBench = false }()
	for i, newCmd := range commands {
		if other := newCmd(); other.Name() == "bench" && other.Annotations[benchParentMark] == "" {
			for _, sub := range other.Commands() {
				other.RemoveCommand(sub)
				bench.AddCommand(sub)
			}
			orig := newCmd
			commands[i] = func() *cobra.Command {
				c := orig()
				c.Hidden = true
				return c
			}
		}
	}
	return bench
}

// benchParentMark annotates the bench parent built here, so that the
// adoption loop tells it from the others; adoptingBench stops the loop from
// recursing through this constructor's own slot.
const benchParentMark = "cpmla/bench-parent"

var adoptingBench bool

// commShape is one decode-step collective of a 64-head MLA layer on a DCP
// group of p ranks at t tokens: perRank is the element count each member
// contributes (f32). The layouts are those of package cp.
type commShape struct {
	name    string
	op      comm.Op
	perRank func(p, t int) int
}

const benchHeads = 64 // gathered query heads (N·H)

var commShapes = []commShape{
	// cp.QueryGather: each rank's H = 64/P heads × 576 (latent 512 + rope 64).
	{"q-allgather", comm.OpAllGather, func(p, t int) int { return t * benchHeads / p * 576 }},
	// cp.Combiner ag_rs: the LSEs of all 64 gathered heads.
	{"lse-allgather", comm.OpAllGather, func(p, t int) int { return t * benchHeads }},
	// cp.Combiner ag_rs: the rescaled partial outputs, 64 heads × 512.
	{"reduce-scatter", comm.OpReduceScatter, func(p, t int) int { return t * benchHeads * 512 }},
	// cp.Combiner a2a: P parts of [T, H, 512 + 1] (output and LSE packed).
	{"a2a-packed", comm.OpAllToAll, func(p, t int) int { return t * benchHeads * 513 }},
}

// commResult is one measured collective, as `bench comm --json` prints it.
type commResult struct {
	Transport  string  `json:"transport"`
	Ranks      int     `json:"ranks"`
	Collective string  `json:"collective"`
	Op         string  `json:"op"`
	Tokens     int     `json:"tokens"`
	Count      int     `json:"count_per_rank"`
	BytesSent  int64   `json:"bytes_sent_per_rank"`
	Iterations int     `json:"iterations"`
	LatencyUS  float64 `json:"latency_us"`
	GBPerS     float64 `json:"gb_per_s"`
}

type benchCommOptions struct {
	transport  string
	ranks      []int
	tokens     []int
	iterations int
	minTime    time.Duration
	timeout    time.Duration
	asJSON     bool
}

func newBenchCommCmd() *cobra.Command {
	o := benchCommOptions{}
	cmd := &cobra.Command{
		Use:   "comm",
		Short: "Latency and bandwidth of the decode-step collectives (query gather, LSE gather, reduce-scatter, packed all-to-all)",
		Long: "Measures each collective a DCP decode step issues, at 64 gathered heads, for the in-process\n" +
			"transport (ranks are goroutines; --ranks sets the group sizes) or MPI (one process per rank,\n" +
			"under mpirun; the group is the whole job):\n\n" +
			"  cpmla bench comm --ranks 2,4\n" +
			"  mpirun -np 4 cpmla bench comm --comm mpi        (binary built with -tags mpi)\n\n" +
			"Latency is the mean time per call on rank 0; GB/s is the bytes rank 0 sends by the\n" +
			"definitions in docs/collectives.md over that time.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.transport == "" {
				o.transport = "inproc"
				if mpi.Launched() {
					o.transport = "mpi"
				}
			}
			if err := o.check(); err != nil {
				return err
			}
			switch o.transport {
			case "inproc":
				res, err := benchCommInproc(o)
				if err != nil {
					return err
				}
				return printCommResults(cmd.OutOrStdout(), res, o.asJSON)
			default:
				return benchCommMPI(cmd.OutOrStdout(), o)
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.transport, "comm", "", "transport: inproc or mpi (default: mpi when started by mpirun, else inproc)")
	f.IntSliceVar(&o.ranks, "ranks", []int{2, 4}, "group sizes for --comm inproc (divisors of 64); MPI uses the job's size")
	f.IntSliceVar(&o.tokens, "tokens", []int{1, 64}, "decode tokens per step")
	f.IntVar(&o.iterations, "iterations", 0, "calls per measurement (0: as many as fit --min-time, decided by rank 0)")
	f.DurationVar(&o.minTime, "min-time", 200*time.Millisecond, "target time per measurement when --iterations is 0")
	f.DurationVar(&o.timeout, "timeout", inproc.DefaultTimeout, "deadline of each collective")
	f.BoolVar(&o.asJSON, "json", false, "print the results as JSON")
	return cmd
}

func (o *benchCommOptions) check() error {
	if o.transport != "inproc" && o.transport != "mpi" {
		return fmt.Errorf("--comm %q: unknown transport; use --comm inproc or --comm mpi", o.transport)
	}
	if o.transport == "inproc" {
		if len(o.ranks) == 0 {
			return errors.New("--ranks is empty; use --ranks 2,4")
		}
		for _, p := range o.ranks {
			if err := checkBenchRanks(p); err != nil {
				return fmt.Errorf("--ranks %d: %w", p, err)
			}
		}
	}
	if len(o.tokens) == 0 {
		return errors.New("--tokens is empty; use --tokens 1,64")
	}
	for _, t := range o.tokens {
		if t < 1 || t > maxBenchTokens {
			return fmt.Errorf("--tokens %d: a step has 1 to %d tokens; use --tokens 1,64", t, maxBenchTokens)
		}
	}
	if o.transport == "inproc" {
		// The largest shape's send and receive buffers on every rank at once.
		var worst int64
		for _, p := range o.ranks {
			for _, t := range o.tokens {
				for _, sh := range commShapes {
					n := int64(sh.perRank(p, t))
					worst = max(worst, plan.MulSat(int64(p), plan.AddSat(n, plan.MulSat(n, int64(p))), 4))
				}
			}
		}
		if err := checkProcessFits("bench comm", []namedBytes{{"the largest collective's buffers over all ranks", worst}},
			"use fewer --tokens or smaller --ranks"); err != nil {
			return err
		}
	}
	if o.iterations < 0 || o.iterations > maxBenchIterations {
		return fmt.Errorf("--iterations %d must be in [0, %d] (0: timed by --min-time)", o.iterations, maxBenchIterations)
	}
	if o.iterations == 0 && (o.minTime <= 0 || o.minTime > maxBenchTime) {
		return fmt.Errorf("--min-time %v must be in (0, %v] when --iterations is 0; use --min-time 200ms", o.minTime, maxBenchTime)
	}
	if o.timeout <= 0 {
		return fmt.Errorf("--timeout %v must be positive; use --timeout 30s", o.timeout)
	}
	return nil
}

// Bounds of the benchmark flags: decode tokens of one measured step, calls
// of one measurement and the time it may take.
const (
	maxBenchTokens     = 1 << 20
	maxBenchIterations = 10_000_000
	maxBenchTime       = time.Hour
)

// checkBenchRanks refuses group sizes the 64-head shapes cannot split.
func checkBenchRanks(p int) error {
	if p < 1 || benchHeads%p != 0 {
		return fmt.Errorf("the %d gathered heads split evenly over 1, 2, 4, 8, 16, 32 or 64 ranks, not %d", benchHeads, p)
	}
	return nil
}

func benchCommInproc(o benchCommOptions) ([]commResult, error) {
	var all []commResult
	for _, p := range o.ranks {
		world, err := inproc.NewWorld(p, inproc.Options{Timeout: o.timeout})
		if err != nil {
			return nil, err
		}
		res := make([][]commResult, p)
		errs := inproc.Run(context.Background(), world, func(ctx context.Context, g comm.Group) error {
			var err error
			res[g.Rank()], err = benchCommGroup(ctx, g, o)
			return err
		})
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("inproc %d ranks: %w", p, err)
		}
		for i := range res[0] {
			res[0][i].Transport = "inproc"
		}
		all = append(all, res[0]...)
	}
	return all, nil
}

// benchCommMPI runs the benchmark on every process of the MPI job; rank 0
// prints.
func benchCommMPI(out io.Writer, o benchCommOptions) error {
	if !mpi.Launched() {
		return errors.New("--comm mpi runs one process per rank under mpirun; start it as `mpirun -np 4 cpmla bench comm --comm mpi`, or use --comm inproc")
	}
	proc, err := mpi.Init(mpi.Options{Timeout: o.timeout})
	if err != nil {
		return err
	}
	w := proc.World()
	if err := checkBenchRanks(w.Size()); err != nil {
		proc.Abort(1, fmt.Errorf("mpirun -np %d: %w", w.Size(), err))
	}
	res, err := benchCommGroup(context.Background(), w, o)
	if err != nil {
		proc.Abort(1, fmt.Errorf("bench comm on rank %d of %s (%s): %w", w.Rank(), w.Name(), proc.Host(), err))
	}
	if err := proc.Close(); err != nil {
		return err
	}
	if w.Rank() != 0 {
		return nil
	}
	for i := range res {
		res[i].Transport = "mpi"
	}
	return printCommResults(out, res, o.asJSON)
}

// benchCommGroup measures every shape at every token count on g. Every
// member runs it; the iteration count of each measurement comes from rank
// 0 (Broadcast), so every member issues the same collectives. It returns
// this member's measurements.
func benchCommGroup(ctx context.Context, g comm.Group, o benchCommOptions) ([]commResult, error) {
	p, r := g.Size(), g.Rank()
	var res []commResult
	for _, sh := range commShapes {
		for _, t := range o.tokens {
			n := sh.perRank(p, t)
			src := make([]float32, n)
			for i := range src {
				src[i] = float32(r+1) + float32(i%1024)*1e-3
			}
			var dst []float32
			switch sh.op {
			case comm.OpAllGather:
				dst = make([]float32, n*p)
			case comm.OpReduceScatter:
				dst = make([]float32, n/p)
			default:
				dst = make([]float32, n)
			}
			call := func() error {
				switch sh.op {
				case comm.OpAllGather:
					return comm.AllGather(ctx, g, dst, src)
				case comm.OpReduceScatter:
					return comm.ReduceScatter(ctx, g, dst, src)
				}
				return comm.AllToAll(ctx, g, dst, src)
			}
			iters, err := benchIterations(ctx, g, o, call)
			if err != nil {
				return nil, fmt.Errorf("%s at %d tokens: %w", sh.name, t, err)
			}
			start := time.Now()
			for range iters {
				if err := call(); err != nil {
					return nil, fmt.Errorf("%s at %d tokens: %w", sh.name, t, err)
				}
			}
			el := time.Since(start)
			c := comm.Collective{Op: sh.op, DType: comm.F32, Count: n}
			sent := comm.BytesSent(&c, r, p)
			lat := el.Seconds() / float64(iters)
			res = append(res, commResult{Ranks: p, Collective: sh.name, Op: sh.op.String(), Tokens: t, Count: n,
				BytesSent: sent, Iterations: iters, LatencyUS: lat * 1e6, GBPerS: float64(sent) / lat / 1e9})
		}
	}
	return res, nil
}

// benchIterations warms up and returns the number of calls to time: the
// fixed --iterations, or as many as rank 0 expects to fit --min-time,
// broadcast to every member.
func benchIterations(ctx context.Context, g comm.Group, o benchCommOptions, call func() error) (int, error) {
	for range 3 {
		if err := call(); err != nil {
			return 0, err
		}
	}
	if o.iterations > 0 {
		return o.iterations, nil
	}
	// Every member makes the same number of probe calls; rank 0's timing
	// decides.
	const probes = 10
	start := time.Now()
	for range probes {
		if err := call(); err != nil {
			return 0, err
		}
	}
	per := time.Since(start) / probes
	n := []int32{int32(min(max(int64(o.minTime/max(per, 1)), 5), 1_000_000))}
	if err := comm.Broadcast(ctx, g, n, 0); err != nil {
		return 0, err
	}
	return int(n[0]), nil
}

func printCommResults(out io.Writer, res []commResult, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	slices.SortStableFunc(res, func(a, b commResult) int {
		if c := strings.Compare(a.Transport, b.Transport); c != 0 {
			return c
		}
		return a.Ranks - b.Ranks
	})
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "transport\tranks\tcollective\top\ttokens\tf32/rank\tsent/rank\tlatency\tGB/s\t")
	for _, r := range res {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t%.2f\t\n", r.Transport, r.Ranks, r.Collective, r.Op, r.Tokens, r.Count,
			formatBytes(r.BytesSent), formatMicros(r.LatencyUS), r.GBPerS)
	}
	return tw.Flush()
}

func formatBytes(b int64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

func formatMicros(us float64) string {
	if us >= 1000 {
		return fmt.Sprintf("%.2f ms", us/1000)
	}
	return fmt.Sprintf("%.1f µs", us)
}
