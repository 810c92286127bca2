package kvcache

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var (
	testNs = []int{1, 2, 3, 4, 5}
	testIs = []int{1, 2, 4, 16}
)

// TestOwnershipProperties checks the ownership function against counting,
// for every N ∈ 1..5, I ∈ {1,2,4,16} and every sequence length up to a few
// full rounds.
func TestOwnershipProperties(t *testing.T) {
	for _, n := range testNs {
		for _, i := range testIs {
			l := Layout{N: n, I: i}
			maxS := 3*n*i + 7
			// count[r] = #{p < S : Owner(p) = r}, updated as S grows.
			count := make([]int, n)
			for s := 0; s <= maxS; s++ {
				lo, hi, sum := s, 0, 0
				for r := range n {
					got := l.LocalLen(s, r)
					if got != count[r] {
						t.Fatalf("%+v: LocalLen(%d, %d) = %d, counting gives %d", l, s, r, got, count[r])
					}
					if s <= r*i && got != 0 {
						t.Errorf("%+v: LocalLen(%d, %d) = %d, want 0 for S ≤ r·I", l, s, r, got)
					}
					lo, hi, sum = min(lo, got), max(hi, got), sum+got
				}
				if sum != s {
					t.Errorf("%+v: Σ_r LocalLen(%d, r) = %d", l, s, sum)
				}
				if hi-lo > i {
					t.Errorf("%+v: S=%d: local lengths spread %d > I", l, s, hi-lo)
				}
				if s == maxS {
					break
				}
				// Position p = s joins its owner's local sequence at the end.
				p, r := s, l.Owner(s)
				if r < 0 || r >= n {
					t.Fatalf("%+v: Owner(%d) = %d", l, p, r)
				}
				if got := l.Local(p); got != count[r] {
					t.Errorf("%+v: Local(%d) = %d, want %d (next local index of rank %d)", l, p, got, count[r], r)
				}
				if got := l.Global(l.Local(p), r); got != p {
					t.Errorf("%+v: Global(Local(%d), %d) = %d", l, p, r, got)
				}
				count[r]++
			}
		}
	}
}

func TestLocalSeqLens(t *testing.T) {
	tests := []struct {
		name string
		l    Layout
		seq  []int32
		rank int
		want []int32
	}{
		// vllm_cp_internals §2.2: per-token bounds of a 3-token decode row.
		{"mtp bounds after expansion", Layout{N: 2, I: 1}, []int32{8, 9, 10}, 1, []int32{4, 4, 5}},
		// vllm_cp_internals §12, visible lengths for N=2, I=2, S=1..4.
		{"interleave 2 rank 0", Layout{N: 2, I: 2}, []int32{1, 2, 3, 4}, 0, []int32{1, 2, 2, 2}},
		{"interleave 2 rank 1", Layout{N: 2, I: 2}, []int32{1, 2, 3, 4}, 1, []int32{0, 0, 1, 2}},
		{"empty", Layout{N: 4, I: 1}, []int32{0}, 3, []int32{0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := make([]int32, len(tc.seq))
			tc.l.LocalSeqLens(got, tc.seq, tc.rank)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("LocalSeqLens(%v) (-want +got):\n%s", tc.seq, d)
			}
		})
	}
	// Why the bounds are expanded per token first: localizing the request's
	// length and then subtracting the query offsets gives other numbers.
	l := Layout{N: 2, I: 1}
	naive := []int32{int32(l.LocalLen(10, 1) - 2), int32(l.LocalLen(10, 1) - 1), int32(l.LocalLen(10, 1))}
	if cmp.Equal(naive, []int32{4, 4, 5}) {
		t.Errorf("local(10) − [2,1,0] = %v agrees with per-token localization", naive)
	}
}

// slotByLogicalBlock is the slot mapping written the way the scheduler sees
// it (vllm_cp_internals §2.3): a logical block covers B·N positions, and the
// offset inside it is localized. It must agree with Layout.Slot.
func slotByLogicalBlock(bt []int32, b, n, i, p, r int) int32 {
	v := b * n
	blk, off := p/v, p%v
	if (off/i)%n != r {
		return -1
	}
	return bt[blk]*int32(b) + int32((off/(n*i))*i+off%i)
}

func TestSlotMatchesLogicalBlocks(t *testing.T) {
	bt := []int32{11, 2, 7, 5, 0, 9}
	for _, n := range testNs {
		for _, i := range testIs {
			for _, b := range []int{16, 64} {
				l := Layout{N: n, I: i}
				if err := l.Validate(b); err != nil {
					t.Fatal(err)
				}
				for p := range len(bt) * b * n {
					for r := range n {
						want := slotByLogicalBlock(bt, b, n, i, p, r)
						if got := l.Slot(bt, b, p, r); got != want {
							t.Fatalf("%+v B=%d: Slot(p=%d, r=%d) = %d, logical-block mapping gives %d", l, b, p, r, got, want)
						}
					}
				}
			}
		}
	}
}

// TestLocalSlotsMatchSlot: a rank's local keys filled block by block are
// the slots Slot gives their global positions, on every layout and rank,
// over tables with unallocated blocks, for every key count the table holds;
// a table too short for the keys is refused.
func TestLocalSlotsMatchSlot(t *testing.T) {
	bt := []int32{11, -1, 7, 5, 0, 9}
	for _, n := range testNs {
		for _, i := range testIs {
			for _, b := range []int{16, 64} {
				l := Layout{N: n, I: i}
				if err := l.Validate(b); err != nil {
					t.Fatal(err)
				}
				for r := range n {
					all := make([]int32, len(bt)*b)
					l.LocalSlots(all, bt, b)
					for k := range all {
						if want := l.Slot(bt, b, l.Global(k, r), r); all[k] != want {
							t.Fatalf("%+v B=%d rank %d: local key %d has slot %d, Slot gives %d", l, b, r, k, all[k], want)
						}
					}
					for _, nk := range []int{0, 1, b - 1, b, b + 1, 3*b + 5} {
						got := make([]int32, nk)
						l.LocalSlots(got, bt, b)
						if d := cmp.Diff(all[:nk], got); d != "" {
							t.Fatalf("%+v B=%d rank %d: %d keys (-whole table +these keys):\n%s", l, b, r, nk, d)
						}
					}
				}
			}
		}
	}
	defer func() {
		if msg := fmt.Sprint(recover()); !strings.Contains(msg, "need 3 blocks of 16, block table has 2") {
			t.Errorf("panic = %q, want the blocks needed and held", msg)
		}
	}()
	Layout{N: 1, I: 1}.LocalSlots(make([]int32, 33), bt[:2], 16)
}

func TestWorkedExamples(t *testing.T) {
	// vllm_cp_internals §2.3: N=2, I=1, B=4, p=5 → rank 1, local 2; rank 1
	// writes slot BT[0]·4+2 and rank 0 writes −1.
	l := Layout{N: 2, I: 1}
	if got := l.Owner(5); got != 1 {
		t.Errorf("Owner(5) = %d, want 1", got)
	}
	if got := l.Local(5); got != 2 {
		t.Errorf("Local(5) = %d, want 2", got)
	}
	bt := []int32{3}
	if got := l.Slot(bt, 4, 5, 1); got != 3*4+2 {
		t.Errorf("rank 1 slot of p=5 = %d, want %d", got, 3*4+2)
	}
	if got := l.Slot(bt, 4, 5, 0); got != -1 {
		t.Errorf("rank 0 slot of p=5 = %d, want -1", got)
	}
}

func TestLocalize(t *testing.T) {
	tests := []struct {
		name      string
		l         Layout
		bt        []int32
		b, rank   int
		positions []int32
		compact   bool
		want      []int32
		wantValid int
	}{
		// vllm_cp_internals §7.3 worked example.
		{"compact", Layout{2, 1}, []int32{11, 2, 7, 5}, 64, 0, []int32{8, 5, 130, 7, -1, 262}, true,
			[]int32{708, 129, 451, -1, -1, -1}, 3},
		{"in place", Layout{2, 1}, []int32{11, 2, 7, 5}, 64, 0, []int32{8, 5, 130, 7, -1, 262}, false,
			[]int32{708, -1, 129, -1, -1, 451}, 3},
		// Second example of §7.3: positions 0..7 on rank 0 of N=2, B=4, BT=[10].
		{"filter", Layout{2, 1}, []int32{10}, 4, 0, []int32{0, 1, 2, 3, 4, 5, 6, 7}, true,
			[]int32{40, 41, 42, 43, -1, -1, -1, -1}, 4},
		// Positions past the block table, other negatives and unallocated blocks are dropped.
		{"out of table", Layout{1, 1}, []int32{4, -1}, 4, 0, []int32{3, 9, 4, -7, 5}, false,
			[]int32{19, -1, -1, -1, -1}, 1},
		{"rank owns none", Layout{4, 2}, []int32{1}, 4, 3, []int32{0, 1, 2, 3, 4, 5}, true,
			[]int32{-1, -1, -1, -1, -1, -1}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := make([]int32, len(tc.positions))
			valid := tc.l.Localize(got, tc.positions, tc.bt, tc.b, tc.rank, tc.compact)
			if d := cmp.Diff(tc.want, got); d != "" || valid != tc.wantValid {
				t.Errorf("Localize valid = %d, want %d; slots (-want +got):\n%s", valid, tc.wantValid, d)
			}
			// In place over the positions themselves gives the same result.
			alias := append([]int32(nil), tc.positions...)
			valid = tc.l.Localize(alias, alias, tc.bt, tc.b, tc.rank, tc.compact)
			if d := cmp.Diff(tc.want, alias); d != "" || valid != tc.wantValid {
				t.Errorf("aliased Localize valid = %d; slots (-want +got):\n%s", valid, d)
			}
		})
	}
}

// TestLocalizeAgreesWithSlot: localized indices are exactly the owned slots,
// and the compact form is the in-place form with the holes squeezed out.
func TestLocalizeAgreesWithSlot(t *testing.T) {
	bt := []int32{6, 1, 4, 0}
	for _, n := range testNs {
		for _, i := range []int{1, 2, 4} {
			l, b := Layout{N: n, I: i}, 4
			var positions []int32
			for p := len(bt)*b*n - 1; p >= -2; p -= 3 { // descending, with a negative
				positions = append(positions, int32(p))
			}
			for r := range n {
				inPlace := make([]int32, len(positions))
				compact := make([]int32, len(positions))
				v1 := l.Localize(inPlace, positions, bt, b, r, false)
				v2 := l.Localize(compact, positions, bt, b, r, true)
				var squeezed []int32
				for k, p := range positions {
					want := int32(-1)
					if p >= 0 {
						want = l.Slot(bt, b, int(p), r)
					}
					if inPlace[k] != want {
						t.Fatalf("%+v r=%d: position %d localized to %d, Slot gives %d", l, r, p, inPlace[k], want)
					}
					if want >= 0 {
						squeezed = append(squeezed, want)
					}
				}
				for len(squeezed) < len(positions) {
					squeezed = append(squeezed, -1)
				}
				if d := cmp.Diff(squeezed, compact); d != "" || v1 != v2 {
					t.Errorf("%+v r=%d: counts %d/%d; compact (-squeezed +got):\n%s", l, r, v1, v2, d)
				}
			}
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		l       Layout
		b       int
		wantErr []string // substrings of the refusal; nil = valid
	}{
		{Layout{1, 1}, 64, nil},
		{Layout{8, 64}, 64, nil},
		{Layout{3, 16}, 64, nil},
		{Layout{0, 1}, 64, []string{"is 0", "--decode-context-parallel-size 1"}},
		{Layout{2, 0}, 64, []string{"is 0", "--cp-kv-cache-interleave-size 1"}},
		{Layout{2, 1}, 0, []string{"block size is 0", "--block-size"}},
		{Layout{2, 128}, 64, []string{"128", "64", "1, 2, 4, 8, 16, 32 or 64"}},
		{Layout{2, 3}, 16, []string{"3", "16", "1, 2, 4, 8 or 16", "multiple of 3"}},
	}
	for _, tc := range tests {
		err := tc.l.Validate(tc.b)
		if (err != nil) != (tc.wantErr != nil) {
			t.Errorf("%+v.Validate(%d) = %v, want error %v", tc.l, tc.b, err, tc.wantErr != nil)
			continue
		}
		for _, s := range tc.wantErr {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%+v.Validate(%d) = %q, missing %q", tc.l, tc.b, err, s)
			}
		}
	}
}

// FuzzLayout checks the ownership invariants on arbitrary layouts and
// positions.
func FuzzLayout(f *testing.F) {
	f.Add(uint8(2), uint8(1), uint32(5), uint8(3))
	f.Add(uint8(3), uint8(16), uint32(22860), uint8(0))
	f.Add(uint8(1), uint8(1), uint32(0), uint8(1))
	f.Fuzz(func(t *testing.T, n8, i8 uint8, p32 uint32, blkPow uint8) {
		l := Layout{N: int(n8%16) + 1, I: int(i8%64) + 1}
		p := int(p32 % (1 << 24))
		r := l.Owner(p)
		if r < 0 || r >= l.N {
			t.Fatalf("%+v: Owner(%d) = %d", l, p, r)
		}
		loc := l.Local(p)
		if g := l.Global(loc, r); g != p {
			t.Fatalf("%+v: Global(Local(%d)=%d, %d) = %d", l, p, loc, r, g)
		}
		// p is the loc-th position of rank r: exactly loc of them lie before it.
		if before, upto := l.LocalLen(p, r), l.LocalLen(p+1, r); before != loc || upto != loc+1 {
			t.Fatalf("%+v: p=%d local %d, LocalLen(p)=%d LocalLen(p+1)=%d", l, p, loc, before, upto)
		}
		sum := 0
		for q := range l.N {
			sum += l.LocalLen(p, q)
		}
		if sum != p {
			t.Fatalf("%+v: Σ LocalLen(%d) = %d", l, p, sum)
		}
		b := l.I << (blkPow % 4)
		if err := l.Validate(b); err != nil {
			t.Fatalf("%+v with block size %d: %v", l, b, err)
		}
		bt := make([]int32, loc/b+1)
		for k := range bt {
			bt[k] = int32(len(bt) - k)
		}
		if s := l.Slot(bt, b, p, r); s != bt[loc/b]*int32(b)+int32(loc%b) {
			t.Fatalf("%+v: Slot(%d) = %d", l, p, s)
		}
		if s := l.Slot(bt, b, p, (r+1)%l.N); l.N > 1 && s != -1 {
			t.Fatalf("%+v: non-owner slot of %d = %d", l, p, s)
		}
	})
}

// TestSlotEdges: an unallocated block gives −1; an owned position past the
// block table is a bookkeeping bug and panics; positions owned elsewhere
// never look at the table.
func TestSlotEdges(t *testing.T) {
	l := Layout{N: 2, I: 1}
	if got := l.Slot([]int32{-1}, 4, 2, 0); got != -1 {
		t.Errorf("slot in an unallocated block = %d, want -1", got)
	}
	if got := l.Slot(nil, 4, 9, 0); got != -1 {
		t.Errorf("slot of a position rank 0 does not own = %d, want -1", got)
	}
	defer func() {
		if r := recover(); r == nil {
			t.Error("Slot past the block table did not panic")
		}
	}()
	l.Slot([]int32{3}, 4, 8, 0) // local 4 → block 1 of a 1-block table
}
