package cp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/cp"
)

// TestPartitionDocumentedExample pins the DualChunkSwap example of the
// reference digest (vllm_cp_internals.md §6.3): P = 2, one 7-token prefill
// A..G gives rank 0 [A B G], rank 1 [C D E F], padding to 4 rows and the
// restore index [0 1 4 5 6 7 2].
func TestPartitionDocumentedExample(t *testing.T) {
	pt, err := cp.NewPartition(2, 16)
	if err != nil {
		t.Fatal(err)
	}
	if err := pt.Build([]int32{7}, []bool{true}); err != nil {
		t.Fatal(err)
	}
	got := [][]int32{pt.Tokens(0), pt.Tokens(1), pt.Restore()}
	want := [][]int32{{0, 1, 6, -1}, {2, 3, 4, 5}, {0, 1, 4, 5, 6, 7, 2}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestPartitionRestoreIsIdentity(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       int
		lens    []int32
		prefill []bool
	}{
		{"one-token prompt P=4", 4, []int32{1}, []bool{true}},
		{"prompt shorter than 2P chunks", 4, []int32{5}, []bool{true}},
		{"ranks own no prefill row", 4, []int32{2, 1}, []bool{true, false}},
		{"mixed batch", 3, []int32{1, 17, 1, 6, 1}, []bool{false, true, false, true, false}},
		{"decodes only", 2, []int32{1, 2, 1}, []bool{false, false, false}},
		{"single rank", 1, []int32{9, 1}, []bool{true, false}},
		{"divisible prefill", 2, []int32{8, 12}, []bool{true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const d = 3
			total := 0
			for _, q := range tc.lens {
				total += int(q)
			}
			world := newWorld(t, tc.p)
			got := make([][]float32, tc.p)
			runRanks(t, world, func(ctx context.Context, g comm.Group) error {
				pt, err := cp.NewPartition(tc.p, 64)
				if err != nil {
					return err
				}
				if err := pt.Build(tc.lens, tc.prefill); err != nil {
					return err
				}
				// The hidden state of a row is its batch token index (pads: −7),
				// so restoring the all-gather must give 0, 1, 2, ... in order.
				rows := pt.MaxRows()
				hidden := make([]float32, rows*d)
				for j, tok := range pt.Tokens(g.Rank()) {
					for x := range d {
						hidden[j*d+x] = -7
						if tok >= 0 {
							hidden[j*d+x] = float32(tok)
						}
					}
				}
				gathered := make([]float32, tc.p*rows*d)
				if err := comm.AllGather(ctx, g, gathered, hidden); err != nil {
					return fmt.Errorf("gather: %w", err)
				}
				got[g.Rank()] = make([]float32, total*d)
				return pt.RestoreRows(got[g.Rank()], gathered, d)
			})
			want := make([]float32, total*d)
			for i := range total {
				for x := range d {
					want[i*d+x] = float32(i)
				}
			}
			for r := range tc.p {
				if diff := cmp.Diff(want, got[r]); diff != "" {
					t.Errorf("rank %d restore (-want +got):\n%s", r, diff)
				}
			}
			pt, _ := cp.NewPartition(tc.p, 64)
			if err := pt.Build(tc.lens, tc.prefill); err != nil {
				t.Fatal(err)
			}
			// Every prefill token is on exactly one rank, every decode token
			// on every rank; the padded lists have MaxRows entries.
			seen := make([]int, total)
			for r := range tc.p {
				if n := len(pt.Tokens(r)); n != pt.MaxRows() {
					t.Errorf("rank %d padded list has %d rows, want %d", r, n, pt.MaxRows())
				}
				for _, tok := range pt.Tokens(r) {
					if tok >= 0 {
						seen[tok]++
					}
				}
			}
			start := 0
			for i, q := range tc.lens {
				wantSeen := 1
				if !tc.prefill[i] {
					wantSeen = tc.p
				}
				for tok := start; tok < start+int(q); tok++ {
					if seen[tok] != wantSeen {
						t.Errorf("token %d (request %d) is on %d ranks, want %d", tok, i, seen[tok], wantSeen)
					}
				}
				start += int(q)
			}
		})
	}
}

// TestPartitionBalancesCausalWork pins the point of DualChunkSwap: with q a
// multiple of 2P, the causal work Σ (offset+1) of every rank is the same,
// c(2Pc + 1) for chunk length c (chunks r and 2P−1−r sum to (2P−1)c + c
// positions of offset plus 2c ones).
func TestPartitionBalancesCausalWork(t *testing.T) {
	for _, p := range []int{1, 2, 3, 4} {
		for _, c := range []int{1, 5} {
			q := 2 * p * c
			pt, err := cp.NewPartition(p, q)
			if err != nil {
				t.Fatal(err)
			}
			if err := pt.Build([]int32{int32(q)}, []bool{true}); err != nil {
				t.Fatal(err)
			}
			want := c * (2*p*c + 1)
			for r := range p {
				work := 0
				for _, o := range pt.Offsets(r) {
					if o >= 0 {
						work += int(o) + 1
					}
				}
				if work != want {
					t.Errorf("P=%d c=%d rank %d causal work %d, want %d", p, c, r, work, want)
				}
				if pt.Rows(r) != 2*c {
					t.Errorf("P=%d c=%d rank %d has %d rows, want %d", p, c, r, pt.Rows(r), 2*c)
				}
			}
		}
	}
}

func TestPartitionRefusalsAndAllocs(t *testing.T) {
	pt, err := cp.NewPartition(2, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := pt.Build([]int32{5, 4}, []bool{true, true}); err == nil {
		t.Error("9 tokens accepted by a partition built for 8")
	}
	if err := pt.Build([]int32{5}, []bool{true, false}); err == nil {
		t.Error("mismatched prefill flags accepted")
	}
	if _, err := cp.NewPartition(0, 8); err == nil {
		t.Error("0 PCP ranks accepted")
	}
	lens, prefill := []int32{5, 1, 2}, []bool{true, false, true}
	if allocs := testing.AllocsPerRun(20, func() { _ = pt.Build(lens, prefill) }); allocs != 0 {
		t.Errorf("%v allocations per Build, want 0", allocs)
	}
}
