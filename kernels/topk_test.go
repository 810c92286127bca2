package kernels

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// topKSorted is the oracle: sort every selectable index by (score desc,
// index asc), keep the first k, pad with −1.
func topKSorted(k int, scores []float32) ([]int32, int) {
	var idx []int32
	for i, s := range scores {
		if !math.IsNaN(float64(s)) && !math.IsInf(float64(s), -1) {
			idx = append(idx, int32(i))
		}
	}
	slices.SortStableFunc(idx, func(a, b int32) int {
		switch sa, sb := scores[a], scores[b]; {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return int(a - b)
	})
	cnt := min(k, len(idx))
	out := make([]int32, k)
	for i := range out {
		out[i] = -1
	}
	copy(out, idx[:cnt])
	return out, cnt
}

// tieScores draws integer scores from a small range (heavy ties) and sprinkles
// −Inf, NaN, +Inf and −0.
func tieScores(seed uint64, n, levels int) []float32 {
	r := newRand(seed)
	s := make([]float32, n)
	for i := range s {
		switch u := r.IntN(20); u {
		case 0:
			s[i] = float32(math.Inf(-1))
		case 1:
			s[i] = float32(math.NaN())
		case 2:
			s[i] = float32(math.Copysign(0, -1))
		case 3:
			if r.IntN(10) == 0 {
				s[i] = float32(math.Inf(1))
				break
			}
			fallthrough
		default:
			s[i] = float32(r.IntN(levels) - levels/2)
		}
	}
	return s
}

func TestTopK(t *testing.T) {
	tests := []struct {
		name      string
		n, levels int
		ks        []int
	}{
		{"empty", 0, 3, []int{0, 1, 4}},
		{"single", 1, 1, []int{0, 1, 3}},
		{"small", 7, 3, []int{1, 3, 7, 12}},
		{"ties", 100, 4, []int{1, 5, 16, 50, 100, 105}},
		{"many ties", 1000, 2, []int{1, 64, 999, 1000, 1001}},
		{"spread", 5000, 100000, []int{2048, 16}},
		{"indexer shape", 65536, 50, []int{2048}},
		{"k covers the row", 2000, 300, []int{2000, 2048}},
	}
	for ti, tc := range tests {
		for _, k := range tc.ks {
			scores := tieScores(uint64(100+ti*10+k), tc.n, tc.levels)
			want, wantCnt := topKSorted(k, scores)
			got := make([]int32, k)
			for i := range got {
				got[i] = 12345 // garbage that must be overwritten
			}
			cnt := TopK(got, scores)
			if cnt != wantCnt {
				t.Errorf("%s n=%d k=%d: count %d, want %d", tc.name, tc.n, k, cnt, wantCnt)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s n=%d k=%d (-sorted oracle +TopK):\n%s", tc.name, tc.n, k, diff)
			}
		}
	}
}

func TestTopKOrderCases(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	tests := []struct {
		name   string
		scores []float32
		k      int
		want   []int32
		cnt    int
	}{
		{"descending then index", []float32{1, 3, 3, 2, 3}, 4, []int32{1, 2, 4, 3}, 4},
		{"ascending input", []float32{0, 1, 2, 3, 4, 5}, 3, []int32{5, 4, 3}, 3},
		{"unselectable padded", []float32{-inf, nan, 2, -inf}, 3, []int32{2, -1, -1}, 1},
		{"all unselectable", []float32{nan, -inf}, 2, []int32{-1, -1}, 0},
		{"plus inf first", []float32{5, inf, 5, -1e38}, 4, []int32{1, 0, 2, 3}, 4},
		{"signed zeros tie", []float32{float32(math.Copysign(0, -1)), 0}, 1, []int32{0}, 1},
	}
	for _, tc := range tests {
		got := make([]int32, tc.k)
		cnt := TopK(got, tc.scores)
		if cnt != tc.cnt {
			t.Errorf("%s: count %d, want %d", tc.name, cnt, tc.cnt)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// FuzzTopK decodes bytes into scores from a small alphabet (ties, NaN, ±Inf,
// ±0) and checks TopK against the sort-based oracle.
func FuzzTopK(f *testing.F) {
	f.Add([]byte{1, 2, 3, 2, 1}, uint8(2))
	f.Add([]byte{0, 0, 0, 255, 254}, uint8(9))
	f.Add([]byte{}, uint8(0))
	alphabet := []float32{
		float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)),
		0, float32(math.Copysign(0, -1)), 1, -1, 2, 0.5, -3e38, 3e38,
	}
	f.Fuzz(func(t *testing.T, data []byte, k uint8) {
		scores := make([]float32, len(data))
		for i, b := range data {
			if int(b) < len(alphabet) {
				scores[i] = alphabet[b]
			} else {
				scores[i] = float32(b%7) - 3
			}
		}
		want, wantCnt := topKSorted(int(k), scores)
		got := make([]int32, k)
		cnt := TopK(got, scores)
		if cnt != wantCnt {
			t.Fatalf("count %d, want %d (scores %v, k %d)", cnt, wantCnt, scores, k)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("scores %v k %d (-oracle +TopK):\n%s", scores, k, diff)
		}
		if int(k) >= len(scores) { // the whole-row sort, whatever the row length
			all := make([]int32, k)
			if cnt := topKAll(all, scores); cnt != wantCnt {
				t.Fatalf("whole-row sort: count %d, want %d (scores %v, k %d)", cnt, wantCnt, scores, k)
			}
			if diff := cmp.Diff(want, all); diff != "" {
				t.Fatalf("scores %v k %d (-oracle +whole-row sort):\n%s", scores, k, diff)
			}
		}
		if int(k) < len(scores) { // the radix select, whatever the row length
			rad := make([]int32, k)
			if cnt := topKRadix(rad, scores); cnt != wantCnt {
				t.Fatalf("radix select: count %d, want %d (scores %v, k %d)", cnt, wantCnt, scores, k)
			}
			if diff := cmp.Diff(want, rad); diff != "" {
				t.Fatalf("scores %v k %d (-oracle +radix select):\n%s", scores, k, diff)
			}
		}
	})
}

// TestTopKRadixSelect: the radix select gives the sorted oracle's result on
// rows of every kind (ties within a histogram bucket and across passes,
// unselectable entries, signed zeros, k above 2048), whatever the row length.
func TestTopKRadixSelect(t *testing.T) {
	tests := []struct {
		name      string
		n, levels int
		ks        []int
	}{
		{"ties", 100, 4, []int{1, 5, 16, 50, 99}},
		{"many ties", 1000, 2, []int{1, 64, 999}},
		{"spread", 5000, 100000, []int{2048, 16, 3000}},
		{"indexer shape", 65536, 1 << 20, []int{2048, 1}},
	}
	for ti, tc := range tests {
		for _, k := range tc.ks {
			scores := tieScores(uint64(300+ti*10+k), tc.n, tc.levels)
			for i := 0; i < len(scores); i += 17 {
				scores[i] = []float32{float32(math.NaN()), float32(math.Inf(-1)), float32(math.Copysign(0, -1)), 0, float32(math.Inf(1))}[i%5]
			}
			want, wantCnt := topKSorted(k, scores)
			got := make([]int32, k)
			if cnt := topKRadix(got, scores); cnt != wantCnt {
				t.Errorf("%s n=%d k=%d: count %d, want %d", tc.name, tc.n, k, cnt, wantCnt)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s n=%d k=%d (-sorted oracle +radix select):\n%s", tc.name, tc.n, k, diff)
			}
		}
	}
	// Values one code apart decide in the last pass.
	near := make([]float32, 5000)
	for i := range near {
		near[i] = math.Float32frombits(0x3f800000 + uint32(i%7))
	}
	want, _ := topKSorted(100, near)
	got := make([]int32, 100)
	topKRadix(got, near)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("adjacent codes (-sorted oracle +radix select):\n%s", diff)
	}
}

// TestSortTopK: every way sortTopK sorts (by comparison up to topkSortMin
// indices, by radix up to topkCandMax, by comparison past it) orders a
// selection made in index order as the sorted oracle does, over heavy ties,
// both zeros, +Inf, values one code apart and spread values.
func TestSortTopK(t *testing.T) {
	near := func(seed uint64, n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = math.Float32frombits(0x3f800000 + uint32((i*7+int(seed))%5))
		}
		return s
	}
	scoreSets := []struct {
		name   string
		scores func(seed uint64, n int) []float32
	}{
		{"two levels", func(seed uint64, n int) []float32 { return tieScores(seed, n, 2) }},
		{"spread", func(seed uint64, n int) []float32 { return tieScores(seed, n, 1<<24) }},
		{"adjacent codes", near},
	}
	for _, n := range []int{0, 1, 2, topkSortMin - 1, topkSortMin, topkSortMin + 1, 2048, topkCandMax, topkCandMax + 1} {
		for si, set := range scoreSets {
			scores := set.scores(uint64(900+n+si), 2*n+3)
			// A selection in index order: every other selectable score.
			idx := []int32{}
			for i, v := range scores {
				if selectable(v) && (i%2 == 0 || len(idx) < n/2) && len(idx) < n {
					idx = append(idx, int32(i))
				}
			}
			picked := make([]float32, len(scores))
			for i := range picked {
				picked[i] = float32(math.Inf(-1))
			}
			for _, i := range idx {
				picked[i] = scores[i]
			}
			want, _ := topKSorted(len(idx), picked)
			got := slices.Clone(idx)
			sortTopK(got, scores)
			if diff := cmp.Diff(want[:len(idx)], got); diff != "" {
				t.Errorf("%s, %d indices (-sorted oracle +sortTopK):\n%s", set.name, len(idx), diff)
			}
		}
	}
}

// TestTopKSplit: the two-half selection merged on two threads gives the
// sorted oracle's result, with ties and unselectable entries on both sides
// of the split and equal scores straddling it.
func TestTopKSplit(t *testing.T) {
	defer SetThreads(SetThreads(2))
	for _, tc := range []struct{ n, levels, k int }{
		{65536, 50, 2048}, {40000, 3, 2048}, {65536, 1 << 20, 1}, {33000, 1 << 20, 256}, {50000, 1, 2000},
	} {
		scores := tieScores(uint64(tc.n+tc.k), tc.n, tc.levels)
		for i := 0; i < len(scores); i += 13 {
			scores[i] = []float32{float32(math.NaN()), float32(math.Inf(-1)), float32(math.Copysign(0, -1)), 0}[i%4]
		}
		want, wantCnt := topKSorted(tc.k, scores)
		got := make([]int32, tc.k)
		if cnt := topKSplit(got, scores); cnt != wantCnt {
			t.Errorf("n=%d levels=%d k=%d: count %d, want %d", tc.n, tc.levels, tc.k, cnt, wantCnt)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("n=%d levels=%d k=%d (-sorted oracle +split TopK):\n%s", tc.n, tc.levels, tc.k, diff)
		}
	}
}

// TestTopKRows: rows of different lengths selected at once give the sorted
// oracle's result row by row on one, two and three threads: empty rows,
// rows shorter than k, rows taking the heap, radix, sampled and (long
// enough to split on their own) split paths, ties and unselectable entries.
func TestTopKRows(t *testing.T) {
	const stride = 40000
	for _, tc := range []struct {
		name string
		k    int
		lens []int32
	}{
		{"one row", 2048, []int32{33000}},
		{"causal prompt", 64, []int32{1, 2, 63, 64, 65, 200, 3000, 9000}},
		{"decode batch", 2048, []int32{512, 2047, 2048, 2049, 8192, 16384, 33000, 0}},
		{"empty", 16, []int32{0, 0, 0}},
	} {
		rows := len(tc.lens)
		scores := tieScores(uint64(tc.k+rows), rows*stride, 40)
		for i := 0; i < len(scores); i += 17 {
			scores[i] = []float32{float32(math.NaN()), float32(math.Inf(-1)), float32(math.Copysign(0, -1)), 0}[i%4]
		}
		want := make([]int32, rows*tc.k)
		wantCnt := make([]int32, rows)
		for i, n := range tc.lens {
			w, c := topKSorted(tc.k, scores[i*stride:i*stride+int(n)])
			copy(want[i*tc.k:], w)
			wantCnt[i] = int32(c)
		}
		for _, threads := range []int{1, 2, 3} {
			SetThreads(threads)
			got := make([]int32, rows*tc.k)
			cnt := make([]int32, rows)
			TopKRows(got, cnt, scores, stride, tc.lens)
			if diff := cmp.Diff(wantCnt, cnt); diff != "" {
				t.Errorf("%s, %d threads: counts (-sorted oracle +TopKRows):\n%s", tc.name, threads, diff)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s, %d threads (-sorted oracle +TopKRows):\n%s", tc.name, threads, diff)
			}
		}
	}
	SetThreads(1)
}

// TestTopKRowsRefusesBadSizes: sizes that do not fit panic with the sizes.
func TestTopKRowsRefusesBadSizes(t *testing.T) {
	for _, tc := range []struct {
		name           string
		dst, counts    int
		scores, stride int
		lens           []int32
		want           string
	}{
		{"dst not whole rows", 5, 2, 20, 10, []int32{3, 3}, "multiple of 2"},
		{"few counts", 4, 1, 20, 10, []int32{3, 3}, "2 counts"},
		{"row past stride", 4, 2, 20, 10, []int32{11, 3}, "row 0 of 11 scores"},
		{"row past scores", 4, 2, 15, 10, []int32{3, 6}, "row 1 of 6 scores"},
		{"negative length", 4, 2, 20, 10, []int32{3, -1}, "row 1 of -1 scores"},
	} {
		got := func() (msg string) {
			defer func() { msg = fmt.Sprint(recover()) }()
			TopKRows(make([]int32, tc.dst), make([]int32, tc.counts), make([]float32, tc.scores), tc.stride, tc.lens)
			return ""
		}()
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: panic %q, want it to say %q", tc.name, got, tc.want)
		}
	}
}

// TestTopKSampled: the sampled threshold's single pass gives the sorted
// oracle's result wherever it accepts a row, and it accepts the rows it is
// for (indexer scores over long contexts, ties of a few dozen values); rows
// it refuses (heavy ties that overflow its buffer, most scores equal, a
// sample that puts the threshold above the k-th best score, a k near the
// row's length) go to the radix select, and TopK still gives the oracle's
// result.
func TestTopKSampled(t *testing.T) {
	relu := func(seed uint64, n int, zeros float64) []float32 {
		r := newRand(seed)
		s := make([]float32, n)
		for i := range s {
			if r.Float64() >= zeros {
				s[i] = float32(r.ExpFloat64())
			}
		}
		return s
	}
	withSpecials := func(s []float32, every int) []float32 {
		for i := 0; i < len(s); i += every {
			s[i] = []float32{float32(math.NaN()), float32(math.Inf(-1)), float32(math.Copysign(0, -1)), float32(math.Inf(1)), -3e38}[i/every%5]
		}
		return s
	}
	causal := func(s []float32, seen int) []float32 {
		for i := seen; i < len(s); i++ {
			s[i] = float32(math.Inf(-1))
		}
		return s
	}
	// The sample's points (every n/512-th score) hold the row's best score
	// and nothing else does, so the sample puts its threshold there, above
	// the row's k-th best: fewer than k candidates.
	sampledBest := func(n int) []float32 {
		s := relu(10, n, 0)
		for i := 0; i < n; i += n / topkSamples {
			s[i] = 1000
		}
		return s
	}
	tests := []struct {
		name     string
		scores   []float32
		k        int
		accepted bool
	}{
		{"indexer row, 32 Ki", relu(1, 32768, 0.3), 2048, true},
		{"indexer row, 128 Ki", relu(2, 131072, 0.5), 2048, true},
		{"indexer row, small k", relu(3, 65536, 0.2), 16, true},
		{"specials every 11th", withSpecials(relu(4, 40000, 0.1), 11), 2048, true},
		{"short row", relu(5, topkSampleMin, 0), 256, true},
		{"ties of a few values", tieScores(6, 65536, 50), 2048, true},
		{"ties overflowing the buffer", tieScores(6, 65536, 3), 2048, false},
		{"mostly zeros", relu(7, 32768, 0.97), 2048, false},
		{"the sample holds the best", sampledBest(32768), 2048, false},
		{"k near the row", relu(8, 10000, 0), 9000, false},
		{"ties at the k-th", tieScores(9, 32768, 1<<12), 2048, true},
		{"a prefill row, -Inf past its position", causal(relu(11, 32768, 0.3), 12000), 2048, true},
		{"a prefill row selecting all it sees", causal(relu(12, 32768, 0.3), 2000), 2048, false},
	}
	for _, tc := range tests {
		want, wantCnt := topKSorted(tc.k, tc.scores)
		got := make([]int32, tc.k)
		cnt, ok := topKSampled(got, tc.scores)
		if ok != tc.accepted {
			t.Errorf("%s: accepted %v, want %v", tc.name, ok, tc.accepted)
		}
		if ok {
			if cnt != wantCnt {
				t.Errorf("%s: count %d, want %d", tc.name, cnt, wantCnt)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s (-sorted oracle +sampled):\n%s", tc.name, diff)
			}
		}
		got = make([]int32, tc.k)
		if cnt := TopK(got, tc.scores); cnt != wantCnt {
			t.Errorf("%s: TopK count %d, want %d", tc.name, cnt, wantCnt)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-sorted oracle +TopK):\n%s", tc.name, diff)
		}
	}
}

// FuzzTopKSampled tiles the fuzzer's bytes into a row long enough for the
// sampled threshold (each byte a score of a small alphabet, ties, NaN, ±Inf
// and ±0 included, offset by its tile so rows are not all ties) and checks
// the sampled pass, where it accepts the row, and TopK against the oracle.
func FuzzTopKSampled(f *testing.F) {
	f.Add([]byte{1, 2, 3, 2, 1}, uint16(2048), uint8(3))
	f.Add([]byte{0, 0, 0, 255, 254}, uint16(16), uint8(0))
	f.Add([]byte{9}, uint16(300), uint8(200))
	alphabet := []float32{
		float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)),
		0, float32(math.Copysign(0, -1)), 1, -1, 2, 0.5, -3e38, 3e38,
	}
	f.Fuzz(func(t *testing.T, data []byte, k uint16, spread uint8) {
		if len(data) == 0 {
			return
		}
		n := topkSampleMin + len(data)*37
		scores := make([]float32, n)
		for i := range scores {
			b := data[i%len(data)]
			if int(b) < len(alphabet) {
				scores[i] = alphabet[b]
			} else {
				scores[i] = float32(b%7) - 3 + float32(i/len(data)%(int(spread)+1))
			}
		}
		kk := int(k)%n + 1
		want, wantCnt := topKSorted(kk, scores)
		got := make([]int32, kk)
		if cnt, ok := topKSampled(got, scores); ok {
			if cnt != wantCnt {
				t.Fatalf("sampled: count %d, want %d (n %d, k %d)", cnt, wantCnt, n, kk)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("n %d k %d (-oracle +sampled):\n%s", n, kk, diff)
			}
		}
		got = make([]int32, kk)
		if cnt := TopK(got, scores); cnt != wantCnt {
			t.Fatalf("count %d, want %d (n %d, k %d)", cnt, wantCnt, n, kk)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("n %d k %d (-oracle +TopK):\n%s", n, kk, diff)
		}
	})
}

// TestTopkKeepFast checks the sampled top-k's candidate pass on AVX-512
// (whole blocks in assembly, the rest in Go) against the pure-Go pass:
// the same count, positions and refusal, for rows of every length around
// the block size, thresholds at row values, zeros of both signs, ±Inf and
// NaN, and rows that keep more than the buffer holds.
func TestTopkKeepFast(t *testing.T) {
	specials := []float32{float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)), 0, float32(math.Copysign(0, -1)), -3e38, 3e38}
	var got, want [topkCandMax]uint32
	for _, n := range []int{0, 1, 15, 63, 64, 65, 127, 128, 1000, 20000, 3 * topkCandMax} {
		r := newRand(uint64(n) + 40)
		row := make([]float32, n)
		for i := range row {
			switch r.IntN(8) {
			case 0:
				row[i] = specials[r.IntN(len(specials))]
			case 1:
				row[i] = 0
			default:
				row[i] = float32(r.NormFloat64())
			}
		}
		thrs := append([]float32{}, specials...)
		for range 4 {
			if n > 0 {
				thrs = append(thrs, row[r.IntN(n)])
			}
		}
		for _, thr := range thrs {
			wantCnt, wantOK := topkKeepRef(&want, row, thr, 0, 0)
			gotCnt, gotOK := topkKeep(&got, row, thr)
			if gotOK != wantOK || gotCnt != wantCnt {
				t.Fatalf("n=%d thr=%v: kept %d (ok %v), want %d (ok %v)", n, thr, gotCnt, gotOK, wantCnt, wantOK)
			}
			if wantOK {
				if diff := cmp.Diff(want[:wantCnt], got[:gotCnt]); diff != "" {
					t.Fatalf("n=%d thr=%v (-Go +fast):\n%s", n, thr, diff)
				}
			}
		}
	}
}
