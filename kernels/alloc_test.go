package kernels

import (
	"testing"
)

// TestHotFunctionsDoNotAllocate pins the package contract that the hot
// functions only use caller-owned memory.
func TestHotFunctionsDoNotAllocate(t *testing.T) {
	r := newRand(11)
	const n, rows, cols = 3, 17, 33
	x := randSlice(r, n*cols, 1)
	dst := make([]float32, n*rows)
	wf := &Matrix{Rows: rows, Cols: cols, F32: randSlice(r, rows*cols, 1)}
	wb := &Matrix{Rows: rows, Cols: cols, BF16: make([]uint16, rows*cols)}
	for i, v := range wf.F32 {
		wb.BF16[i] = toBF16(v)
	}
	wq := randFP8(r, rows, cols, 64, 16)
	x8 := randSlice(r, 8*cols, 1)
	dst8 := make([]float32, 8*rows)
	// A width without a scalar tail: the decoded fp8 path's strips.
	wq256 := randFP8(r, 16, 256, 0, 0)
	x5 := randSlice(r, 5*256, 1)
	dst5 := make([]float32, 5*16)
	x3 := randSlice(r, 3*256, 1)
	dst3 := make([]float32, 3*16)
	// Codes marked as checked once, as NewFP8Matrix marks them: the
	// one-row product's two regions and the eight-row tiles of two and
	// three rows.
	wqc := *wq256
	wqc.finite = true
	// Power-of-two scales: the one-row pair tile over prescaled
	// activations, from the pooled buffer.
	wqp := randFP8(r, 16, 256, 0, 0)
	for i := range wqp.Scales.S {
		wqp.Scales.S[i] = 0x1p-6
	}
	wqp.CheckFP8Codes()
	x2 := randSlice(r, 2*256, 1)
	dst2 := make([]float32, 2*16)
	// Interleaved bf16 (where AVX-512 runs; row-major elsewhere): the GEMV
	// tile, the strips' passes and blocks of weight rows.
	wi := &Matrix{Rows: 16, Cols: 256, BF16: make([]uint16, 16*256)}
	wi.InterleaveBF16()
	xi := randSlice(r, 20*256, 1)
	dsti := make([]float32, 20*16)
	// Sixteen rows over a whole reduction block: the group tiles' calls of
	// half a block, which carry their accumulators on the stack.
	wk := &Matrix{Rows: 16, Cols: gemmKC, BF16: make([]uint16, 16*gemmKC)}
	wk.InterleaveBF16()
	xk := randSlice(r, 16*gemmKC, 1)
	dstk := make([]float32, 16*16)
	// Interleaved fp8 (where AVX-512 runs; row-major elsewhere): the pair
	// tile with and without prescaled activations and the odd group, the
	// eight-, four- and three-row tiles and the decoded path.
	wqi, wqpi := *wqc.SliceRows(0, 16), *wqp
	wqi.FP8, wqpi.FP8 = append([]uint8(nil), wqc.FP8...), append([]uint8(nil), wqp.FP8...)
	wqi.InterleaveFP8()
	wqpi.InterleaveFP8()
	wqi24 := finiteFP8(randFP8(r, 24, 256, 0, 0))
	wqi24.InterleaveFP8()
	if activeLevel() == levelAVX512 && !(wqi.Interleaved() && wqpi.Interleaved() && wqi24.Interleaved()) {
		t.Fatal("InterleaveFP8 left a test matrix row-major under AVX-512")
	}
	row := make([]float32, 64)
	wrow := make([]float32, cols)
	w := randSlice(r, 64, 1)
	b := randSlice(r, 64, 1)
	scores := randSlice(r, 1000, 10)
	expDst := make([]float64, len(scores))
	idx := make([]int32, 16)
	longScores := randSlice(r, 40000, 10) // the radix select and the sampled threshold
	longIdx := make([]int32, 2048)
	rope := NewRope(64, 10000, nil)
	row64 := make([]float64, 64)

	tests := []struct {
		name string
		f    func()
	}{
		{"MatMulT f32", func() { MatMulT(dst, x, n, wf) }},
		{"MatMulT bf16", func() { MatMulT(dst, x, n, wb) }},
		{"MatVecT bf16", func() { MatVecT(dst[:rows], x[:cols], wb) }},
		{"MatMulT fp8", func() { MatMulT(dst, x, n, wq) }},
		{"MatMulT fp8 n=8", func() { MatMulT(dst8, x8, 8, wq) }},
		{"MatMulT fp8 n=5 no tail", func() { MatMulT(dst5, x5, 5, wq256) }},
		{"MatMulT fp8 n=3 in registers", func() { MatMulT(dst3, x3, 3, wq256) }},
		{"MatVecT fp8", func() { MatVecT(dst[:rows], x[:cols], wq) }},
		{"MatVecT fp8 checked once", func() { MatVecT(dst2[:16], x2[:256], &wqc) }},
		{"MatVecT fp8 power-of-two scales", func() { MatVecT(dst2[:16], x2[:256], wqp) }},
		{"MatMulT fp8 n=2 checked once", func() { MatMulT(dst2, x2, 2, &wqc) }},
		{"MatMulT fp8 n=3 checked once", func() { MatMulT(dst3, x3, 3, &wqc) }},
		{"MatVecT bf16 interleaved", func() { MatVecT(dsti[:16], xi[:256], wi) }},
		{"MatMulT bf16 interleaved n=5", func() { MatMulT(dsti[:5*16], xi[:5*256], 5, wi) }},
		{"MatMulT bf16 interleaved n=20", func() { MatMulT(dsti, xi, 20, wi) }},
		{"MatMulT bf16 interleaved n=16, split blocks", func() { MatMulT(dstk, xk, 16, wk) }},
		{"MatVecT fp8 interleaved", func() { MatVecT(dst2[:16], x2[:256], &wqi) }},
		{"MatVecT fp8 interleaved, power-of-two scales", func() { MatVecT(dst2[:16], x2[:256], &wqpi) }},
		{"MatVecT fp8 interleaved, odd group", func() { MatVecT(dsti[:24], xi[:256], wqi24) }},
		{"MatMulT fp8 interleaved n=2", func() { MatMulT(dst2, x2, 2, &wqi) }},
		{"MatMulT fp8 interleaved n=4", func() { MatMulT(dsti[:4*16], xi[:4*256], 4, &wqi) }},
		{"MatMulT fp8 interleaved n=5", func() { MatMulT(dsti[:5*16], xi[:5*256], 5, &wqi) }},
		{"MatMulT fp8 interleaved n=20", func() { MatMulT(dsti, xi, 20, &wqi) }},
		{"ExpShifted", func() { ExpShifted(expDst, scores, 3, 1/0.7) }},
		{"Matrix.Row bf16 interleaved", func() { wrow = wi.Row(1, wrow) }},
		{"Matrix.Row", func() { wrow = wb.Row(1, wrow) }},
		{"Matrix.Row fp8", func() { wrow = wq.Row(1, wrow) }},
		{"Dot", func() { _ = Dot(row, w) }},
		{"Axpy", func() { Axpy(0.5, w, row) }},
		{"RMSNorm", func() { RMSNorm(row, row, w, 1e-6) }},
		{"LayerNorm", func() { LayerNorm(row, row, w, b, 1e-6) }},
		{"SwiGLU", func() { SwiGLU(row, row, w) }},
		{"Softmax", func() { Softmax(row) }},
		{"LogSumExp", func() { _ = LogSumExp(row) }},
		{"TopK", func() { TopK(idx, scores) }},
		{"TopK long row", func() { TopK(longIdx, longScores) }},
		{"TopK whole row", func() { TopK(longIdx, longScores[:2048]) }},
		{"TopK half a row", func() { TopK(longIdx, longScores[:4096]) }},
		{"Rope.Apply", func() { rope.Apply(row, 4097, true) }},
		{"Rope.Angles", func() { rope.Angles(row, 4097) }},
		{"Rope.Rotate", func() { rope.Rotate(row, w, true) }},
		{"Rope.Apply64", func() { rope.Apply64(row64, 4097, false) }},
	}
	for _, tc := range tests {
		if got := testing.AllocsPerRun(20, tc.f); got != 0 {
			t.Errorf("%s allocates %v times per call, want 0", tc.name, got)
		}
	}

	// A prompt's attention on two threads: the second thread's scratch is
	// the task's, kept from the first call.
	const heads, dim, vdim = 16, 576, 512
	pool := make([][]uint16, 64)
	for j := range pool {
		pool[j] = make([]uint16, dim)
	}
	src := &listRows{pool: pool}
	for i := range 6 {
		src.sel = append(src.sel, []int{i, i + 1, i + 2, 3 * i, 40 + i}[:2+i%4])
	}
	q, out, lse := randSlice(r, 6*heads*dim, 0.3), make([]float32, 6*heads*vdim), make([]float32, 6*heads)
	rowSpace, logits := make([][]uint16, 5), make([]float32, AttendScratchLen(heads, 5, vdim))
	defer SetThreads(SetThreads(2))
	if got := testing.AllocsPerRun(20, func() { AttendQueriesBF16(out, lse, nil, q, 6, heads, vdim, src, 0.0625, rowSpace, logits) }); got != 0 {
		t.Errorf("AttendQueriesBF16 on two threads allocates %v times per call, want 0", got)
	}
	dec := &listDecoded{listRows: src}
	decoded, rowsF32, sel := make([]float32, 5*dim), make([][]float32, 5), make([]int32, 5)
	if got := testing.AllocsPerRun(20, func() {
		AttendQueriesDecoded(out, lse, nil, q, 6, heads, vdim, dim, dec, 0.0625, logits, decoded, rowsF32, sel)
	}); got != 0 {
		t.Errorf("AttendQueriesDecoded on two threads allocates %v times per call, want 0", got)
	}
	f32 := newListF32(src)
	if got := testing.AllocsPerRun(20, func() {
		AttendQueries(out, lse, nil, q, 6, heads, vdim, dim, f32, 0.0625, logits, decoded, rowsF32)
	}); got != 0 {
		t.Errorf("AttendQueries on two threads allocates %v times per call, want 0", got)
	}
}
