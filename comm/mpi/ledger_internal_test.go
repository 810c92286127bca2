//go:build mpi

package mpi

import (
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/comm"
)

// newTestMember is a member of a group of the given world ranks with no
// communicator: enough to encode and decode ledger records without MPI.
func newTestMember(ranks []int, rank int) *member {
	return newMember(&process{opts: Options{Timeout: DefaultTimeout}, claimed: map[string]bool{}}, nil, comm.GroupName("t", ranks), ranks, rank)
}

// TestLedgerRecordRoundTrip encodes each member's collective, places the
// records where the exchange would, and checks that decoding yields
// exactly Collective.Record for every member.
func TestLedgerRecordRoundTrip(t *testing.T) {
	ranks := []int{5, 2, 7}
	cases := []comm.Collective{
		{Op: comm.OpAllGather, DType: comm.F32, Count: 4608},
		{Op: comm.OpBroadcast, DType: comm.U8, Count: 3, Root: 2},
		{Op: comm.OpBarrier},
		{Op: comm.OpAllToAllV, DType: comm.I32, Count: 6, SendCounts: []int{1, 2, 3}, RecvCounts: []int{0, 4, 9}},
		{Op: comm.OpAllToAllV, DType: comm.F64, Count: 1, SendCounts: []int{1}, RecvCounts: []int{1, 2, 3, 4}},
	}
	for i, c := range cases {
		members := make([]*member, len(ranks))
		for r := range members {
			members[r] = newTestMember(ranks, r)
			members[r].encode(&collective{c: c, seq: uint64(10 + i)})
		}
		m := members[1]
		all := m.recvRecs.int64s(m.words * len(ranks))
		for r, o := range members {
			copy(all[r*m.words:], o.sendRec.int64s(o.words))
		}
		if _, err := m.decode(); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		want := make([]comm.Record, len(ranks))
		for r := range want {
			want[r] = c.Record(ranks[r], uint64(10+i))
			if len(want[r].RecvCounts) > len(ranks) { // a record carries one count per member
				want[r].RecvCounts = want[r].RecvCounts[:len(ranks)]
			}
		}
		if d := cmp.Diff(want, m.recs, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("case %d (-want +decoded):\n%s", i, d)
		}
	}
}

// FuzzLedgerRecord decodes arbitrary bytes as the records of a 3-member
// group: decoding and the ledger check must never panic, and a decoded
// set must only be accepted with the magic and the sender's world rank in
// place.
func FuzzLedgerRecord(f *testing.F) {
	ranks := []int{0, 1, 2}
	seed := newTestMember(ranks, 0)
	seed.encode(&collective{c: comm.Collective{Op: comm.OpAllToAllV, DType: comm.I32, Count: 3, SendCounts: []int{1, 1, 1}, RecvCounts: []int{1, 1, 1}}})
	f.Add(append([]byte(nil), seed.sendRec.bytes(0, 8*seed.words)...))
	f.Add([]byte{})
	m := newTestMember(ranks, 1) // reused: its buffers are C memory
	f.Fuzz(func(t *testing.T, data []byte) {
		all := m.recvRecs.int64s(m.words * len(ranks))
		for i := range all {
			if k := 8 * (i % (m.words)); k+8 <= len(data) {
				all[i] = int64(binary.LittleEndian.Uint64(data[k:]))
			}
		}
		for r := range ranks { // the sender's rank field follows the data for member 0 only
			if r > 0 {
				all[r*m.words], all[r*m.words+1] = recordMagic, int64(ranks[r])
			}
		}
		_, err := m.decode()
		if err == nil {
			if all[0] != recordMagic || all[1] != int64(ranks[0]) {
				t.Fatalf("accepted a record with magic %#x rank %d", all[0], all[1])
			}
			_ = comm.CheckLedger(m.name, m.recs)
		}
	})
}
