package inproc_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
)

func TestSplitRefusals(t *testing.T) {
	world := newWorld(t, 4, inproc.Options{})
	cases := []struct {
		name    string
		group   string
		members []int
		want    string
	}{
		{"not-a-member", "x", []int{1, 2}, "split x from world[0 1 2 3]: group x[1 2]: rank 0 of world[0 1 2 3] is not among the members [1 2]; only members split a group"},
		{"out-of-range", "x", []int{0, 4}, "split x from world[0 1 2 3]: group x: member 4 outside world[0 1 2 3] (size 4)"},
		{"duplicate", "x", []int{0, 1, 0}, "split x from world[0 1 2 3]: group x: member 0 listed twice in [0 1 0]"},
		{"empty", "x", nil, "split x from world[0 1 2 3]: group x: no members"},
		{"bad-name", "a b", []int{0}, `split a b from world[0 1 2 3]: group name "a b" must be non-empty without spaces or brackets`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := comm.Split(world[0], tc.group, tc.members)
			if d := cmp.Diff(tc.want, fmt.Sprint(err)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
	if _, err := comm.Split(world[0], "once", []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	_, err := comm.Split(world[0], "once", []int{0, 1})
	want := "split once from world[0 1 2 3]: group once[0 1]: world rank 0 already holds a handle; split each group once per rank"
	if d := cmp.Diff(want, fmt.Sprint(err)); d != "" {
		t.Errorf("second split (-want +got):\n%s", d)
	}
	if _, err := inproc.NewWorld(0, inproc.Options{}); err == nil {
		t.Error("empty world accepted")
	}
}

// TestNestedSplit splits a sub-group of a sub-group (group-relative member
// lists) and checks names, ranks and a collective on it.
func TestNestedSplit(t *testing.T) {
	got := make([][]int32, 6)
	names := make([]string, 6)
	mustAll(t, run(t, 6, inproc.Options{}, func(ctx context.Context, w comm.Group) error {
		r := w.Rank()
		half, err := comm.Split(w, "half", []int{r / 3 * 3, r/3*3 + 1, r/3*3 + 2})
		if err != nil {
			return err
		}
		// Within each half: members 2 and 0 (in that order) form a pair; member 1 alone.
		members := []int{half.Rank()}
		if half.Rank() != 1 {
			members = []int{2, 0}
		}
		pair, err := comm.Split(half, "pair", members)
		if err != nil {
			return err
		}
		names[r] = pair.Name()
		got[r] = make([]int32, pair.Size())
		return comm.AllGather(ctx, pair, got[r], []int32{int32(r)})
	}))
	want := [][]int32{{2, 0}, {1}, {2, 0}, {5, 3}, {4}, {5, 3}}
	wantNames := []string{"pair[2 0]", "pair[1]", "pair[2 0]", "pair[5 3]", "pair[4]", "pair[5 3]"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("gathered (-want +got):\n%s", d)
	}
	if d := cmp.Diff(wantNames, names); d != "" {
		t.Errorf("names (-want +got):\n%s", d)
	}
}
