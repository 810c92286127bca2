package kernels

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// impls lists the implementations this machine runs, the reference first.
func impls() []string {
	names := []string{"ref"}
	for _, l := range []level{levelAVX2, levelAVX512} {
		if supported(l) {
			names = append(names, l.String())
		}
	}
	if enableAMX() == nil {
		names = append(names, choice{l: levelAVX512, amx: true}.String())
	}
	return names
}

// forEachImpl runs f as a subtest under every supported implementation and
// restores the active one and the thread count afterwards.
func forEachImpl(t *testing.T, f func(t *testing.T)) {
	for _, name := range impls() {
		t.Run(name, func(t *testing.T) {
			prev, err := SetImpl(name)
			if err != nil {
				t.Fatal(err)
			}
			defer SetImpl(prev)
			defer SetThreads(SetThreads(1))
			f(t)
		})
	}
}

// bitsOf compares float32 slices by their bits (NaN == NaN, 0 != −0).
func bitsOf(x []float32) []uint32 {
	b := make([]uint32, len(x))
	for i, v := range x {
		b[i] = math.Float32bits(v)
	}
	return b
}

func TestSetImpl(t *testing.T) {
	tests := []struct {
		name    string
		wantErr string // "" = accepted
	}{
		{"ref", ""},
		{" REF ", ""},
		{"auto", ""},
		{"", ""},
		{"sse", "use one of auto, ref, avx2, avx512"},
		{"avx1024", "use one of auto, ref, avx2, avx512"},
	}
	for _, l := range []level{levelAVX2, levelAVX512} {
		if supported(l) {
			tests = append(tests, struct{ name, wantErr string }{l.String(), ""})
		} else {
			tests = append(tests, struct{ name, wantErr string }{l.String(), "CPU support this machine lacks"})
		}
	}
	before := Impl()
	for _, tc := range tests {
		prev, err := SetImpl(tc.name)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("SetImpl(%q): %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("SetImpl(%q) = %v, want an error mentioning %q", tc.name, err, tc.wantErr)
		case err == nil && tc.name != "" && tc.name != "auto" && Impl() != strings.ToLower(strings.TrimSpace(tc.name)):
			t.Errorf("after SetImpl(%q), Impl() = %q", tc.name, Impl())
		}
		if err == nil {
			SetImpl(prev)
		}
	}
	if Impl() != before {
		t.Errorf("SetImpl did not restore %q, Impl() = %q", before, Impl())
	}
	if _, err := SetImpl("auto"); err != nil || Impl() != bestLevel().String() {
		t.Errorf("SetImpl(auto) = %v, Impl() = %q, want %q", err, Impl(), bestLevel())
	}
	SetImpl(before)
}

// FuzzParseImpl: any string either parses to a level whose name parses back
// to it, or is refused with the list of accepted names.
func FuzzParseImpl(f *testing.F) {
	for _, s := range []string{"", "auto", "ref", "avx2", "avx512", "AVX-512", "avx512-amx", " AMX", " go ", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, auto, err := parseImpl(s)
		if err != nil {
			if !strings.Contains(err.Error(), "auto, ref, avx2, avx512, avx512-amx") {
				t.Errorf("parseImpl(%q): error %q does not list the accepted names", s, err)
			}
			return
		}
		if auto {
			if l != (choice{l: bestLevel()}) {
				t.Errorf("parseImpl(%q) auto = %v, want %v", s, l, bestLevel())
			}
			return
		}
		if back, _, err := parseImpl(l.String()); err != nil || back != l {
			t.Errorf("parseImpl(%q) = %v, which parses back to %v, %v", s, l, back, err)
		}
	})
}

func TestSetThreadsRefusesZero(t *testing.T) {
	expectPanic(t, "SetThreads(0)", func() { SetThreads(0) })
}

// dotBound is Σ|a·b|, the scale of the rounding error of a float32 dot
// product of a and b.
func dotBound(a []float32, b []float64) float64 {
	var s float64
	for k := range a {
		s += math.Abs(float64(a[k]) * b[k])
	}
	return s
}

// TestMatMulTAllImpls: every implementation agrees with the float64 product
// within float32 rounding (relative to Σ|x·w|), on shapes with row, column
// and reduction tails, every weight format; a row's bits do not depend on
// the batch it is in, on the thread count, or on the run.
func TestMatMulTAllImpls(t *testing.T) {
	shapes := []struct{ n, out, in int }{
		{1, 1, 1}, {2, 3, 7}, {5, 4, 16}, {3, 9, 17}, {7, 13, 33}, {4, 6, 64},
		{9, 31, 100}, {1, 576, 256}, {6, 5, 2*gemmKC + 40}, {0, 4, 16}, {3, 5, 0}, {2, 0, 8},
		{1, 19, 43}, {1, 17, 2*gemmKC + 40}, {1, 8, 8}, {1, 16, 24},
	}
	forEachImpl(t, func(t *testing.T) {
		r := newRand(40)
		for _, sh := range shapes {
			x := randSlice(r, sh.n*sh.in, 1)
			wf := randSlice(r, sh.out*sh.in, 1)
			wb := make([]uint16, len(wf))
			wbf := make([]float64, len(wf))
			for i, v := range wf {
				wb[i] = toBF16(v)
				wbf[i] = float64(bf16ToF32(wb[i]))
			}
			wq := randFP8(r, sh.out, sh.in, 0, 0)
			for _, tc := range []struct {
				dtype string
				w     *Matrix
				w64   []float64
			}{
				{"f32", &Matrix{Rows: sh.out, Cols: sh.in, F32: wf}, to64(wf)},
				{"bf16", &Matrix{Rows: sh.out, Cols: sh.in, BF16: wb}, wbf},
				{"fp8", wq, to64(wq.Dequantize().F32)},
			} {
				name := fmt.Sprintf("%s n=%d [%d,%d]", tc.dtype, sh.n, sh.out, sh.in)
				dst := make([]float32, sh.n*sh.out)
				MatMulT(dst, x, sh.n, tc.w)
				var bad []string
				for i := range sh.n {
					for j := range sh.out {
						xi := x[i*sh.in : (i+1)*sh.in]
						wj := tc.w64[j*sh.in : (j+1)*sh.in]
						var want float64
						for k := range xi {
							want += float64(xi[k]) * wj[k]
						}
						if err := math.Abs(float64(dst[i*sh.out+j]) - want); err > 1e-6*dotBound(xi, wj)+1e-30 {
							bad = append(bad, fmt.Sprintf("(%d,%d): got %v, want %v", i, j, dst[i*sh.out+j], want))
						}
					}
				}
				if d := cmp.Diff([]string(nil), bad); d != "" {
					t.Errorf("%s: elements beyond float32 rounding:\n%s", name, d)
				}
				// Each row alone, and the batch again on three threads.
				for i := range sh.n {
					row := make([]float32, sh.out)
					MatVecT(row, x[i*sh.in:(i+1)*sh.in], tc.w)
					if d := cmp.Diff(bitsOf(dst[i*sh.out:(i+1)*sh.out]), bitsOf(row)); d != "" {
						t.Errorf("%s row %d: alone vs in the batch (-batch +alone):\n%s", name, i, d)
					}
				}
				SetThreads(3)
				par := make([]float32, len(dst))
				MatMulT(par, x, sh.n, tc.w)
				SetThreads(1)
				if d := cmp.Diff(bitsOf(dst), bitsOf(par)); d != "" {
					t.Errorf("%s: 1 thread vs 3 threads (-1 +3):\n%s", name, d)
				}
			}
		}
	})
}

// attend64 is the float64 definition of AttendRows.
func attend64(q []float32, heads, vdim int, rows [][]float32, scale float32) (out, lse, maxL []float64) {
	dim := len(q) / heads
	out = make([]float64, heads*vdim)
	lse = make([]float64, heads)
	maxL = make([]float64, heads)
	for h := range heads {
		lg := make([]float64, len(rows))
		m := math.Inf(-1)
		for j, row := range rows {
			var d float64
			for k := range dim {
				d += float64(q[h*dim+k]) * float64(row[k])
			}
			lg[j] = float64(scale) * d
			m = max(m, lg[j])
		}
		maxL[h], lse[h] = m, m
		if len(rows) == 0 {
			continue
		}
		var s float64
		for _, l := range lg {
			s += math.Exp(l - m)
		}
		lse[h] = m + math.Log(s)
		for j, row := range rows {
			p := math.Exp(lg[j] - lse[h])
			for c := range vdim {
				out[h*vdim+c] += p * float64(row[c])
			}
		}
	}
	return out, lse, maxL
}

// TestAttendRows: every implementation against the float64 definition, on
// head counts and row counts with tails, rows whose unread tail is NaN, and
// no rows at all. Under the fast path each head's bits are the same computed
// alone, on several threads, or again.
func TestAttendRows(t *testing.T) {
	tests := []struct {
		name                 string
		heads, dim, vdim, nr int
		scale                float32
	}{
		{"glm5 decode", 64, 576, 512, 300, 0.0625},
		{"odd heads, one block tail", 7, 576, 512, 131, 0.1352},
		{"one head one row", 1, 576, 512, 1, 0.0625},
		{"small dims with tails", 5, 20, 70, 37, 0.5},
		{"vdim wider than dim", 3, 16, 128, 9, 0.25},
		{"no rows", 6, 576, 512, 0, 0.0625},
		{"three splits, the last short", 8, 576, 512, 1100, 0.0625},
		{"glm5 top-k, four splits", 16, 576, 512, 2048, 0.0625},
		{"split with tails", 5, 20, 70, 600, 0.5},
		{"more heads than one logit tile", 80, 576, 512, 70, 0.0625},
		{"odd dim", 18, 33, 16, 21, 0.25},
	}
	forEachImpl(t, func(t *testing.T) {
		for k, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r := newRand(50 + uint64(k))
				width := max(tc.dim, tc.vdim)
				rows := make([][]float32, tc.nr)
				for j := range rows {
					// Eight NaN values past the read width must never matter.
					row := append(randSlice(r, width, 1), make([]float32, 8)...)
					for c := width; c < len(row); c++ {
						row[c] = float32(math.NaN())
					}
					rows[j] = row
				}
				q := randSlice(r, tc.heads*tc.dim, 0.3)
				wantOut, wantLSE, wantMax := attend64(q, tc.heads, tc.vdim, rows, tc.scale)
				out := make([]float32, tc.heads*tc.vdim)
				lse := make([]float32, tc.heads)
				maxL := make([]float32, tc.heads)
				logits := make([]float32, AttendScratchLen(tc.heads, tc.nr, tc.vdim))
				AttendRows(out, lse, maxL, q, tc.heads, tc.vdim, rows, tc.scale, logits)
				opt := cmp.Options{cmpopts.EquateApprox(1e-4, 1e-5), cmpopts.EquateNaNs()}
				if d := cmp.Diff(wantOut, to64(out), opt); d != "" {
					t.Errorf("out (-want +got):\n%s", d)
				}
				if d := cmp.Diff(wantLSE, to64(lse), opt); d != "" {
					t.Errorf("lse (-want +got):\n%s", d)
				}
				if d := cmp.Diff(wantMax, to64(maxL), opt); d != "" {
					t.Errorf("maxLogits (-want +got):\n%s", d)
				}
				// Threads, repetition, and every head alone.
				SetThreads(3)
				out3 := make([]float32, len(out))
				lse3 := make([]float32, len(lse))
				AttendRows(out3, lse3, nil, q, tc.heads, tc.vdim, rows, tc.scale, logits)
				SetThreads(1)
				if d := cmp.Diff(bitsOf(append(out, lse...)), bitsOf(append(out3, lse3...))); d != "" {
					t.Errorf("1 thread vs 3 threads (-1 +3):\n%s", d)
				}
				for h := range tc.heads {
					o1 := make([]float32, tc.vdim)
					l1 := make([]float32, 1)
					AttendRows(o1, l1, nil, q[h*tc.dim:(h+1)*tc.dim], 1, tc.vdim, rows, tc.scale, logits)
					if d := cmp.Diff(bitsOf(append(out[h*tc.vdim:(h+1)*tc.vdim:(h+1)*tc.vdim], lse[h])), bitsOf(append(o1, l1...))); d != "" {
						t.Errorf("head %d alone vs with all heads (-all +alone):\n%s", h, d)
					}
				}
			})
		}
	})
}

// TestWeightedReLUScores: every implementation against the float64 formula
// Σ_h w[h]·max(0, q_h·k); a key's score has the same bits alone, with
// other keys, and on several threads.
func TestWeightedReLUScores(t *testing.T) {
	tests := []struct{ heads, dim, nkeys int }{
		{32, 128, 67}, {32, 128, 600}, {4, 16, 5}, {3, 16, 9}, {8, 24, 10}, {64, 128, 1}, {4, 128, 0},
		{64, 128, 37}, {33, 7, 19}, {1, 1, 9},
	}
	forEachImpl(t, func(t *testing.T) {
		for k, tc := range tests {
			r := newRand(60 + uint64(k))
			q := randSlice(r, tc.heads*tc.dim, 1)
			w := randSlice(r, tc.heads, 1)
			keys := make([][]float32, tc.nkeys)
			for j := range keys {
				keys[j] = randSlice(r, tc.dim, 1)
			}
			want := reluScores64(q, w, tc.heads, keys)
			got := make([]float32, tc.nkeys)
			WeightedReLUScores(got, q, w, tc.heads, keys)
			name := fmt.Sprintf("heads=%d dim=%d keys=%d", tc.heads, tc.dim, tc.nkeys)
			if d := cmp.Diff(want, to64(got), cmpopts.EquateApprox(1e-4, 1e-4)); d != "" {
				t.Errorf("%s (-want +got):\n%s", name, d)
			}
			SetThreads(3)
			par := make([]float32, tc.nkeys)
			WeightedReLUScores(par, q, w, tc.heads, keys)
			SetThreads(1)
			if d := cmp.Diff(bitsOf(got), bitsOf(par)); d != "" {
				t.Errorf("%s: 1 thread vs 3 threads (-1 +3):\n%s", name, d)
			}
			for j := range keys {
				one := make([]float32, 1)
				WeightedReLUScores(one, q, w, tc.heads, keys[j:j+1])
				if math.Float32bits(one[0]) != math.Float32bits(got[j]) {
					t.Errorf("%s key %d: alone %v, with the others %v", name, j, one[0], got[j])
				}
			}
		}
	})
}

// TestFastKernelsDoNotAllocate: the dispatching kernels allocate nothing in
// steady state, on one thread and on several.
func TestFastKernelsDoNotAllocate(t *testing.T) {
	r := newRand(70)
	const heads, dim, vdim, nr = 8, 576, 512, 40
	rows := make([][]float32, nr)
	for j := range rows {
		rows[j] = randSlice(r, dim, 1)
	}
	q := randSlice(r, heads*dim, 1)
	out := make([]float32, heads*vdim)
	lse := make([]float32, heads)
	logits := make([]float32, AttendScratchLen(heads, nr, vdim))
	w := &Matrix{Rows: 64, Cols: 256, F32: randSlice(r, 64*256, 1)}
	wq := randFP8(r, 64, 256, 64, 16)
	x := randSlice(r, 8*256, 1)
	y := make([]float32, 8*64)
	iw := randSlice(r, 4, 1)
	scores := make([]float32, nr)
	rowsB := make([][]uint16, nr)
	for j := range rowsB {
		rowsB[j] = make([]uint16, dim)
		for c, v := range rows[j] {
			rowsB[j][c] = toBF16(v)
		}
	}
	dec := &widenDecoder{rows: rowsB, rowLen: dim}
	decScratch := make([]float32, nr*dim)
	decViews := make([][]float32, nr)
	longScores := randSlice(r, 40000, 1)
	picked := make([]int32, 2048)
	heads4 := make([]Matrix, 4) // four 16 × 64 heads of w
	for h := range heads4 {
		heads4[h] = Matrix{Rows: 16, Cols: 64, F32: w.F32[h*16*64 : (h+1)*16*64]}
	}
	headsScratch := make([]float32, MatMulTHeadsScratch(8, heads4))
	forEachImpl(t, func(t *testing.T) {
		for _, threads := range []int{1, 2} {
			SetThreads(threads)
			for _, tc := range []struct {
				name string
				f    func()
			}{
				{"AttendRows", func() { AttendRows(out, lse, nil, q, heads, vdim, rows, 0.0625, logits) }},
				{"MatMulT", func() { MatMulT(y, x, 8, w) }},
				{"MatMulT fp8", func() { MatMulT(y, x, 8, wq) }},
				{"MatVecT fp8", func() { MatVecT(y[:64], x[:256], wq) }},
				{"MatMulTHeads", func() { MatMulTHeads(y, 64, 16, x, 256, 64, 8, heads4, headsScratch) }},
				{"MatMulTHeads n=1", func() { MatMulTHeads(y[:64], 64, 16, x[:256], 256, 64, 1, heads4, nil) }},
				{"WeightedReLUScores", func() { WeightedReLUScores(scores, q[:4*128], iw, 4, rows) }},
				{"TopK (split on two threads)", func() { TopK(picked, longScores) }},
				{"AttendDecodedRows", func() {
					AttendDecodedRows(out, lse, nil, q, heads, vdim, nr, dim, dec, 0.0625, logits, decScratch, decViews)
				}},
			} {
				if a := testing.AllocsPerRun(20, tc.f); a != 0 {
					t.Errorf("%s on %d threads allocates %v times per call", tc.name, threads, a)
				}
			}
		}
	})
}

// TestPeakProbes: the probe loops report the work they did, StreamSum and
// StreamSumPaired are sums and StreamFMA its fused multiple.
func TestPeakProbes(t *testing.T) {
	x := randSlice(newRand(71), 1000, 1)
	var want float64
	for _, v := range x {
		want += float64(v)
	}
	// StreamFMA: positive values (no cancellation), two whole chunks and a
	// part of one with a tail past the last whole 512 bytes.
	xs := make([]float32, 2*(32<<10)+1000+37)
	var wantS float64
	for i := range xs {
		xs[i] = float32(i%97+1) / 97
		wantS += float64(xs[i])
	}
	var want200 float64
	for _, v := range x[:200] {
		want200 += float64(v)
	}
	forEachImpl(t, func(t *testing.T) {
		flops := FMAPeakLoop(10) // the machine's widest FMA, whatever Impl is
		wantFlops := map[string]float64{"ref": 0, "avx2": 10 * 12 * 8 * 2, "avx512": 10 * 24 * 16 * 2}[bestLevel().String()]
		if flops != wantFlops {
			t.Errorf("FMAPeakLoop(10) = %v FLOPs, want %v", flops, wantFlops)
		}
		codes := FP8DecodeLoop(10)
		wantCodes := map[string]float64{"ref": 0, "avx2": 10 * 8 * 8, "avx512": 10 * 8 * 16}[bestLevel().String()]
		if codes != wantCodes {
			t.Errorf("FP8DecodeLoop(10) = %v codes, want %v", codes, wantCodes)
		}
		// Codes a round of the product probe decodes: as many vectors as
		// the register file leaves room for, of the level's width.
		vectors := map[string][]float64{"ref": {0, 0, 0, 0}, "avx2": {6 * 8, 4 * 8, 2 * 8, 1 * 8}, "avx512": {8 * 16, 8 * 16, 5 * 16, 3 * 16}}[bestLevel().String()]
		for i, rows := range FP8ProductRows {
			if got := FP8ProductLoop(rows, 10); got != 10*vectors[i] {
				t.Errorf("FP8ProductLoop(%d, 10) = %v codes, want %v", rows, got, 10*vectors[i])
			}
		}
		if d := cmp.Diff(want, float64(StreamSum(x)), cmpopts.EquateApprox(1e-5, 1e-4)); d != "" {
			t.Errorf("StreamSum (-want +got):\n%s", d)
		}
		// Paired: one pair of 384-value parts and a tail of 232; parts of
		// two whole chunks and a part of one (one pair) or of several
		// blocks and a short one (two and three pairs), and a tail; parts
		// too short (StreamSum alone).
		for _, c := range []struct {
			x     []float32
			pairs int
			want  float64
		}{{x, 1, want}, {x, 2, want}, {xs, 1, wantS}, {xs, 2, wantS}, {xs, 3, wantS}, {x[:200], 1, want200}} {
			if d := cmp.Diff(c.want, float64(StreamSumPaired(c.x, c.pairs)), cmpopts.EquateApprox(1e-5, 1e-4)); d != "" {
				t.Errorf("StreamSumPaired of %d values, %d pairs (-want +got):\n%s", len(c.x), c.pairs, d)
			}
		}
		for _, f := range StreamFMAPerLine {
			got, ok := StreamFMA(xs, f)
			if ok != (bestLevel() == levelAVX512) {
				t.Errorf("StreamFMA(%d) ran: %v on %v", f, ok, bestLevel())
			}
			if !ok {
				continue
			}
			if d := cmp.Diff(float64(f)*0.5*wantS, float64(got), cmpopts.EquateApprox(1e-5, 0)); d != "" {
				t.Errorf("StreamFMA(%d) (-want +got):\n%s", f, d)
			}
		}
	})
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "not 3") {
				t.Errorf("StreamFMA(x, 3) panicked with %v, want a refusal of 3 FMAs a line", r)
			}
		}()
		StreamFMA(xs, 3)
	}()
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "not 3") {
				t.Errorf("FP8ProductLoop(3, 1) panicked with %v, want a refusal of 3 rows", r)
			}
		}()
		FP8ProductLoop(3, 1)
	}()
}

// TestAttendRowsBF16: attention over bf16 rows has exactly the bits of
// AttendRows over the same rows widened to float32, under every
// implementation (within rounding where only the f32 rows take the fast
// path); the values past the read width are NaN and never matter.
func TestAttendRowsBF16(t *testing.T) {
	tests := []struct{ heads, dim, vdim, nr int }{
		{64, 576, 512, 300}, {7, 576, 512, 131}, {4, 64, 64, 5}, {3, 20, 70, 9}, {5, 576, 512, 0}, {12, 576, 512, 1100},
	}
	forEachImpl(t, func(t *testing.T) {
		for k, tc := range tests {
			r := newRand(80 + uint64(k))
			width := max(tc.dim, tc.vdim)
			rows := make([][]float32, tc.nr)
			rowsB := make([][]uint16, tc.nr)
			for j := range rows {
				v := randSlice(r, width, 1)
				rowsB[j] = make([]uint16, width+4)
				rows[j] = make([]float32, width)
				for c, x := range v {
					rowsB[j][c] = toBF16(x)
					rows[j][c] = bf16ToF32(rowsB[j][c])
				}
				for c := width; c < width+4; c++ {
					rowsB[j][c] = 0x7fc0 // NaN
				}
			}
			q := randSlice(r, tc.heads*tc.dim, 0.3)
			run := func(bf bool) []float32 {
				out := make([]float32, tc.heads*tc.vdim)
				lse := make([]float32, tc.heads)
				maxL := make([]float32, tc.heads)
				logits := make([]float32, AttendScratchLen(tc.heads, tc.nr, tc.vdim))
				if bf {
					AttendRowsBF16(out, lse, maxL, q, tc.heads, tc.vdim, rowsB, 0.0625, logits)
				} else {
					AttendRows(out, lse, maxL, q, tc.heads, tc.vdim, rows, 0.0625, logits)
				}
				return append(append(out, lse...), maxL...)
			}
			f32, b16 := run(false), run(true)
			if l := activeLevel(); l != levelRef && (tc.dim%vecWidth(l) != 0 || tc.vdim%attendCols(l) != 0) {
				// The bf16 rows take the reference here, the f32 rows the
				// fast path: equal within rounding only.
				if d := cmp.Diff(to64(f32), to64(b16), cmpopts.EquateApprox(1e-4, 1e-5)); d != "" {
					t.Errorf("heads=%d dim=%d vdim=%d rows=%d: f32 rows vs bf16 rows (-f32 +bf16):\n%s", tc.heads, tc.dim, tc.vdim, tc.nr, d)
				}
				continue
			}
			if d := cmp.Diff(bitsOf(f32), bitsOf(b16)); d != "" {
				t.Errorf("heads=%d dim=%d vdim=%d rows=%d: f32 rows vs bf16 rows (-f32 +bf16):\n%s", tc.heads, tc.dim, tc.vdim, tc.nr, d)
			}
		}
	})
}

// widenDecoder is a RowDecoder over bf16 rows: row j is rows[j] widened,
// with the values past the row length left as they were in dst.
type widenDecoder struct {
	rows   [][]uint16
	rowLen int
}

func (d *widenDecoder) DecodeRows(dst []float32, j0, j1 int) {
	for j := j0; j < j1; j++ {
		for c, b := range d.rows[j][:d.rowLen] {
			dst[(j-j0)*d.rowLen+c] = bf16ToF32(b)
		}
	}
}

// TestAttendDecodedRows: attention over rows a decoder produces block by
// block has exactly the bits of AttendRows over the same rows, under every
// implementation and thread count, over several blocks with a tail; scratch
// past what the call needs is NaN and never matters.
func TestAttendDecodedRows(t *testing.T) {
	tests := []struct{ heads, dim, vdim, nr int }{
		{64, 576, 512, 300}, {7, 576, 512, 131}, {4, 64, 64, 5}, {3, 20, 70, 9}, {5, 576, 512, 0}, {16, 576, 512, 256},
		{12, 576, 512, 1100}, {8, 576, 512, 2048}, {3, 20, 70, 600},
	}
	forEachImpl(t, func(t *testing.T) {
		for k, tc := range tests {
			r := newRand(60 + uint64(k))
			width := max(tc.dim, tc.vdim)
			rows := make([][]float32, tc.nr)
			rowsB := make([][]uint16, tc.nr)
			for j := range rows {
				rows[j] = make([]float32, width)
				rowsB[j] = make([]uint16, width)
				for c, x := range randSlice(r, width, 1) {
					rowsB[j][c] = toBF16(x)
					rows[j][c] = bf16ToF32(rowsB[j][c])
				}
			}
			q := randSlice(r, tc.heads*tc.dim, 0.3)
			run := func(threads int, decoded bool) []float32 {
				defer SetThreads(SetThreads(threads))
				out := make([]float32, tc.heads*tc.vdim)
				lse := make([]float32, tc.heads)
				maxL := make([]float32, tc.heads)
				logits := make([]float32, AttendScratchLen(tc.heads, tc.nr, tc.vdim))
				if decoded {
					scratch := make([]float32, tc.nr*width+7)
					for i := range scratch {
						scratch[i] = float32(math.NaN())
					}
					views := make([][]float32, tc.nr+2)
					dec := &widenDecoder{rows: rowsB, rowLen: width}
					AttendDecodedRows(out, lse, maxL, q, tc.heads, tc.vdim, tc.nr, width, dec, 0.0625, logits, scratch, views)
				} else {
					AttendRows(out, lse, maxL, q, tc.heads, tc.vdim, rows, 0.0625, logits)
				}
				return append(append(out, lse...), maxL...)
			}
			want := run(1, false)
			for _, threads := range []int{1, 3} {
				if d := cmp.Diff(bitsOf(want), bitsOf(run(threads, true))); d != "" {
					t.Errorf("heads=%d dim=%d vdim=%d rows=%d, %d threads: AttendRows vs AttendDecodedRows (-rows +decoded):\n%s",
						tc.heads, tc.dim, tc.vdim, tc.nr, threads, d)
				}
			}
		}
	})
}

// TestAttendDecodedRowsRefusesSmallScratch: the sizes are checked before any
// row is decoded.
func TestAttendDecodedRowsRefusesSmallScratch(t *testing.T) {
	defer func() {
		if msg := fmt.Sprint(recover()); !strings.Contains(msg, "need len(scratch)≥1152") {
			t.Errorf("panic = %q, want the needed scratch size", msg)
		}
	}()
	dec := &widenDecoder{}
	AttendDecodedRows(make([]float32, 512), make([]float32, 1), nil, make([]float32, 576), 1, 512, 2, 576, dec, 1,
		make([]float32, 2), make([]float32, 576), make([][]float32, 2))
}

// TestConcurrentCallersShareThePool: several goroutines (ranks) call the
// parallel kernels at once on a shared pool; every result has the bits of a
// lone single-thread call.
func TestConcurrentCallersShareThePool(t *testing.T) {
	r := newRand(90)
	// Sizes above planParts' threshold, so every call is split.
	const callers, n, out, in = 4, 8, 128, 600
	const heads, dim, vdim, nr = 12, 64, 64, 600
	w := &Matrix{Rows: out, Cols: in, F32: randSlice(r, out*in, 1)}
	rows := make([][]float32, nr)
	for j := range rows {
		rows[j] = randSlice(r, dim, 1)
	}
	xs := make([][]float32, callers)
	qs := make([][]float32, callers)
	want := make([][]float32, callers)
	for c := range callers {
		xs[c] = randSlice(r, n*in, 1)
		qs[c] = randSlice(r, heads*dim, 1)
		y := make([]float32, n*out)
		MatMulT(y, xs[c], n, w)
		o := make([]float32, heads*vdim)
		AttendRows(o, make([]float32, heads), nil, qs[c], heads, vdim, rows, 0.125, make([]float32, AttendScratchLen(heads, nr, vdim)))
		want[c] = append(y, o...)
	}
	defer SetThreads(SetThreads(3))
	got := make([][]float32, callers)
	done := make(chan int)
	for c := range callers {
		go func() {
			y := make([]float32, n*out)
			o := make([]float32, heads*vdim)
			lse := make([]float32, heads)
			logits := make([]float32, AttendScratchLen(heads, nr, vdim))
			for range 20 {
				MatMulT(y, xs[c], n, w)
				AttendRows(o, lse, nil, qs[c], heads, vdim, rows, 0.125, logits)
			}
			got[c] = append(y, o...)
			done <- c
		}()
	}
	for range callers {
		<-done
	}
	for c := range callers {
		if d := cmp.Diff(bitsOf(want[c]), bitsOf(got[c])); d != "" {
			t.Errorf("caller %d: concurrent 3-thread results vs lone 1-thread results (-lone +concurrent):\n%s", c, d)
		}
	}
}

// TestAxpyBitsMatchReference: the vector Axpy has the reference's bits for
// every non-NaN element (and NaN where the reference has NaN), tails
// included, with NaN, ±Inf, −0 and subnormal inputs.
func TestAxpyBitsMatchReference(t *testing.T) {
	special := []float32{float32(math.NaN()), math.Float32frombits(0x7fa00001), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.Copysign(0, -1)), math.Float32frombits(1), 3e38}
	r := newRand(95)
	for _, n := range []int{0, 1, 31, 32, 63, 64, 65, 200, 1000} {
		for _, alpha := range []float32{0.75, -1, 0, 1e30, float32(math.NaN())} {
			x := randSlice(r, n, 2)
			y := randSlice(r, n, 2)
			for i := range n {
				if r.IntN(8) == 0 {
					x[i] = special[r.IntN(len(special))]
				}
				if r.IntN(8) == 0 {
					y[i] = special[r.IntN(len(special))]
				}
			}
			// NaN payloads depend on operand order, which the Go compiler
			// chooses for the scalar loop; every NaN counts as one value.
			canon := func(v []float32) []uint32 {
				b := bitsOf(v)
				for i, f := range v {
					if f != f {
						b[i] = 0x7fc00000
					}
				}
				return b
			}
			var want []uint32
			forEachImpl(t, func(t *testing.T) {
				got := append([]float32(nil), y...)
				Axpy(alpha, x, got)
				if want == nil {
					want = canon(got) // the reference runs first
					return
				}
				if d := cmp.Diff(want, canon(got)); d != "" {
					t.Errorf("n=%d alpha=%v: %s vs reference bits (-ref +fast):\n%s", n, alpha, Impl(), d)
				}
			})
		}
	}
}

// TestScoreKeysPrepared: a prepared query scores keys with the bits of
// WeightedReLUScores, over several calls with one preparation, and refuses
// to run under an implementation other than the one it was prepared for.
func TestScoreKeysPrepared(t *testing.T) {
	r := newRand(95)
	const heads, dim, n = 33, 40, 50
	q := randSlice(r, heads*dim, 1)
	w := randSlice(r, heads, 1)
	keys := make([][]float32, n)
	for j := range keys {
		keys[j] = randSlice(r, dim, 1)
	}
	forEachImpl(t, func(t *testing.T) {
		want := make([]float32, n)
		WeightedReLUScores(want, q, w, heads, keys)
		var sq ScoreQuery
		sq.Prepare(q, w, heads)
		got := make([]float32, n)
		ScoreKeys(got[:20], &sq, keys[:20])
		ScoreKeys(got[20:], &sq, keys[20:])
		if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
			t.Errorf("WeightedReLUScores vs ScoreKeys in two calls (-want +got):\n%s", d)
		}
		if sq.Bytes() > ScoreQueryBytes(heads, dim) {
			t.Errorf("a prepared query holds %d bytes, ScoreQueryBytes says at most %d", sq.Bytes(), ScoreQueryBytes(heads, dim))
		}
		other := "ref"
		if Impl() == "ref" {
			other = impls()[len(impls())-1]
		}
		if other == Impl() {
			return
		}
		prev, _ := SetImpl(other)
		defer SetImpl(prev)
		defer func() {
			if msg := fmt.Sprint(recover()); !strings.Contains(msg, "prepared for") {
				t.Errorf("panic = %q, want a refusal naming the implementation", msg)
			}
		}()
		ScoreKeys(got, &sq, keys)
	})
}

// TestScoreTilesOneCall: a 32-head query's whole tiles scored in one
// assembly call have the bits of one call per tile, for key counts around
// the tile boundaries, dims that do and do not fill lines, zero and
// negative weights, NaN and zero key values, on one thread and two.
func TestScoreTilesOneCall(t *testing.T) {
	if !supported(levelAVX512) {
		t.Skip("no AVX-512 on this CPU")
	}
	prev, err := SetImpl("avx512")
	if err != nil {
		t.Fatal(err)
	}
	defer SetImpl(prev)
	defer SetThreads(SetThreads(1))
	for _, dim := range []int{128, 40, 7} {
		for _, n := range []int{15, 16, 17, 23, 24, 25, 64, 301} {
			for _, threads := range []int{1, 2} {
				r := newRand(uint64(200 + n + dim))
				q := randSlice(r, 32*dim, 1)
				w := randSlice(r, 32, 1)
				w[3], w[20] = 0, float32(math.Copysign(0, -1))
				keys := make([][]float32, n)
				for j := range keys {
					keys[j] = randSlice(r, dim, 1)
				}
				keys[n/2][0] = float32(math.NaN())
				clear(keys[n-1])
				var sq ScoreQuery
				sq.Prepare(q, w, 32)
				SetThreads(threads)
				want, got := make([]float32, n), make([]float32, n)
				scoreTilesOneCall = false
				ScoreKeys(want, &sq, keys)
				scoreTilesOneCall = true
				ScoreKeys(got, &sq, keys)
				if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
					t.Errorf("dim %d, %d keys, %d threads: one call per tile vs whole tiles in one call (-want +got):\n%s", dim, n, threads, d)
				}
			}
		}
	}
}

// sliceGatherer gathers keys by copying them into scratch (a decoding
// source) or pointing at them (in place).
type sliceGatherer struct {
	keys   [][]float32
	dim    int
	decode bool
}

func (g *sliceGatherer) GatherKeys(dst [][]float32, scratch []float32, j0, j1 int) {
	for j := j0; j < j1; j++ {
		i := j - j0
		if g.decode {
			dst[i] = scratch[i*g.dim : (i+1)*g.dim]
			copy(dst[i], g.keys[j])
		} else {
			dst[i] = g.keys[j]
		}
	}
}

// TestScoreGatheredKeys: gathering and scoring in chunks on the kernel
// threads gives every query's ScoreKeys bits for its own key bound, with
// gather space of a few keys and of many, and leaves the rest of each row
// untouched.
func TestScoreGatheredKeys(t *testing.T) {
	r := newRand(97)
	const heads, dim, n, nq = 33, 40, 301, 3
	keys := make([][]float32, n)
	for j := range keys {
		keys[j] = randSlice(r, dim, 1)
	}
	q := randSlice(r, nq*heads*dim, 1)
	w := randSlice(r, nq*heads, 1)
	ends := []int32{n, 17, 0}
	forEachImpl(t, func(t *testing.T) {
		qs := make([]ScoreQuery, nq)
		want := make([]float32, nq*n)
		for i := range qs {
			qs[i].Prepare(q[i*heads*dim:(i+1)*heads*dim], w[i*heads:(i+1)*heads], heads)
			ScoreKeys(want[i*n:i*n+int(ends[i])], &qs[i], keys[:ends[i]])
		}
		for _, threads := range []int{1, 3} {
			for _, space := range []int{5, 64, 1024} {
				for _, decode := range []bool{false, true} {
					SetThreads(threads)
					got := make([]float32, nq*n)
					ScoreGatheredKeys(got, n, qs, ends, &sliceGatherer{keys: keys, dim: dim, decode: decode},
						make([][]float32, space), make([]float32, space*dim))
					SetThreads(1)
					if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
						t.Errorf("%d threads, %d keys of gather space, decode %v (-ScoreKeys +gathered):\n%s", threads, space, decode, d)
					}
				}
			}
		}
	})
}

// TestNextTileKeys pins which keys a score tile prefetches: the next
// tile's (a short next tile repeating the last key), and after the last
// tile its own.
func TestNextTileKeys(t *testing.T) {
	keys := make([][]float32, 19)
	for i := range keys {
		keys[i] = make([]float32, 1)
	}
	index := func(p *float32) int {
		for i := range keys {
			if &keys[i][0] == p {
				return i
			}
		}
		return -1
	}
	tests := []struct {
		tile, j int
		want    []int
	}{
		{8, 0, []int{8, 9, 10, 11, 12, 13, 14, 15}},
		{8, 8, []int{16, 17, 18, 18, 18, 18, 18, 18}},
		{8, 16, []int{16, 17, 18, 18, 18, 18, 18, 18}},
		{6, 12, []int{18, 18, 18, 18, 18, 18}},
		{6, 18, []int{18, 18, 18, 18, 18, 18}},
	}
	for _, tc := range tests {
		next := make([]*float32, tc.tile)
		nextTileKeys(next, keys, tc.j)
		got := make([]int, len(next))
		for c, p := range next {
			got[c] = index(p)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("tile %d at key %d of %d: prefetched keys (-want +got):\n%s", tc.tile, tc.j, len(keys), diff)
		}
	}
}

// TestSplitRange: a long attention call's splits cover its rows in order,
// hold at most splitRows each, start on whole blocks, differ by at most a
// block and come in fours, so the two or four threads that share them share
// the work (513 rows split as 128, 128, 128 and 129, not 512 and 1), and
// their logits regions fit the scratch AttendScratchLen sizes.
func TestSplitRange(t *testing.T) {
	for _, n := range []int{1, 511, 512, 513, 600, 1024, 1025, 2049, 8193, 32769} {
		s := attendSplits(n)
		var got [][2]int
		next := 0
		lo, hi := n, 0
		for i := range s {
			r0, r1 := splitRange(n, i)
			got = append(got, [2]int{r0, r1})
			if r0 != next || r1 <= r0 || r1-r0 > splitRows || (i < s-1 && r1%attendBlock != 0) {
				t.Errorf("n=%d: split %d is [%d, %d) after %d", n, i, r0, r1, next)
			}
			lo, hi, next = min(lo, r1-r0), max(hi, r1-r0), r1
		}
		if next != n || hi-lo > attendBlock {
			t.Errorf("n=%d: splits %v, want [0, %d) covered in splits differing by at most a block", n, got, n)
		}
		if s > 1 && (s%4 != 0 || s*min(n, attendBlock) > n) {
			t.Errorf("n=%d: %d splits, want a multiple of 4 whose logits regions fit in %d rows", n, s, n)
		}
	}
	var got [][2]int
	for i := range attendSplits(513) {
		r0, r1 := splitRange(513, i)
		got = append(got, [2]int{r0, r1})
	}
	if d := cmp.Diff([][2]int{{0, 128}, {128, 256}, {256, 384}, {384, 513}}, got); d != "" {
		t.Errorf("513 rows (-want +got):\n%s", d)
	}
}
