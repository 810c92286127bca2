package model

import (
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/sampler"
)

// The PyTorch reference (tools/train/reference.py) is an implementation of
// the architecture written from the published definitions, independent of
// this package and of the oracle. It reads the checkpoints `cpmla model init`
// writes and records, in float64, per-position log-probabilities, the
// indexer's selections, the routed experts and the MTP layer's drafts. These
// tests write the same checkpoints through the same code path (the preset,
// WithWeightDType, RandomTensors, WriteCheckpoint), load them from disk as
// --model DIR does, run the engine on one rank and compare.

// torchRefTol bounds |Δ logprob| between the engine (float32 compute, f32
// caches) and the float64 reference. The engine's own float64 oracle agrees
// to about 4e-6 on these models (docs/verification.md); a float32 forward of
// a few layers of width 256 with logits of magnitude ~10 leaves a few 1e-6,
// so 1e-4 passes every honest difference while a wrong convention (a routing
// factor, a RoPE layout, a norm in the wrong place, one different key in a
// selection) moves log-probabilities by far more.
const torchRefTol = 1e-4

// torchRefTieRel is the relative gap under which an index score or a routing
// score counts as a near tie: float32 rounding of the engine (≈1e-6 relative
// on these sums) could then order the two candidates differently.
const torchRefTieRel = 1e-5

// torchRefShardBytes is cpmla model init's default --max-shard-bytes.
const torchRefShardBytes = 2 << 30

type torchRef struct {
	Format      int               `json:"format"`
	Preset      string            `json:"preset"`
	Checkpoint  string            `json:"checkpoint"` // a built-in trained checkpoint, else one model init writes
	WeightDType string            `json:"weight_dtype"`
	Seed        uint64            `json:"seed"`
	Generator   map[string]string `json:"generator"`
	SHA256      map[string]string `json:"checkpoint_sha256"`
	FixedIDs    []int             `json:"fixed_ids"`
	Prompts     []struct {
		Tokens []int32              `json:"tokens"`
		Rows   []torchRefRow        `json:"rows"`
		Layers map[int]torchRefSite `json:"layers"`
	} `json:"prompts"`
	MTP *struct {
		Prompt int           `json:"prompt"`
		Layer  int           `json:"layer"`
		Chain  []int32       `json:"chain"`
		Rows   []torchRefRow `json:"rows"`
		Trace  torchRefSite  `json:"trace"`
	} `json:"mtp"`
}

// torchRefRow is one position's reference log-probabilities.
type torchRefRow struct {
	Top   [][2]float64 `json:"top"` // (token id, logprob), best first
	Next  *float64     `json:"next"`
	Fixed []float64    `json:"fixed"`
}

// torchRefSite is one layer's decisions over a sequence's positions.
type torchRefSite struct {
	Selected    [][]int32   `json:"selected"`     // null where every position ≤ p is attended
	IndexMargin [][]float64 `json:"index_margin"` // (k-th − (k+1)-th score, k-th score)
	Experts     [][]int32   `json:"experts"`
	RouteMargin []float64   `json:"route_margin"`
}

func readTorchRef(t *testing.T, path string) *torchRef {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var ref torchRef
	if err := json.NewDecoder(io.LimitReader(z, 16<<20)).Decode(&ref); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if ref.Format != 1 {
		t.Fatalf("%s: format %d, want 1", path, ref.Format)
	}
	return &ref
}

// writeTorchRefCheckpoint writes the case's checkpoint as cpmla model init
// does, or for a trained case finds the committed checkpoint, and checks that
// its tensor files are the bytes the reference read.
func writeTorchRefCheckpoint(t *testing.T, ref *torchRef) string {
	t.Helper()
	if ref.Checkpoint != "" {
		dir := filepath.Join("..", "checkpoints", ref.Checkpoint)
		checkTorchRefFiles(t, dir, ref)
		return dir
	}
	cfg, err := config.Load(ref.Preset)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = WithWeightDType(cfg, ref.WeightDType); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteCheckpoint(dir, cfg, RandomTensors(cfg, ref.Seed), torchRefShardBytes); err != nil {
		t.Fatal(err)
	}
	checkTorchRefFiles(t, dir, ref)
	return dir
}

// checkTorchRefFiles requires dir's tensor files to have the hashes the
// reference recorded.
func checkTorchRefFiles(t *testing.T, dir string, ref *torchRef) {
	t.Helper()
	if len(ref.SHA256) == 0 {
		t.Fatal("the reference names no checkpoint file")
	}
	for name, want := range ref.SHA256 {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("the reference read %s, which model init no longer writes: %v (regenerate with tools/train/reference.py)", name, err)
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			t.Fatalf("%s of %s seed %d (%s) has sha256 %s, the reference read %s: the checkpoint changed; regenerate with tools/train/reference.py",
				name, ref.Preset, ref.Seed, ref.WeightDType, got, want)
		}
	}
}

// torchRefReport collects a comparison's findings.
type torchRefReport struct {
	maxDiff, maxMTPDiff float64
	rows, mtpRows       int
	selections, routes  int
	failures            []string
}

func (r *torchRefReport) fail(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

// compareRow checks one position's logits against the reference row.
// next is the token the reference's Next entry is for, or −1.
func (r *torchRefReport) compareRow(where string, lg []float32, want torchRefRow, fixed []int, next int, mtp bool) {
	lse := sampler.LogSumExp(lg)
	lp := func(id int) float64 { return float64(lg[id]) - lse }
	diff := func(what string, got, w float64) {
		d := math.Abs(got - w)
		if mtp {
			r.maxMTPDiff = max(r.maxMTPDiff, d)
		} else {
			r.maxDiff = max(r.maxDiff, d)
		}
		if !(d <= torchRefTol) {
			r.fail("%s: logprob of %s %.6f, reference %.6f (|Δ| %.3g > %g)", where, what, got, w, d, torchRefTol)
		}
	}
	for _, e := range want.Top {
		diff(fmt.Sprintf("top token %d", int(e[0])), lp(int(e[0])), e[1])
	}
	// Nothing the engine ranks first may beat the reference's best.
	best := sampler.Argmax(lg)
	diff(fmt.Sprintf("the engine's best token %d against the reference's best %d", best, int(want.Top[0][0])), lp(best), want.Top[0][1])
	switch {
	case (want.Next != nil) != (next >= 0):
		r.fail("%s: the reference has a next-token entry %v, the workload's next token is %d", where, want.Next, next)
	case next >= 0:
		diff(fmt.Sprintf("the next token %d", next), lp(next), *want.Next)
	}
	for i, id := range fixed {
		diff(fmt.Sprintf("token %d", id), lp(id), want.Fixed[i])
	}
}

// nearTie reports whether a reference margin (gap, k-th score) is within
// float32 reach of a tie. Exact ties among exact zeros (every indexer head's
// dot product negative) are not near ties: both sides compute exactly 0 and
// take the lowest position.
func nearTie(m []float64) bool {
	if m == nil {
		return false
	}
	gap, kth := m[0], m[1]
	if gap == 0 && kth == 0 {
		return false
	}
	return gap <= torchRefTieRel*math.Max(math.Abs(kth), 1e-30)
}

// runTorchRef runs the engine on the reference's workload and compares:
// prompt 0 prefills its first 24 tokens in one batch with the other
// prompts, then decodes the rest a token per step; with an MTP layer, every
// target step is followed by the MTP pass over the positions it computed
// (teacher-forced by the prompt, the target's hidden after its final norm)
// and, at the last position, by the reference's draft chain.
func runTorchRef(t *testing.T, dir string, ref *torchRef, perturb func(*config.Model)) *torchRefReport {
	t.Helper()
	cfg, src, err := Source(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if perturb != nil {
		perturb(cfg)
	}
	m, err := Build(cfg, src, Shard{})
	if err != nil {
		t.Fatal(err)
	}
	const B, prefill = 16, 24
	withMTP := cfg.NumNextNPredict > 0 && ref.MTP != nil
	A := ref.Prompts[0].Tokens
	first, longest := prefill, 0
	for i, p := range ref.Prompts {
		if i > 0 {
			first += len(p.Tokens)
		}
		longest = max(longest, len(p.Tokens))
	}
	maxLen := longest + 8 // the MTP chain runs past the prompt
	// Each sequence gets the blocks it needs, prompt 0's in descending order so
	// its table is not the identity.
	tables := make([][]int32, len(ref.Prompts))
	next := int32(0)
	for i, p := range ref.Prompts {
		n := int32((len(p.Tokens) + 8 + B - 1) / B)
		for j := range n {
			tables[i] = append(tables[i], next+j)
		}
		if i == 0 {
			slices.Reverse(tables[i])
		}
		next += n
	}
	r, err := NewRunner(m, RunnerOptions{MaxTokens: first, MaxModelLen: maxLen, MaxLogitRows: first, MaxSeqs: len(ref.Prompts), BlockSize: B, NumBlocks: int(next),
		KVDType: "f32", IndexerDType: "f32", MTP: withMTP})
	if err != nil {
		t.Fatal(err)
	}
	type site struct{ seq, layer, pos int }
	sel, routes := map[site][]int32{}, map[site][]int32{}
	r.Trace = func(layer int, pos, seq int32, positions []int32) {
		sel[site{int(seq), layer, int(pos)}] = slices.Sorted(slices.Values(positions))
	}
	r.RouteTrace = func(layer int, pos, seq int32, experts []int32) {
		routes[site{int(seq), layer, int(pos)}] = slices.Sorted(slices.Values(experts))
	}
	rep := &torchRefReport{}
	target := func(pi, pos int, lg []float32) {
		rep.rows++
		toks, next := ref.Prompts[pi].Tokens, -1
		if pos+1 < len(toks) {
			next = int(toks[pos+1])
		}
		rep.compareRow(fmt.Sprintf("prompt %d position %d", pi, pos), lg, ref.Prompts[pi].Rows[pos], ref.FixedIDs, next, false)
	}
	draft := func(pos int, lg []float32) {
		rep.mtpRows++
		next := -1
		if pos+2 < len(A) {
			next = int(A[pos+2])
		}
		rep.compareRow(fmt.Sprintf("MTP position %d", pos), lg, ref.MTP.Rows[pos], ref.FixedIDs, next, true)
	}
	runDraft := func(tokens []int32, start int, hidden []int32, bank HiddenBank) {
		if err := r.Draft(0, &Batch{Seqs: []Seq{{Tokens: tokens, Start: start, BlockTable: tables[0], LogitsAll: true, Hidden: hidden}}}, bank); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < r.NumLogitRows(); i++ {
			_, lg := r.Logits(i)
			draft(start+i, lg)
		}
	}
	// Step 1: prompt 0's first tokens beside the whole of the others.
	b := &Batch{Seqs: []Seq{{Tokens: A[:prefill], BlockTable: tables[0], LogitsAll: true}}}
	for i, p := range ref.Prompts[1:] {
		b.Seqs = append(b.Seqs, Seq{Tokens: p.Tokens, BlockTable: tables[i+1], LogitsAll: true})
	}
	if err := r.Forward(b); err != nil {
		t.Fatal(err)
	}
	row := 0
	for pi, q := range b.Seqs {
		for j := range q.Tokens {
			_, lg := r.Logits(row)
			target(pi, j, lg)
			row++
		}
	}
	if withMTP {
		hidden := make([]int32, prefill)
		for i := range hidden {
			hidden[i] = int32(i)
		}
		runDraft(A[1:prefill+1], 0, hidden, TargetBank)
	}
	// Decode the rest of prompt 0, one token per step.
	for p := prefill; p < len(A); p++ {
		if err := r.Forward(&Batch{Seqs: []Seq{{Tokens: A[p : p+1], Start: p, BlockTable: tables[0]}}}); err != nil {
			t.Fatal(err)
		}
		_, lg := r.Logits(0)
		target(0, p, lg)
		if withMTP {
			next := ref.MTP.Chain[0]
			if p+1 < len(A) {
				next = A[p+1]
			}
			runDraft([]int32{next}, p, []int32{0}, TargetBank)
		}
	}
	if withMTP {
		for j := 1; j < len(ref.MTP.Chain); j++ {
			runDraft(ref.MTP.Chain[j:j+1], len(A)-1+j, []int32{0}, DraftBank)
		}
	}
	// Decisions: every indexer selection and every routing.
	check := func(where string, seq, layer int, s torchRefSite) {
		for pos, want := range s.Selected {
			got, ok := sel[site{seq, layer, pos}]
			if !ok {
				rep.fail("%s layer %d position %d: the engine traced no selection", where, layer, pos)
				continue
			}
			if want == nil {
				if len(got) != pos+1 {
					rep.fail("%s layer %d position %d: the engine attended %d positions, want all %d", where, layer, pos, len(got), pos+1)
				}
				continue
			}
			rep.selections++
			if !slices.Equal(got, want) {
				tie := ""
				if nearTie(s.IndexMargin[pos]) {
					tie = " (a near tie of the index scores changed the selection)"
				}
				rep.fail("%s layer %d position %d: the engine selected %v, the reference %v%s", where, layer, pos, got, want, tie)
			}
		}
		for pos, want := range s.Experts {
			rep.routes++
			if got := routes[site{seq, layer, pos}]; !slices.Equal(got, want) {
				tie := ""
				if pos < len(s.RouteMargin) && s.RouteMargin[pos] <= torchRefTieRel {
					tie = " (a routing near tie)"
				}
				rep.fail("%s layer %d position %d: the engine routed to %v, the reference to %v%s", where, layer, pos, got, want, tie)
			}
		}
	}
	for pi, p := range ref.Prompts {
		for layer, s := range p.Layers {
			check(fmt.Sprintf("prompt %d", pi), pi, layer, s)
		}
	}
	if withMTP {
		check("MTP", 0, ref.MTP.Layer, ref.MTP.Trace)
	}
	return rep
}

func torchRefFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "torchref", "*.json.gz"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no reference files under testdata/torchref (%v)", err)
	}
	return files
}

// TestEngineMatchesTorchRef compares the engine with the PyTorch reference
// on every committed case: log-probabilities at every prompt position
// (prefill and decode) and every MTP draft position, within torchRefTol,
// and every indexer selection and routing decision exactly.
func TestEngineMatchesTorchRef(t *testing.T) {
	for _, path := range torchRefFiles(t) {
		name := strings.TrimSuffix(filepath.Base(path), ".json.gz")
		t.Run(name, func(t *testing.T) {
			ref := readTorchRef(t, path)
			dir := writeTorchRefCheckpoint(t, ref)
			rep := runTorchRef(t, dir, ref, nil)
			t.Logf("%s: %d positions max |Δ logprob| %.3g; %d MTP positions max |Δ logprob| %.3g; %d sparse selections, %d routings compared (reference: torch %s, %s)",
				name, rep.rows, rep.maxDiff, rep.mtpRows, rep.maxMTPDiff, rep.selections, rep.routes, ref.Generator["torch"], ref.Generator["precision"])
			for i, f := range rep.failures {
				if i == 20 {
					t.Errorf("… and %d more disagreements", len(rep.failures)-i)
					break
				}
				t.Error(f)
			}
			if ref.MTP != nil && rep.mtpRows != len(ref.MTP.Rows) {
				t.Errorf("compared %d MTP positions, the reference has %d", rep.mtpRows, len(ref.MTP.Rows))
			}
		})
	}
}

// TestTorchRefComparisonFailsOnPerturbedModels shows the comparison can
// fail: the same checkpoint run with one convention changed must disagree
// with the reference. Each perturbation is a value a port could plausibly
// get wrong.
func TestTorchRefComparisonFailsOnPerturbedModels(t *testing.T) {
	ref := readTorchRef(t, filepath.Join("testdata", "torchref", "v32-moe-mini-bf16-seed7.json.gz"))
	dir := writeTorchRefCheckpoint(t, ref)
	for _, tc := range []struct {
		name    string
		perturb func(*config.Model)
	}{
		{"routed_scaling_factor 2.45", func(c *config.Model) { c.RoutedScalingFactor = 2.45 }},
		{"index_topk 15", func(c *config.Model) { c.IndexTopK = 15 }},
		{"interleaved indexer RoPE", func(c *config.Model) { c.IndexerRopeInterleave = true }},
		{"topk_group 3", func(c *config.Model) { c.TopKGroup = 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := runTorchRef(t, dir, ref, tc.perturb)
			t.Logf("%s: %d disagreements; max |Δ logprob| %.3g, MTP %.3g", tc.name, len(rep.failures), rep.maxDiff, rep.maxMTPDiff)
			if len(rep.failures) == 0 {
				t.Errorf("the engine with %s still matches the reference: the comparison cannot see it", tc.name)
			}
		})
	}
}
