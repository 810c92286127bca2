//go:build mpi

package mpi

import (
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/comm"
)

// TestStalledNamesPendingPeers pins the error of a round that outlived the
// deadline with every member arrived: the peers of the pending transfers as
// world ranks in group order, each once, the transfers themselves, a bound
// on how many are listed, and the *comm.AbortError within.
func TestStalledNamesPendingPeers(t *testing.T) {
	ranks := []int{4, 7, 2, 9} // world rank of each group rank
	head := "collective timeout after 2s in group g[4 7 2 9] seq 12 (AllReduce f32 count 1000) on rank 4: "
	many := make([]transfer, 0, 10)
	for i := range 10 {
		many = append(many, transfer{peer: 1 + i/5, send: i%2 == 1, bytes: 100 + i})
	}
	cases := []struct {
		name       string
		round      string
		pend       []transfer
		unfinished []int
		want       string
	}{{
		name:       "one peer, receive only",
		round:      "data round",
		pend:       []transfer{{peer: 2, bytes: 4000}},
		unfinished: []int{2},
		want: head + "every member arrived, but the data exchange with rank 2 did not finish (rank 2 is unreachable or stopped); " +
			"still pending in its data round: receiving 4000 bytes from rank 2",
	}, {
		name:       "one peer, both ways",
		round:      "first data round (reduce-scatter)",
		pend:       []transfer{{peer: 2, bytes: 16000}, {peer: 2, send: true, bytes: 16004}},
		unfinished: []int{2},
		want: head + "every member arrived, but the data exchange with rank 2 did not finish (rank 2 is unreachable or stopped); " +
			"still pending in its first data round (reduce-scatter): receiving 16000 bytes from rank 2, sending 16004 bytes to rank 2",
	}, {
		name:       "several peers",
		round:      "data round",
		pend:       []transfer{{peer: 1, send: true, bytes: 8}, {peer: 3, bytes: 8}, {peer: 3, send: true, bytes: 8}},
		unfinished: []int{7, 9},
		want: head + "every member arrived, but the data exchange with one or more of ranks [7 9] did not finish; " +
			"still pending in its data round: sending 8 bytes to rank 7, receiving 8 bytes from rank 9, sending 8 bytes to rank 9",
	}, {
		name:       "listing bounded",
		round:      "ledger round",
		pend:       many,
		unfinished: []int{7, 2},
		want: head + "every member arrived, but the data exchange with one or more of ranks [7 2] did not finish; still pending in its ledger round: " +
			"receiving 100 bytes from rank 7, sending 101 bytes to rank 7, receiving 102 bytes from rank 7, sending 103 bytes to rank 7, receiving 104 bytes from rank 7, " +
			"sending 105 bytes to rank 2, receiving 106 bytes from rank 2, sending 107 bytes to rank 2 and 2 more",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := &comm.AbortError{Group: "g[4 7 2 9]", Record: comm.Record{Rank: 4, Seq: 12, Op: comm.OpAllReduce, DType: comm.F32, Count: 1000},
				Timeout: 2 * time.Second, Cause: comm.ErrTimeout}
			err := stalled(e, tc.round, tc.pend, ranks)
			if d := cmp.Diff(tc.want, err.Error()); d != "" {
				t.Errorf("message (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.unfinished, e.Unfinished); d != "" {
				t.Errorf("Unfinished (-want +got):\n%s", d)
			}
			var ae *comm.AbortError
			if !errors.As(err, &ae) || ae != e || !errors.Is(err, comm.ErrTimeout) {
				t.Errorf("%v does not wrap the AbortError and its cause", err)
			}
		})
	}
}

// TestPartsMatchAcrossMembers checks the layout of every data round on a
// group of three: what member i sends to member j has the length of what j
// expects from i, a member keeps its own part whole, and the places a
// member receives into (its own part included) do not overlap and add up
// to the buffer the round fills.
func TestPartsMatchAcrossMembers(t *testing.T) {
	const n = 3
	ranks := []int{0, 1, 2}
	f32 := func(k int) []byte { return make([]byte, 4*k) }
	counts := [n][n]int{{0, 2, 5}, {1, 0, 0}, {3, 4, 1}} // counts[i][j]: i sends to j
	big := smallAllReduceBytes/4/n + 7                   // takes the chunked AllReduce
	chunkBytes := func(r int) int { lo, hi := chunk(big, n, r); return 4 * (hi - lo) }
	rounds := []struct {
		name   string
		c      func(r int) comm.Collective
		stage  int
		filled func(r int, c *comm.Collective) int // bytes the round fills on member r
	}{
		{"AllGather", func(int) comm.Collective {
			return comm.Collective{Op: comm.OpAllGather, DType: comm.F32, Count: 5, Send: f32(5), Recv: f32(5 * n)}
		}, stageDataWait, func(_ int, c *comm.Collective) int { return len(c.Recv) }},
		{"AllToAll", func(int) comm.Collective {
			return comm.Collective{Op: comm.OpAllToAll, DType: comm.F32, Count: 6, Send: f32(6), Recv: f32(6)}
		}, stageDataWait, func(_ int, c *comm.Collective) int { return len(c.Recv) }},
		{"ReduceScatter", func(int) comm.Collective {
			return comm.Collective{Op: comm.OpReduceScatter, DType: comm.F32, Count: 6, Send: f32(6), Recv: f32(2)}
		}, stageDataWait, func(_ int, c *comm.Collective) int { return len(c.Send) }},
		{"AllReduce/staged", func(int) comm.Collective {
			return comm.Collective{Op: comm.OpAllReduce, DType: comm.F32, Count: 7, Send: f32(7), Recv: f32(7)}
		}, stageDataWait, func(_ int, c *comm.Collective) int { return n * len(c.Send) }},
		{"AllReduce/chunked/reduce-scatter", func(int) comm.Collective {
			return comm.Collective{Op: comm.OpAllReduce, DType: comm.F32, Count: big, Send: f32(big), Recv: f32(big)}
		}, stageDataWait, func(r int, _ *comm.Collective) int { return n * chunkBytes(r) }},
		{"AllReduce/chunked/all-gather", func(int) comm.Collective {
			return comm.Collective{Op: comm.OpAllReduce, DType: comm.F32, Count: big, Send: f32(big), Recv: f32(big)}
		}, stageAllGatherChunks, func(_ int, c *comm.Collective) int { return len(c.Recv) }},
		{"AllToAllV", func(r int) comm.Collective {
			c := comm.Collective{Op: comm.OpAllToAllV, DType: comm.F32, SendCounts: make([]int, n), RecvCounts: make([]int, n)}
			so, ro := 0, 0
			for j := range n {
				c.SendCounts[j], c.RecvCounts[j] = counts[r][j], counts[j][r]
				so, ro = so+counts[r][j], ro+counts[j][r]
			}
			c.Count, c.Send, c.Recv = so, f32(so), f32(ro)
			return c
		}, stageDataWait, func(_ int, c *comm.Collective) int { return len(c.Recv) }},
		{"Broadcast", func(int) comm.Collective {
			b := f32(4) // comm.Broadcast passes one buffer as both
			return comm.Collective{Op: comm.OpBroadcast, DType: comm.F32, Count: 4, Root: 1, Send: b, Recv: b}
		}, stageDataWait, func(r int, c *comm.Collective) int {
			if r == c.Root {
				return 0 // the root's buffer holds the data already
			}
			return len(c.Recv)
		}},
	}
	for _, rd := range rounds {
		t.Run(rd.name, func(t *testing.T) {
			tasks := make([]*collective, n)
			for r := range tasks {
				m := newTestMember(ranks, r)
				c := rd.c(r)
				if err := c.Validate(r, n); err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				es := c.DType.Size()
				switch c.Op { // the staging startData sizes
				case comm.OpReduceScatter:
					m.scratch.grow(len(c.Send))
				case comm.OpAllReduce:
					m.scratch.grow(max(n*len(c.Send), n*chunkBytes(r)))
				case comm.OpAllToAllV:
					so, ro := 0, 0
					for j := range n {
						m.offs[0][j], m.offs[1][j] = so, ro
						so, ro = so+c.SendCounts[j]*es, ro+c.RecvCounts[j]*es
					}
				}
				tasks[r] = &collective{m: m, c: c, stage: rd.stage}
			}
			for i, ti := range tasks {
				total := 0
				for j, tj := range tasks {
					if j != i {
						if got, want := len(ti.part(true, j)), len(tj.part(false, i)); got != want {
							t.Errorf("member %d sends %d bytes to member %d, which expects %d", i, got, j, want)
						}
					}
					pj := ti.part(false, j)
					total += len(pj)
					for k := j + 1; k < n; k++ {
						if pk := ti.part(false, k); overlap(pj, pk) {
							t.Errorf("member %d receives from %d and %d into overlapping bytes", i, j, k)
						}
					}
				}
				if kept, own := len(ti.part(false, i)), len(ti.part(true, i)); kept != own && !(rd.c(i).Op == comm.OpBroadcast && kept == 0) {
					t.Errorf("member %d keeps %d of its own %d bytes", i, kept, own)
				}
				if want := rd.filled(i, &ti.c); total != want {
					t.Errorf("member %d receives %d bytes, want %d", i, total, want)
				}
			}
		})
	}
}

// overlap reports whether two non-empty byte slices share memory.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}
