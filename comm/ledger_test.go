package comm_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/comm"
)

func TestCheckLedger(t *testing.T) {
	ag := func(rank, count int) comm.Record {
		return comm.Record{Rank: rank, Seq: 17, Op: comm.OpAllGather, DType: comm.F32, Count: count}
	}
	v := func(rank int, send, recv []int) comm.Record {
		return comm.Record{Rank: rank, Seq: 2, Op: comm.OpAllToAllV, DType: comm.I32, Count: sum(send), SendCounts: send, RecvCounts: recv}
	}
	cases := []struct {
		name string
		recs []comm.Record
		want string
	}{
		{"empty", nil, ""},
		{"agree", []comm.Record{ag(0, 4608), ag(1, 4608)}, ""},
		{"count", []comm.Record{ag(0, 4608), ag(1, 4609)},
			"collective mismatch in group dcp[0 1] seq 17: rank 0 AllGather f32 count 4608, rank 1 AllGather f32 count 4609"},
		{"seq", []comm.Record{ag(4, 8), {Rank: 5, Seq: 18, Op: comm.OpAllGather, DType: comm.F32, Count: 8}},
			"collective mismatch in group dcp[0 1]: rank 4 seq 17 AllGather f32 count 8, rank 5 seq 18 AllGather f32 count 8"},
		{"v-agree", []comm.Record{v(0, []int{1, 2}, []int{1, 3}), v(1, []int{3, 0}, []int{2, 0})}, ""},
		{"v-counts-may-differ", []comm.Record{v(0, []int{0, 0}, []int{0, 5}), v(1, []int{5, 0}, []int{0, 0})}, ""},
		{"v-pair", []comm.Record{v(0, []int{1, 2}, []int{1, 3}), v(1, []int{3, 0}, []int{1, 0})},
			"collective mismatch in group dcp[0 1] seq 2: AllToAllV split counts disagree: rank 0 sends 2 to rank 1 but rank 1 expects 1 from rank 0; " +
				"rank 0 AllToAllV i32 send [1 2] recv [1 3], rank 1 AllToAllV i32 send [3 0] recv [1 0]"},
		{"v-length", []comm.Record{v(0, []int{1, 2}, []int{1, 3}), v(1, []int{3}, []int{2, 0})},
			"collective mismatch in group dcp[0 1] seq 2: AllToAllV split counts disagree: rank 1 has 1 send and 2 receive counts for a group of 2; " +
				"rank 0 AllToAllV i32 send [1 2] recv [1 3], rank 1 AllToAllV i32 send [3] recv [2 0]"},
		{"barrier-count-ignored-only-when-equal", []comm.Record{{Op: comm.OpBarrier}, {Rank: 1, Op: comm.OpBarrier, Count: 1}},
			"collective mismatch in group dcp[0 1] seq 0: rank 0 Barrier, rank 1 Barrier none count 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := comm.CheckLedger("dcp[0 1]", tc.recs)
			got := ""
			if err != nil {
				got = err.Error()
				var me *comm.MismatchError
				if !errors.As(err, &me) {
					t.Fatalf("got %T, want *comm.MismatchError", err)
				}
				if d := cmp.Diff(tc.recs, me.Records); d != "" {
					t.Errorf("records (-want +got):\n%s", d)
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func sum(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}

// ledgerAgrees is the ledger's rule written out directly: same seq, op
// and dtype everywhere; same count (and root for Broadcast) except for
// AllToAllV, whose split counts must match pairwise.
func ledgerAgrees(recs []comm.Record) bool {
	n := len(recs)
	for _, r := range recs {
		a := recs[0]
		if r.Seq != a.Seq || r.Op != a.Op || r.DType != a.DType {
			return false
		}
		if a.Op != comm.OpAllToAllV && r.Count != a.Count {
			return false
		}
		if a.Op == comm.OpBroadcast && r.Root != a.Root {
			return false
		}
	}
	if n == 0 || recs[0].Op != comm.OpAllToAllV {
		return true
	}
	for _, r := range recs {
		if len(r.SendCounts) != n || len(r.RecvCounts) != n {
			return false
		}
	}
	for i := range n {
		for j := range n {
			if recs[i].SendCounts[j] != recs[j].RecvCounts[i] {
				return false
			}
		}
	}
	return true
}

// FuzzCheckLedger decodes records from the input (small values so that
// agreement happens often) and compares the ledger's verdict with the rule.
func FuzzCheckLedger(f *testing.F) {
	f.Add([]byte{2, 0, 0, 2, 5, 0, 0, 0, 2, 5, 0})
	f.Add([]byte{2, 0, 4, 2, 0, 0, 1, 1, 1, 1, 0, 4, 2, 0, 0, 1, 1, 1, 1})
	f.Add([]byte{3, 1, 5, 3, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func(mod int) int {
			if len(data) == 0 {
				return 0
			}
			b := int(data[0])
			data = data[1:]
			return b % mod
		}
		n := next(5)
		recs := make([]comm.Record, n)
		for i := range recs {
			r := comm.Record{Rank: i, Seq: uint64(next(2)), Op: comm.Op(next(int(comm.NumOps))), DType: comm.DType(next(3)), Count: next(3), Root: next(2)}
			if r.Op == comm.OpAllToAllV {
				k := n - 1 + next(3) // sometimes the wrong length
				r.SendCounts, r.RecvCounts = make([]int, k), make([]int, k)
				for j := range k {
					r.SendCounts[j], r.RecvCounts[j] = next(2), next(2)
				}
			}
			recs[i] = r
		}
		err := comm.CheckLedger("g[0]", recs)
		if want := ledgerAgrees(recs); (err == nil) != want {
			t.Fatalf("records %+v: CheckLedger = %v, rule says agree=%v", recs, err, want)
		}
		var me *comm.MismatchError
		if err != nil && (!errors.As(err, &me) || me.Error() == "") {
			t.Fatalf("got %T %v, want a *comm.MismatchError", err, err)
		}
	})
}

func TestCollectiveValidate(t *testing.T) {
	f := make([]float32, 16)
	b := comm.Bytes(f)
	cases := []struct {
		name       string
		c          comm.Collective
		rank, size int
		want       string
	}{
		{"allgather-ok", comm.Collective{Op: comm.OpAllGather, DType: comm.F32, Count: 4, Send: b[:16], Recv: b[16:48]}, 0, 2, ""},
		{"allgather-short-recv", comm.Collective{Op: comm.OpAllGather, DType: comm.F32, Count: 4, Send: b[:16], Recv: b[16:44]}, 0, 2,
			"AllGather f32 count 4 in a group of 2: receive buffer has 7 elements, want 8"},
		{"send-length", comm.Collective{Op: comm.OpAllReduce, DType: comm.F32, Count: 5, Send: b[:16], Recv: b[16:36]}, 0, 2,
			"AllReduce f32 count 5: send buffer has 16 bytes, want 20"},
		{"overlap", comm.Collective{Op: comm.OpAllReduce, DType: comm.F32, Count: 4, Send: b[:16], Recv: b[12:28]}, 0, 2,
			"AllReduce: send and receive buffers overlap; peers read the send buffer while the receive buffer is written, use separate buffers"},
		{"rs-indivisible", comm.Collective{Op: comm.OpReduceScatter, DType: comm.F32, Count: 5, Send: b[:20], Recv: b[20:24]}, 0, 3,
			"ReduceScatter f32: count 5 is not a multiple of the group size 3; pad to 6"},
		{"a2av-lengths", comm.Collective{Op: comm.OpAllToAllV, DType: comm.F32, Count: 1, SendCounts: []int{1}, RecvCounts: []int{1, 0}, Send: b[:4], Recv: b[4:8]}, 0, 2,
			"AllToAllV: 1 send counts and 2 receive counts for a group of 2 members; want one per member"},
		{"a2av-sum", comm.Collective{Op: comm.OpAllToAllV, DType: comm.F32, Count: 2, SendCounts: []int{1, 0}, RecvCounts: []int{1, 0}, Send: b[:8], Recv: b[8:12]}, 0, 2,
			"AllToAllV: send counts sum to 1, count is 2"},
		{"a2av-negative", comm.Collective{Op: comm.OpAllToAllV, DType: comm.F32, Count: 0, SendCounts: []int{1, -1}, RecvCounts: []int{0, 0}}, 0, 2,
			"AllToAllV: negative count for member 1 (send -1, receive 0)"},
		{"broadcast-root", comm.Collective{Op: comm.OpBroadcast, DType: comm.F32, Count: 4, Root: 2, Send: b[:16], Recv: b[:16]}, 0, 2,
			"Broadcast: root 2 outside the group of 2 members"},
		{"broadcast-two-buffers", comm.Collective{Op: comm.OpBroadcast, DType: comm.F32, Count: 4, Send: b[:16], Recv: b[16:32]}, 0, 2,
			"Broadcast: send and receive must be the same buffer"},
		{"barrier-data", comm.Collective{Op: comm.OpBarrier, Count: 1}, 0, 2,
			"Barrier carries no data, got count 1, 0 send bytes, 0 recv bytes"},
		{"dtype", comm.Collective{Op: comm.OpAllReduce, DType: comm.DTypeNone}, 0, 2, "AllReduce: unknown dtype none"},
		{"op", comm.Collective{Op: comm.NumOps}, 0, 2, "unknown collective op 7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if err := tc.c.Validate(tc.rank, tc.size); err != nil {
				got = err.Error()
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestBytesSent pins the documented per-op definitions on one shape:
// 576 f32 (2304 bytes) in a group of 4, from rank 1.
func TestBytesSent(t *testing.T) {
	const n, s, p = 576, 4, 4
	cases := []struct {
		c    comm.Collective
		want int64
	}{
		{comm.Collective{Op: comm.OpAllGather, DType: comm.F32, Count: n}, n * s * (p - 1)},
		{comm.Collective{Op: comm.OpReduceScatter, DType: comm.F32, Count: n}, n * s / p * (p - 1)},
		{comm.Collective{Op: comm.OpAllReduce, DType: comm.F32, Count: n}, 2 * n * s / p * (p - 1)},
		{comm.Collective{Op: comm.OpAllToAll, DType: comm.F32, Count: n}, n * s / p * (p - 1)},
		{comm.Collective{Op: comm.OpAllToAllV, DType: comm.F32, Count: 10, SendCounts: []int{1, 2, 3, 4}}, (1 + 3 + 4) * s},
		{comm.Collective{Op: comm.OpBroadcast, DType: comm.F32, Count: n, Root: 1}, n * s * (p - 1)},
		{comm.Collective{Op: comm.OpBroadcast, DType: comm.F32, Count: n, Root: 0}, 0},
		{comm.Collective{Op: comm.OpBarrier}, 0},
	}
	for _, tc := range cases {
		if got := comm.BytesSent(&tc.c, 1, p); got != tc.want {
			t.Errorf("%s: BytesSent = %d, want %d", tc.c.Op, got, tc.want)
		}
	}
}

func TestAddInto(t *testing.T) {
	f := []float32{1.5, -2, 1e8}
	if err := comm.AddInto(comm.F32, comm.Bytes(f), comm.Bytes([]float32{0.25, 2, 1})); err != nil {
		t.Fatal(err)
	}
	u := []uint8{250, 1}
	if err := comm.AddInto(comm.U8, comm.Bytes(u), comm.Bytes([]uint8{10, 2})); err != nil {
		t.Fatal(err)
	}
	i := []int32{1 << 30, -5}
	if err := comm.AddInto(comm.I32, comm.Bytes(i), comm.Bytes([]int32{1 << 30, 5})); err != nil {
		t.Fatal(err)
	}
	d := []float64{0.1}
	if err := comm.AddInto(comm.F64, comm.Bytes(d), comm.Bytes([]float64{0.2})); err != nil {
		t.Fatal(err)
	}
	got := []any{f, u, i, d}
	// Element arithmetic of each type: float32 rounding, wrap-around for
	// integers, float64 rounding (computed at run time, not as a constant).
	big, tenth, fifth := float32(1e8), 0.1, 0.2
	want := []any{[]float32{1.75, 0, big + 1}, []uint8{4, 3}, []int32{-1 << 31, 0}, []float64{tenth + fifth}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if err := comm.AddInto(comm.F32, make([]byte, 4), make([]byte, 8)); err == nil {
		t.Error("length mismatch accepted")
	}
	if err := comm.AddInto(comm.F32, make([]byte, 6), make([]byte, 6)); err == nil {
		t.Error("partial element accepted")
	}
}

func TestDTypeOf(t *testing.T) {
	got := []comm.DType{comm.DTypeOf[uint8](), comm.DTypeOf[int32](), comm.DTypeOf[float32](), comm.DTypeOf[float64]()}
	want := []comm.DType{comm.U8, comm.I32, comm.F32, comm.F64}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if got := len(comm.Bytes(make([]float64, 3))); got != 24 {
		t.Errorf("Bytes of 3 float64 = %d bytes, want 24", got)
	}
}
