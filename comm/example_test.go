package comm_test

import (
	"context"
	"fmt"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
)

// Four ranks with TP=4 and DCP=2: each rank builds its groups and gathers
// the world ranks of its DCP group.
func ExampleLayout_Split() {
	l := comm.Layout{TP: 4, PCP: 1, DCP: 2}
	world, err := inproc.NewWorld(l.World(), inproc.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	seen := make([]string, l.World())
	errs := inproc.Run(context.Background(), world, func(ctx context.Context, w comm.Group) error {
		gs, err := l.Split(w)
		if err != nil {
			return err
		}
		members := make([]int32, gs.DCP.Size())
		if err := comm.AllGather(ctx, gs.DCP, members, []int32{int32(w.Rank())}); err != nil {
			return err
		}
		seen[w.Rank()] = fmt.Sprintf("rank %d: %s dcp rank %d of %d, gathered %v", w.Rank(), gs.DCP.Name(), gs.DCP.Rank(), gs.DCP.Size(), members)
		return nil
	})
	for r, s := range seen {
		if errs[r] != nil {
			fmt.Println(errs[r])
			continue
		}
		fmt.Println(s)
	}
	// Output:
	// rank 0: dcp[0 1] dcp rank 0 of 2, gathered [0 1]
	// rank 1: dcp[0 1] dcp rank 1 of 2, gathered [0 1]
	// rank 2: dcp[2 3] dcp rank 0 of 2, gathered [2 3]
	// rank 3: dcp[2 3] dcp rank 1 of 2, gathered [2 3]
}
