//go:build mpi

package mpi_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/comm"
)

// TestLayouts builds the TP, PCP and DCP groups of every layout whose world
// divides the job (each block of l.World() consecutive ranks is one
// replica of the layout, split from its own sub-world) and checks each
// group's name, rank and size against comm.Layout, then runs an AllGather
// of world ranks and an AllReduce on every group.
func TestLayouts(t *testing.T) {
	w := needWorld(t)
	layouts := []comm.Layout{
		{TP: 2, PCP: 1, DCP: 2}, {TP: 1, PCP: 2, DCP: 2}, {TP: 1, PCP: 4, DCP: 4}, {TP: 2, PCP: 2, DCP: 1},
		{TP: 2, PCP: 2, DCP: 2}, {TP: 2, PCP: 2, DCP: 4}, {TP: 4, PCP: 1, DCP: 2}, {TP: 4, PCP: 1, DCP: 4},
		{TP: 1, PCP: 3, DCP: 3}, {TP: 3, PCP: 1, DCP: 3},
	}
	ctx := context.Background()
	ran := 0
	for _, l := range layouts {
		size := l.World()
		if w.Size()%size != 0 {
			continue
		}
		ran++
		t.Run(fmt.Sprintf("tp%d-pcp%d-dcp%d", l.TP, l.PCP, l.DCP), func(t *testing.T) {
			base := w.Rank() / size * size
			block := make([]int, size)
			for i := range block {
				block[i] = base + i
			}
			sub := split(t, w, fmt.Sprintf("replica-tp%d-pcp%d-dcp%d", l.TP, l.PCP, l.DCP), block)
			gs, err := l.Split(sub)
			if err != nil {
				t.Fatal(err)
			}
			r := sub.Rank()
			shift := func(m []int) []int {
				out := make([]int, len(m))
				for i, v := range m {
					out[i] = base + v
				}
				return out
			}
			for _, c := range []struct {
				role    string
				g       comm.Group
				members []int
				rank    int
			}{
				{"tp", gs.TP, l.TPMembers(r), l.TPRank(r)},
				{"pcp", gs.PCP, l.PCPMembers(r), l.PCPRank(r)},
				{"dcp", gs.DCP, l.DCPMembers(r), l.DCPRank(r)},
			} {
				members := shift(c.members)
				type shape struct {
					Name       string
					Rank, Size int
				}
				want := shape{groupName(c.role, members), c.rank, len(members)}
				if d := cmp.Diff(want, shape{c.g.Name(), c.g.Rank(), c.g.Size()}); d != "" {
					t.Errorf("world rank %d %s group (-want +got):\n%s", w.Rank(), c.role, d)
				}
				got := make([]int32, c.g.Size())
				if err := comm.AllGather(ctx, c.g, got, []int32{int32(w.Rank())}); err != nil {
					t.Fatal(err)
				}
				wantRanks := make([]int32, len(members))
				for i, m := range members {
					wantRanks[i] = int32(m)
				}
				if d := cmp.Diff(wantRanks, got); d != "" {
					t.Errorf("world rank %d %s all-gather of world ranks (-want +got):\n%s", w.Rank(), c.role, d)
				}
				sum := make([]int32, 1)
				if err := comm.AllReduce(ctx, c.g, sum, []int32{int32(w.Rank())}); err != nil {
					t.Fatal(err)
				}
				var wantSum int32
				for _, m := range members {
					wantSum += int32(m)
				}
				if sum[0] != wantSum {
					t.Errorf("world rank %d %s all-reduce of world ranks: got %d, want %d", w.Rank(), c.role, sum[0], wantSum)
				}
			}
		})
	}
	if ran == 0 {
		t.Skipf("no layout fits a world of %d ranks", w.Size())
	}
}

func groupName(role string, ranks []int) string {
	return fmt.Sprintf("%s%v", role, ranks)
}

// TestSplitRefusals pins the argument checks of Split, which need no peer.
func TestSplitRefusals(t *testing.T) {
	w := needWorld(t)
	if w.Size() < 2 {
		t.Skip("needs at least 2 ranks")
	}
	p, r := w.Size(), w.Rank()
	other := (r + 1) % p
	cases := []struct {
		name    string
		members []int
		want    string
	}{
		{"not-a-member", []int{other}, fmt.Sprintf("split x from %s: group x[%d]: rank %d of %s is not among the members [%d]; only members split a group", w.Name(), other, r, w.Name(), other)},
		{"out-of-range", []int{r, p}, fmt.Sprintf("split x from %s: group x: member %d outside %s (size %d)", w.Name(), p, w.Name(), p)},
		{"duplicate", []int{r, r}, fmt.Sprintf("split x from %s: group x: member %d listed twice in [%d %d]", w.Name(), r, r, r)},
		{"empty", nil, fmt.Sprintf("split x from %s: group x: no members", w.Name())},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := comm.Split(w, "x", tc.members)
			if d := cmp.Diff(tc.want, fmt.Sprint(err)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
	// Splitting the same group twice from the same parent is refused; the
	// first split is collective over all ranks.
	all := make([]int, p)
	for i := range all {
		all[i] = i
	}
	slices.Reverse(all)
	split(t, w, "once", all)
	_, err := comm.Split(w, "once", all)
	want := fmt.Sprintf("split once from %s: group %s: world rank %d already holds a handle; split each group once per rank", w.Name(), groupName("once", all), r)
	if d := cmp.Diff(want, fmt.Sprint(err)); d != "" {
		t.Errorf("second split (-want +got):\n%s", d)
	}
}
