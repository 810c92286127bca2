package kernels

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// MatMulTHeads gives every head exactly the bits of MatMulT on its rows
// gathered, for every implementation, dtype, row count and thread count,
// and leaves the values between the heads' regions alone.
func TestMatMulTHeads(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRand(90)
		for _, sh := range []struct{ heads, out, in, n int }{
			{1, 5, 7, 1}, {3, 8, 16, 1}, {16, 64, 48, 1}, {16, 64, 48, 3}, {16, 200, 128, 1}, {5, 300, 200, 1}, {4, 300, 200, 2}, {5, 17, 33, 8}, {12, 40, 64, 8}, {4, 0, 8, 2}, {2, 9, 0, 2}, {7, 12, 24, 0},
		} {
			for _, dtype := range []string{"f32", "bf16", "fp8"} {
				name := fmt.Sprintf("%s heads=%d [%d,%d] n=%d", dtype, sh.heads, sh.out, sh.in, sh.n)
				ws := make([]Matrix, sh.heads)
				for h := range ws {
					wf := randSlice(r, sh.out*sh.in, 1)
					switch dtype {
					case "f32":
						ws[h] = Matrix{Rows: sh.out, Cols: sh.in, F32: wf}
					case "bf16":
						wb := make([]uint16, len(wf))
						for i, v := range wf {
							wb[i] = toBF16(v)
						}
						ws[h] = Matrix{Rows: sh.out, Cols: sh.in, BF16: wb}
					default:
						ws[h] = *randFP8(r, sh.out, sh.in, 0, 0)
					}
				}
				// Heads' inputs and outputs interleaved with other values, as
				// the per-head parts of MLA's [rows, heads, dim] activations.
				hx, hd := sh.in+3, sh.out+2
				ldx, ldd := sh.heads*hx+1, sh.heads*hd+5
				x := randSlice(r, max(1, sh.n*ldx), 1)
				want := randSlice(r, max(1, sh.n*ldd), 1)
				for h := range ws {
					g := make([]float32, sh.n*sh.in)
					for i := range sh.n {
						copy(g[i*sh.in:(i+1)*sh.in], x[i*ldx+h*hx:])
					}
					out := make([]float32, sh.n*sh.out)
					MatMulT(out, g, sh.n, &ws[h])
					for i := range sh.n {
						copy(want[i*ldd+h*hd:i*ldd+h*hd+sh.out], out[i*sh.out:(i+1)*sh.out])
					}
				}
				for _, threads := range []int{1, 2, 3} {
					SetThreads(threads)
					got := make([]float32, len(want))
					copy(got, want)
					for i := range sh.n { // the heads' regions must be written
						for h := range ws {
							for j := range sh.out {
								got[i*ldd+h*hd+j] = 12345
							}
						}
					}
					MatMulTHeads(got, ldd, hd, x, ldx, hx, sh.n, ws, make([]float32, MatMulTHeadsScratch(sh.n, ws)))
					if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
						t.Errorf("%s on %d threads: MatMulTHeads vs MatMulT per head (-want +got):\n%s", name, threads, d)
					}
				}
				SetThreads(1)
			}
		}
	})
}

// One row of heads of checked fp8 codes goes through headsPairsFP8, one
// walk of pairs of groups across the heads, on AVX-512: every head keeps
// MatMulT's bits on its own rows, whichever group of which head its groups
// are paired with, on any thread count; heads whose blocks of columns start
// at different offsets (as the absorbed W_UKᵀ heads of kv_b's grid do) are
// still paired only where their block boundaries agree; and heads with a
// group across a block of 128 rows are left to the per-head walk.
func TestMatMulTHeadsFP8OneWalk(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRand(92)
		for _, tc := range []struct {
			name                   string
			heads, out, in         int
			rowOff, colOff, offMod int // head h's offsets: rowOff·h and colOff·(h mod offMod)
			walk                   bool
		}{
			{"even groups", 4, 64, 48, 0, 0, 1, true},
			{"odd groups across heads", 5, 24, 32, 0, 0, 1, true},
			{"W_UKᵀ-like, column offsets 0 and 64", 6, 64, 192, 0, 64, 2, true},
			{"W_UV-like, row offsets of 448", 5, 32, 256, 448, 0, 1, true},
			{"column offsets 0, 16 and 32", 7, 16, 64, 0, 16, 3, true},
			{"a group across 128 rows", 3, 16, 32, 124, 0, 1, false},
			{"rows not a multiple of 8", 3, 12, 32, 0, 0, 1, false},
		} {
			ws := make([]Matrix, tc.heads)
			for h := range ws {
				ws[h] = *randFP8(r, tc.out, tc.in, tc.rowOff*h, tc.colOff*(h%tc.offMod))
				ws[h].CheckFP8Codes()
			}
			hx, hd := tc.in+16, tc.out+3
			ldx, ldd := tc.heads*hx, tc.heads*hd
			x := randSlice(r, ldx, 1)
			want := randSlice(r, ldd, 1)
			for h := range ws {
				MatMulT(want[h*hd:h*hd+tc.out], x[h*hx:h*hx+tc.in], 1, &ws[h])
			}
			if activeLevel() == levelAVX512 {
				got := make([]float32, ldd)
				if did := headsPairsFP8(got, hd, x, hx, ws, levelAVX512, 0, tc.heads); did != tc.walk {
					t.Errorf("%s: headsPairsFP8 took the heads: %v, want %v", tc.name, did, tc.walk)
				}
			}
			for _, threads := range []int{1, 2, 3} {
				SetThreads(threads)
				got := make([]float32, ldd)
				copy(got, want)
				for h := range ws {
					for j := range tc.out {
						got[h*hd+j] = 12345
					}
				}
				MatMulTHeads(got, ldd, hd, x, ldx, hx, 1, ws, nil)
				if d := cmp.Diff(bitsOf(want), bitsOf(got)); d != "" {
					t.Errorf("%s on %d threads: MatMulTHeads vs MatMulT per head (-want +got):\n%s", tc.name, threads, d)
				}
			}
			SetThreads(1)
		}
	})
}

// MatMulTHeads refuses strides that do not hold the heads' regions.
func TestMatMulTHeadsRefusesShortStrides(t *testing.T) {
	ws := []Matrix{{Rows: 4, Cols: 8, F32: make([]float32, 32)}, {Rows: 4, Cols: 8, F32: make([]float32, 32)}}
	for _, tc := range []struct {
		name               string
		ldd, hd, ldx, hx   int
		dstLen, xLen, rows int
		scratch            int
	}{
		{"x stride", 8, 4, 12, 8, 16, 24, 2, 24},
		{"dst stride", 7, 4, 16, 8, 16, 32, 2, 24},
		{"short x", 8, 4, 16, 8, 16, 23, 2, 24},
		{"short dst", 8, 4, 16, 8, 11, 32, 2, 24},
		{"short scratch", 8, 4, 16, 8, 16, 32, 2, 23},
		{"one row, x stride", 8, 4, 12, 8, 8, 16, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("accepted")
				}
			}()
			MatMulTHeads(make([]float32, tc.dstLen), tc.ldd, tc.hd, make([]float32, tc.xLen), tc.ldx, tc.hx, tc.rows, ws, make([]float32, tc.scratch))
		})
	}
}

// TestMatMulTHeadsDoesNotAllocate: once a call of a size has run, the next
// does not allocate, on one thread or several (the other threads' gather
// space is kept by the call's task).
func TestMatMulTHeadsDoesNotAllocate(t *testing.T) {
	r := newRand(91)
	const heads, out, in, n = 12, 40, 64, 8
	for _, dtype := range []string{"f32", "fp8"} {
		ws := make([]Matrix, heads)
		for h := range ws {
			if dtype == "fp8" {
				// Checked codes: one row walks all heads at once
				// (headsPairsFP8) on AVX-512.
				ws[h] = *randFP8(r, out, in, 0, 0)
				ws[h].CheckFP8Codes()
				continue
			}
			ws[h] = Matrix{Rows: out, Cols: in, F32: randSlice(r, out*in, 1)}
		}
		x := randSlice(r, n*heads*in, 1)
		dst := make([]float32, n*heads*out)
		scratch := make([]float32, MatMulTHeadsScratch(n, ws))
		for _, threads := range []int{1, 3} {
			SetThreads(threads)
			for _, rows := range []int{1, n} {
				if got := testing.AllocsPerRun(20, func() { MatMulTHeads(dst, heads*out, out, x, heads*in, in, rows, ws, scratch) }); got != 0 {
					t.Errorf("%s, %d rows on %d threads: %v allocations per call, want 0", dtype, rows, threads, got)
				}
			}
		}
	}
	SetThreads(1)
}

// BenchmarkMatMulTHeadsFP8 times MLA's absorbed per-head products at GLM-5's
// shapes with fp8 weights on one thread: 64 heads of W_UK (512×192) and of
// W_UV (256×512), over one row (a decode step of one sequence) and eight,
// row-major and interleaved. The row-major heads are row views of one
// matrix, one after another in memory as the model keeps its W_UKᵀ heads
// row-major; the interleaved ones are those heads after InterleaveFP8Each,
// as the model keeps them on AVX-512. The calls cycle through copies of
// them (256 MiB in all) so that the codes stream from memory as in a step.
// GB/s counts the codes read per call; cpu-ms is the calling thread's CPU
// time per call (Linux).
func BenchmarkMatMulTHeadsFP8(b *testing.B) {
	for _, sh := range []struct {
		name    string
		out, in int
	}{{"w_uk", 512, 192}, {"w_uv", 256, 512}} {
		const heads = 64
		r := newRand(85)
		sets := make([][]Matrix, (256<<20)/(heads*sh.out*sh.in))
		ilvSets := make([][]Matrix, len(sets))
		for s := range sets {
			m, err := QuantizeFP8(heads*sh.out, sh.in, randSlice(r, heads*sh.out*sh.in, 0.02))
			if err != nil {
				b.Fatal(err)
			}
			sets[s] = make([]Matrix, heads)
			for h := range sets[s] {
				sets[s][h] = *m.SliceRows(h*sh.out, sh.out)
			}
			ilvSets[s] = slices.Clone(sets[s])
			if !InterleaveFP8Each(ilvSets[s]) {
				ilvSets[s] = nil
			}
		}
		for _, n := range []int{1, 8} {
			for _, layout := range []string{"row-major", "interleaved"} {
				sets := sets
				if layout == "interleaved" {
					sets = ilvSets
				}
				b.Run(fmt.Sprintf("%s/rows=%d/%s", sh.name, n, layout), func(b *testing.B) {
					if sets[0] == nil {
						b.Skip("InterleaveFP8Each acts under the AVX-512 implementation only")
					}
					benchHeadsFP8(b, sets, heads, sh.out, sh.in, n)
				})
			}
		}
	}
}

// benchHeadsFP8 is one case of BenchmarkMatMulTHeadsFP8: n rows through
// the heads of sets[k], k cycling.
func benchHeadsFP8(b *testing.B, sets [][]Matrix, heads, out, in, n int) {
	ldx, ldd := heads*in, heads*out
	x := randSlice(newRand(86), n*ldx, 1)
	dst := make([]float32, n*ldd)
	scratch := make([]float32, MatMulTHeadsScratch(n, sets[0]))
	defer SetThreads(SetThreads(1))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	MatMulTHeads(dst, ldd, out, x, ldx, in, n, sets[0], scratch)
	k := 0
	cpu0, cpuOK := threadCPU()
	for b.Loop() {
		MatMulTHeads(dst, ldd, out, x, ldx, in, n, sets[k], scratch)
		k = (k + 1) % len(sets)
	}
	if cpu1, _ := threadCPU(); cpuOK {
		b.ReportMetric((cpu1-cpu0)*1e3/float64(b.N), "cpu-ms")
	}
	reportRate(b, float64(heads*out*in), "GB/s")
	reportRate(b, float64(2*n*heads*out*in), "GFLOP/s")
}
