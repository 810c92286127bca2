package comm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
)

func TestLayoutValidate(t *testing.T) {
	cases := []struct {
		l    comm.Layout
		want string // "" for a valid layout
	}{
		{comm.Layout{1, 1, 1}, ""},
		{comm.Layout{8, 1, 4}, ""},
		{comm.Layout{8, 1, 8}, ""},
		{comm.Layout{2, 2, 1}, ""},
		{comm.Layout{2, 2, 2}, ""},
		{comm.Layout{2, 2, 4}, ""},
		{comm.Layout{1, 4, 4}, ""},
		{comm.Layout{4, 1, 3}, "decode-context-parallel-size 3 does not divide tensor-parallel-size 4 (PCP=1 needs tp % dcp == 0); use --decode-context-parallel-size 1, 2 or 4"},
		{comm.Layout{6, 1, 4}, "decode-context-parallel-size 4 does not divide tensor-parallel-size 6 (PCP=1 needs tp % dcp == 0); use --decode-context-parallel-size 1, 2, 3 or 6"},
		{comm.Layout{2, 2, 3}, "decode-context-parallel-size 3 is not allowed with prefill-context-parallel-size 2 and tensor-parallel-size 2 (PCP>1 needs DCP off, spanning the PCP axis or spanning TP×PCP: dcp ∈ {1, pcp, tp·pcp}); use --decode-context-parallel-size 1, 2 or 4"},
		{comm.Layout{4, 2, 4}, "decode-context-parallel-size 4 is not allowed with prefill-context-parallel-size 2 and tensor-parallel-size 4 (PCP>1 needs DCP off, spanning the PCP axis or spanning TP×PCP: dcp ∈ {1, pcp, tp·pcp}); use --decode-context-parallel-size 1, 2 or 8"},
		{comm.Layout{1, 2, 4}, "decode-context-parallel-size 4 is not allowed with prefill-context-parallel-size 2 and tensor-parallel-size 1 (PCP>1 needs DCP off, spanning the PCP axis or spanning TP×PCP: dcp ∈ {1, pcp, tp·pcp}); use --decode-context-parallel-size 1 or 2"},
		{comm.Layout{0, 1, 1}, "tensor-parallel-size 0 must be at least 1; use --tensor-parallel-size 1"},
		{comm.Layout{2, 0, 1}, "prefill-context-parallel-size 0 must be at least 1; use --prefill-context-parallel-size 1"},
		{comm.Layout{2, 1, -1}, "decode-context-parallel-size -1 must be at least 1; use --decode-context-parallel-size 1"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("tp%d-pcp%d-dcp%d", tc.l.TP, tc.l.PCP, tc.l.DCP), func(t *testing.T) {
			got := ""
			if err := tc.l.Validate(); err != nil {
				got = err.Error()
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestLayoutCanonical pins group memberships stated in the layout's
// definition (vLLM's arrangement with DP = PP = 1).
func TestLayoutCanonical(t *testing.T) {
	cases := []struct {
		l             comm.Layout
		rank          int
		tp, pcp, dcp  []int
		tpr, pcr, dcr int
	}{
		{comm.Layout{8, 1, 4}, 5, []int{0, 1, 2, 3, 4, 5, 6, 7}, []int{5}, []int{4, 5, 6, 7}, 5, 0, 1},
		{comm.Layout{8, 1, 4}, 2, []int{0, 1, 2, 3, 4, 5, 6, 7}, []int{2}, []int{0, 1, 2, 3}, 2, 0, 2},
		{comm.Layout{2, 2, 2}, 1, []int{0, 1}, []int{1, 3}, []int{1, 3}, 1, 0, 0},
		{comm.Layout{2, 2, 2}, 3, []int{2, 3}, []int{1, 3}, []int{1, 3}, 1, 1, 1},
		{comm.Layout{2, 2, 4}, 2, []int{2, 3}, []int{0, 2}, []int{0, 1, 2, 3}, 0, 1, 2},
		{comm.Layout{2, 2, 1}, 3, []int{2, 3}, []int{1, 3}, []int{3}, 1, 1, 0},
		{comm.Layout{4, 1, 1}, 3, []int{0, 1, 2, 3}, []int{3}, []int{3}, 3, 0, 0},
	}
	for _, tc := range cases {
		l := tc.l
		got := []any{l.TPMembers(tc.rank), l.PCPMembers(tc.rank), l.DCPMembers(tc.rank), l.TPRank(tc.rank), l.PCPRank(tc.rank), l.DCPRank(tc.rank)}
		want := []any{tc.tp, tc.pcp, tc.dcp, tc.tpr, tc.pcr, tc.dcr}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%+v rank %d: [tp pcp dcp members, tp pcp dcp rank] (-want +got):\n%s", l, tc.rank, d)
		}
	}
}

// sameGroup is the membership predicate of each group, written from the
// definition independently of Layout's member lists.
func sameGroup(l comm.Layout, kind string, a, b int) bool {
	switch kind {
	case "tp":
		return a/l.TP == b/l.TP
	case "pcp":
		return a%l.TP == b%l.TP
	}
	switch {
	case l.PCP == 1:
		return a/l.DCP == b/l.DCP
	case l.DCP == 1:
		return a == b
	case l.DCP == l.PCP:
		return a%l.TP == b%l.TP
	default:
		return true
	}
}

// TestLayoutSplit builds the groups of every valid layout with TP, PCP in
// {1, 2, 4} on an inproc world and checks, with a collective in each group,
// who the members are and that rank and size agree with the layout.
func TestLayoutSplit(t *testing.T) {
	for _, tp := range []int{1, 2, 4} {
		for _, pcp := range []int{1, 2, 4} {
			for _, dcp := range []int{1, 2, 4, 8, 16} {
				l := comm.Layout{TP: tp, PCP: pcp, DCP: dcp}
				if l.Validate() != nil {
					continue
				}
				t.Run(fmt.Sprintf("tp%d-pcp%d-dcp%d", tp, pcp, dcp), func(t *testing.T) { checkLayoutSplit(t, l) })
			}
		}
	}
}

func checkLayoutSplit(t *testing.T, l comm.Layout) {
	world, err := inproc.NewWorld(l.World(), inproc.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	type view struct {
		Members         map[string][]int32
		Rank, Size      map[string]int
		DCPRank, DCPDim int
	}
	got := make([]view, l.World())
	errs := inproc.Run(context.Background(), world, func(ctx context.Context, w comm.Group) error {
		gs, err := l.Split(w)
		if err != nil {
			return err
		}
		v := view{Members: map[string][]int32{}, Rank: map[string]int{}, Size: map[string]int{}}
		// Every rank visits its groups in the same order.
		for _, kg := range []struct {
			kind string
			g    comm.Group
		}{{"tp", gs.TP}, {"pcp", gs.PCP}, {"dcp", gs.DCP}} {
			kind, g := kg.kind, kg.g
			all := make([]int32, g.Size())
			if err := comm.AllGather(ctx, g, all, []int32{int32(w.Rank())}); err != nil {
				return err
			}
			v.Members[kind], v.Rank[kind], v.Size[kind] = all, g.Rank(), g.Size()
		}
		v.DCPRank, v.DCPDim = l.DCPRank(w.Rank()), gs.DCP.Size()
		got[w.Rank()] = v
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range l.World() {
		want := view{Members: map[string][]int32{}, Rank: map[string]int{}, Size: map[string]int{}}
		for _, kind := range []string{"tp", "pcp", "dcp"} {
			for q := range l.World() {
				if sameGroup(l, kind, r, q) {
					if int32(q) == int32(r) {
						want.Rank[kind] = len(want.Members[kind])
					}
					want.Members[kind] = append(want.Members[kind], int32(q))
				}
			}
			want.Size[kind] = len(want.Members[kind])
		}
		want.DCPRank, want.DCPDim = want.Rank["dcp"], l.DCP
		want.Rank["tp"], want.Rank["pcp"] = l.TPRank(r), l.PCPRank(r)
		if d := cmp.Diff(want, got[r]); d != "" {
			t.Errorf("rank %d (-want +got):\n%s", r, d)
		}
	}
}

func TestLayoutSplitRefusals(t *testing.T) {
	world, err := inproc.NewWorld(4, inproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = comm.Layout{TP: 2, PCP: 1, DCP: 2}.Split(world[0])
	want := "layout TP=2 PCP=1 needs a world of 2 ranks, group world[0 1 2 3] has 4; use a world of TP·PCP ranks"
	if d := cmp.Diff(want, fmt.Sprint(err)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	_, err = comm.Layout{TP: 4, PCP: 1, DCP: 3}.Split(world[0])
	if err == nil {
		t.Errorf("invalid layout split without error")
	}
}
