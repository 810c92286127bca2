// Command _gen writes the amd64 assembly of package kernels with avo:
//
//	cd _gen && go run . -out ../kernels/asm_amd64.s -stubs ../kernels/asm_stub_amd64.go -pkg kernels
//
// It lives in its own module so that avo never enters the main module's
// dependency graph. Every generated function is bounded by its arguments (one
// tile, one panel or one row), so a call never runs long enough to starve the
// Go scheduler, and every function ends with VZEROUPPER.
//
// Summation order is part of the contract of each kernel: it depends only on
// the reduction length, never on which other rows share a call, so callers can
// keep results batch-invariant.
package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

var zmm = []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15,
	Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}
var ymm = []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15,
	Y16, Y17, Y18, Y19, Y20, Y21, Y22, Y23, Y24, Y25, Y26, Y27, Y28, Y29, Y30, Y31}
var xmm = []VecPhysical{X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X10, X11, X12, X13, X14, X15,
	X16, X17, X18, X19, X20, X21, X22, X23, X24, X25, X26, X27, X28, X29, X30, X31}

func main() {
	widenBF16Data()
	for _, bf16 := range []bool{false, true} {
		for m := 1; m <= 6; m++ {
			dotTile512(m, bf16)
		}
		gemv8x512(bf16)
		for m := 1; m <= 3; m++ {
			dotTile256(m, bf16)
		}
		gemv8x256(bf16)
		for m := 1; m <= 3; m++ {
			gemmStrip256(m, bf16)
		}
		for m := 1; m <= 6; m++ {
			gemmStrip512(m, bf16, false)
		}
	}
	gemvIlv(1)
	gemvIlv(2)
	for m := 1; m <= 6; m++ {
		gemmStrip512(m, true, true)
	}
	for m := 2; m <= 3; m++ {
		gemmGroup8x512Ilv(m)
	}
	gemmPair8x512Ilv()
	amxIlvSlab(false)
	amxIlvSlab(true)
	amxIotaData()
	amxPiecesRow()
	amxScoreTiles()
	cpuVendor()
	for m := 1; m <= eightRowMaxRows; m++ {
		gemmTile8F32512(m)
	}
	widenIlvGroup()
	for _, bf16 := range []bool{false, true} {
		for m := 1; m <= 6; m++ {
			axpyTile512(m, bf16)
		}
		for nvec := 1; nvec <= 4; nvec++ {
			qkTileT512(nvec, 4, bf16)
		}
		qkTileT512(1, 8, bf16)
		prefetchRows(bf16)
	}
	transpose16x16512()
	scale512()
	axpy512()
	axpy256()
	for _, bf16 := range []bool{false, true} {
		for m := 1; m <= 4; m++ {
			axpyTile256(m, bf16)
		}
	}
	expSum256()
	max256()
	expSum512()
	max512()
	scoreTile8T512()
	scoreTiles8T32512()
	siluMul512()
	expShifted512()
	topkKeep512()
	scoreTile6T256()
	fmaPeak512()
	fmaPeak256()
	fp8DecodePeak(16)
	fp8DecodePeak(8)
	for _, lanes := range []int{16, 8} {
		for _, r := range fp8ProductProbeRows {
			fp8ProductPeak(lanes, r)
		}
	}
	readSum512()
	readSum256()
	readPairSum512()
	for _, f := range streamFMAPerLine {
		streamFMA512(f)
	}
	decodeE4M3512()
	decodeE4M3256()
	gemvFP8512()
	gemvFP8256()
	decodeFP8Row(8)
	decodeFP8Row(16)
	decodeFP8RowIlv512()
	for m := 2; m <= 4; m++ {
		fp8Tile512(m, false, false)
		fp8Tile512(m, true, false)
		fp8Tile512(m, true, true)
	}
	for m := 5; m <= 8; m++ {
		fp8Tile3W512(m, false)
		fp8Tile3W512(m, true)
	}
	for m := 2; m <= eightRowMaxRows; m++ {
		fp8Tile8W512(m, false)
		fp8Tile8W512(m, true)
	}
	fp8GEMVPair512(false, false)
	fp8GEMVPair512(true, false)
	fp8GEMVPair512(false, true)
	fp8GEMVPair512(true, true)
	decodeRecords512()
	decodeRecords256()
	widenBF16512()
	widenBF16256()
	Generate()
}

// broadcastConst loads the float32 constant c into every lane of v.
func broadcastConst(c float32, v VecPhysical) {
	r := GP32()
	MOVL(U32(math.Float32bits(c)), r)
	VPBROADCASTD(r, v)
}

// broadcastConst256 is broadcastConst with AVX2 instructions only.
func broadcastConst256(c float32, v, tmp VecPhysical) {
	r := GP32()
	MOVL(U32(math.Float32bits(c)), r)
	VMOVD(r, tmp)
	VBROADCASTSS(tmp, v)
}

// reduce4x512 sums each of the four zmm accumulators a[0..3] into one lane of
// xmm(a[0]): lane j = ((y[0]+y[1])+(y[2]+y[3])) + ((y[4]+y[5])+(y[6]+y[7]))
// with y[l] = a_j[l] + a_j[l+8]. The order is the same for every j. The
// accumulators must be among Z0–Z15 (VHADDPS has no EVEX form).
func reduce4x512(a [4]int) {
	for _, j := range a {
		VEXTRACTF64X4(U8(1), zmm[j], Y28)
		VADDPS(Y28, ymm[j], ymm[j])
	}
	reduce4x256(a, X28, true)
}

// reduce4x256 is the 256-bit half of reduce4x512: three horizontal adds and
// a fold of the two 128-bit halves, leaving the four sums in xmm(a[0]).
func reduce4x256(a [4]int, tmp VecPhysical, evex bool) {
	VHADDPS(ymm[a[1]], ymm[a[0]], ymm[a[0]])
	VHADDPS(ymm[a[3]], ymm[a[2]], ymm[a[2]])
	VHADDPS(ymm[a[2]], ymm[a[0]], ymm[a[0]])
	if evex {
		VEXTRACTF32X4(U8(1), ymm[a[0]], tmp)
	} else {
		VEXTRACTF128(U8(1), ymm[a[0]], tmp)
	}
	VADDPS(tmp, xmm[a[0]], xmm[a[0]])
}

func wType(bf16 bool) string {
	if bf16 {
		return "*uint16"
	}
	return "*float32"
}

func wName(bf16 bool) string {
	if bf16 {
		return "BF16"
	}
	return "F32"
}

// loadW loads one vector of weights at mem into v, widening bf16 exactly.
func loadW(mem Mem, v VecPhysical, bf16 bool) {
	if bf16 {
		VPMOVZXWD(mem, v)
		VPSLLD(U8(16), v, v)
		return
	}
	VMOVUPS(mem, v)
}

// widenBF16Ctl is the VPSHUFB control of widenBF16x8: dword i of the result
// takes bf16 value i as its high half and zeros as its low half. Both 128-bit
// lanes of the source hold the same eight values (VBROADCASTI128), lane 0's
// control picks values 0–3 and lane 1's values 4–7.
var widenBF16Ctl Mem

func widenBF16Data() {
	widenBF16Ctl = GLOBL("widenBF16Ctl", RODATA|NOPTR)
	for i := range 8 {
		src := 2 * i // first byte of value i in its lane's copy
		DATA(4*i, U32(0x8080|uint32(src)<<16|uint32(src+1)<<24))
	}
}

// widenBF16x8 loads eight bf16 values at mem into v as float32, exactly
// (the bf16 bits in the high half of each lane), in element order: one
// broadcast load and one byte shuffle with the control ctl (a register
// holding widenBF16Ctl, or the constant itself), one ALU operation fewer
// than a zero-extending load and a shift.
func widenBF16x8(mem Mem, v VecPhysical, ctl Op) {
	VBROADCASTI128(mem, v)
	VPSHUFB(ctl, v, v)
}

// dotTile512 emits dotTile{m}x4{F32,BF16}AVX512 (m ≤ 6): out[i*4+j] = Σ_k x[i·ldx+k]·w_j[k]
// for i < m, j < 4, k < kn (a multiple of 16). Each product is fused into a
// 16-lane accumulator, lanes summed by reduce4x512.
func dotTile512(m int, bf16 bool) {
	name := fmt.Sprintf("dotTile%dx4%sAVX512", m, wName(bf16))
	wt := wType(bf16)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(x *float32, ldx int, w0, w1, w2, w3 %s, kn int, out *float32)", wt))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes a %dx4 tile of dot products over kn (a multiple of 16) elements.", name, m))
	x := Load(Param("x"), GP64())
	ldx := Load(Param("ldx"), GP64())
	SHLQ(U8(2), ldx)
	var w [4]Register
	for j := range 4 {
		w[j] = Load(Param(fmt.Sprintf("w%d", j)), GP64())
	}
	kn := Load(Param("kn"), GP64())
	xr := rowPointers(x, ldx, m)
	acc := func(i, j int) VecPhysical { return zmm[4*i+j] }
	for i := range m {
		for j := range 4 {
			VPXORD(acc(i, j), acc(i, j), acc(i, j))
		}
	}
	offX := GP64()
	offW := GP64()
	XORQ(offX, offX)
	XORQ(offW, offW)
	SHRQ(U8(4), kn)
	JZ(LabelRef(name + "_reduce"))
	Label(name + "_loop")
	for j := range 4 {
		loadW(Mem{Base: w[j], Index: offW, Scale: 1}, zmm[24+j], bf16)
	}
	for i := range m {
		VMOVUPS(Mem{Base: xr[i], Index: offX, Scale: 1}, Z28)
		for j := range 4 {
			VFMADD231PS(zmm[24+j], Z28, acc(i, j))
		}
	}
	ADDQ(U32(64), offX)
	if bf16 {
		ADDQ(U32(32), offW)
	} else {
		ADDQ(U32(64), offW)
	}
	DECQ(kn)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_reduce")
	out := Load(Param("out"), GP64())
	for i := range min(m, 4) {
		reduce4x512([4]int{4 * i, 4*i + 1, 4*i + 2, 4*i + 3})
		VMOVUPS(xmm[4*i], Mem{Base: out, Disp: 16 * i})
	}
	// Rows 4 and 5 live in Z16–Z23; VHADDPS reaches only Z0–Z15, so move
	// them down first (the reduction is the same for every row).
	for i := 4; i < m; i++ {
		for j := range 4 {
			VMOVAPS(acc(i, j), zmm[4*(i-4)+j])
		}
	}
	for i := 4; i < m; i++ {
		a := 4 * (i - 4)
		reduce4x512([4]int{a, a + 1, a + 2, a + 3})
		VMOVUPS(xmm[a], Mem{Base: out, Disp: 16 * i})
	}
	VZEROUPPER()
	RET()
}

// gemv8x512 emits dotTile1x8{F32,BF16}AVX512: out[j] = Σ_k x[k]·w_j[k] for
// eight weight rows at w + j·ldw and kn (a multiple of 16) elements: one
// activation row against eight weight streams at once, which keeps more
// memory requests in flight than four. Every output has exactly the
// accumulator and reduction of dotTile512's, so the bits are the same.
// gemvPrefetch is how many bytes ahead of its loads the one-row GEMV tile
// prefetches each of its eight weight rows (0: no prefetch).
//
// The AVX-512 tiles prefetch weights into L2 (PREFETCHT1), not L1: on the
// Zen 4 host PREFETCHT0 made the row-major GEMV 20–33 % slower, the few-row
// strips 11–40 % and the fp8 GEMV 3–20 % (docs/performance-log.md, "Weights
// prefetched into L2"). The AVX2 tiles keep PREFETCHT0, measured on their own
// host.
const gemvPrefetch = 1024

func gemv8x512(bf16 bool) {
	name := fmt.Sprintf("dotTile1x8%sAVX512", wName(bf16))
	TEXT(name, NOSPLIT, fmt.Sprintf("func(x *float32, w %s, ldw int, kn int, out *float32)", wType(bf16)))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes one activation row's dot products with eight weight rows over kn (a multiple of 16) elements.", name))
	x := Load(Param("x"), GP64())
	w0 := Load(Param("w"), GP64())
	ldw := Load(Param("ldw"), GP64())
	if bf16 {
		SHLQ(U8(1), ldw)
	} else {
		SHLQ(U8(2), ldw)
	}
	kn := Load(Param("kn"), GP64())
	var w [8]Register
	w[0] = w0
	for j := 1; j < 8; j++ {
		w[j] = GP64()
		LEAQ(Mem{Base: w[j-1], Index: ldw, Scale: 1}, w[j])
	}
	for a := range 8 {
		VPXORD(zmm[a], zmm[a], zmm[a])
	}
	offX := GP64()
	offW := GP64()
	XORQ(offX, offX)
	XORQ(offW, offW)
	SHRQ(U8(4), kn)
	JZ(LabelRef(name + "_reduce"))
	// step handles 16 values of every row; a bf16 step reads half a line,
	// so bf16 steps go in pairs and prefetch each line once.
	wStep := 64
	if bf16 {
		wStep = 32
	}
	step := func(disp int, prefetch bool) {
		VMOVUPS(Mem{Base: x, Index: offX, Scale: 1, Disp: disp * 64 / wStep}, Z28)
		for j := range 8 {
			if prefetch && gemvPrefetch > 0 {
				PREFETCHT1(Mem{Base: w[j], Index: offW, Scale: 1, Disp: gemvPrefetch})
			}
			loadW(Mem{Base: w[j], Index: offW, Scale: 1, Disp: disp}, zmm[16+j], bf16)
			VFMADD231PS(zmm[16+j], Z28, zmm[j])
		}
	}
	if bf16 {
		pairs := GP64()
		MOVQ(kn, pairs)
		SHRQ(U8(1), pairs)
		JZ(LabelRef(name + "_single"))
		Label(name + "_loop")
		step(0, true)
		step(32, false)
		ADDQ(U32(128), offX)
		ADDQ(U32(64), offW)
		DECQ(pairs)
		JNZ(LabelRef(name + "_loop"))
		Label(name + "_single")
		TESTQ(U32(1), kn)
		JZ(LabelRef(name + "_reduce"))
		step(0, true)
	} else {
		Label(name + "_loop")
		step(0, true)
		ADDQ(U32(64), offX)
		ADDQ(U32(64), offW)
		DECQ(kn)
		JNZ(LabelRef(name + "_loop"))
	}
	reduceStore8x512(name)
}

// reduceStore8x512 ends a one-row, eight-weight-row AVX-512 GEMV tile: at
// label name_reduce it reduces accumulators Z0–Z7 (reduce4x512 over rows 0–3,
// then 4–7) into out[0..7] and returns, so every such tile has the same
// reduction and so the same bits.
func reduceStore8x512(name string) {
	Label(name + "_reduce")
	out := Load(Param("out"), GP64())
	reduce4x512([4]int{0, 1, 2, 3})
	VMOVUPS(X0, Mem{Base: out})
	reduce4x512([4]int{4, 5, 6, 7})
	VMOVUPS(X4, Mem{Base: out, Disp: 16})
	VZEROUPPER()
	RET()
}

// gemvIlv emits dotTile1x8BF16IlvAVX512 (groups 1): dotTile1x8BF16AVX512
// for a group of eight weight rows in the interleaved layout of
// Matrix.InterleaveBF16 (row r's chunk of values k…k+31 at
// w + 512·(k/32) + 64·r, value i of the chunk and value i+16 in the low and
// high half of word i), so the tile reads its weights as one stream, front to
// back, which the hardware prefetchers follow without help. A 64-byte load
// shifted left by 16 bits is values k…k+15 as float32, the same load masked
// to its high halves values k+16…k+31: one operation per sixteen values
// where row-major rows take a widening shuffle and a shift. Every output has
// exactly dotTile1x8BF16AVX512's accumulator and reduction, so the bits are
// the same. With groups 2 it emits dotTile1x16BF16IlvAVX512, the same over
// two groups at once, w and w2, read side by side: two streams in flight
// instead of one, the first group's eight outputs at out, the second's at
// out+8, each with the one-group tile's accumulator and reduction.
func gemvIlv(groups int) {
	name := fmt.Sprintf("dotTile1x%dBF16IlvAVX512", 8*groups)
	sig, what := "func(x *float32, w *uint16, kn int, out *float32)", "a group"
	if groups == 2 {
		sig, what = "func(x *float32, w *uint16, w2 *uint16, kn int, out *float32)", "two groups"
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes one activation row's dot products with %s of eight interleaved bf16 weight rows over kn (a multiple of 32) elements.", name, what))
	x := Load(Param("x"), GP64())
	bases := []Register{Load(Param("w"), GP64())}
	if groups == 2 {
		bases = append(bases, Load(Param("w2"), GP64()))
	}
	kn := Load(Param("kn"), GP64())
	for a := range 8 * groups {
		VPXORD(zmm[a], zmm[a], zmm[a])
	}
	highMask(Z31)
	SHRQ(U8(5), kn)
	JZ(LabelRef(name + "_reduce"))
	Label(name + "_loop")
	VMOVUPS(Mem{Base: x}, Z28)
	VMOVUPS(Mem{Base: x, Disp: 64}, Z29)
	for j := range 8 {
		for s, base := range bases {
			// The widened halves rotate through Z16–Z21 and Z22–Z27.
			lo, hi := zmm[16+(groups*j+s)%6], zmm[22+(groups*j+s)%6]
			VPSLLD(U8(16), Mem{Base: base, Disp: 64 * j}, lo)
			VPANDD(Mem{Base: base, Disp: 64 * j}, Z31, hi)
			VFMADD231PS(lo, Z28, zmm[8*s+j])
			VFMADD231PS(hi, Z29, zmm[8*s+j])
		}
	}
	ADDQ(U32(128), x)
	for _, base := range bases {
		ADDQ(U32(512), base)
	}
	DECQ(kn)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_reduce")
	out := Load(Param("out"), GP64())
	for q := range 2 * groups {
		reduce4x512([4]int{4 * q, 4*q + 1, 4*q + 2, 4*q + 3})
		VMOVUPS(xmm[4*q], Mem{Base: out, Disp: 16 * q})
	}
	VZEROUPPER()
	RET()
}

// gemmGroup8x512Ilv emits gemmGroup{m}x8BF16IlvAVX512 (2 ≤ m ≤ 3): m activation
// rows' dot products with a whole group of eight interleaved bf16 weight
// rows over kn (a multiple of 32) elements, added to (add ≠ 0) or stored in
// dst (row i at dst + i·ldd, the group's eight outputs side by side). It
// reads the group as dotTile1x8BF16IlvAVX512 does, every line once, front
// to back, where the 4-row strips read each half of a group as every other
// 256 bytes; for every 512 bytes it reads it prefetches pfl lines (0 to 8)
// into L2, front to back from pfd bytes past w. The m rows' activations stay in registers (Z24–Z29) beside 8m
// accumulators (Z0–Z23); each weight line is loaded once into Z30 and widened
// from there, the low halves shifted into Z31, the high ones kept in place
// by a word mask (K1), and fused into every row. Widening each half straight
// from memory, two loads of the line, streamed 13–18 % slower at eight rows
// on a Zen 5 core: a streamed tile pays for every load it issues beside the
// FMAs, though in cache the two run alike (docs/performance-log.md, "What a
// streamed eight-row product loses"). Each output
// has dotTile1x8BF16IlvAVX512's accumulator (values k…k+15 of a chunk, then
// k+16…k+31) and reduce4x512's sums (reduce4x512Any, the same additions), so
// the bits are those of every other tile. A reduction block may take several
// calls: with carry bit 1 a call starts from the 8m accumulators stored at
// acc (64 bytes each, row by row) instead of zero, with bit 2 it stores its
// own there, unreduced, and leaves dst alone; the lanes add the same values
// in the same order as one call over the whole block.
func gemmGroup8x512Ilv(m int) {
	name := fmt.Sprintf("gemmGroup%dx8BF16IlvAVX512", m)
	TEXT(name, NOSPLIT, "func(x *float32, ldx int, w *uint16, kn int, dst *float32, ldd int, add int, pfd int, pfl int, acc *float32, carry int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes the %dx8 dot products of %d activation rows with a group of eight interleaved bf16 weight rows over kn (a multiple of 32) elements, added to or stored in dst.", name, m, m))
	x := Load(Param("x"), GP64())
	ldx := Load(Param("ldx"), GP64())
	SHLQ(U8(2), ldx)
	xr := rowPointers(x, ldx, m)
	w := Load(Param("w"), GP64())
	kn := Load(Param("kn"), GP64())
	acc := func(i, j int) VecPhysical { return zmm[8*i+j] }
	// carry bit 1: start from the unreduced accumulators at acc (a call
	// before this one over the block's earlier values) instead of zero.
	carryAccumulators(1, name+"_zero", m, acc, true)
	JMP(LabelRef(name + "_start"))
	Label(name + "_zero")
	for i := range m {
		for j := range 8 {
			VPXORD(acc(i, j), acc(i, j), acc(i, j))
		}
	}
	Label(name + "_start")
	highWordsMask()
	off := GP64()
	XORQ(off, off)
	pf := chunkPrefetch(w)
	SHRQ(U8(5), kn)
	JZ(LabelRef(name + "_reduce"))
	Label(name + "_loop")
	pf.lines(name, 8)
	for i := range m {
		VMOVUPS(Mem{Base: xr[i], Index: off, Scale: 1}, zmm[24+2*i])
		VMOVUPS(Mem{Base: xr[i], Index: off, Scale: 1, Disp: 64}, zmm[25+2*i])
	}
	for j := range 8 {
		VMOVUPS(Mem{Base: w, Disp: 64 * j}, Z30)
		VPSLLD(U8(16), Z30, Z31)
		for i := range m {
			VFMADD231PS(Z31, zmm[24+2*i], acc(i, j))
		}
		VMOVDQU16_Z(Z30, K1, Z30)
		for i := range m {
			VFMADD231PS(Z30, zmm[25+2*i], acc(i, j))
		}
	}
	ADDQ(U32(128), off)
	ADDQ(U32(512), w)
	DECQ(kn)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_reduce")
	// carry bit 2: the block goes on in a later call, so the accumulators
	// are stored at acc as they are, unreduced.
	carryAccumulators(2, name+"_sums", m, acc, false)
	VZEROUPPER()
	RET()
	Label(name + "_sums")
	dst := Load(Param("dst"), GP64())
	ldd := Load(Param("ldd"), GP64())
	SHLQ(U8(2), ldd)
	for i := range m {
		reduce4x512Any([4]VecPhysical{acc(i, 0), acc(i, 1), acc(i, 2), acc(i, 3)}, Z24, Z25)
		reduce4x512Any([4]VecPhysical{acc(i, 4), acc(i, 5), acc(i, 6), acc(i, 7)}, Z24, Z25)
	}
	sums := func(i, h int) VecPhysical { return xmm[8*i+4*h] }
	CMPQ(NewParamAddr("add", 48), U8(0))
	JE(LabelRef(name + "_store"))
	for i := range m {
		for h := range 2 {
			VADDPS(Mem{Base: dst, Disp: 16 * h}, sums(i, h), sums(i, h))
			VMOVUPS(sums(i, h), Mem{Base: dst, Disp: 16 * h})
		}
		if i+1 < m {
			ADDQ(ldd, dst)
		}
	}
	VZEROUPPER()
	RET()
	Label(name + "_store")
	for i := range m {
		for h := range 2 {
			VMOVUPS(sums(i, h), Mem{Base: dst, Disp: 16 * h})
		}
		if i+1 < m {
			ADDQ(ldd, dst)
		}
	}
	VZEROUPPER()
	RET()
}

// gemmPair8x512Ilv emits gemmPair8x2BF16IlvAVX512: eight activation rows'
// dot products with one pair of interleaved bf16 weight rows of a group
// (their lines at w and w+64, the next chunk's 512 bytes on) over kn (a
// multiple of 32) elements, added to (add ≠ 0) or stored in dst (row i at
// dst + i·ldd, the pair's two outputs side by side). Each weight line is
// widened once for all eight rows (a shift for the low halves into Z17 or
// Z19, a word mask K1 for the high ones in place), where the group tiles'
// passes of three rows widen it once per pass: per 32 values of a weight
// row, 16 FMAs and 2 widening operations against 16 and 6, on the two ports
// an Intel core runs both on. The sixteen accumulators are Z0–Z15 (row i's
// in Z2i and Z2i+1); the activation vectors are loaded into Z20–Z31 in turn.
// For every chunk it prefetches pfl lines (0 to 2) into L2, front to back
// from pfd bytes past w. Each output has dotTile1x8BF16IlvAVX512's
// accumulator (values k…k+15 of a chunk, then k+16…k+31) and reduce4x512's
// sums (reduce4x512Any, rows i and i+1 together), so the bits are those of
// every other tile.
func gemmPair8x512Ilv() {
	const m = 8
	name := "gemmPair8x2BF16IlvAVX512"
	TEXT(name, NOSPLIT, "func(x *float32, ldx int, w *uint16, kn int, dst *float32, ldd int, add int, pfd int, pfl int)")
	Pragma("noescape")
	Doc(name + " computes the 8x2 dot products of eight activation rows with a pair of interleaved bf16 weight rows over kn (a multiple of 32) elements, added to or stored in dst.")
	x := Load(Param("x"), GP64())
	ldx := Load(Param("ldx"), GP64())
	SHLQ(U8(2), ldx)
	ldx3 := GP64()
	LEAQ(Mem{Base: ldx, Index: ldx, Scale: 2}, ldx3)
	x4 := GP64()
	LEAQ(Mem{Base: x, Index: ldx, Scale: 4}, x4)
	// row(i, disp): activation row i at the current chunk, plus disp bytes.
	row := func(i, disp int) Mem {
		b := x
		if i >= 4 {
			b = x4
		}
		switch i % 4 {
		case 1:
			return Mem{Base: b, Index: ldx, Scale: 1, Disp: disp}
		case 2:
			return Mem{Base: b, Index: ldx, Scale: 2, Disp: disp}
		case 3:
			return Mem{Base: b, Index: ldx3, Scale: 1, Disp: disp}
		}
		return Mem{Base: b, Disp: disp}
	}
	w := Load(Param("w"), GP64())
	kn := Load(Param("kn"), GP64())
	acc := func(i, j int) VecPhysical { return zmm[2*i+j] }
	for i := range m {
		for j := range 2 {
			VPXORD(acc(i, j), acc(i, j), acc(i, j))
		}
	}
	highWordsMask()
	pf := chunkPrefetch(w)
	SHRQ(U8(5), kn)
	JZ(LabelRef(name + "_reduce"))
	Label(name + "_loop")
	pf.lines(name, 2)
	// The pair's first row: high halves in Z16, low in Z17; the second's
	// in Z18 and Z19.
	VMOVUPS(Mem{Base: w}, Z16)
	VPSLLD(U8(16), Z16, Z17)
	VMOVDQU16_Z(Z16, K1, Z16)
	VMOVUPS(Mem{Base: w, Disp: 64}, Z18)
	VPSLLD(U8(16), Z18, Z19)
	VMOVDQU16_Z(Z18, K1, Z18)
	for i := range m {
		lo, hi := zmm[20+(2*i)%12], zmm[21+(2*i)%12]
		VMOVUPS(row(i, 0), lo)
		VMOVUPS(row(i, 64), hi)
		VFMADD231PS(Z17, lo, acc(i, 0))
		VFMADD231PS(Z19, lo, acc(i, 1))
		VFMADD231PS(Z16, hi, acc(i, 0))
		VFMADD231PS(Z18, hi, acc(i, 1))
	}
	ADDQ(U32(128), x)
	ADDQ(U32(128), x4)
	ADDQ(U32(512), w)
	DECQ(kn)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_reduce")
	// Rows i and i+1 reduced together: xmm(2i) holds row i's two sums,
	// then row i+1's.
	for i := 0; i < m; i += 2 {
		reduce4x512Any([4]VecPhysical{acc(i, 0), acc(i, 1), acc(i+1, 0), acc(i+1, 1)}, Z20, Z21)
	}
	dst := Load(Param("dst"), GP64())
	ldd := Load(Param("ldd"), GP64())
	SHLQ(U8(2), ldd)
	sums := func(i int) VecPhysical { return xmm[2*i] }
	CMPQ(NewParamAddr("add", 48), U8(0))
	JE(LabelRef(name + "_store"))
	for i := 0; i < m; i += 2 {
		VMOVSD(Mem{Base: dst}, X20)
		VMOVHPS(Mem{Base: dst, Index: ldd, Scale: 1}, X20, X20)
		VADDPS(X20, sums(i), sums(i))
		VMOVLPS(sums(i), Mem{Base: dst})
		VMOVHPS(sums(i), Mem{Base: dst, Index: ldd, Scale: 1})
		if i+2 < m {
			LEAQ(Mem{Base: dst, Index: ldd, Scale: 2}, dst)
		}
	}
	VZEROUPPER()
	RET()
	Label(name + "_store")
	for i := 0; i < m; i += 2 {
		VMOVLPS(sums(i), Mem{Base: dst})
		VMOVHPS(sums(i), Mem{Base: dst, Index: ldd, Scale: 1})
		if i+2 < m {
			LEAQ(Mem{Base: dst, Index: ldd, Scale: 2}, dst)
		}
	}
	VZEROUPPER()
	RET()
}

// highWordsMask sets K1 to keep the high bf16 of every 32-bit pair of an
// interleaved line: the values k+16…k+31 of its chunk.
func highWordsMask() {
	hiWords := GP32()
	MOVL(U32(0xAAAAAAAA), hiWords)
	KMOVD(hiWords, K1)
}

// linePrefetch is the prefetch of the interleaved tiles: pfl lines (the
// pfl argument) into L2 for every chunk they read, front to back from pfd
// bytes past w.
type linePrefetch struct{ pf, pfl, step Register }

// chunkPrefetch loads the pfd and pfl arguments of a tile reading w.
func chunkPrefetch(w Register) linePrefetch {
	p := linePrefetch{pf: Load(Param("pfd"), GP64()), pfl: Load(Param("pfl"), GP64()), step: GP64()}
	ADDQ(w, p.pf)
	MOVQ(p.pfl, p.step)
	SHLQ(U8(6), p.step)
	return p
}

// lines emits one chunk's prefetch: pfl lines (0 to most) from pf, which
// then moves on by as many.
func (p linePrefetch) lines(name string, most int) {
	for l := range most {
		CMPQ(p.pfl, U8(l))
		JE(LabelRef(name + "_pfdone"))
		PREFETCHT1(Mem{Base: p.pf, Disp: 64 * l})
	}
	Label(name + "_pfdone")
	ADDQ(p.step, p.pf)
}

// carryAccumulators emits a group tile's carry of its accumulators across
// calls: unless bit is set in the carry argument it jumps to skip; otherwise
// it loads (load) or stores the m×8 accumulators acc(i, j) from or to the
// acc argument's memory, 64 bytes each, row by row.
func carryAccumulators(bit uint32, skip string, m int, acc func(i, j int) VecPhysical, load bool) {
	carry := Load(Param("carry"), GP64())
	TESTQ(U32(bit), carry)
	JZ(LabelRef(skip))
	p := Load(Param("acc"), GP64())
	for i := range m {
		for j := range 8 {
			at := Mem{Base: p, Disp: 64 * (8*i + j)}
			if load {
				VMOVUPS(at, acc(i, j))
			} else {
				VMOVUPS(acc(i, j), at)
			}
		}
	}
}

// rowPointers returns m registers pointing at consecutive rows (activation,
// weight or output rows): x, then each the one before plus ldx (in bytes).
func rowPointers(x, ldx Register, m int) []Register {
	xr := make([]Register, m)
	for i := range m {
		xr[i] = GP64()
		if i == 0 {
			MOVQ(x, xr[i])
		} else {
			LEAQ(Mem{Base: xr[i-1], Index: ldx, Scale: 1}, xr[i])
		}
	}
	return xr
}

// highMask sets every 32-bit lane of v to 0xffff0000, the mask that keeps
// the high bf16 value of an interleaved word as a float32.
func highMask(v VecPhysical) {
	t := GP32()
	MOVL(U32(0xffff0000), t)
	VPBROADCASTD(t, v)
}

// dotTile256 emits dotTile{m}x4{F32,BF16}AVX2 (m ≤ 3): the AVX2 form of
// dotTile512 over kn (a multiple of 8) with 8-lane accumulators, lanes summed
// ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)).
func dotTile256(m int, bf16 bool) {
	name := fmt.Sprintf("dotTile%dx4%sAVX2", m, wName(bf16))
	wt := wType(bf16)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(x *float32, ldx int, w0, w1, w2, w3 %s, kn int, out *float32)", wt))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes a %dx4 tile of dot products over kn (a multiple of 8) elements.", name, m))
	x := Load(Param("x"), GP64())
	ldx := Load(Param("ldx"), GP64())
	SHLQ(U8(2), ldx)
	var w [4]Register
	for j := range 4 {
		w[j] = Load(Param(fmt.Sprintf("w%d", j)), GP64())
	}
	kn := Load(Param("kn"), GP64())
	xr := rowPointers(x, ldx, m)
	acc := func(i, j int) VecPhysical { return ymm[4*i+j] }
	for i := range m {
		for j := range 4 {
			VXORPS(acc(i, j), acc(i, j), acc(i, j))
		}
	}
	offX := GP64()
	offW := GP64()
	XORQ(offX, offX)
	XORQ(offW, offW)
	SHRQ(U8(3), kn)
	JZ(LabelRef(name + "_reduce"))
	Label(name + "_loop")
	for i := range m {
		VMOVUPS(Mem{Base: xr[i], Index: offX, Scale: 1}, ymm[12+i])
	}
	for j := range 4 {
		if bf16 {
			widenBF16x8(Mem{Base: w[j], Index: offW, Scale: 1}, Y15, widenBF16Ctl)
		} else {
			VMOVUPS(Mem{Base: w[j], Index: offW, Scale: 1}, Y15)
		}
		for i := range m {
			VFMADD231PS(Y15, ymm[12+i], acc(i, j))
		}
	}
	ADDQ(U32(32), offX)
	if bf16 {
		ADDQ(U32(16), offW)
	} else {
		ADDQ(U32(32), offW)
	}
	DECQ(kn)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_reduce")
	out := Load(Param("out"), GP64())
	for i := range m {
		reduce4x256([4]int{4 * i, 4*i + 1, 4*i + 2, 4*i + 3}, X15, false)
		VMOVUPS(xmm[4*i], Mem{Base: out, Disp: 16 * i})
	}
	VZEROUPPER()
	RET()
}

// gemmStrip256 emits gemmStrip{m}x4{F32,BF16}AVX2: dotTile256's m×4 tile
// for groups consecutive groups of four weight rows in one call (rows at w +
// r·ldw), each tile's sums stored to (add = 0) or added to (add ≠ 0) dst[i·ldd
// + 4g + c], the old value as the first operand of the add, as the Go loop
// `d += s` does. Every output has exactly dotTile256's accumulator and
// reduction, so the bits are the same as a tile at a time; one call per
// activation tile and reduction block saves the Go code around every tile.
func gemmStrip256(m int, bf16 bool) {
	name := fmt.Sprintf("gemmStrip%dx4%sAVX2", m, wName(bf16))
	TEXT(name, NOSPLIT, fmt.Sprintf("func(x *float32, ldx int, w %s, ldw int, groups int, kn int, dst *float32, ldd int, add int)", wType(bf16)))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes groups %dx4 tiles of dot products over kn (a multiple of 8) elements into dst.", name, m))
	x := Load(Param("x"), GP64())
	ldx := Load(Param("ldx"), GP64())
	SHLQ(U8(2), ldx)
	xr := rowPointers(x, ldx, m)
	var w [4]Register
	w[0] = Load(Param("w"), GP64())
	ldw := Load(Param("ldw"), GP64())
	if bf16 {
		SHLQ(U8(1), ldw)
	} else {
		SHLQ(U8(2), ldw)
	}
	for j := 1; j < 4; j++ {
		w[j] = GP64()
		LEAQ(Mem{Base: w[j-1], Index: ldw, Scale: 1}, w[j])
	}
	SHLQ(U8(2), ldw) // four rows: the step from one group to the next
	dst := Load(Param("dst"), GP64())
	groups := Load(Param("groups"), GP64())
	off, cnt, tmp := GP64(), GP64(), GP64()
	// bf16 weights advance 16 bytes per step while x advances 32: x is
	// addressed at twice the weights' offset.
	xScale := uint8(1)
	wStep := 32
	if bf16 {
		xScale, wStep = 2, 16
	}
	acc := func(i, j int) VecPhysical { return ymm[4*i+j] }
	TESTQ(groups, groups)
	JZ(LabelRef(name + "_done"))
	Label(name + "_group")
	for i := range m {
		for j := range 4 {
			VXORPS(acc(i, j), acc(i, j), acc(i, j))
		}
	}
	XORQ(off, off)
	Load(Param("kn"), cnt)
	SHRQ(U8(3), cnt)
	JZ(LabelRef(name + "_reduce"))
	// Steps go by whole 64-byte lines of the weight rows where they can.
	perLine := 64 / wStep
	step := func(s int) {
		for i := range m {
			VMOVUPS(Mem{Base: xr[i], Index: off, Scale: xScale, Disp: 32 * s}, ymm[12+i])
		}
		for j := range 4 {
			wm := Mem{Base: w[j], Index: off, Scale: 1, Disp: wStep * s}
			if bf16 {
				widenBF16x8(wm, Y15, widenBF16Ctl)
			} else {
				VMOVUPS(wm, Y15)
			}
			for i := range m {
				VFMADD231PS(Y15, ymm[12+i], acc(i, j))
			}
		}
	}
	MOVQ(cnt, tmp)
	SHRQ(U8(bits(perLine)), tmp)
	JZ(LabelRef(name + "_rest"))
	Label(name + "_loop")
	for st := range perLine {
		step(st)
	}
	ADDQ(U32(64), off)
	DECQ(tmp)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_rest")
	ANDQ(U32(perLine-1), cnt)
	JZ(LabelRef(name + "_reduce"))
	Label(name + "_single")
	step(0)
	ADDQ(U32(wStep), off)
	DECQ(cnt)
	JNZ(LabelRef(name + "_single"))
	Label(name + "_reduce")
	for i := range m {
		reduce4x256([4]int{4 * i, 4*i + 1, 4*i + 2, 4*i + 3}, X15, false)
	}
	Load(Param("ldd"), tmp)
	SHLQ(U8(2), tmp)
	row := func(i int) Mem {
		switch i {
		case 0:
			return Mem{Base: dst}
		case 1:
			return Mem{Base: dst, Index: tmp, Scale: 1}
		}
		return Mem{Base: dst, Index: tmp, Scale: 2}
	}
	CMPQ(NewParamAddr("add", 64), U8(0))
	JE(LabelRef(name + "_store"))
	for i := range m {
		VMOVUPS(row(i), X12)
		VADDPS(xmm[4*i], X12, X12)
		VMOVUPS(X12, row(i))
	}
	JMP(LabelRef(name + "_next"))
	Label(name + "_store")
	for i := range m {
		VMOVUPS(xmm[4*i], row(i))
	}
	Label(name + "_next")
	for j := range 4 {
		ADDQ(ldw, w[j])
	}
	ADDQ(U8(16), dst)
	DECQ(groups)
	JNZ(LabelRef(name + "_group"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// gemmStrip512 emits gemmStrip{m}x4{F32,BF16}AVX512 (m ≤ 6): dotTile512's
// m×4 tile for groups consecutive groups of four weight rows in one call
// (rows at w + r·ldw), each tile's sums stored to (add = 0) or added to
// (add ≠ 0) dst[i·ldd + 4g + c], as the Go loop `d += s` does. Every output
// has exactly dotTile512's accumulator and reduction, so the bits are the
// same as a tile at a time. While it reads a 64-byte line of a weight row it
// prefetches the line pfd bytes further on into L2 (pfd = 0: the line
// itself), so that the rows the caller reads next are on their way.
//
// With ilv (bf16 only) it emits gemmStrip{m}x4BF16IlvAVX512, which reads its
// weights in the interleaved layout of Matrix.InterleaveBF16: row r's chunk
// of 32 values of a group of eight at w + 64·r, the next chunk 512 bytes
// further on, each chunk widened as gemv8x512Ilv does (a shift, then a
// mask); its groups (at most two) are the halves of one group of eight, 256
// bytes apart, and kn is a multiple of 32. The arithmetic is the same. Its
// prefetches run through their own range instead of a distance from each
// line read: pfs bytes (0, 128 or 256) into L2 per 32 values read, from pfd
// bytes past w on, through all its halves, so the caller can spread the
// lines of the block it reads next evenly over its passes over this one.
func gemmStrip512(m int, bf16, ilv bool) {
	name := fmt.Sprintf("gemmStrip%dx4%sAVX512", m, wName(bf16))
	sig := fmt.Sprintf("func(x *float32, ldx int, w %s, ldw int, groups int, kn int, dst *float32, ldd int, add int, pfd int)", wType(bf16))
	if ilv {
		name = fmt.Sprintf("gemmStrip%dx4BF16IlvAVX512", m)
		sig = "func(x *float32, ldx int, w *uint16, groups int, kn int, dst *float32, ldd int, add int, pfd int, pfs int)"
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	kmul := 16
	if ilv {
		kmul = 32
	}
	Doc(fmt.Sprintf("%s computes groups %dx4 tiles of dot products over kn (a multiple of %d) elements into dst.", name, m, kmul))
	x := Load(Param("x"), GP64())
	ldx := Load(Param("ldx"), GP64())
	SHLQ(U8(2), ldx)
	xr := rowPointers(x, ldx, m)
	// Weight rows 0–2 from w0 (index ldw), row 3 from w3; both advance.
	w0 := Load(Param("w"), GP64())
	var ldw Register
	switch {
	case ilv:
		ldw = GP64()
		MOVQ(U32(64), ldw)
		highMask(Z29)
	case bf16:
		ldw = Load(Param("ldw"), GP64())
		SHLQ(U8(1), ldw)
	default:
		ldw = Load(Param("ldw"), GP64())
		SHLQ(U8(2), ldw)
	}
	w3 := GP64()
	LEAQ(Mem{Base: w0, Index: ldw, Scale: 2}, w3)
	ADDQ(ldw, w3)
	wrow := func(j, disp int) Mem {
		switch j {
		case 0:
			return Mem{Base: w0, Disp: disp}
		case 3:
			return Mem{Base: w3, Disp: disp}
		}
		return Mem{Base: w0, Index: ldw, Scale: uint8(j), Disp: disp}
	}
	dst := Load(Param("dst"), GP64())
	groups := Load(Param("groups"), GP64())
	off, cnt, tmp := GP64(), GP64(), GP64()
	wStep := 64 // bytes of weights per 16-value step
	if bf16 {
		wStep = 32
	}
	// wAdv is how far a step moves the weight pointers: a row's next 16
	// values, or (ilv) half the way to the group of eight's next chunk.
	wAdv := wStep
	if ilv {
		wAdv = 256
	}
	acc := func(i, j int) VecPhysical { return zmm[4*i+j] }
	TESTQ(groups, groups)
	JZ(LabelRef(name + "_done"))
	if ilv {
		Load(Param("pfd"), tmp)
		ADDQ(w0, tmp)
		MOVQ(tmp, NewParamAddr("pfd", 64))
	}
	Label(name + "_group")
	for i := range m {
		for j := range 4 {
			VPXORD(acc(i, j), acc(i, j), acc(i, j))
		}
	}
	XORQ(off, off)
	Load(Param("kn"), cnt)
	SHRQ(U8(4), cnt)
	JZ(LabelRef(name + "_reduce"))
	step := func(s int) {
		for j := range 4 {
			switch {
			case ilv && s == 0:
				VPSLLD(U8(16), wrow(j, 0), zmm[24+j])
			case ilv:
				VPANDD(wrow(j, 0), Z29, zmm[24+j])
			default:
				loadW(wrow(j, wAdv*s), zmm[24+j], bf16)
			}
		}
		for i := range m {
			VMOVUPS(Mem{Base: xr[i], Index: off, Scale: 1, Disp: 64 * s}, Z28)
			for j := range 4 {
				VFMADD231PS(zmm[24+j], Z28, acc(i, j))
			}
		}
	}
	pfLabel := 0
	prefetch := func() {
		if ilv {
			// pfs bytes (0, 128 or 256: two or four lines) from the running
			// pointer in pfd's slot, which moves on by as much.
			pfs := NewParamAddr("pfs", 72)
			CMPQ(pfs, U8(0))
			JE(LabelRef(fmt.Sprintf("%s_pf%d", name, pfLabel)))
			Load(Param("pfd"), tmp)
			PREFETCHT1(Mem{Base: tmp})
			PREFETCHT1(Mem{Base: tmp, Disp: 64})
			CMPQ(pfs, U32(128))
			JE(LabelRef(fmt.Sprintf("%s_pfa%d", name, pfLabel)))
			PREFETCHT1(Mem{Base: tmp, Disp: 128})
			PREFETCHT1(Mem{Base: tmp, Disp: 192})
			Label(fmt.Sprintf("%s_pfa%d", name, pfLabel))
			ADDQ(pfs, tmp)
			MOVQ(tmp, NewParamAddr("pfd", 64))
			Label(fmt.Sprintf("%s_pf%d", name, pfLabel))
			pfLabel++
			return
		}
		Load(Param("pfd"), tmp)
		ADDQ(w0, tmp)
		for j := range 3 {
			if j == 0 {
				PREFETCHT1(Mem{Base: tmp})
			} else {
				PREFETCHT1(Mem{Base: tmp, Index: ldw, Scale: uint8(j)})
			}
		}
		Load(Param("pfd"), tmp)
		ADDQ(w3, tmp)
		PREFETCHT1(Mem{Base: tmp})
	}
	// Whole 64-byte lines of the weight rows, then (bf16) one half line.
	perLine := 64 / wStep
	lines := GP64()
	MOVQ(cnt, lines)
	SHRQ(U8(bits(perLine)), lines)
	JZ(LabelRef(name + "_rest"))
	Label(name + "_loop")
	prefetch()
	for st := range perLine {
		step(st)
	}
	ADDQ(U32(64*perLine), off)
	ADDQ(U32(wAdv*perLine), w0)
	ADDQ(U32(wAdv*perLine), w3)
	DECQ(lines)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_rest")
	if perLine > 1 && !ilv {
		TESTQ(U32(1), cnt)
		JZ(LabelRef(name + "_reduce"))
		prefetch()
		step(0)
		ADDQ(U8(64), off)
		ADDQ(U32(wAdv), w0)
		ADDQ(U32(wAdv), w3)
	}
	Label(name + "_reduce")
	// Back to the start of the group's rows, then on to the next group.
	MOVQ(off, tmp)
	switch {
	case ilv:
		SHLQ(U8(2), tmp)
	case bf16:
		SHRQ(U8(1), tmp)
	}
	SUBQ(tmp, w0)
	SUBQ(tmp, w3)
	LEAQ(Mem{Base: w0, Index: ldw, Scale: 4}, w0)
	LEAQ(Mem{Base: w3, Index: ldw, Scale: 4}, w3)
	for i := range min(m, 4) {
		reduce4x512([4]int{4 * i, 4*i + 1, 4*i + 2, 4*i + 3})
	}
	// Rows 4 and 5 live in Z16–Z23; VHADDPS reaches only Z0–Z15, so move
	// them to Z24–Z31's place after rows 0–3 are reduced to xmm 0, 4, 8, 12:
	// Z1–Z3, Z5–Z7 are free.
	if m > 4 {
		spare := [][4]int{{1, 2, 3, 5}, {6, 7, 9, 10}}
		for i := 4; i < m; i++ {
			a := spare[i-4]
			for j := range 4 {
				VMOVAPS(acc(i, j), zmm[a[j]])
			}
			reduce4x512(a)
		}
	}
	sum := func(i int) VecPhysical {
		if i < 4 {
			return xmm[4*i]
		}
		return xmm[[]int{1, 6}[i-4]]
	}
	Load(Param("ldd"), cnt)
	SHLQ(U8(2), cnt)
	rowPtr := func(i int) Mem {
		switch i {
		case 0:
			return Mem{Base: dst}
		case 1, 2, 4:
			return Mem{Base: dst, Index: cnt, Scale: uint8(i)}
		}
		return Mem{Base: tmp}
	}
	setTmp := func(i int) {
		switch i {
		case 3:
			LEAQ(Mem{Base: dst, Index: cnt, Scale: 2}, tmp)
			ADDQ(cnt, tmp)
		case 5:
			LEAQ(Mem{Base: dst, Index: cnt, Scale: 4}, tmp)
			ADDQ(cnt, tmp)
		}
	}
	addOff := 64 // add's place in the arguments: after ldw
	if ilv {
		addOff = 56
	}
	CMPQ(NewParamAddr("add", addOff), U8(0))
	JE(LabelRef(name + "_store"))
	for i := range m {
		setTmp(i)
		VMOVUPS(rowPtr(i), X28)
		VADDPS(sum(i), X28, X28)
		VMOVUPS(X28, rowPtr(i))
	}
	JMP(LabelRef(name + "_next"))
	Label(name + "_store")
	for i := range m {
		setTmp(i)
		VMOVUPS(sum(i), rowPtr(i))
	}
	Label(name + "_next")
	ADDQ(U8(16), dst)
	DECQ(groups)
	JNZ(LabelRef(name + "_group"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// gemv8x256 emits dotTile1x8{F32,BF16}AVX2: gemv8x512 with 8-lane vectors
// over kn (a multiple of 8) elements. Eight independent accumulator chains
// keep both FMA pipes busy (the 1×4 tile has four, one FMA per cycle at a
// four-cycle latency), and each weight row is prefetched gemvPrefetch bytes
// ahead, one prefetch per 64-byte line. Every output has exactly the
// accumulator and reduction of dotTile256's (reduce4x256 over rows 0–3, then
// 4–7), so the bits are the same.
func gemv8x256(bf16 bool) {
	name := fmt.Sprintf("dotTile1x8%sAVX2", wName(bf16))
	TEXT(name, NOSPLIT, fmt.Sprintf("func(x *float32, w %s, ldw int, kn int, out *float32)", wType(bf16)))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes one activation row's dot products with eight weight rows over kn (a multiple of 8) elements.", name))
	x := Load(Param("x"), GP64())
	w0 := Load(Param("w"), GP64())
	ldw := Load(Param("ldw"), GP64())
	if bf16 {
		SHLQ(U8(1), ldw)
	} else {
		SHLQ(U8(2), ldw)
	}
	kn := Load(Param("kn"), GP64())
	// Eight row pointers, one offset register shared by all rows.
	offW := GP64()
	var w [8]Register
	w[0] = w0
	for j := 1; j < 8; j++ {
		w[j] = GP64()
		LEAQ(Mem{Base: w[j-1], Index: ldw, Scale: 1}, w[j])
	}
	for a := range 8 {
		VXORPS(ymm[a], ymm[a], ymm[a])
	}
	// Temporaries Y8–Y13 (Y8–Y14 for f32), the widening control in Y14, x
	// in Y15.
	temps := 7
	if bf16 {
		temps = 6
		VMOVDQU(widenBF16Ctl, Y14)
	}
	offX := GP64()
	XORQ(offX, offX)
	XORQ(offW, offW)
	SHRQ(U8(3), kn)
	JZ(LabelRef(name + "_reduce"))
	// A step handles 8 values of every row: 16 bytes of bf16, 32 of f32;
	// an iteration covers one 64-byte line of every row and prefetches the
	// line gemvPrefetch bytes ahead once.
	wStep := 32
	if bf16 {
		wStep = 16
	}
	perLine := 64 / wStep
	step := func(s int, prefetch bool) {
		VMOVUPS(Mem{Base: x, Index: offX, Scale: 1, Disp: 32 * s}, Y15)
		for j := range 8 {
			if prefetch {
				PREFETCHT0(Mem{Base: w[j], Index: offW, Scale: 1, Disp: gemvPrefetch})
			}
			t := ymm[8+j%temps]
			if bf16 {
				widenBF16x8(Mem{Base: w[j], Index: offW, Scale: 1, Disp: wStep * s}, t, Y14)
			} else {
				VMOVUPS(Mem{Base: w[j], Index: offW, Scale: 1, Disp: wStep * s}, t)
			}
			VFMADD231PS(t, Y15, ymm[j])
		}
	}
	lines := GP64()
	MOVQ(kn, lines)
	SHRQ(U8(bits(perLine)), lines)
	JZ(LabelRef(name + "_rest"))
	Label(name + "_loop")
	for s := range perLine {
		step(s, s == 0)
	}
	ADDQ(U32(32*perLine), offX)
	ADDQ(U32(64), offW)
	DECQ(lines)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_rest")
	ANDQ(U32(perLine-1), kn)
	JZ(LabelRef(name + "_reduce"))
	Label(name + "_single")
	step(0, false)
	ADDQ(U32(32), offX)
	ADDQ(U32(wStep), offW)
	DECQ(kn)
	JNZ(LabelRef(name + "_single"))
	Label(name + "_reduce")
	out := Load(Param("out"), GP64())
	reduce4x256([4]int{0, 1, 2, 3}, X15, false)
	VMOVUPS(X0, Mem{Base: out})
	reduce4x256([4]int{4, 5, 6, 7}, X15, false)
	VMOVUPS(X4, Mem{Base: out, Disp: 16})
	VZEROUPPER()
	RET()
}

// axpyTile512 emits axpyTile{m}x64AVX512: for i < m and c < 64,
// out[i·ldo+c] += Σ_{j<n} p[i·ldp+j]·rows[j][coff+c], rows a table of
// []float32 headers; each element is one fused chain over j in order.
func axpyTile512(m int, bf16 bool) {
	name := fmt.Sprintf("axpyTile%dx64%sAVX512", m, wName(bf16))
	et := "float32"
	if bf16 {
		et = "uint16"
	}
	TEXT(name, NOSPLIT, fmt.Sprintf("func(out *float32, ldo int, p *float32, ldp int, rows *[]%s, n int, coff int)", et))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s accumulates %d rows of 64 outputs, each a weighted sum of n table rows at column coff.", name, m))
	out := Load(Param("out"), GP64())
	ldo := Load(Param("ldo"), GP64())
	SHLQ(U8(2), ldo)
	p := Load(Param("p"), GP64())
	ldp := Load(Param("ldp"), GP64())
	SHLQ(U8(2), ldp)
	rows := Load(Param("rows"), GP64())
	n := Load(Param("n"), GP64())
	coff := Load(Param("coff"), GP64())
	if bf16 {
		SHLQ(U8(1), coff)
	} else {
		SHLQ(U8(2), coff)
	}
	// The weight rows' pointers stay in registers through the loop; the
	// output rows are walked from out before and after it.
	pr := rowPointers(p, ldp, m)
	acc := func(i, c int) VecPhysical { return zmm[4*i+c] }
	orow := GP64()
	MOVQ(out, orow)
	for i := range m {
		for c := range 4 {
			VMOVUPS(Mem{Base: orow, Disp: 64 * c}, acc(i, c))
		}
		if i < m-1 {
			ADDQ(ldo, orow)
		}
	}
	poff := GP64()
	XORQ(poff, poff)
	TESTQ(n, n)
	JZ(LabelRef(name + "_store"))
	Label(name + "_loop")
	row := GP64()
	MOVQ(Mem{Base: rows}, row)
	// Up to four heads: row vectors in Z16–Z19, weights in Z20–Z23; five
	// or six (24 accumulators): row vectors in Z24–Z27, weights in Z28–Z29.
	rv, wv := zmm[16:20], zmm[20:24]
	if m > 4 {
		rv, wv = zmm[24:28], []VecPhysical{Z28, Z29}
	}
	for c := range 4 {
		if bf16 {
			loadW(Mem{Base: row, Index: coff, Scale: 1, Disp: 32 * c}, rv[c], true)
		} else {
			VMOVUPS(Mem{Base: row, Index: coff, Scale: 1, Disp: 64 * c}, rv[c])
		}
	}
	for i := range m {
		w := wv[i%len(wv)]
		VBROADCASTSS(Mem{Base: pr[i], Index: poff, Scale: 1}, w)
		for c := range 4 {
			VFMADD231PS(rv[c], w, acc(i, c))
		}
	}
	ADDQ(U32(24), rows)
	ADDQ(U32(4), poff)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_store")
	for i := range m {
		for c := range 4 {
			VMOVUPS(acc(i, c), Mem{Base: out, Disp: 64 * c})
		}
		if i < m-1 {
			ADDQ(ldo, out)
		}
	}
	VZEROUPPER()
	RET()
}

// qkTileT512 emits qkTileT{nvec}{F32,BF16}AVX512 (nrows 4) and, for one
// head vector, qkTileT1x8{F32,BF16}AVX512 (nrows 8, so that a tile of at
// most 16 heads still has eight independent FMA chains): the scaled logits
// of up to 16·nvec heads against nrows key rows, with the query transposed:
// qT holds the heads' queries as [dim][ldq] (head i of the tile at
// qT[d·ldq+i]), so every step d broadcasts one value of each key row and
// fuses it into 16-head vectors. Each logit is one fused chain over d in
// order, started at 0 and then multiplied by scale, whatever the number of
// heads or rows in the tile. The results of head i < heads and row r with
// bit r set in mask go to out[i·ldo + r]; nothing else is written. bf16 rows
// need an even dim.
func qkTileT512(nvec, nrows int, bf16 bool) {
	name := fmt.Sprintf("qkTileT%d%sAVX512", nvec, wName(bf16))
	rowsSig := fmt.Sprintf("k0, k1, k2, k3 %s", wType(bf16))
	if nrows == 8 {
		name = fmt.Sprintf("qkTileT%dx8%sAVX512", nvec, wName(bf16))
		rowsSig = fmt.Sprintf("k *[8]%s", wType(bf16))
	}
	TEXT(name, NOSPLIT, fmt.Sprintf("func(qT *float32, ldq int, dim int, %s, out *float32, ldo int, heads int, mask int, scale float32)", rowsSig))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes the scaled logits of up to %d transposed-query heads against %d key rows.", name, 16*nvec, nrows))
	qp := Load(Param("qT"), GP64())
	ldq := Load(Param("ldq"), GP64())
	SHLQ(U8(2), ldq)
	dim := Load(Param("dim"), GP64())
	k := make([]Register, nrows)
	if nrows == 8 {
		tab := Load(Param("k"), GP64())
		for r := range nrows {
			k[r] = GP64()
			MOVQ(Mem{Base: tab, Disp: 8 * r}, k[r])
		}
	} else {
		for r := range nrows {
			k[r] = Load(Param(fmt.Sprintf("k%d", r)), GP64())
		}
	}
	acc := func(r, v int) VecPhysical { return zmm[nvec*r+v] }
	for r := range nrows {
		for v := range nvec {
			VPXORD(acc(r, v), acc(r, v), acc(r, v))
		}
	}
	off := GP64() // key bytes
	XORQ(off, off)
	// Registers: accumulators from Z0 (at most 16), query vectors from Z16,
	// broadcast key values in two sets, bf16's high-half mask in Z28.
	qv := func(v, set int) VecPhysical {
		if 2*nvec > 4 {
			return zmm[16+v]
		}
		return zmm[16+v+set*nvec]
	}
	var bset [2][]VecPhysical
	if nrows == 8 {
		bset = [2][]VecPhysical{zmm[20:28], zmm[8:16]}
	} else {
		bset = [2][]VecPhysical{zmm[20:24], zmm[24:28]}
	}
	// step fuses q(d) with the broadcast key values in b.
	step := func(b []VecPhysical, set int) {
		for v := range nvec {
			VMOVUPS(Mem{Base: qp, Disp: 64 * v}, qv(v, set))
		}
		for r := range nrows {
			for v := range nvec {
				VFMADD231PS(qv(v, set), b[r], acc(r, v))
			}
		}
		ADDQ(ldq, qp)
	}
	pairs := GP64()
	MOVQ(dim, pairs)
	SHRQ(U8(1), pairs)
	JZ(LabelRef(name + "_tail"))
	if bf16 {
		mhi := GP32()
		MOVL(U32(0xFFFF0000), mhi)
		VPBROADCASTD(mhi, Z28)
	}
	Label(name + "_loop")
	if bf16 {
		// One dword holds keys d (low half) and d+1 (high half).
		for r := range nrows {
			VPBROADCASTD(Mem{Base: k[r], Index: off, Scale: 1}, bset[0][r])
			VPSLLD(U8(16), bset[0][r], bset[1][r])
			VPANDD(Z28, bset[0][r], bset[0][r])
		}
		step(bset[1], 0)
		step(bset[0], 1)
		ADDQ(U32(4), off)
	} else {
		for r := range nrows {
			VBROADCASTSS(Mem{Base: k[r], Index: off, Scale: 1}, bset[0][r])
		}
		step(bset[0], 0)
		for r := range nrows {
			VBROADCASTSS(Mem{Base: k[r], Index: off, Scale: 1, Disp: 4}, bset[1][r])
		}
		step(bset[1], 1)
		ADDQ(U32(8), off)
	}
	DECQ(pairs)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_tail")
	if !bf16 {
		TESTQ(U32(1), dim)
		JZ(LabelRef(name + "_scale"))
		for r := range nrows {
			VBROADCASTSS(Mem{Base: k[r], Index: off, Scale: 1}, bset[0][r])
		}
		step(bset[0], 0)
	}
	Label(name + "_scale")
	scaleOff := 88
	if nrows == 8 {
		scaleOff = 64
	}
	VBROADCASTSS(NewParamAddr("scale", scaleOff), Z29)
	for r := range nrows {
		for v := range nvec {
			VMULPS(Z29, acc(r, v), acc(r, v))
		}
	}
	maskReg := Load(Param("mask"), GP64()).(GPVirtual)
	KMOVW(maskReg.As32(), K1)
	if nrows == 8 {
		SHRQ(U8(4), maskReg)
		KMOVW(maskReg.As32(), K2)
	}
	heads := Load(Param("heads"), GP64())
	out := Load(Param("out"), GP64())
	ldo := Load(Param("ldo"), GP64())
	SHLQ(U8(2), ldo)
	for v := range nvec {
		// Transpose each group of four rows' 16-head vectors into one
		// four-row xmm per head: u[g][c] lane L holds head 4L+c.
		var u [2][4]VecPhysical
		for g := range nrows / 4 {
			t := [4]VecPhysical{Z24, Z25, Z26, Z27}
			u[g] = [4]VecPhysical{zmm[16+4*g], zmm[17+4*g], zmm[18+4*g], zmm[19+4*g]}
			a := func(r int) VecPhysical { return acc(4*g+r, v) }
			VUNPCKLPS(a(1), a(0), t[0])
			VUNPCKHPS(a(1), a(0), t[1])
			VUNPCKLPS(a(3), a(2), t[2])
			VUNPCKHPS(a(3), a(2), t[3])
			VUNPCKLPD(t[2], t[0], u[g][0])
			VUNPCKHPD(t[2], t[0], u[g][1])
			VUNPCKLPD(t[3], t[1], u[g][2])
			VUNPCKHPD(t[3], t[1], u[g][3])
		}
		for lane := range 4 {
			for c := range 4 {
				h := 16*v + 4*lane + c
				CMPQ(heads, U32(h))
				JLE(LabelRef(name + "_done"))
				VEXTRACTF32X4(U8(lane), u[0][c], K1, Mem{Base: out})
				if nrows == 8 {
					VEXTRACTF32X4(U8(lane), u[1][c], K2, Mem{Base: out, Disp: 16})
				}
				ADDQ(ldo, out)
			}
		}
	}
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// prefetchRows emits prefetchRows4: PREFETCHT0 of every 64-byte line of
// four rows of n bytes, so that rows gathered from random cache slots are on
// their way while the previous rows are being used.
func prefetchRows(bf16 bool) {
	name := "prefetchRows4"
	if bf16 {
		name = "prefetchRows4BF16"
	}
	TEXT(name, NOSPLIT, fmt.Sprintf("func(r0, r1, r2, r3 %s, n int)", wType(bf16)))
	Pragma("noescape")
	Doc(name + " prefetches n bytes of each of four rows into the L1 cache.")
	var r [4]Register
	for j := range 4 {
		r[j] = Load(Param(fmt.Sprintf("r%d", j)), GP64())
	}
	n := Load(Param("n"), GP64())
	off := GP64()
	XORQ(off, off)
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	Label(name + "_loop")
	for j := range 4 {
		PREFETCHT0(Mem{Base: r[j], Index: off, Scale: 1})
	}
	ADDQ(U32(64), off)
	CMPQ(off, n)
	JB(LabelRef(name + "_loop"))
	Label(name + "_done")
	RET()
}

// transpose16x16512 emits transpose16x16AVX512: dst[k·ldd + i] =
// src[i·lds + k] for i, k < 16 (lds and ldd in elements), by interleaving
// pairs of rows, then pairs of pairs, then 128-bit lanes.
func transpose16x16512() {
	TEXT("transpose16x16AVX512", NOSPLIT, "func(src *float32, lds int, dst *float32, ldd int)")
	Pragma("noescape")
	Doc("transpose16x16AVX512 writes the transpose of a 16×16 block of src into dst.")
	src := Load(Param("src"), GP64())
	lds := Load(Param("lds"), GP64())
	SHLQ(U8(2), lds)
	dst := Load(Param("dst"), GP64())
	ldd := Load(Param("ldd"), GP64())
	SHLQ(U8(2), ldd)
	for i := range 16 {
		VMOVUPS(Mem{Base: src}, zmm[i])
		if i < 15 {
			ADDQ(lds, src)
		}
	}
	// t[2i], t[2i+1]: rows 2i and 2i+1 interleaved (low and high pairs).
	for i := range 8 {
		VUNPCKLPS(zmm[2*i+1], zmm[2*i], zmm[16+2*i])
		VUNPCKHPS(zmm[2*i+1], zmm[2*i], zmm[16+2*i+1])
	}
	// u[4j+c]: in 128-bit lane l, rows 4j … 4j+3 of column 4l+c.
	for j := range 4 {
		t := 16 + 4*j
		VUNPCKLPD(zmm[t+2], zmm[t], zmm[4*j])
		VUNPCKHPD(zmm[t+2], zmm[t], zmm[4*j+1])
		VUNPCKLPD(zmm[t+3], zmm[t+1], zmm[4*j+2])
		VUNPCKHPD(zmm[t+3], zmm[t+1], zmm[4*j+3])
	}
	// Rows 4l of dst start at base[l]; row 4l+c is base[l] + c·ldd.
	ldd3 := GP64()
	LEAQ(Mem{Base: ldd, Index: ldd, Scale: 2}, ldd3)
	var base [4]Register
	base[0] = dst
	for l := 1; l < 4; l++ {
		base[l] = GP64()
		LEAQ(Mem{Base: base[l-1], Index: ldd, Scale: 4}, base[l])
	}
	row := func(l, c int) Mem {
		switch c {
		case 0:
			return Mem{Base: base[l]}
		case 3:
			return Mem{Base: base[l], Index: ldd3, Scale: 1}
		default:
			return Mem{Base: base[l], Index: ldd, Scale: uint8(c)}
		}
	}
	// Column 4l+c gathers lane l of u[c], u[4+c], u[8+c], u[12+c].
	for c := range 4 {
		VSHUFF32X4(U8(0x44), zmm[4+c], zmm[c], Z16)
		VSHUFF32X4(U8(0xEE), zmm[4+c], zmm[c], Z17)
		VSHUFF32X4(U8(0x44), zmm[12+c], zmm[8+c], Z18)
		VSHUFF32X4(U8(0xEE), zmm[12+c], zmm[8+c], Z19)
		VSHUFF32X4(U8(0x88), Z18, Z16, Z20)
		VSHUFF32X4(U8(0xDD), Z18, Z16, Z21)
		VSHUFF32X4(U8(0x88), Z19, Z17, Z22)
		VSHUFF32X4(U8(0xDD), Z19, Z17, Z23)
		for l := range 4 {
			VMOVUPS(zmm[20+l], row(l, c))
		}
	}
	VZEROUPPER()
	RET()
}

// scale512 emits scaleAVX512: x[i] *= a for n (a multiple of 16) values,
// each one rounded product, the bits of the scalar loop.
func scale512() {
	TEXT("scaleAVX512", NOSPLIT, "func(x *float32, n int, a float32)")
	Pragma("noescape")
	Doc("scaleAVX512 multiplies n (a multiple of 16) values of x by a.")
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	VBROADCASTSS(NewParamAddr("a", 16), Z0)
	SHRQ(U8(4), n)
	JZ(LabelRef("scaleAVX512_done"))
	Label("scaleAVX512_loop")
	VMULPS(Mem{Base: x}, Z0, Z1)
	VMOVUPS(Z1, Mem{Base: x})
	ADDQ(U32(64), x)
	DECQ(n)
	JNZ(LabelRef("scaleAVX512_loop"))
	Label("scaleAVX512_done")
	VZEROUPPER()
	RET()
}

// axpy512 emits axpyAVX512: y[i] += alpha·x[i] for n (a multiple of 64)
// values, the product rounded before the add (VMULPS then VADDPS, never
// fused), so every element has exactly the bits of the scalar reference.
// Each call handles at most the n it is given; callers bound n.
func axpy512() {
	TEXT("axpyAVX512", NOSPLIT, "func(alpha float32, x, y *float32, n int)")
	Pragma("noescape")
	Doc("axpyAVX512 adds alpha·x to y element-wise (product rounded, then added) for n (a multiple of 64) values.")
	VBROADCASTSS(NewParamAddr("alpha", 0), Z31)
	x := Load(Param("x"), GP64())
	y := Load(Param("y"), GP64())
	n := Load(Param("n"), GP64())
	SHRQ(U8(6), n)
	JZ(LabelRef("axpy512_done"))
	Label("axpy512_loop")
	for a := range 4 {
		// Operand order as the Go compiler emits the scalar loop
		// (x·alpha, then product + y), so even NaN payloads agree.
		VMOVUPS(Mem{Base: x, Disp: 64 * a}, zmm[a])
		VMULPS(Z31, zmm[a], zmm[a])
		VADDPS(Mem{Base: y, Disp: 64 * a}, zmm[a], zmm[a])
		VMOVUPS(zmm[a], Mem{Base: y, Disp: 64 * a})
	}
	ADDQ(U32(256), x)
	ADDQ(U32(256), y)
	DECQ(n)
	JNZ(LabelRef("axpy512_loop"))
	Label("axpy512_done")
	VZEROUPPER()
	RET()
}

// axpy256 emits axpyAVX2: axpyAVX512 with 8-lane vectors over n (a multiple
// of 32) values.
func axpy256() {
	TEXT("axpyAVX2", NOSPLIT, "func(alpha float32, x, y *float32, n int)")
	Pragma("noescape")
	Doc("axpyAVX2 adds alpha·x to y element-wise (product rounded, then added) for n (a multiple of 32) values.")
	VBROADCASTSS(NewParamAddr("alpha", 0), Y15)
	x := Load(Param("x"), GP64())
	y := Load(Param("y"), GP64())
	n := Load(Param("n"), GP64())
	SHRQ(U8(5), n)
	JZ(LabelRef("axpy256_done"))
	Label("axpy256_loop")
	for a := range 4 {
		VMOVUPS(Mem{Base: x, Disp: 32 * a}, ymm[a])
		VMULPS(Y15, ymm[a], ymm[a])
		VADDPS(Mem{Base: y, Disp: 32 * a}, ymm[a], ymm[a])
		VMOVUPS(ymm[a], Mem{Base: y, Disp: 32 * a})
	}
	ADDQ(U32(128), x)
	ADDQ(U32(128), y)
	DECQ(n)
	JNZ(LabelRef("axpy256_loop"))
	Label("axpy256_done")
	VZEROUPPER()
	RET()
}

// axpyTile256 emits axpyTile{m}x16{F32,BF16}AVX2: axpyTile512 with two
// 8-lane vectors per row (16 outputs) and m ≤ 4 rows (8 accumulators, two
// row vectors, four broadcasts: 14 of the 16 registers).
func axpyTile256(m int, bf16 bool) {
	name := fmt.Sprintf("axpyTile%dx16%sAVX2", m, wName(bf16))
	et := "float32"
	if bf16 {
		et = "uint16"
	}
	TEXT(name, NOSPLIT, fmt.Sprintf("func(out *float32, ldo int, p *float32, ldp int, rows *[]%s, n int, coff int)", et))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s accumulates %d rows of 16 outputs, each a weighted sum of n table rows at column coff.", name, m))
	out := Load(Param("out"), GP64())
	ldo := Load(Param("ldo"), GP64())
	SHLQ(U8(2), ldo)
	p := Load(Param("p"), GP64())
	ldp := Load(Param("ldp"), GP64())
	SHLQ(U8(2), ldp)
	rows := Load(Param("rows"), GP64())
	n := Load(Param("n"), GP64())
	coff := Load(Param("coff"), GP64())
	if bf16 {
		SHLQ(U8(1), coff)
	} else {
		SHLQ(U8(2), coff)
	}
	or, pr := rowPointers(out, ldo, m), rowPointers(p, ldp, m)
	acc := func(i, c int) VecPhysical { return ymm[2*i+c] }
	for i := range m {
		for c := range 2 {
			VMOVUPS(Mem{Base: or[i], Disp: 32 * c}, acc(i, c))
		}
	}
	if bf16 {
		VMOVDQU(widenBF16Ctl, Y14)
	}
	poff := GP64()
	XORQ(poff, poff)
	TESTQ(n, n)
	JZ(LabelRef(name + "_store"))
	Label(name + "_loop")
	row := GP64()
	MOVQ(Mem{Base: rows}, row)
	for c := range 2 {
		if bf16 {
			widenBF16x8(Mem{Base: row, Index: coff, Scale: 1, Disp: 16 * c}, ymm[8+c], Y14)
		} else {
			VMOVUPS(Mem{Base: row, Index: coff, Scale: 1, Disp: 32 * c}, ymm[8+c])
		}
	}
	for i := range m {
		VBROADCASTSS(Mem{Base: pr[i], Index: poff, Scale: 1}, ymm[10+i])
		for c := range 2 {
			VFMADD231PS(ymm[8+c], ymm[10+i], acc(i, c))
		}
	}
	ADDQ(U32(24), rows)
	ADDQ(U32(4), poff)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_store")
	for i := range m {
		for c := range 2 {
			VMOVUPS(acc(i, c), Mem{Base: or[i], Disp: 32 * c})
		}
	}
	VZEROUPPER()
	RET()
}

// expSum256 emits expSumAVX2: expSumAVX512 with 8-lane vectors and without
// VSCALEFPS: 2^r is built in the exponent field, so arguments are clamped
// at −87 (e^−87 ≈ 1.6e−38, still a normal float) instead of −110; the lanes
// are summed ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)). Registers: Y0 sum, Y1 f,
// Y2 r, Y3 p, Y4–Y15 constants (c0 = c1 = 1 share Y4).
func expSum256() {
	bias := GLOBL("expBias127", RODATA|NOPTR)
	for k := range 8 {
		DATA(4*k, U32(127))
	}
	TEXT("expSumAVX2", NOSPLIT, "func(x *float32, n int, m float32) float32")
	Pragma("noescape")
	Doc("expSumAVX2 replaces x[i] by exp(x[i]-m) for n (a multiple of 8) values and returns their sum.")
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	VBROADCASTSS(NewParamAddr("m", 16), Y15)
	broadcastConst256(float32(math.Log2E), Y14, X0)
	broadcastConst256(-87, Y13, X0)
	broadcastConst256(0.693145751953125, Y12, X0)
	broadcastConst256(1.428606765330187e-06, Y11, X0)
	// Y10..Y5 = c7..c2, Y4 = 1.
	coef := []float64{1, 1, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040}
	for k := 7; k >= 2; k-- {
		broadcastConst256(float32(coef[k]), ymm[3+k], X0)
	}
	broadcastConst256(1, Y4, X0)
	VXORPS(Y0, Y0, Y0)
	SHRQ(U8(3), n)
	JZ(LabelRef("expSum256_done"))
	Label("expSum256_loop")
	VMOVUPS(Mem{Base: x}, Y1)
	VSUBPS(Y15, Y1, Y1)
	VMAXPS(Y1, Y13, Y1) // NaN in Y1 stays NaN
	VMULPS(Y14, Y1, Y2)
	VROUNDPS(U8(0), Y2, Y2) // r = round(v·log2e)
	VFNMADD231PS(Y12, Y2, Y1)
	VFNMADD231PS(Y11, Y2, Y1)
	VMOVAPS(Y10, Y3)
	for k := 6; k >= 2; k-- {
		VFMADD213PS(ymm[3+k], Y1, Y3)
	}
	VFMADD213PS(Y4, Y1, Y3) // c1
	VFMADD213PS(Y4, Y1, Y3) // c0
	VCVTPS2DQ(Y2, Y2)
	VPADDD(bias, Y2, Y2)
	VPSLLD(U8(23), Y2, Y2) // 2^r
	VMULPS(Y2, Y3, Y3)
	VMOVUPS(Y3, Mem{Base: x})
	VADDPS(Y3, Y0, Y0)
	ADDQ(U32(32), x)
	DECQ(n)
	JNZ(LabelRef("expSum256_loop"))
	Label("expSum256_done")
	hsum256()
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// max256 emits maxAVX2: the largest of n (a multiple of 8, at least 8)
// values.
func max256() {
	TEXT("maxAVX2", NOSPLIT, "func(x *float32, n int) float32")
	Pragma("noescape")
	Doc("maxAVX2 returns the largest of n (a positive multiple of 8) values.")
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	VMOVUPS(Mem{Base: x}, Y0)
	SHRQ(U8(3), n)
	DECQ(n)
	JZ(LabelRef("max256_reduce"))
	Label("max256_loop")
	ADDQ(U32(32), x)
	VMAXPS(Mem{Base: x}, Y0, Y0)
	DECQ(n)
	JNZ(LabelRef("max256_loop"))
	Label("max256_reduce")
	VEXTRACTF128(U8(1), Y0, X1)
	VMAXPS(X1, X0, X0)
	VPERMILPS(U8(0x4e), X0, X1)
	VMAXPS(X1, X0, X0)
	VPERMILPS(U8(0xb1), X0, X1)
	VMAXPS(X1, X0, X0)
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// hsum256 sums the 8 lanes of Y0 into X0 lane 0 in a fixed order:
// 256→128, then two horizontal adds.
func hsum256() {
	VEXTRACTF128(U8(1), Y0, X1)
	VADDPS(X1, X0, X0)
	VHADDPS(X0, X0, X0)
	VHADDPS(X0, X0, X0)
}

// hsum512 sums the 16 lanes of Z0 into X0 lane 0 in a fixed order:
// 512→256, then hsum256.
func hsum512() {
	VEXTRACTF64X4(U8(1), Z0, Y1)
	VADDPS(Y1, Y0, Y0)
	hsum256()
}

// expSum512 emits expSumAVX512: x[i] = exp(x[i] − m) in place for n (a
// multiple of 16) values, returning their sum (16 lanes, summed by hsum512).
// exp uses a Cody–Waite reduction by ln 2, a degree-7 Taylor polynomial on
// |f| ≤ ln2/2 (truncation error < 6e-9) and VSCALEFPS; arguments below −110
// give 0 and NaN propagates.
func expSum512() {
	TEXT("expSumAVX512", NOSPLIT, "func(x *float32, n int, m float32) float32")
	Pragma("noescape")
	Doc("expSumAVX512 replaces x[i] by exp(x[i]-m) for n (a multiple of 16) values and returns their sum.")
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	mx := Load(Param("m"), XMM())
	VBROADCASTSS(mx, Z31)
	broadcastConst(float32(math.Log2E), Z30)
	broadcastConst(-110, Z29)
	// ln 2 split so that r·ln2hi is exact for |r| < 2^8.
	broadcastConst(0.693145751953125, Z28)
	broadcastConst(1.428606765330187e-06, Z27)
	coef := []float64{1, 1, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040}
	for k := 7; k >= 0; k-- {
		broadcastConst(float32(coef[k]), zmm[19+k]) // Z19..Z26 = c0..c7
	}
	VPXORD(Z0, Z0, Z0)
	SHRQ(U8(4), n)
	JZ(LabelRef("expSum_done"))
	Label("expSum_loop")
	VMOVUPS(Mem{Base: x}, Z1)
	VSUBPS(Z31, Z1, Z1)
	VMAXPS(Z1, Z29, Z1) // NaN in Z1 stays NaN
	VMULPS(Z30, Z1, Z2)
	VRNDSCALEPS(U8(0), Z2, Z2) // r = round(v·log2e)
	VFNMADD231PS(Z28, Z2, Z1)  // f = v − r·ln2hi
	VFNMADD231PS(Z27, Z2, Z1)  // f −= r·ln2lo
	VMOVAPS(Z26, Z3)
	for k := 6; k >= 0; k-- {
		VFMADD213PS(zmm[19+k], Z1, Z3) // p = p·f + c_k
	}
	VSCALEFPS(Z2, Z3, Z3)
	VMOVUPS(Z3, Mem{Base: x})
	VADDPS(Z3, Z0, Z0)
	ADDQ(U32(64), x)
	DECQ(n)
	JNZ(LabelRef("expSum_loop"))
	Label("expSum_done")
	hsum512()
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// max512 emits maxAVX512: the largest of n (a multiple of 16, at least 16)
// values.
func max512() {
	TEXT("maxAVX512", NOSPLIT, "func(x *float32, n int) float32")
	Pragma("noescape")
	Doc("maxAVX512 returns the largest of n (a positive multiple of 16) values.")
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	VMOVUPS(Mem{Base: x}, Z0)
	SHRQ(U8(4), n)
	DECQ(n)
	JZ(LabelRef("max_reduce"))
	Label("max_loop")
	ADDQ(U32(64), x)
	VMAXPS(Mem{Base: x}, Z0, Z0)
	DECQ(n)
	JNZ(LabelRef("max_loop"))
	Label("max_reduce")
	VEXTRACTF64X4(U8(1), Z0, Y1)
	VMAXPS(Y1, Y0, Y0)
	VEXTRACTF128(U8(1), Y0, X1)
	VMAXPS(X1, X0, X0)
	VPERMILPS(U8(0x4e), X0, X1)
	VMAXPS(X1, X0, X0)
	VPERMILPS(U8(0xb1), X0, X1)
	VMAXPS(X1, X0, X0)
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// scoreTile8T512 emits scoreTile8TAVX512: one group of 32 heads of the
// weighted ReLU scores of eight keys, with the query transposed
// (qT[d·stride + h], stride in bytes, 32 heads per row of the group). For
// each key j and head h the dot product runs over d in ascending order as a
// chain of fused multiply-adds of the broadcast key value and the query row
// (no horizontal reduction per head); then run[j] (16 lanes, in memory)
// gains max(dot, 0)·w for heads 0–15 and then for heads 16–31 of the group,
// lane-wise. When out is not nil the running sums are final: each is reduced
// by hsum512 and stored to out[j]. Every key's arithmetic is the same
// whichever keys share the tile. While it reads line l of its keys it
// prefetches line l of the eight keys at next[0..7] (the next tile's).
func scoreTile8T512() {
	name := "scoreTile8TAVX512"
	TEXT(name, NOSPLIT, "func(qT *float32, stride int, dim int, w *float32, k0, k1, k2, k3, k4, k5, k6, k7 *float32, next *[8]*float32, run *float32, out *float32)")
	Pragma("noescape")
	Doc(name + " adds one 32-head group of the weighted ReLU scores of eight keys to their running sums (and reduces them into out when out is not nil), prefetching the keys at next.")
	qrow := Load(Param("qT"), GP64())
	stride := Load(Param("stride"), GP64())
	dim := Load(Param("dim"), GP64())
	var k [8]Register
	for j := range 8 {
		k[j] = Load(Param(fmt.Sprintf("k%d", j)), GP64())
	}
	for a := range 16 {
		VPXORD(zmm[a], zmm[a], zmm[a])
	}
	SHLQ(U8(2), dim) // bytes per key
	off := GP64()
	XORQ(off, off)
	TESTQ(dim, dim)
	JZ(LabelRef(name + "_dots"))
	next := Load(Param("next"), GP64())
	Label(name + "_d")
	prefetchNextKeys(name, next, off, 8)
	scoreTileStep(qrow, off, k[:])
	ADDQ(stride, qrow)
	ADDQ(U8(4), off)
	CMPQ(off, dim)
	JB(LabelRef(name + "_d"))
	Label(name + "_dots")
	w := Load(Param("w"), GP64())
	run := Load(Param("run"), GP64())
	VMOVUPS(Mem{Base: w}, Z28)
	VMOVUPS(Mem{Base: w, Disp: 64}, Z29)
	VPXORD(Z27, Z27, Z27)
	for j := range 8 {
		VMOVUPS(Mem{Base: run, Disp: 64 * j}, Z30)
		for half := range 2 {
			VMAXPS(Z27, zmm[2*j+half], zmm[2*j+half]) // max(dot, 0); a NaN dot gives 0
			VMULPS([]VecPhysical{Z28, Z29}[half], zmm[2*j+half], zmm[2*j+half])
			VADDPS(zmm[2*j+half], Z30, Z30)
		}
		VMOVUPS(Z30, Mem{Base: run, Disp: 64 * j})
	}
	out := Load(Param("out"), GP64())
	TESTQ(out, out)
	JZ(LabelRef(name + "_done"))
	for j := range 8 {
		VMOVUPS(Mem{Base: run, Disp: 64 * j}, Z0)
		hsum512()
		VMOVSS(X0, Mem{Base: out, Disp: 4 * j})
	}
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// scoreTileStep emits one step d of the eight-key score tiles: the 32
// heads' query values at qrow (two vectors) fused with key j's value at
// byte off, broadcast, into accumulators Z(2j) and Z(2j+1).
func scoreTileStep(qrow, off Register, k []Register) {
	VMOVUPS(Mem{Base: qrow}, Z24)
	VMOVUPS(Mem{Base: qrow, Disp: 64}, Z25)
	for j := range 8 {
		VBROADCASTSS(Mem{Base: k[j], Index: off, Scale: 1}, Z26)
		VFMADD231PS(Z24, Z26, zmm[2*j])
		VFMADD231PS(Z25, Z26, zmm[2*j+1])
	}
}

// scoreTiles8T32512 emits scoreTiles8T32AVX512: scoreTile8TAVX512 for a
// query of exactly one 32-head group over consecutive tiles of eight keys,
// in one call: the keys' pointers are read from their slice headers (keys,
// 24 bytes apart) up to the header at end, a multiple of eight headers on;
// every tile prefetches the next tile's keys a line at a time, so the eight
// headers after end must exist too. Each key's arithmetic is the tile's,
// operation for operation: the chains over d, then 0 + max(dot, 0)·w for
// heads 0–15, plus max(dot, 0)·w for heads 16–31, lane-wise, reduced by
// hsum512 into out. What the call saves is the per-tile call, the running
// sums' round trip through memory and the Go loop around them.
func scoreTiles8T32512() {
	name := "scoreTiles8T32AVX512"
	TEXT(name, NOSPLIT, "func(qT *float32, dimBytes int, w *float32, keys *[]float32, end *[]float32, out *float32)")
	Pragma("noescape")
	Doc(name + " computes the weighted ReLU scores of a 32-head query against the keys of whole tiles of eight, prefetching each next tile's keys.")
	hdr := Load(Param("keys"), GP64())
	out := Load(Param("out"), GP64())
	CMPQ(hdr, NewParamAddr("end", 32))
	JAE(LabelRef(name + "_done"))
	Label(name + "_tile")
	var k [8]Register
	for j := range 8 {
		k[j] = GP64()
		MOVQ(Mem{Base: hdr, Disp: 24 * j}, k[j])
	}
	for a := range 16 {
		VPXORD(zmm[a], zmm[a], zmm[a])
	}
	qrow := Load(Param("qT"), GP64())
	off := GP64()
	XORQ(off, off)
	CMPQ(off, NewParamAddr("dimBytes", 8))
	JAE(LabelRef(name + "_dots"))
	Label(name + "_d")
	// The next tile's line off of each key, whenever off starts a line.
	np := GP64()
	TESTQ(U32(63), off)
	JNZ(LabelRef(name + "_noprefetch"))
	for j := range 8 {
		MOVQ(Mem{Base: hdr, Disp: 24 * (8 + j)}, np)
		PREFETCHT0(Mem{Base: np, Index: off, Scale: 1})
	}
	Label(name + "_noprefetch")
	scoreTileStep(qrow, off, k[:])
	ADDQ(U32(128), qrow)
	ADDQ(U8(4), off)
	CMPQ(off, NewParamAddr("dimBytes", 8))
	JB(LabelRef(name + "_d"))
	Label(name + "_dots")
	w := Load(Param("w"), GP64())
	VMOVUPS(Mem{Base: w}, Z28)
	VMOVUPS(Mem{Base: w, Disp: 64}, Z29)
	VPXORD(Z27, Z27, Z27)
	for j := range 8 {
		for half := range 2 {
			a := zmm[2*j+half]
			VMAXPS(Z27, a, a) // max(dot, 0); a NaN dot gives 0
			VMULPS([]VecPhysical{Z28, Z29}[half], a, a)
		}
		// The tile's running sum: 0 + heads 0–15, then + heads 16–31.
		VADDPS(zmm[2*j], Z27, zmm[2*j])
		VADDPS(zmm[2*j+1], zmm[2*j], zmm[2*j])
	}
	for j := range 8 {
		if j > 0 {
			VMOVAPS(zmm[2*j], Z0)
		}
		hsum512()
		VMOVSS(X0, Mem{Base: out, Disp: 4 * j})
	}
	ADDQ(U32(8*24), hdr)
	ADDQ(U8(32), out)
	CMPQ(hdr, NewParamAddr("end", 32))
	JB(LabelRef(name + "_tile"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// topkKeep512 emits topkKeepAVX512: the candidate pass of the sampled
// top-k. For whole blocks of 64 scores it appends to idx the positions
// (from 0) of the scores at or above thr — the ordered, quiet
// comparison, so NaN is never kept, as Go's s >= thr — in increasing order,
// and returns how many it kept; before each block it checks that more than
// limit were not kept yet, and returns −1 if they were, having written at
// most limit+64 positions. Each 16 scores are one compare into a mask, one
// compress of the running positions by it, one full store at the count
// (the lanes past the kept ones are overwritten by the next store or lie
// past the count) and a population count.
func topkKeep512() {
	TEXT("topkKeepAVX512", NOSPLIT, "func(scores *float32, n int, thr float32, idx *uint32, limit int) int")
	Pragma("noescape")
	Doc("topkKeepAVX512 appends to idx the positions of the scores at or above thr in whole blocks of 64 of n scores and returns how many, or -1 once more than limit were kept before a block.")
	sc := Load(Param("scores"), GP64())
	n := Load(Param("n"), GP64())
	idx := Load(Param("idx"), GP64())
	limit := Load(Param("limit"), GP64())
	thr := Z31
	VBROADCASTSS(Load(Param("thr"), XMM()), thr)
	// Z30: the positions of the next 16 scores (lane l: l, built bit by
	// bit from zero); Z29: 16 in every lane.
	pos, step := Z30, Z29
	VPXORD(pos, pos, pos)
	iota := GP32()
	for b := range 4 {
		var m uint32 // the lanes whose index has bit b set
		for l := range 16 {
			m |= uint32(l>>b&1) << l
		}
		MOVL(U32(m), iota)
		KMOVW(iota, K2)
		MOVL(U32(1<<b), iota)
		VPBROADCASTD(iota, step)
		VPADDD(step, pos, K2, pos)
	}
	MOVL(U32(16), iota)
	VPBROADCASTD(iota, step)
	cnt := GP64()
	XORQ(cnt, cnt)
	SHRQ(U8(6), n)
	JZ(LabelRef("topkKeep512_done"))
	k := GP64()
	Label("topkKeep512_block")
	CMPQ(cnt, limit)
	JG(LabelRef("topkKeep512_full"))
	for v := range 4 {
		VCMPPS(U8(0x12), Mem{Base: sc, Disp: 64 * v}, thr, K1) // thr <= s, ordered, quiet
		VPCOMPRESSD_Z(pos, K1, Z0)
		VMOVDQU32(Z0, Mem{Base: idx, Index: cnt, Scale: 4})
		KMOVW(K1, k.As32())
		POPCNTL(k.As32(), k.As32())
		ADDQ(k, cnt)
		VPADDD(step, pos, pos)
	}
	ADDQ(U32(256), sc)
	DECQ(n)
	JNZ(LabelRef("topkKeep512_block"))
	Label("topkKeep512_done")
	Store(cnt, ReturnIndex(0))
	VZEROUPPER()
	RET()
	Label("topkKeep512_full")
	MOVQ(I64(-1), cnt)
	Store(cnt, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// exp64 holds the registers of math.Exp's constants on a CPU with FMA
// (exp_amd64.s), broadcast to every lane: log2 e, ln 2 in two parts, 1/16,
// 2, the exponent bias and the Taylor polynomial's eight coefficients (c64 in
// Z15, c56 … c8 in Z25–Z31). They take Z15–Z21 and Z25–Z31; exp uses Z2–Z7
// besides its argument.
type exp64 struct {
	log2e, ln2u, ln2l, sixteenth, two, bias, c64 VecPhysical
	poly                                         []VecPhysical
}

// c64 broadcasts the float64 c to every lane of v.
func c64(c float64, v VecPhysical) {
	r := GP64()
	MOVQ(U64(math.Float64bits(c)), r)
	VPBROADCASTQ(r, v)
}

// loadExp64 broadcasts the reduction's constants; loadBias and loadPoly the
// rest (separate so that an existing kernel keeps its instruction order).
func loadExp64() exp64 {
	e := exp64{log2e: Z16, ln2u: Z17, ln2l: Z18, sixteenth: Z19, two: Z20, bias: Z21, c64: Z15,
		poly: []VecPhysical{Z25, Z26, Z27, Z28, Z29, Z30, Z31}}
	c64(1.4426950408889634073599246810018920, e.log2e)
	c64(0.69314718055966295651160180568695068359375, e.ln2u)
	c64(0.28235290563031577122588448175013436025525412068e-12, e.ln2l)
	c64(0.0625, e.sixteenth)
	c64(2.0, e.two)
	return e
}

func (e exp64) loadBias() {
	r := GP64()
	MOVQ(U64(1023), r) // the float64 exponent bias, for 2^k
	VPBROADCASTQ(r, e.bias)
}

func (e exp64) loadPoly() {
	c64(2.4801587301587301587e-5, e.c64)
	for k, c := range []float64{1.9841269841269841270e-4, 1.3888888888888888889e-3, 8.3333333333333333333e-3,
		4.1666666666666666667e-2, 1.6666666666666666667e-1, 0.5, 1.0} {
		c64(c, e.poly[k])
	}
}

// one is the register holding 1.0 (the polynomial's last term).
func (e exp64) one() VecPhysical { return e.poly[6] }

// exp replaces every lane a of x by math.Exp(a), operation for operation as
// math.Exp computes it on a CPU with FMA where no branch of it applies (k =
// round(a·log2 e) within [−1022, 1023], a finite): a Cody–Waite reduction by
// ln 2, the Taylor polynomial of the reduced value over 16 by fused
// multiply-adds, four squarings as x·(x + 2), then ·2^k. It uses Z2–Z7.
func (e exp64) exp(x VecPhysical) {
	VMULPD(x, e.log2e, Z2)      // a·log2 e
	VCVTPD2DQ(Z2, Y3)           // k
	VCVTDQ2PD(Y3, Z4)           // k as float64
	VFNMADD231PD(e.ln2u, Z4, x) // a − k·ln2u
	VFNMADD231PD(e.ln2l, Z4, x) // − k·ln2l
	VMULPD(e.sixteenth, x, x)   // x = …/16
	VMOVAPD(e.c64, Z5)          // p = c64
	for _, c := range e.poly {
		VFMADD213PD(c, x, Z5) // p = x·p + c
	}
	VMULPD(Z5, x, x) // x·p
	for range 3 {
		VADDPD(e.two, x, Z6) // t = x + 2
		VMULPD(Z6, x, x)     // x·t
	}
	VADDPD(e.two, x, Z6)        // t = x + 2
	VFMADD213PD(e.one(), Z6, x) // x = t·x + 1
	VPMOVSXDQ(Y3, Z7)           // 2^k: (k + 1023) << 52
	VPADDQ(e.bias, Z7, Z7)
	VPSLLQ(U8(52), Z7, Z7)
	VMULPD(Z7, x, x)
}

// expShifted512 emits expShiftedAVX512: dst[i] = math.Exp((float64(x[i]) −
// shift)·scale), eight values at a time, with math.Exp's bits: the argument
// a computed by the same two float64 operations as the Go expression, then
// exp64.exp where |a| ≤ 708 (k within [−1021, 1021]: no branch of math.Exp
// applies) and +0 where a < −746 (k ≤ −1076: math.Exp underflows to +0; −∞
// too). It stops before the first group of eight holding any other argument
// (NaN, +∞, the edges of the range) and returns how many values it did, for
// the caller to compute that group by math.Exp. n is a multiple of 8.
func expShifted512() {
	name := "expShiftedAVX512"
	TEXT(name, NOSPLIT, "func(dst *float64, x *float32, n int, shift float64, scale float64) int")
	Pragma("noescape")
	Doc(name + " computes dst[i] = math.Exp((float64(x[i]) − shift)·scale) for whole groups of eight whose arguments are within ±708 or below −746 and returns how many values it did.")
	dst := Load(Param("dst"), GP64())
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	zShift, zScale, zAbs, zLimit, zLow := Z8, Z9, Z10, Z11, Z12
	VBROADCASTSD(Load(Param("shift"), XMM()), zShift)
	VBROADCASTSD(Load(Param("scale"), XMM()), zScale)
	e := loadExp64()
	e.loadBias()
	e.loadPoly()
	r := GP64()
	MOVQ(U64(1<<63-1), r)
	VPBROADCASTQ(r, zAbs)
	c64(708, zLimit)
	c64(-746, zLow)
	i := GP64()
	XORQ(i, i)
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	Label(name + "_loop")
	VCVTPS2PD(Mem{Base: x, Index: i, Scale: 4}, Z0) // float64(x)
	VSUBPD(zShift, Z0, Z0)                          // − shift
	VMULPD(zScale, Z0, Z1)                          // a = …·scale
	VANDPD(zAbs, Z1, Z0)
	VCMPPD(U8(0x12), zLimit, Z0, K1) // |a| ≤ 708, ordered: false for NaN
	VCMPPD(U8(0x11), zLow, Z1, K2)   // a < −746, ordered
	KORB(K1, K2, K3)
	KORTESTB(K3, K3)
	JCC(LabelRef(name + "_done")) // not all eight: stop before this group
	e.exp(Z1)
	VMOVAPD_Z(Z1, K1, Z1) // +0 where a < −746
	VMOVUPD(Z1, Mem{Base: dst, Index: i, Scale: 8})
	endGroupsOfEight(name, i, n)
}

// endGroupsOfEight emits the end of a loop over groups of eight values that
// may stop early (at label name_done): i moves on by eight and the loop
// (name_loop) goes on while i < n; the function returns i, how many values
// it did.
func endGroupsOfEight(name string, i, n Register) {
	ADDQ(U8(8), i)
	CMPQ(i, n)
	JB(LabelRef(name + "_loop"))
	Label(name + "_done")
	Store(i, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// siluMul512 emits siluMulAVX512: dst[i] = SiLU(gate[i])·up[i] eight values
// at a time, with the bits of the scalar kernels.SiLU: the gate widened to
// float64, exp(−v) by the exact operations of Go's math.Exp on a CPU with
// FMA (a Cody–Waite reduction by ln 2 with k = round(x·log2 e), the Taylor
// polynomial of x/16 by fused multiply-adds, four squarings as
// x·(x + 2), then ·2^k), then v / (1 + exp(−v)) rounded once to float32,
// times up. Only lanes with |gate| ≤ 30 take that path (k in [−44, 44]: no
// overflow, underflow or non-finite branch of math.Exp applies): it stops
// before the first group of eight holding another value and returns how
// many it did, for the caller to compute that group by the scalar SiLU.
// n is a multiple of 8. dst may alias gate or up.
func siluMul512() {
	name := "siluMulAVX512"
	TEXT(name, NOSPLIT, "func(dst, gate, up *float32, n int) int")
	Pragma("noescape")
	Doc(name + " computes dst[i] = SiLU(gate[i])·up[i] for whole groups of eight with |gate| ≤ 30 and returns how many values it did.")
	dst := Load(Param("dst"), GP64())
	gate := Load(Param("gate"), GP64())
	up := Load(Param("up"), GP64())
	n := Load(Param("n"), GP64())
	i := GP64()
	XORQ(i, i)
	e := loadExp64()
	zLimit, zAbs, zSign := Z22, Z23, Z24
	c64(30.0, zLimit)
	r := GP64()
	MOVQ(U64(1<<63-1), r)
	VPBROADCASTQ(r, zAbs)
	MOVQ(U64(1<<63), r)
	VPBROADCASTQ(r, zSign)
	e.loadBias()
	e.loadPoly()
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	Label(name + "_loop")
	VCVTPS2PD(Mem{Base: gate, Index: i, Scale: 4}, Z0) // v
	VANDPD(zAbs, Z0, Z1)
	VCMPPD(U8(0x12), zLimit, Z1, K1) // |v| ≤ 30, ordered: false for NaN
	KORTESTB(K1, K1)
	JCC(LabelRef(name + "_done")) // not all eight: stop before this group
	VXORPD(zSign, Z0, Z1)         // a = −v
	e.exp(Z1)                     // e = exp(−v)
	VADDPD(e.one(), Z1, Z1)       // 1 + e
	VDIVPD(Z1, Z0, Z0)            // v / (1 + e)
	VCVTPD2PS(Z0, Y0)             // SiLU, rounded once
	VMULPS(Mem{Base: up, Index: i, Scale: 4}, Y0, Y0)
	VMOVUPS(Y0, Mem{Base: dst, Index: i, Scale: 4})
	endGroupsOfEight(name, i, n)
}

// prefetchNextKeys emits, for a score tile's loop over the byte offset off
// of its keys, a prefetch of line off of each of the keys keys at next (the
// next tile's) whenever off starts a 64-byte line: the next tile's lines are
// requested a few at a time over the whole call rather than all at once
// before it. A burst of a tile's lines (64 for eight f32 keys of 128
// values) is likely more than a core keeps in flight; spread out, the
// tile's from-memory rate came close to its in-cache rate
// (docs/performance-log.md, "The indexer's keys prefetched a line at a time").
func prefetchNextKeys(name string, next, off Register, keys int) {
	np := GP64()
	TESTQ(U32(63), off)
	JNZ(LabelRef(name + "_noprefetch"))
	for j := range keys {
		MOVQ(Mem{Base: next, Disp: 8 * j}, np)
		PREFETCHT0(Mem{Base: np, Index: off, Scale: 1})
	}
	Label(name + "_noprefetch")
}

// scoreTile6T256 emits scoreTile6TAVX2: scoreTile8TAVX512 for AVX2 over six
// keys and one 16-head half of a 32-head group: for each key j and head h
// the dot product runs over d in ascending order as a chain of fused
// multiply-adds of the broadcast key value and the half's query row (two
// 8-head vectors), then run[j] (16 lanes, in memory; heads h and h+8 of the
// half in lanes h mod 8 of its two vectors) gains max(dot, 0)·w lane-wise
// (multiply, then add). Called for a group's low half and then its high
// half, every lane sees the operations of scoreTile8TAVX512 in the same
// order; when out is not nil the running sums are final and each is reduced
// as hsum512 does (the two vectors added, then hsum256) into out[j]. The
// results are those of the AVX-512 tile, bit for bit. While it reads line l
// of its keys it prefetches line l of the six keys at next[0..5].
func scoreTile6T256() {
	name := "scoreTile6TAVX2"
	TEXT(name, NOSPLIT, "func(qT *float32, stride int, dim int, w *float32, k0, k1, k2, k3, k4, k5 *float32, next *[6]*float32, run *float32, out *float32)")
	Pragma("noescape")
	Doc(name + " adds one 16-head half of a 32-head group of the weighted ReLU scores of six keys to their running sums (and reduces them into out when out is not nil), prefetching the keys at next.")
	qrow := Load(Param("qT"), GP64())
	stride := Load(Param("stride"), GP64())
	dim := Load(Param("dim"), GP64())
	var k [6]Register
	for j := range 6 {
		k[j] = Load(Param(fmt.Sprintf("k%d", j)), GP64())
	}
	for a := range 12 {
		VXORPS(ymm[a], ymm[a], ymm[a])
	}
	SHLQ(U8(2), dim) // bytes per key
	off := GP64()
	XORQ(off, off)
	TESTQ(dim, dim)
	JZ(LabelRef(name + "_dots"))
	next := Load(Param("next"), GP64())
	Label(name + "_d")
	prefetchNextKeys(name, next, off, 6)
	VMOVUPS(Mem{Base: qrow}, Y12)
	VMOVUPS(Mem{Base: qrow, Disp: 32}, Y13)
	for j := range 6 {
		VBROADCASTSS(Mem{Base: k[j], Index: off, Scale: 1}, Y14)
		VFMADD231PS(Y12, Y14, ymm[2*j])
		VFMADD231PS(Y13, Y14, ymm[2*j+1])
	}
	ADDQ(stride, qrow)
	ADDQ(U8(4), off)
	CMPQ(off, dim)
	JB(LabelRef(name + "_d"))
	Label(name + "_dots")
	w := Load(Param("w"), GP64())
	run := Load(Param("run"), GP64())
	VMOVUPS(Mem{Base: w}, Y12)
	VMOVUPS(Mem{Base: w, Disp: 32}, Y13)
	VXORPS(Y14, Y14, Y14)
	for j := range 6 {
		for half := range 2 {
			a := ymm[2*j+half]
			VMOVUPS(Mem{Base: run, Disp: 64*j + 32*half}, Y15)
			VMAXPS(Y14, a, a) // max(dot, 0); a NaN dot gives 0
			VMULPS([]VecPhysical{Y12, Y13}[half], a, a)
			VADDPS(a, Y15, Y15)
			VMOVUPS(Y15, Mem{Base: run, Disp: 64*j + 32*half})
		}
	}
	out := Load(Param("out"), GP64())
	TESTQ(out, out)
	JZ(LabelRef(name + "_done"))
	for j := range 6 {
		VMOVUPS(Mem{Base: run, Disp: 64 * j}, Y0)
		VMOVUPS(Mem{Base: run, Disp: 64*j + 32}, Y1)
		VADDPS(Y1, Y0, Y0)
		hsum256()
		VMOVSS(X0, Mem{Base: out, Disp: 4 * j})
	}
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// fmaPeak512 emits fmaPeakAVX512: n rounds of 24 independent 16-lane FMA
// chains (24·16·2 FLOPs per round), enough chains to cover the FMA latency of
// two pipes. It returns one lane so the work has a visible result.
func fmaPeak512() {
	TEXT("fmaPeakAVX512", NOSPLIT, "func(n int) float32")
	Doc("fmaPeakAVX512 runs n rounds of 24 independent 16-lane FMA chains.")
	n := Load(Param("n"), GP64())
	broadcastConst(0.5, Z24)
	broadcastConst(0.25, Z25)
	for a := range 24 {
		VPXORD(zmm[a], zmm[a], zmm[a])
	}
	TESTQ(n, n)
	JZ(LabelRef("fmaPeak512_done"))
	Label("fmaPeak512_loop")
	for a := range 24 {
		VFMADD231PS(Z24, Z25, zmm[a])
	}
	DECQ(n)
	JNZ(LabelRef("fmaPeak512_loop"))
	Label("fmaPeak512_done")
	for a := 1; a < 24; a++ {
		VADDPS(zmm[a], Z0, Z0)
	}
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// fp8DecodePeak emits fp8DecodePeakAVX512 (lanes 16) and fp8DecodePeakAVX2
// (lanes 8): n rounds of eight independent decodings of lanes e4m3 codes to
// float32, each the fp8 tiles' exact sequence (sign-extend from memory,
// shift, mask, multiply by scale·2^120), from four vectors of codes at w
// that stay in L1. Nothing else runs, so timing it gives the fastest rate at
// which a core turns fp8 weights into the float32 values the FMAs take.
func fp8DecodePeak(lanes int) {
	evex := lanes == 16
	name, v := "fp8DecodePeakAVX2", ymm
	if evex {
		name, v = "fp8DecodePeakAVX512", zmm
	}
	TEXT(name, NOSPLIT, "func(w *uint8, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s runs n rounds of eight independent %d-code fp8 decodings from the codes at w (4·%d bytes).", name, lanes, lanes))
	w := Load(Param("w"), GP64())
	n := Load(Param("n"), GP64())
	mask, sc := v[15], v[14]
	tmp := GP64()
	MOVL(U32(0x87F00000), tmp.As32())
	if evex {
		VPBROADCASTD(tmp.As32(), mask)
		broadcastConst(float32(math.Ldexp(1, 117)), sc)
	} else {
		VMOVD(tmp.As32(), X15)
		VPBROADCASTD(X15, mask)
		broadcastConst256(float32(math.Ldexp(1, 117)), sc, X13)
	}
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	Label(name + "_loop")
	for k := range 8 {
		decodeE4M3Vec(Mem{Base: w, Disp: lanes * (k % 4)}, v[k], mask, sc, evex)
	}
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// decodeE4M3Vec decodes the e4m3 codes at src (one per lane of r) to
// float32 in r with the fp8 tiles' exact sequence: sign-extend, shift the
// sign and EEEEMMM bits into float32 position, mask (0x87F00000), multiply
// by scale·2^120.
func decodeE4M3Vec(src Mem, r, mask, scale VecPhysical, evex bool) {
	decodeE4M3Bits(src, r, mask, evex)
	VMULPS(scale, r, r)
}

// decodeE4M3Stages is decodeE4M3Vec of the codes at srcs[j] into rs[j]
// with the scale scales[j] (decodeE4M3Bits where scales is nil), one stage
// at a time: every load, then every shift, every mask and every multiply,
// so that the stages of different vectors overlap in the pipes (AVX-512).
func decodeE4M3Stages(srcs []Mem, rs []VecPhysical, mask VecPhysical, scales []VecPhysical) {
	for j, m := range srcs {
		VPMOVSXBD(m, rs[j])
	}
	for _, r := range rs {
		VPSLLD(U8(20), r, r)
	}
	for _, r := range rs {
		VPANDD(mask, r, r)
	}
	for j, sc := range scales {
		VMULPS(sc, rs[j], rs[j])
	}
}

// decodeE4M3Bits is decodeE4M3Vec without the multiply: r holds each
// code's value times 2^-120 exactly.
func decodeE4M3Bits(src Mem, r, mask VecPhysical, evex bool) {
	VPMOVSXBD(src, r)
	VPSLLD(U8(20), r, r)
	if evex {
		VPANDD(mask, r, r)
	} else {
		VPAND(mask, r, r)
	}
}

// fmaPeak256 emits fmaPeakAVX2: n rounds of 12 independent 8-lane FMA chains.
func fmaPeak256() {
	TEXT("fmaPeakAVX2", NOSPLIT, "func(n int) float32")
	Doc("fmaPeakAVX2 runs n rounds of 12 independent 8-lane FMA chains.")
	n := Load(Param("n"), GP64())
	broadcastConst256(0.5, Y12, X14)
	broadcastConst256(0.25, Y13, X14)
	for a := range 12 {
		VXORPS(ymm[a], ymm[a], ymm[a])
	}
	TESTQ(n, n)
	JZ(LabelRef("fmaPeak256_done"))
	Label("fmaPeak256_loop")
	for a := range 12 {
		VFMADD231PS(Y12, Y13, ymm[a])
	}
	DECQ(n)
	JNZ(LabelRef("fmaPeak256_loop"))
	Label("fmaPeak256_done")
	for a := 1; a < 12; a++ {
		VADDPS(ymm[a], Y0, Y0)
	}
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// readStreams is the number of concurrent streams of the read-bandwidth
// probe: as many as the widest GEMV tile (1×8) reads at once, so that the
// probe bounds the kernels measured against it.
const readStreams = 8

// readSum512 emits readSumAVX512: the sum of n (a multiple of
// 16·readStreams) values read as readStreams concurrent streams, one per
// equal part of x, part a summed in accumulator a; the accumulators are
// combined by a pairwise tree in order, ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)),
// lanes by hsum512.
func readSum512() {
	TEXT("readSumAVX512", NOSPLIT, "func(x *float32, n int) float32")
	Pragma("noescape")
	Doc(fmt.Sprintf("readSumAVX512 returns the sum of n (a multiple of %d) values read as %d concurrent streams.", 16*readStreams, readStreams))
	readSumBody("readSum512", zmm[:readStreams], 64)
	hsum512()
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// readPairSum512 emits readPairSumAVX512: the sum of n values at a and n
// at b (n a multiple of 128), read side by side, 512 bytes of each a step,
// front to back with no software prefetch: the walk of the one-row
// interleaved bf16 product (dotTile1x16BF16IlvAVX512), which reads a group
// of a weight's first half beside one of its second and leaves the
// prefetching to the hardware. a's eight lines of a step go to Z0–Z7, b's
// to Z8–Z15; the sixteen are combined by addTree, lanes by hsum512.
func readPairSum512() {
	name := "readPairSumAVX512"
	TEXT(name, NOSPLIT, "func(a, b *float32, n int) float32")
	Pragma("noescape")
	Doc(name + " returns the sum of n (a multiple of 128) values at a and n at b, read side by side.")
	a := Load(Param("a"), GP64())
	b := Load(Param("b"), GP64())
	n := Load(Param("n"), GP64())
	acc := zmm[:16]
	for _, r := range acc {
		VPXORD(r, r, r)
	}
	SHRQ(U8(7), n)
	JZ(LabelRef(name + "_done"))
	Label(name + "_loop")
	for s, base := range []Register{a, b} {
		for l := range 8 {
			VADDPS(Mem{Base: base, Disp: 64 * l}, acc[8*s+l], acc[8*s+l])
		}
	}
	ADDQ(U32(512), a)
	ADDQ(U32(512), b)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_done")
	addTree(acc)
	hsum512()
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// readSum256 emits readSumAVX2: readSumAVX512 with 8-lane accumulators over
// n (a multiple of 8·readStreams) values.
func readSum256() {
	TEXT("readSumAVX2", NOSPLIT, "func(x *float32, n int) float32")
	Pragma("noescape")
	Doc(fmt.Sprintf("readSumAVX2 returns the sum of n (a multiple of %d) values read as %d concurrent streams.", 8*readStreams, readStreams))
	readSumBody("readSum256", ymm[:readStreams], 32)
	hsum256()
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// readSumBody loads the arguments, streams the readStreams equal parts of x
// at once (accumulator a sums part a, one vector per step) and leaves the
// accumulators' tree sum in acc[0].
func readSumBody(name string, acc []VecPhysical, width int) {
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	for _, r := range acc {
		if width == 64 {
			VPXORD(r, r, r)
		} else {
			VXORPS(r, r, r)
		}
	}
	part := GP64()
	MOVQ(n, part)
	SHLQ(U8(2), part)
	SHRQ(U8(bits(len(acc))), part)            // part length in bytes
	SHRQ(U8(bits(len(acc))+bits(width/4)), n) // steps: n / (streams · lanes)
	JZ(LabelRef(name + "_done"))
	p := make([]Register, len(acc))
	for a := range acc {
		p[a] = GP64()
		if a == 0 {
			MOVQ(x, p[a])
		} else {
			LEAQ(Mem{Base: p[a-1], Index: part, Scale: 1}, p[a])
		}
	}
	Label(name + "_loop")
	for a, r := range acc {
		// 1 KiB ahead, as the GEMV prefetches its weight rows: the probe
		// must not be slower than a kernel reading the same way.
		PREFETCHT0(Mem{Base: p[a], Disp: 1024})
		VADDPS(Mem{Base: p[a]}, r, r)
		ADDQ(U32(width), p[a])
	}
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_done")
	addTree(acc)
}

// addTree leaves the sum of acc in acc[0], added by a pairwise tree in
// order: ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)) for eight.
func addTree(acc []VecPhysical) {
	for step := 1; step < len(acc); step *= 2 {
		for a := 0; a+step < len(acc); a += 2 * step {
			VADDPS(acc[a+step], acc[a], acc[a])
		}
	}
}

// streamFMAPerLine are the FMA counts per 64-byte line streamFMA512 is
// emitted for (kernels.StreamFMAPerLine): 2·r for a product of r
// activation rows on bf16 weights (a line holds 32 values, two vectors),
// from one row (2) to sixteen (32); 4·r on fp8 weights.
var streamFMAPerLine = []int{2, 4, 8, 16, 32}

// streamFMAAhead is how far ahead of its loads streamFMA512 prefetches.
const streamFMAAhead = 16 << 10

// streamFMA512 emits streamFMA<f>AVX512: x (n floats, a multiple of 128)
// read front to back as one stream, 512 bytes a step, each line loaded
// into a register and fused f times with the constant ½ into f of 24
// accumulators, every line prefetched streamFMAAhead bytes ahead. It
// returns the accumulators' sum (f·½·Σx up to rounding), so timing it over
// a buffer far larger than the caches shows how much of the read
// bandwidth and of the FMA peak one core keeps when it needs both at
// once: the ceiling of a product that streams its weights from memory.
func streamFMA512(f int) {
	name := fmt.Sprintf("streamFMA%dAVX512", f)
	TEXT(name, NOSPLIT, "func(x *float32, n int) float32")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s returns %d·½·Σx over n (a multiple of 128) values, read as one stream and fused %d times per line.", name, f, f))
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	for a := range 24 {
		VPXORD(zmm[a], zmm[a], zmm[a])
	}
	half := Z31
	broadcastConst(0.5, half)
	SHRQ(U8(7), n)
	JZ(LabelRef(name + "_done"))
	Label(name + "_loop")
	k := 0
	for l := range 8 {
		PREFETCHT0(Mem{Base: x, Disp: streamFMAAhead + 64*l})
		r := zmm[24+l%4]
		VMOVUPS(Mem{Base: x, Disp: 64 * l}, r)
		for range f {
			VFMADD231PS(r, half, zmm[k%24])
			k++
		}
	}
	ADDQ(U32(512), x)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_done")
	addTree(zmm[:24])
	hsum512()
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// bits is log2 of a power of two.
func bits(v int) int {
	b := 0
	for 1<<b < v {
		b++
	}
	return b
}

// recordsLevel is what decodeRecords512 and decodeRecords256 differ in:
// the function's name, the constants its tiles need, its tiles, the
// values a widening step takes (log2) and that step.
type recordsLevel struct {
	name     string
	consts   func()
	tiles    recordTiles
	ropeLog2 uint8
	widen    func(sp, dst Register)
}

// decodeRecords512 emits decodeRecordsAVX512: n quantized cache records of
// a flat store, record i at base + slots[i]·recBytes, each tiles tiles of
// tileCodes e4m3 codes (a multiple of 16), then tiles little-endian float32
// scales, then rope little-endian bf16 values (a multiple of 16), decoded
// into consecutive rows of tiles·tileCodes + rope values of dst: tile t
// with exactly the operations of decodeE4M3AVX512 at scale t, the bf16
// values widened as widenBF16AVX512 does. While record i is decoded every
// line of the record of slots[i+ahead] is prefetched, for i+ahead < npf.
// The caller guarantees every decoded record lies inside the store.
func decodeRecords512() {
	decodeRecords(recordsLevel{name: "decodeRecordsAVX512", consts: e4m3Consts, tiles: recordTiles512, ropeLog2: 4,
		widen: func(sp, dst Register) {
			VPMOVZXWD(Mem{Base: sp}, Z0)
			VPSLLD(U8(16), Z0, Z0)
			VMOVUPS(Z0, Mem{Base: dst})
			ADDQ(U32(32), sp)
			ADDQ(U32(64), dst)
		}})
}

// decodeRecords256 emits decodeRecordsAVX2: decodeRecordsAVX512 with AVX2
// (tiles of a multiple of 8 codes, a multiple of 8 bf16 values), the
// codes decoded as decodeE4M3AVX2 does and the bf16 values widened by
// widenBF16x8: the same bits.
func decodeRecords256() {
	decodeRecords(recordsLevel{name: "decodeRecordsAVX2", tiles: recordTiles256, ropeLog2: 3,
		consts: func() {
			e4m3Consts256()
			VMOVDQU(widenBF16Ctl, Y10)
		},
		widen: func(sp, dst Register) {
			widenBF16x8(Mem{Base: sp}, Y0, Y10)
			VMOVUPS(Y0, Mem{Base: dst})
			ADDQ(U32(16), sp)
			ADDQ(U32(32), dst)
		}})
}

// decodeRecords emits decodeRecords512's function at level lv.
func decodeRecords(lv recordsLevel) {
	name := lv.name
	TEXT(name, NOSPLIT, "func(dst *float32, base *byte, slots *int32, n int, npf int, ahead int, recBytes int, tiles int, tileCodes int, rope int)")
	Pragma("noescape")
	Doc(name + " decodes n scaled e4m3 (and bf16) records of a flat store, chosen by slot, into dst, prefetching the records of later slots.")
	dst := Load(Param("dst"), GP64())
	base := Load(Param("base"), GP64())
	slots := Load(Param("slots"), GP64())
	n := Load(Param("n"), GP64())
	recBytes := Load(Param("recBytes"), GP64())
	lv.consts()
	i := GP64()
	XORQ(i, i)
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	Label(name + "_rec")
	// Prefetch every line of the record ahead, and its last byte.
	pi := GP64()
	MOVQ(i, pi)
	ADDQ(NewParamAddr("ahead", 40), pi)
	CMPQ(pi, NewParamAddr("npf", 32))
	JAE(LabelRef(name + "_decode"))
	MOVLQSX(Mem{Base: slots, Index: pi, Scale: 4}, pi)
	IMULQ(recBytes, pi)
	ADDQ(base, pi)
	PREFETCHT0(Mem{Base: pi, Index: recBytes, Scale: 1, Disp: -1})
	po := GP64()
	XORQ(po, po)
	Label(name + "_pf")
	PREFETCHT0(Mem{Base: pi, Index: po, Scale: 1})
	ADDQ(U32(64), po)
	CMPQ(po, recBytes)
	JB(LabelRef(name + "_pf"))
	Label(name + "_decode")
	rec := GP64()
	MOVLQSX(Mem{Base: slots, Index: i, Scale: 4}, rec)
	IMULQ(recBytes, rec)
	ADDQ(base, rec)
	// The scales follow the codes: at rec + tiles·tileCodes.
	tileCodes := Load(Param("tileCodes"), GP64())
	sp := GP64()
	MOVQ(Load(Param("tiles"), GP64()), sp)
	tl := GP64()
	MOVQ(sp, tl)
	IMULQ(tileCodes, sp)
	ADDQ(rec, sp)
	TESTQ(tl, tl)
	JZ(LabelRef(name + "_rope"))
	Label(name + "_tile")
	recordTile(name, rec, dst, sp, tileCodes, lv.tiles)
	DECQ(tl)
	JNZ(LabelRef(name + "_tile"))
	Label(name + "_rope")
	// sp now points past the scales, at the bf16 values.
	rc := GP64()
	MOVQ(Load(Param("rope"), GP64()), rc)
	SHRQ(U8(lv.ropeLog2), rc)
	JZ(LabelRef(name + "_next"))
	Label(name + "_widen")
	lv.widen(sp, dst)
	DECQ(rc)
	JNZ(LabelRef(name + "_widen"))
	Label(name + "_next")
	INCQ(i)
	CMPQ(i, n)
	JB(LabelRef(name + "_rec"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// widenBF16512 emits widenBF16AVX512: dst[i] = the bf16 value stored
// little-endian at src[2i:2i+2], for n (a multiple of 16) values: each half
// word is zero-extended and shifted into the high half of a float32, which is
// exact (NaN payloads included).
func widenBF16512() {
	TEXT("widenBF16AVX512", NOSPLIT, "func(dst *float32, src *byte, n int)")
	Pragma("noescape")
	Doc("widenBF16AVX512 widens n (a multiple of 16) little-endian bf16 values at src to float32 at dst.")
	dst := Load(Param("dst"), GP64())
	src := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	SHRQ(U8(4), n)
	JZ(LabelRef("widenBF16_done"))
	Label("widenBF16_loop")
	VPMOVZXWD(Mem{Base: src}, Z0)
	VPSLLD(U8(16), Z0, Z0)
	VMOVUPS(Z0, Mem{Base: dst})
	ADDQ(U32(32), src)
	ADDQ(U32(64), dst)
	DECQ(n)
	JNZ(LabelRef("widenBF16_loop"))
	Label("widenBF16_done")
	VZEROUPPER()
	RET()
}

// decodeE4M3512 emits decodeE4M3AVX512: dst[i] = e4m3(src[i])·scale for n (a
// multiple of 16) bytes, with e4m3Step: each code becomes the float16 of its
// value·2^-8, widened exactly to float32 and multiplied by 2^8 (so that no
// operand is ever a float32 denormal), the two NaN codes (0x7F, 0xFF)
// become a quiet NaN of their sign, and multiplying the signed value by the
// scale rounds once, as value·scale does in float32 (for a scale of either
// sign).
func decodeE4M3512() {
	TEXT("decodeE4M3AVX512", NOSPLIT, "func(dst *float32, src *byte, n int, scale float32)")
	Pragma("noescape")
	Doc("decodeE4M3AVX512 writes e4m3(src[i])·scale to dst[i] for n (a multiple of 16) bytes.")
	dst := Load(Param("dst"), GP64())
	src := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	VBROADCASTSS(NewParamAddr("scale", 24), Z31)
	e4m3Consts()
	SHRQ(U8(4), n)
	JZ(LabelRef("decodeE4M3_done"))
	Label("decodeE4M3_loop")
	e4m3Step(src, dst)
	ADDQ(U32(16), src)
	ADDQ(U32(64), dst)
	DECQ(n)
	JNZ(LabelRef("decodeE4M3_loop"))
	Label("decodeE4M3_done")
	VZEROUPPER()
	RET()
}

// e4m3Consts loads the constants of e4m3Step: Z30 the word mask 0xBFFF, Z29
// 2^8, Z28 the word mask 0x7FFF, Z27 the words 0x3F80 (a NaN code's
// magnitude bits in its float16), Z26 the float32 sign bit, Z25 a quiet
// NaN, and for e4m3ChunkNaN Z22 the bytes 0x80 and Z23 all ones.
func e4m3Consts() {
	r := GP32()
	MOVL(U32(0xBFFFBFFF), r)
	VPBROADCASTD(r, Z30)
	broadcastConst(256, Z29)
	MOVL(U32(0x7FFF7FFF), r)
	VPBROADCASTD(r, Z28)
	MOVL(U32(0x3F803F80), r)
	VPBROADCASTD(r, Z27)
	MOVL(U32(0x80000000), r)
	VPBROADCASTD(r, Z26)
	MOVL(U32(0x7FC00000), r)
	VPBROADCASTD(r, Z25)
	MOVL(U32(0x80808080), r)
	VPBROADCASTD(r, Z22)
	VPTERNLOGD(U8(0xFF), Z23, Z23, Z23)
}

// e4m3Step decodes the 16 e4m3 codes at src, times the scale in Z31, into
// 16 float32 at dst (constants from e4m3Consts; Z0, Z1 and K1 clobbered).
// A code S EEEE MMM sign-extended to a word and shifted left by 7 is
// S S EEEE MMM 0000000; clearing bit 14 leaves the float16 S 0EEEE MMM0000000,
// which is the code's value·2^-8 exactly (a subnormal code a float16
// subnormal). VCVTPH2PS widens it exactly, and the multiply by 2^8 is exact
// on a normal float32. The float32 route of the tiles (the bits shifted into
// a float32, times 2^120) makes a subnormal code a float32 denormal, and an
// Intel core takes a microcode assist of about a hundred cycles for each
// vector holding one (docs/performance-log.md, "fp8 records with subnormal
// codes"); a widened float16 subnormal costs nothing extra.
func e4m3Step(src, dst Register) {
	e4m3Half(src)
	VPANDD(Y28, Y0, Y1)   // its magnitude
	VPCMPEQW(Y27, Y1, K1) // NaN codes
	VCVTPH2PS(Y0, Z0)
	VMULPS(Z29, Z0, Z0)                    // value, exactly
	VPTERNLOGD(U8(0xEA), Z25, Z26, K1, Z0) // NaN codes: sign | quiet NaN
	VMULPS(Z31, Z0, Z0)                    // ×scale: one rounding of the signed value's product
	VMOVUPS(Z0, Mem{Base: dst})
}

// e4m3Half sets Y0 to the float16s of the 16 e4m3 codes at src times 2^-8:
// each code sign-extended to a word, shifted left by 7, bit 14 cleared
// (Z30 from e4m3Consts).
func e4m3Half(src Register) {
	VPMOVSXBW(Mem{Base: src}, Y0)
	VPSLLW(U8(7), Y0, Y0)
	VPANDD(Y30, Y0, Y0)
}

// e4m3ChunkNaN sets the flags for JNZ to jump when one of the 64 codes at m
// is a NaN code (0x7F or 0xFF: ORed with 0x80, all ones; Z22 and Z23 from
// e4m3Consts, Z1 and K2 clobbered).
func e4m3ChunkNaN(m Mem) {
	VPORD(m, Z22, Z1)
	VPCMPEQB(Z23, Z1, K2)
	KORTESTQ(K2, K2)
}

// e4m3Fast decodes the 16 e4m3 codes at src, none of them a NaN code, times
// the scale whose product with 2^8 is in Z24 (exact: the scale's magnitude
// is below 2^120), into 16 float32 at dst: e4m3Step's float16 of value·2^-8,
// widened, and one multiply by scale·2^8, which rounds value·scale once as
// e4m3Step's two multiplies do (Z0 clobbered).
func e4m3Fast(src, dst Register) {
	e4m3Half(src)
	VCVTPH2PS(Y0, Z0)
	VMULPS(Z24, Z0, Z0)
	VMOVUPS(Z0, Mem{Base: dst})
}

// recordTiles describes how one vector width decodes a record's tiles:
// codes per step, the bytes one NaN check covers, the registers of the
// scale, of scale·2^8 and of 2^8, the full loop's and the short loop's
// steps, and the NaN check of one chunk.
type recordTiles struct {
	lanes, chunk        int
	scale, scaled, two8 VecPhysical
	step, fast          func(src, dst Register)
	chunkNaN            func(m Mem)
}

var (
	recordTiles512 = recordTiles{lanes: 16, chunk: 64, scale: Z31, scaled: Z24, two8: Z29, step: e4m3Step, fast: e4m3Fast, chunkNaN: e4m3ChunkNaN}
	recordTiles256 = recordTiles{lanes: 8, chunk: 32, scale: Y11, scaled: Y5, two8: Y14, step: e4m3Step256, fast: e4m3Fast256, chunkNaN: e4m3ChunkNaN256}
)

// recordTile emits the decoding of one tile of a record (its tileCodes
// codes at rec, its scale at sp) into dst, advancing rec, dst and sp past
// it: the short loop (e4m3Fast) when the tile's codes are whole chunks
// holding no NaN code and its scale's magnitude is below 2^120, so that
// scale·2^8 is exact; the full loop (e4m3Step) otherwise.
func recordTile(name string, rec, dst, sp, tileCodes Register, t recordTiles) {
	VBROADCASTSS(Mem{Base: sp}, t.scale)
	cnt := GP64()
	MOVQ(tileCodes, cnt)
	SHRQ(U8(bits(t.lanes)), cnt)
	JZ(LabelRef(name + "_tilenext"))
	sb := GP32()
	MOVL(Mem{Base: sp}, sb)
	ANDL(U32(0x7FFFFFFF), sb)
	CMPL(sb, U32(0x7B800000))
	JAE(LabelRef(name + "_loop"))
	TESTQ(U32(t.chunk-1), tileCodes)
	JNZ(LabelRef(name + "_loop"))
	// Every chunk of the tile checked for NaN codes.
	off := GP64()
	XORQ(off, off)
	Label(name + "_check")
	t.chunkNaN(Mem{Base: rec, Index: off, Scale: 1})
	JNZ(LabelRef(name + "_loop"))
	ADDQ(U32(t.chunk), off)
	CMPQ(off, tileCodes)
	JB(LabelRef(name + "_check"))
	VMULPS(t.two8, t.scale, t.scaled)
	for _, loop := range []struct {
		label string
		step  func(src, dst Register)
	}{{"_fast", t.fast}, {"_loop", t.step}} {
		Label(name + loop.label)
		loop.step(rec, dst)
		ADDQ(U32(t.lanes), rec)
		ADDQ(U32(4*t.lanes), dst)
		DECQ(cnt)
		JNZ(LabelRef(name + loop.label))
		if loop.label == "_fast" {
			JMP(LabelRef(name + "_tilenext"))
		}
	}
	Label(name + "_tilenext")
	ADDQ(U32(4), sp)
}

// e4m3Consts256 loads the constants of e4m3Step256, e4m3Fast256 and
// e4m3ChunkNaN256: Y15 the word mask 0xBFFF, Y14 2^8, Y13 the word mask 0x7FFF,
// Y12 the words 0x3F80, Y9 the float32 sign bit, Y8 a quiet NaN, Y7 the
// bytes 0x80 and Y6 all ones.
func e4m3Consts256() {
	r := GP32()
	for _, c := range []struct {
		v   uint32
		reg VecPhysical
		x   VecPhysical
	}{{0xBFFFBFFF, Y15, X15}, {0x7FFF7FFF, Y13, X13}, {0x3F803F80, Y12, X12}, {0x80000000, Y9, X9}, {0x7FC00000, Y8, X8}, {0x80808080, Y7, X7}} {
		MOVL(U32(c.v), r)
		VMOVD(r, c.x)
		VPBROADCASTD(c.x, c.reg)
	}
	broadcastConst256(256, Y14, X10)
	VPCMPEQB(Y6, Y6, Y6)
}

// e4m3Step256 decodes the 8 e4m3 codes at src, times the scale in Y11,
// into 8 float32 at dst: e4m3Step on eight lanes, the NaN codes' lanes
// blended (constants from e4m3Consts256; Y0–Y4 clobbered).
func e4m3Step256(src, dst Register) {
	e4m3Half256(src)
	VPAND(X13, X0, X1)        // its magnitude
	VPCMPEQW(X12, X1, X1)     // NaN codes
	VPMOVSXWD(X1, Y4)         // as lane masks
	VCVTPH2PS(X0, Y3)         // exactly, subnormal codes included
	VMULPS(Y14, Y3, Y3)       // value, exactly
	VANDPS(Y9, Y3, Y2)        // its sign
	VORPS(Y8, Y2, Y2)         // sign | quiet NaN
	VBLENDVPS(Y4, Y2, Y3, Y3) // NaN codes
	VMULPS(Y11, Y3, Y3)       // ×scale: one rounding of the signed value's product
	VMOVUPS(Y3, Mem{Base: dst})
}

// e4m3Fast256 is e4m3Fast on eight lanes: the 8 codes at src, none a NaN
// code, times the scale whose product with 2^8 is in Y5 (Y0 clobbered).
func e4m3Fast256(src, dst Register) {
	e4m3Half256(src)
	VCVTPH2PS(X0, Y0)
	VMULPS(Y5, Y0, Y0)
	VMOVUPS(Y0, Mem{Base: dst})
}

// e4m3Half256 is e4m3Half for the 8 codes at src, into X0 (X15 from
// e4m3Consts256).
func e4m3Half256(src Register) {
	VPMOVSXBW(Mem{Base: src}, X0)
	VPSLLW(U8(7), X0, X0)
	VPAND(X15, X0, X0)
}

// e4m3ChunkNaN256 is e4m3ChunkNaN for the 32 codes at m (Y6 and Y7 from
// e4m3Consts256, Y1 clobbered).
func e4m3ChunkNaN256(m Mem) {
	VPOR(m, Y7, Y1)
	VPCMPEQB(Y6, Y1, Y1)
	VPTEST(Y1, Y1)
}

// widenBF16256 emits widenBF16AVX2: widenBF16AVX512 for n (a multiple of 8)
// values with widenBF16x8.
func widenBF16256() {
	TEXT("widenBF16AVX2", NOSPLIT, "func(dst *float32, src *byte, n int)")
	Pragma("noescape")
	Doc("widenBF16AVX2 widens n (a multiple of 8) little-endian bf16 values at src to float32 at dst.")
	dst := Load(Param("dst"), GP64())
	src := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	VMOVDQU(widenBF16Ctl, Y15)
	SHRQ(U8(3), n)
	JZ(LabelRef("widenBF16AVX2_done"))
	Label("widenBF16AVX2_loop")
	widenBF16x8(Mem{Base: src}, Y0, Y15)
	VMOVUPS(Y0, Mem{Base: dst})
	ADDQ(U32(16), src)
	ADDQ(U32(32), dst)
	DECQ(n)
	JNZ(LabelRef("widenBF16AVX2_loop"))
	Label("widenBF16AVX2_done")
	VZEROUPPER()
	RET()
}

// decodeE4M3256 emits decodeE4M3AVX2: decodeE4M3AVX512 for n (a multiple of
// 8) bytes with AVX2, the same operations on eight lanes.
func decodeE4M3256() {
	TEXT("decodeE4M3AVX2", NOSPLIT, "func(dst *float32, src *byte, n int, scale float32)")
	Pragma("noescape")
	Doc("decodeE4M3AVX2 writes e4m3(src[i])·scale to dst[i] for n (a multiple of 8) bytes.")
	dst := Load(Param("dst"), GP64())
	src := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	VBROADCASTSS(NewParamAddr("scale", 24), Y11)
	e4m3Consts256()
	SHRQ(U8(3), n)
	JZ(LabelRef("decodeE4M3AVX2_done"))
	Label("decodeE4M3AVX2_loop")
	e4m3Step256(src, dst)
	ADDQ(U32(8), src)
	ADDQ(U32(32), dst)
	DECQ(n)
	JNZ(LabelRef("decodeE4M3AVX2_loop"))
	Label("decodeE4M3AVX2_done")
	VZEROUPPER()
	RET()
}

// eightRows addresses eight weight rows w0 + j·ldw through three base
// registers, the fewest x86 addressing allows: rows 0, 1, 2, 4 from row 0,
// 3, 5, 7 from row 3 (loaded here) and 6 from row 6. row(j, disp) is row
// j's address plus disp; the caller advances every base in bases as it
// reads.
func eightRows(w0, ldw Register) (row func(j, disp int) Mem, bases []Register) {
	b3, b6 := GP64(), GP64()
	LEAQ(Mem{Base: w0, Index: ldw, Scale: 2}, b3)
	ADDQ(ldw, b3)
	LEAQ(Mem{Base: b3, Index: ldw, Scale: 2}, b6)
	ADDQ(ldw, b6)
	row = func(j, disp int) Mem {
		switch j {
		case 0:
			return Mem{Base: w0, Disp: disp}
		case 1, 2, 4:
			return Mem{Base: w0, Index: ldw, Scale: uint8(j), Disp: disp}
		case 3:
			return Mem{Base: b3, Disp: disp}
		case 5, 7:
			return Mem{Base: b3, Index: ldw, Scale: uint8(j - 3), Disp: disp}
		}
		return Mem{Base: b6, Disp: disp}
	}
	return row, []Register{w0, b3, b6}
}

// prefetchEightRows prefetches into L2 each of the eight rows of eightRows'
// bases (any number of groups of three, one group per eight rows) at pfd
// bytes past where the base points, from each base moved by pfd (tmp is
// scratch).
func prefetchEightRows(bases []Register, pfd, ldw, tmp Register) {
	for i, b := range bases {
		LEAQ(Mem{Base: b, Index: pfd, Scale: 1}, tmp)
		prefetchFromBase(i, tmp, ldw)
	}
}

// prefetchFromBase prefetches into L2 the rows of eightRows' base i (of a
// group of three) that the base reaches, each at p (the base moved by the
// prefetch offset).
func prefetchFromBase(i int, p, ldw Register) {
	for _, f := range [][]uint8{{0, 1, 2, 4}, {0, 2, 4}, {0}}[i%3] {
		if f == 0 {
			PREFETCHT1(Mem{Base: p})
		} else {
			PREFETCHT1(Mem{Base: p, Index: ldw, Scale: f})
		}
	}
}

// fp8GEMV describes one fp8 GEMV tile: its lane count, weight rows and
// register names. The tile computes out[j] = Σ_k x[k]·w_j[k] over kn (a
// multiple of the lane count) elements for rows j < rows, the weight of
// (j, k) being the e4m3 code at w + j·ldw + k times the scale of its block:
// block b of the tile (b = 0, 1, …; the first holds first steps of lanes
// elements, every later one 128/lanes) uses *sc[j] + b. Each code is
// decoded in registers exactly: its sign and EEEEMMM bits shifted into
// float32 position are the value times 2^-120 (a denormal for a subnormal
// code, still exact), and one multiply by scale·2^120 (exact for |scale| <
// 2^8, which the caller guarantees) gives float32(value·scale) rounded
// once — the dequantized f32 weight. The products are then fused into one
// accumulator per row exactly as dotTile1x8F32AVX512 (dotTile1x4F32AVX2)
// fuses f32 weights, and reduced by the same tree, so the outputs have the
// bits of that tile on the dequantized rows. A NaN code (0x7F, 0xFF) would
// decode as 480·scale: the tile instead records whether any full chunk of
// chunk bytes of a row's codes holds one (unsigned byte max 0xFF, signed
// byte max 0x7F) and returns nonzero if so; the caller recomputes such a
// tile another way and checks the codes past the last full chunk itself.
//
// With finite set, the tile is for codes known to hold no NaN code (checked
// once, when the matrix was made): it leaves out the check and returns 0.
type fp8GEMV struct {
	name        string
	lanes, rows int
	chunk       int // bytes per NaN check and per prefetch (a multiple of lanes)
	vec         []VecPhysical
	evex        bool
	finite      bool
}

func gemvFP8512() {
	fp8GEMVTile(fp8GEMV{name: "dotTile1x8FP8AVX512", lanes: 16, rows: 8, chunk: 64, vec: zmm, evex: true})
	fp8GEMVTile(fp8GEMV{name: "dotTile1x8FP8FiniteAVX512", lanes: 16, rows: 8, chunk: 64, vec: zmm, evex: true, finite: true})
}

func gemvFP8256() {
	fp8GEMVTile(fp8GEMV{name: "dotTile1x4FP8AVX2", lanes: 8, rows: 4, chunk: 32, vec: ymm})
}

func fp8GEMVTile(g fp8GEMV) {
	name := g.name
	sig := fmt.Sprintf("func(x *float32, w *uint8, ldw int, kn int, sc *[%d]*float32, first int, pfd int, out *float32, add int) int", g.rows)
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	nans := " and reports NaN codes."
	if g.finite {
		nans = "; the codes must hold no NaN code, and it returns 0."
	}
	Doc(fmt.Sprintf("%s computes one activation row's dot products with %d fp8 weight rows of block-scaled e4m3 codes over kn (a multiple of %d) elements%s", name, g.rows, g.lanes, nans))
	R := g.rows
	v := g.vec
	acc := func(j int) VecPhysical { return v[j] }
	sv := func(j int) VecPhysical { return v[R+j] }   // scale·2^120 of row j's block
	tv := func(j int) VecPhysical { return v[2*R+j] } // decoded weights of row j
	tx := func(j int) VecPhysical { return xmm[2*R+j] }
	xv, mask, nanU, nanS := v[3*R], v[3*R+1], v[3*R+2], v[3*R+3]
	// Rows: w + j·ldw through three bases on AVX-512 (rows 0,1,2,4 from
	// row 0, 3,5,7 from row 3, 6 from row 6), four pointers on AVX2.
	x := Load(Param("x"), GP64())
	w0 := Load(Param("w"), GP64())
	ldw := Load(Param("ldw"), GP64())
	var bases []Register
	var row func(j, disp int) Mem
	if R == 8 {
		row, bases = eightRows(w0, ldw)
	}
	off := GP64() // code bytes consumed per row
	XORQ(off, off)
	var pfo Register // pfd + off, on AVX2
	var pf func(j int) Mem
	xmem := func(v int) Mem { return Mem{Base: x, Disp: 4 * g.lanes * v} }
	if R == 4 {
		// Four row pointers indexed by off, and x by 4·off: one add per
		// step of two vectors.
		r := []Register{w0, GP64(), GP64(), GP64()}
		for j := 1; j < 4; j++ {
			LEAQ(Mem{Base: r[j-1], Index: ldw, Scale: 1}, r[j])
		}
		row = func(j, disp int) Mem { return Mem{Base: r[j], Index: off, Scale: 1, Disp: disp} }
		xmem = func(v int) Mem { return Mem{Base: x, Index: off, Scale: 4, Disp: 4 * g.lanes * v} }
		// The prefetches run pfd bytes ahead of off: the caller points
		// them at what its next call reads (the next block of each row,
		// or after a row's last block the first of the row four below).
		pfo = Load(Param("pfd"), GP64())
		pf = func(j int) Mem { return Mem{Base: r[j], Index: pfo, Scale: 1} }
	}
	var pfd Register // on AVX-512: the caller's prefetch offset (kernels.fp8TilePrefetch)
	if R == 8 {
		pfd = Load(Param("pfd"), GP64())
	}
	kn := Load(Param("kn"), GP64())
	sc := Load(Param("sc"), GP64())
	seg := Load(Param("first"), GP64())
	zero := func(r VecPhysical) {
		if g.evex {
			VPXORD(r, r, r)
		} else {
			VXORPS(r, r, r)
		}
	}
	for j := range R {
		zero(acc(j))
	}
	if !g.finite {
		zero(nanU)
		zero(nanS)
	}
	tmp := GP64()
	MOVL(U32(0x87F00000), tmp.As32())
	if g.evex {
		VPBROADCASTD(tmp.As32(), mask)
	} else {
		VMOVD(tmp.As32(), xmm[3*R+1])
		VPBROADCASTD(xmm[3*R+1], mask)
	}
	// loadScales sets sv(j) = *sc[j]·2^120 and advances sc[j] by one block.
	loadScales := func() {
		c := tv(0) // free between steps
		if g.evex {
			broadcastConst(float32(math.Ldexp(1, 120)), c)
		} else {
			broadcastConst256(float32(math.Ldexp(1, 120)), c, tx(1))
		}
		for j := range R {
			MOVQ(Mem{Base: sc, Disp: 8 * j}, tmp)
			VBROADCASTSS(Mem{Base: tmp}, sv(j))
			VMULPS(c, sv(j), sv(j))
			ADDQ(U8(4), tmp)
			MOVQ(tmp, Mem{Base: sc, Disp: 8 * j})
		}
	}
	steps := GP64()
	MOVQ(kn, steps)
	SHRQ(U8(bits(g.lanes)), steps)
	JZ(LabelRef(name + "_nan"))
	cnt := GP64()
	// vecStep fuses vector v (lanes codes from off + v·lanes) of every row.
	vecStep := func(v int) {
		VMOVUPS(xmem(v), xv)
		for j := range R {
			decodeE4M3Vec(row(j, g.lanes*v), tv(j), mask, sv(j), g.evex)
			VFMADD231PS(tv(j), xv, acc(j))
		}
	}
	// chunkCheck, every chunk bytes: check the chunk just decoded for NaN
	// codes and prefetch the next lines of each row.
	chunkCheck := func(next string) {
		TESTQ(U32(g.chunk-1), off)
		JNZ(LabelRef(next))
		for j := range R {
			if !g.finite {
				VPMAXUB(row(j, -g.chunk), nanU, nanU)
				VPMAXSB(row(j, -g.chunk), nanS, nanS)
			}
		}
		if R == 4 {
			for j := range R {
				PREFETCHT0(pf(j))
			}
		} else {
			// Each row's line pfd bytes past the one just read.
			prefetchEightRows(bases, pfd, ldw, tmp)
		}
		Label(next)
	}
	Label(name + "_block")
	loadScales()
	MOVQ(seg, cnt)
	CMPQ(steps, cnt)
	CMOVQLT(steps, cnt)
	SUBQ(cnt, steps)
	if R == 4 {
		// Pairs of vectors; an odd one only ends the last block (the
		// caller's first is even), so every pair starts on a multiple of
		// two vectors and the chunks stay aligned.
		pairs := GP64()
		MOVQ(cnt, pairs)
		SHRQ(U8(1), pairs)
		JZ(LabelRef(name + "_single"))
		Label(name + "_pair")
		vecStep(0)
		vecStep(1)
		ADDQ(U32(2*g.lanes), off)
		ADDQ(U32(2*g.lanes), pfo)
		chunkCheck(name + "_next")
		DECQ(pairs)
		JNZ(LabelRef(name + "_pair"))
		Label(name + "_single")
		TESTQ(U32(1), cnt)
		JZ(LabelRef(name + "_blockdone"))
		vecStep(0)
		ADDQ(U32(g.lanes), off)
		ADDQ(U32(g.lanes), pfo)
		Label(name + "_blockdone")
	} else {
		Label(name + "_step")
		vecStep(0)
		ADDQ(U32(4*g.lanes), x)
		for _, b := range bases {
			ADDQ(U32(g.lanes), b)
		}
		ADDQ(U32(g.lanes), off)
		chunkCheck(name + "_next")
		DECQ(cnt)
		JNZ(LabelRef(name + "_step"))
	}
	MOVQ(U32(128/g.lanes), seg)
	TESTQ(steps, steps)
	JNZ(LabelRef(name + "_block"))
	Label(name + "_nan")
	// nonzero if a byte of nanU is 0xFF or a byte of nanS is 0x7F.
	res := GP64()
	if g.finite {
		XORQ(res, res)
	} else if g.evex {
		VPTERNLOGD(U8(0xFF), tv(0), tv(0), tv(0)) // all ones
		VPCMPEQB(tv(0), nanU, K1)
		MOVL(U32(0x7F7F7F7F), tmp.As32())
		VPBROADCASTD(tmp.As32(), tv(1))
		VPCMPEQB(tv(1), nanS, K2)
		KORQ(K1, K2, K1)
		KMOVQ(K1, res)
	} else {
		VPCMPEQB(tv(0), tv(0), tv(0))
		VPCMPEQB(tv(0), nanU, nanU)
		MOVL(U32(0x7F7F7F7F), tmp.As32())
		VMOVD(tmp.As32(), tx(1))
		VPBROADCASTD(tx(1), tv(1))
		VPCMPEQB(tv(1), nanS, nanS)
		VPOR(nanU, nanS, nanS)
		VPMOVMSKB(nanS, res.As32())
	}
	Store(res, ReturnIndex(0))
	out := Load(Param("out"), GP64())
	add := Load(Param("add"), GP64())
	if g.evex {
		reduce4x512([4]int{0, 1, 2, 3})
		reduce4x512([4]int{4, 5, 6, 7})
	} else {
		reduce4x256([4]int{0, 1, 2, 3}, X15, false)
	}
	// add ≠ 0: the sums are added to out (out + sums, as the Go tail
	// does), else stored.
	TESTQ(add, add)
	JZ(LabelRef(name + "_store"))
	VADDPS(Mem{Base: out}, X0, X0)
	if g.evex {
		VADDPS(Mem{Base: out, Disp: 16}, X4, X4)
	}
	Label(name + "_store")
	VMOVUPS(X0, Mem{Base: out})
	if g.evex {
		VMOVUPS(X4, Mem{Base: out, Disp: 16})
	}
	VZEROUPPER()
	RET()
}

// fp8Tile512 emits dotTile{m}x4FP8AVX512 (2 ≤ m ≤ 4): m activation rows
// (x + i·ldx) against four fp8 weight rows (w + j·ldw) over kn (a multiple
// of 16) elements, out[i·4+j]. Each code is decoded once in registers with
// dotTile1x8FP8AVX512's exact arithmetic (sign and EEEEMMM shifted into
// float32 position, one multiply by scale·2^120; block b of the tile uses
// *sc[j] + b, the first block holding first steps of sixteen and every later
// one eight) and fused into the m rows' accumulators, so the decoding is
// paid once for all m rows and every output has the bits of dotTile512 on
// the dequantized rows (same accumulator, same reduce4x512). NaN codes are
// reported as dotTile1x8FP8AVX512 reports them (every full 64-byte chunk
// checked; the caller checks the rest).
func fp8Tile512(m int, finite, ilv bool) {
	name := fmt.Sprintf("dotTile%dx4FP8AVX512", m)
	doc := fmt.Sprintf("%s computes %d activation rows' dot products with 4 fp8 weight rows of block-scaled e4m3 codes over kn (a multiple of 16) elements, stores (add 0) or adds them to out (row i at out + i·ldo floats) and reports NaN codes.", name, m)
	switch {
	case ilv:
		name = fmt.Sprintf("dotTile%dx4FP8IlvAVX512", m)
		doc = fmt.Sprintf("%s is dotTile%dx4FP8FiniteAVX512 for 4 weight rows of one interleaved group (row j at w + j·ldw, ldw 16; each step of 16 codes 128 bytes further), prefetching pfd bytes ahead every step.", name, m)
	case finite:
		name = fmt.Sprintf("dotTile%dx4FP8FiniteAVX512", m)
		doc = fmt.Sprintf("%s is dotTile%dx4FP8AVX512 for codes holding no NaN code: it does not check them.", name, m)
	}
	TEXT(name, NOSPLIT, "func(x *float32, ldx int, w *uint8, ldw int, kn int, sc *[4]*float32, first int, pfd int, out *float32, ldo int, add int) int")
	Pragma("noescape")
	Doc(doc)
	acc := func(i, j int) VecPhysical { return zmm[4*i+j] }
	sv := func(j int) VecPhysical { return zmm[16+j] }
	tv := func(j int) VecPhysical { return zmm[20+j] }
	xv := func(i int) VecPhysical { return zmm[24+i] }
	mask, nanU, nanS := Z28, Z29, Z30
	x0 := Load(Param("x"), GP64())
	ldx := Load(Param("ldx"), GP64())
	SHLQ(U8(2), ldx)
	// Rows 0–2 of x from x0 (index ldx), row 3 from x3.
	x3 := GP64()
	LEAQ(Mem{Base: x0, Index: ldx, Scale: 2}, x3)
	ADDQ(ldx, x3)
	xmem := func(i int) Mem {
		switch i {
		case 0:
			return Mem{Base: x0}
		case 3:
			return Mem{Base: x3}
		}
		return Mem{Base: x0, Index: ldx, Scale: uint8(i)}
	}
	w0 := Load(Param("w"), GP64())
	ldw := Load(Param("ldw"), GP64())
	w3 := GP64()
	LEAQ(Mem{Base: w0, Index: ldw, Scale: 2}, w3)
	ADDQ(ldw, w3)
	row := func(j, disp int) Mem {
		switch j {
		case 0:
			return Mem{Base: w0, Disp: disp}
		case 3:
			return Mem{Base: w3, Disp: disp}
		}
		return Mem{Base: w0, Index: ldw, Scale: uint8(j), Disp: disp}
	}
	pfd := Load(Param("pfd"), GP64()) // the caller's prefetch offset (kernels.fp8TilePrefetch)
	kn := Load(Param("kn"), GP64())
	sc := Load(Param("sc"), GP64())
	seg := Load(Param("first"), GP64())
	for i := range m {
		for j := range 4 {
			VPXORD(acc(i, j), acc(i, j), acc(i, j))
		}
	}
	if !finite {
		VPXORD(nanU, nanU, nanU)
		VPXORD(nanS, nanS, nanS)
	}
	tmp := GP64()
	MOVL(U32(0x87F00000), tmp.As32())
	VPBROADCASTD(tmp.As32(), mask)
	steps, cnt, off := fp8TileBlocks(name, name+"_nan", kn, seg, sc, tmp, tv(0), []VecPhysical{sv(0), sv(1), sv(2), sv(3)})
	for i := range m {
		VMOVUPS(xmem(i), xv(i))
	}
	decodeE4M3Stages([]Mem{row(0, 0), row(1, 0), row(2, 0), row(3, 0)}, []VecPhysical{tv(0), tv(1), tv(2), tv(3)}, mask, []VecPhysical{sv(0), sv(1), sv(2), sv(3)})
	for j := range 4 {
		for i := range m {
			VFMADD231PS(tv(j), xv(i), acc(i, j))
		}
	}
	ADDQ(U8(64), x0)
	ADDQ(U8(64), x3)
	fp8Advance(w0, ilv)
	fp8Advance(w3, ilv)
	ADDQ(U8(16), off)
	if ilv {
		// Every step: the four rows' next codes pfd bytes on, one line.
		LEAQ(Mem{Base: w0, Index: pfd, Scale: 1}, tmp)
		PREFETCHT1(Mem{Base: tmp})
		LEAQ(Mem{Base: w3, Index: pfd, Scale: 1}, tmp)
		PREFETCHT1(Mem{Base: tmp})
	} else {
		// Every 64 bytes: check the chunk just decoded for NaN codes and
		// prefetch each row's next lines.
		TESTQ(U32(63), off)
		JNZ(LabelRef(name + "_next"))
		if !finite {
			for j := range 4 {
				VPMAXUB(row(j, -64), nanU, nanU)
				VPMAXSB(row(j, -64), nanS, nanS)
			}
		}
		// Each row's line pfd bytes past the one just read: rows 0, 1, 2
		// from row 0's base moved by pfd, row 3 from its own.
		LEAQ(Mem{Base: w0, Index: pfd, Scale: 1}, tmp)
		PREFETCHT1(Mem{Base: tmp})
		PREFETCHT1(Mem{Base: tmp, Index: ldw, Scale: 1})
		PREFETCHT1(Mem{Base: tmp, Index: ldw, Scale: 2})
		LEAQ(Mem{Base: w3, Index: pfd, Scale: 1}, tmp)
		PREFETCHT1(Mem{Base: tmp})
		Label(name + "_next")
	}
	DECQ(cnt)
	JNZ(LabelRef(name + "_step"))
	MOVQ(U32(128/16), seg)
	TESTQ(steps, steps)
	JNZ(LabelRef(name + "_block"))
	Label(name + "_nan")
	res := GP64()
	if finite {
		XORQ(res, res)
	} else {
		VPTERNLOGD(U8(0xFF), tv(0), tv(0), tv(0))
		VPCMPEQB(tv(0), nanU, K1)
		MOVL(U32(0x7F7F7F7F), tmp.As32())
		VPBROADCASTD(tmp.As32(), tv(1))
		VPCMPEQB(tv(1), nanS, K2)
		KORQ(K1, K2, K1)
		KMOVQ(K1, res)
	}
	Store(res, ReturnIndex(0))
	out := Load(Param("out"), GP64())
	ldo := Load(Param("ldo"), GP64())
	SHLQ(U8(2), ldo)
	add := Load(Param("add"), GP64())
	for i := range m {
		reduce4x512([4]int{4 * i, 4*i + 1, 4*i + 2, 4*i + 3})
	}
	// add ≠ 0: out + sums, as the Go tail adds them; else the sums.
	TESTQ(add, add)
	JZ(LabelRef(name + "_store"))
	for i := range m {
		VADDPS(Mem{Base: out}, xmm[4*i], xmm[4*i])
		VMOVUPS(xmm[4*i], Mem{Base: out})
		ADDQ(ldo, out)
	}
	VZEROUPPER()
	RET()
	Label(name + "_store")
	for i := range m {
		VMOVUPS(xmm[4*i], Mem{Base: out})
		ADDQ(ldo, out)
	}
	VZEROUPPER()
	RET()
}

// fp8TileBlocks emits the entry of an fp8 tile's loop over scale blocks:
// steps = kn/16 vectors in all (to exit when none), and at label
// name+"_block" the scales of the weight rows for the block (each
// *sc[j]·2^120 broadcast into sv[j], sc[j] moved on to the next block's
// scale; c is scratch) and cnt = min(seg, steps) steps for it (seg: the
// first block's vectors; the caller sets 128/16 for the later ones),
// ending at label name+"_step", where the caller's step begins. off is
// zeroed for the caller's byte count.
func fp8TileBlocks(name, exit string, kn, seg, sc, tmp Register, c VecPhysical, sv []VecPhysical) (steps, cnt, off Register) {
	steps = GP64()
	MOVQ(kn, steps)
	SHRQ(U8(4), steps)
	JZ(LabelRef(exit))
	cnt, off = GP64(), GP64()
	XORQ(off, off)
	Label(name + "_block")
	broadcastConst(float32(math.Ldexp(1, 120)), c)
	for j, v := range sv {
		MOVQ(Mem{Base: sc, Disp: 8 * j}, tmp)
		VBROADCASTSS(Mem{Base: tmp}, v)
		VMULPS(c, v, v)
		ADDQ(U8(4), tmp)
		MOVQ(tmp, Mem{Base: sc, Disp: 8 * j})
	}
	MOVQ(seg, cnt)
	CMPQ(steps, cnt)
	CMOVQLT(steps, cnt)
	SUBQ(cnt, steps)
	Label(name + "_step")
	return steps, cnt, off
}

// fp8Step is how many bytes a tile's weight pointers advance per step of
// sixteen codes: 16 in a row-major fp8 matrix, 128 in the interleaved
// layout of kernels.Matrix.InterleaveFP8, where a step holds the sixteen
// codes of each of a group's eight rows side by side.
func fp8Step(ilv bool) int {
	if ilv {
		return 128
	}
	return 16
}

// fp8Advance moves the weight pointer r on by one step (fp8Step).
func fp8Advance(r Register, ilv bool) {
	if ilv {
		ADDQ(U32(fp8Step(ilv)), r)
		return
	}
	ADDQ(U8(fp8Step(ilv)), r)
}

// decodeFP8RowIlv512 emits decodeFP8RowIlvAVX512: decodeFP8RowAVX512 for
// one row of an interleaved fp8 matrix whose codes hold no NaN code, its
// sixteen codes of a step 128 bytes apart, prefetching the line at pf + 128
// bytes a step (pf advancing as w does).
func decodeFP8RowIlv512() {
	name := "decodeFP8RowIlvAVX512"
	TEXT(name, NOSPLIT, "func(dst *float32, w *uint8, kn int, sc *float32, first int, pf *uint8)")
	Pragma("noescape")
	Doc(name + " decodes kn (a multiple of 16) fp8 codes of one block-scaled row of an interleaved matrix (16 codes a step, steps 128 bytes apart), holding no NaN code, to float32.")
	dst := Load(Param("dst"), GP64())
	w := Load(Param("w"), GP64())
	steps := Load(Param("kn"), GP64())
	sc := Load(Param("sc"), GP64())
	seg := Load(Param("first"), GP64())
	pf := Load(Param("pf"), GP64())
	mask, c120, s, r := Z15, Z14, Z13, Z0
	tmp := GP64()
	MOVL(U32(0x87F00000), tmp.As32())
	VPBROADCASTD(tmp.As32(), mask)
	broadcastConst(float32(math.Ldexp(1, 120)), c120)
	SHRQ(U8(4), steps)
	JZ(LabelRef(name + "_done"))
	cnt := GP64()
	Label(name + "_block")
	VBROADCASTSS(Mem{Base: sc}, s)
	VMULPS(c120, s, s)
	ADDQ(U8(4), sc)
	MOVQ(seg, cnt)
	CMPQ(steps, cnt)
	CMOVQLT(steps, cnt)
	SUBQ(cnt, steps)
	Label(name + "_step")
	decodeE4M3Vec(Mem{Base: w}, r, mask, s, true)
	VMOVUPS(r, Mem{Base: dst})
	PREFETCHT0(Mem{Base: pf})
	fp8Advance(w, true)
	fp8Advance(pf, true)
	ADDQ(U8(64), dst)
	DECQ(cnt)
	JNZ(LabelRef(name + "_step"))
	MOVQ(U32(128/16), seg)
	TESTQ(steps, steps)
	JNZ(LabelRef(name + "_block"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// decodeFP8Row emits decodeFP8RowAVX2 (lanes 8) and decodeFP8RowAVX512
// (lanes 16): one fp8 weight row's kn (a multiple of lanes) e4m3 codes at
// w decoded to float32 at dst, with the in-register decoding of
// fp8GEMVTile: sign and EEEEMMM bits shifted into float32 position, then
// one multiply by scale·2^120, exact for |scale| < 2^8 (the caller
// guarantees it), so every value is float32(code·scale) rounded once, the
// dequantized weight. Block b of the row (b = 0, 1, …; the first holds
// first vectors of lanes codes, every later one 128/lanes) uses the scale at
// sc + 4b. A NaN code would decode as 480·scale: the kernel returns nonzero
// when any of the kn codes is one (0x7F or 0xFF; unsigned and signed byte
// maxima over the row), and the caller then decodes the row another way.
// While it decodes it prefetches kn bytes at pf, two lines per block of 128
// codes: the codes the caller decodes a few calls later.
func decodeFP8Row(lanes int) {
	evex := lanes == 16
	name, v, chunk := "decodeFP8RowAVX2", ymm, 32
	if evex {
		name, v, chunk = "decodeFP8RowAVX512", zmm, 64
	}
	TEXT(name, NOSPLIT, "func(dst *float32, w *uint8, kn int, sc *float32, first int, pf *uint8) int")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s decodes kn (a multiple of %d) fp8 codes of one block-scaled weight row to float32 and reports NaN codes.", name, lanes))
	dst := Load(Param("dst"), GP64())
	w := Load(Param("w"), GP64())
	kn := Load(Param("kn"), GP64())
	sc := Load(Param("sc"), GP64())
	seg := Load(Param("first"), GP64())
	pf := Load(Param("pf"), GP64())
	mask, c120, s, nanU, nanS := v[15], v[14], v[13], v[12], v[11]
	tmp := GP64()
	MOVL(U32(0x87F00000), tmp.As32())
	if evex {
		VPBROADCASTD(tmp.As32(), mask)
		broadcastConst(float32(math.Ldexp(1, 120)), c120)
		VPXORD(nanU, nanU, nanU)
		VPXORD(nanS, nanS, nanS)
	} else {
		VMOVD(tmp.As32(), X15)
		VPBROADCASTD(X15, mask)
		broadcastConst256(float32(math.Ldexp(1, 120)), c120, X10)
		VXORPS(nanU, nanU, nanU)
		VXORPS(nanS, nanS, nanS)
	}
	off := GP64() // codes decoded
	XORQ(off, off)
	steps := GP64()
	MOVQ(kn, steps)
	SHRQ(U8(bits(lanes)), steps)
	JZ(LabelRef(name + "_nan"))
	cnt, pairs := GP64(), GP64()
	decode := func(k int, r VecPhysical) {
		decodeE4M3Vec(Mem{Base: w, Index: off, Scale: 1, Disp: lanes * k}, r, mask, s, evex)
		VMOVUPS(r, Mem{Base: dst, Index: off, Scale: 4, Disp: 4 * lanes * k})
	}
	Label(name + "_block")
	VBROADCASTSS(Mem{Base: sc}, s)
	VMULPS(c120, s, s)
	ADDQ(U8(4), sc)
	MOVQ(seg, cnt)
	CMPQ(steps, cnt)
	CMOVQLT(steps, cnt)
	SUBQ(cnt, steps)
	// Two lines of pf per block of 128 codes, then pairs of vectors.
	PREFETCHT0(Mem{Base: pf, Index: off, Scale: 1})
	PREFETCHT0(Mem{Base: pf, Index: off, Scale: 1, Disp: 64})
	MOVQ(cnt, pairs)
	SHRQ(U8(1), pairs)
	JZ(LabelRef(name + "_single"))
	Label(name + "_pair")
	decode(0, v[0])
	decode(1, v[1])
	ADDQ(U8(2*lanes), off)
	DECQ(pairs)
	JNZ(LabelRef(name + "_pair"))
	Label(name + "_single")
	TESTQ(U32(1), cnt)
	JZ(LabelRef(name + "_blockdone"))
	decode(0, v[0])
	ADDQ(U8(lanes), off)
	Label(name + "_blockdone")
	MOVQ(U32(128/lanes), seg)
	TESTQ(steps, steps)
	JNZ(LabelRef(name + "_block"))
	// NaN codes: whole chunks of a register, then vectors of lanes codes
	// (broadcast to every part of the register).
	Label(name + "_nan")
	MOVQ(kn, cnt)
	SHRQ(U8(bits(chunk)), cnt)
	JZ(LabelRef(name + "_rest"))
	Label(name + "_chunk")
	VPMAXUB(Mem{Base: w}, nanU, nanU)
	VPMAXSB(Mem{Base: w}, nanS, nanS)
	ADDQ(U8(chunk), w)
	DECQ(cnt)
	JNZ(LabelRef(name + "_chunk"))
	Label(name + "_rest")
	ANDQ(U8(chunk-1), kn)
	SHRQ(U8(bits(lanes)), kn)
	JZ(LabelRef(name + "_check"))
	Label(name + "_vec")
	if evex {
		VBROADCASTI32X4(Mem{Base: w}, v[0])
	} else {
		VPBROADCASTQ(Mem{Base: w}, v[0])
	}
	VPMAXUB(v[0], nanU, nanU)
	VPMAXSB(v[0], nanS, nanS)
	ADDQ(U8(lanes), w)
	DECQ(kn)
	JNZ(LabelRef(name + "_vec"))
	Label(name + "_check")
	// nonzero if a byte of nanU is 0xFF or a byte of nanS is 0x7F.
	res := GP64()
	if evex {
		VPTERNLOGD(U8(0xFF), Z0, Z0, Z0)
		VPCMPEQB(Z0, nanU, K1)
		MOVL(U32(0x7F7F7F7F), tmp.As32())
		VPBROADCASTD(tmp.As32(), Z1)
		VPCMPEQB(Z1, nanS, K2)
		KORQ(K1, K2, K1)
		KMOVQ(K1, res)
	} else {
		VPCMPEQB(Y0, Y0, Y0)
		VPCMPEQB(Y0, nanU, nanU)
		MOVL(U32(0x7F7F7F7F), tmp.As32())
		VMOVD(tmp.As32(), X1)
		VPBROADCASTD(X1, Y1)
		VPCMPEQB(Y1, nanS, nanS)
		VPOR(nanU, nanS, nanS)
		XORQ(res, res)
		VPMOVMSKB(nanS, res.As32())
	}
	Store(res, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// fp8ProductProbeRows are the activation-row counts fp8ProductPeak is
// emitted for (kernels.FP8ProductLoop).
var fp8ProductProbeRows = []int{1, 2, 4, 8}

// fp8ProductPeak emits fp8ProductPeakR<rows>AVX512 (lanes 16) or
// fp8ProductPeakR<rows>AVX2 (lanes 8): n rounds of the instruction mix of
// an fp8 product of rows activation rows in the dot-product order every
// fp8 tile keeps: d weight vectors decoded with the tiles' sequence
// (decodeE4M3Vec), then each activation row's vector loaded once and
// multiplied into d accumulators, one per (weight vector, row). Codes and
// activations stay in L1, so nothing but the core bounds it.
func fp8ProductPeak(lanes, rows int) {
	evex := lanes == 16
	regs, suffix := ymm, "AVX2"
	if evex {
		regs, suffix = zmm, "AVX512"
	}
	d := fp8ProductProbeVectors(lanes, rows)
	name := fmt.Sprintf("fp8ProductPeakR%d%s", rows, suffix)
	TEXT(name, NOSPLIT, "func(w *uint8, x *float32, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s runs n rounds of %d fp8 decodings of %d codes from w (4·%d bytes), each multiplied by the %d activation rows' vectors at x into its own accumulators.", name, d, lanes, lanes, rows))
	w := Load(Param("w"), GP64())
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	// Decoded vectors in regs[0:d], accumulators after them, then the
	// activation vector, the scale and the mask at the top.
	dec := func(k int) VecPhysical { return regs[k] }
	acc := func(k, r int) VecPhysical { return regs[d+k*rows+r] }
	top := len(regs) - 1
	if !evex {
		top = 15
	}
	xv, sc, mask := regs[top-2], regs[top-1], regs[top]
	tmp := GP64()
	MOVL(U32(0x87F00000), tmp.As32())
	if evex {
		VPBROADCASTD(tmp.As32(), mask)
		broadcastConst(float32(math.Ldexp(1, 117)), sc)
	} else {
		VMOVD(tmp.As32(), xmm[top])
		VPBROADCASTD(xmm[top], mask)
		broadcastConst256(float32(math.Ldexp(1, 117)), sc, xmm[top-2])
	}
	for k := range d {
		for r := range rows {
			VXORPS(acc(k, r), acc(k, r), acc(k, r))
		}
	}
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	Label(name + "_loop")
	for k := range d {
		decodeE4M3Vec(Mem{Base: w, Disp: lanes * (k % 4)}, dec(k), mask, sc, evex)
	}
	for r := range rows {
		VMOVUPS(Mem{Base: x, Disp: 4 * lanes * r}, xv)
		for k := range d {
			VFMADD231PS(xv, dec(k), acc(k, r))
		}
	}
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// fp8ProductProbeVectors is how many weight vectors a round of
// fp8ProductPeak decodes: as many as leave rows·d accumulators, d decoded
// vectors and three constants within the register file (32 registers for
// AVX-512, 16 for AVX2), at most eight.
func fp8ProductProbeVectors(lanes, rows int) int {
	n := 32
	if lanes == 8 {
		n = 16
	}
	return min(8, (n-3)/(rows+1))
}

// fp8Tile3W512 emits dotTile<m>x3FP8AVX512 (5 ≤ m ≤ 8): m activation rows'
// dot products with 3 fp8 weight rows whose codes hold no NaN code, the
// codes decoded in registers once for all m rows. Per 16 columns it decodes
// the three rows' codes (decodeE4M3Vec), then loads each activation row's
// vector once and fuses it with the three: 3m FMAs per 3 decodings and m
// loads, where the four-weight-row tile of up to four rows takes 4m per 4.
// Every accumulator sums its lanes in the order of the f32 tiles, and
// reduce4x512Any gives reduce4x512's sums for accumulators above Z15, so
// each output has the bits of the f32 product on the dequantized rows.
// Accumulators Z0–Z23 (row i, weight row j at 3i+j), decoded codes
// Z24–Z26, scales Z27–Z29, the activation vector Z30, the mask Z31.
func fp8Tile3W512(m int, ilv bool) {
	name := fmt.Sprintf("dotTile%dx3FP8AVX512", m)
	sig := "func(x *float32, ldx int, w *uint8, ldw int, kn int, sc *[3]*float32, first int, pfd int, out *float32, ldo int, add int)"
	doc := fmt.Sprintf("%s computes %d activation rows' dot products with 3 fp8 weight rows of block-scaled e4m3 codes holding no NaN code over kn (a multiple of 16) elements, and stores (add 0) or adds them to out (row i at out + i·ldo floats, three values).", name, m)
	if ilv {
		name = fmt.Sprintf("dotTile%dx3FP8IlvAVX512", m)
		sig = strings.Replace(sig, "ldw int, ", "ldw int, ldw2 int, ", 1)
		doc = fmt.Sprintf("%s is dotTile%dx3FP8AVX512 for 3 rows of an interleaved fp8 matrix (rows at w, w + ldw and w + ldw2; each step of 16 codes 128 bytes further), prefetching pfd bytes ahead every step.", name, m)
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(doc)
	acc := func(i, j int) VecPhysical { return zmm[3*i+j] }
	tv := func(j int) VecPhysical { return zmm[24+j] }
	sv := func(j int) VecPhysical { return zmm[27+j] }
	xv, mask := Z30, Z31
	x0 := Load(Param("x"), GP64())
	ldx := Load(Param("ldx"), GP64())
	SHLQ(U8(2), ldx)
	// Rows 0–2 from x0, 3–5 from x3 = x0 + 3·ldx, 6–7 from x6 = x0 + 6·ldx.
	x3, x6 := GP64(), GP64()
	LEAQ(Mem{Base: x0, Index: ldx, Scale: 2}, x3)
	ADDQ(ldx, x3)
	LEAQ(Mem{Base: x3, Index: ldx, Scale: 2}, x6)
	ADDQ(ldx, x6)
	xmem := func(i int) Mem {
		base := []Register{x0, x3, x6}[i/3]
		if i%3 == 0 {
			return Mem{Base: base}
		}
		return Mem{Base: base, Index: ldx, Scale: uint8(i % 3)}
	}
	w0 := Load(Param("w"), GP64())
	ldw := Load(Param("ldw"), GP64())
	ldw2 := ldw // row 2 at w0 + 2·ldw, or interleaved at w0 + ldw2
	if ilv {
		ldw2 = Load(Param("ldw2"), GP64())
	}
	row := func(j, disp int) Mem {
		switch {
		case j == 0:
			return Mem{Base: w0, Disp: disp}
		case j == 2 && ilv:
			return Mem{Base: w0, Index: ldw2, Scale: 1, Disp: disp}
		}
		return Mem{Base: w0, Index: ldw, Scale: uint8(j), Disp: disp}
	}
	pfd := Load(Param("pfd"), GP64()) // the caller's prefetch offset (kernels.fp8TilePrefetch)
	kn := Load(Param("kn"), GP64())
	sc := Load(Param("sc"), GP64())
	seg := Load(Param("first"), GP64())
	for i := range m {
		for j := range 3 {
			VPXORD(acc(i, j), acc(i, j), acc(i, j))
		}
	}
	tmp := GP64()
	MOVL(U32(0x87F00000), tmp.As32())
	VPBROADCASTD(tmp.As32(), mask)
	steps, cnt, off := fp8TileBlocks(name, name+"_reduce", kn, seg, sc, tmp, tv(0), []VecPhysical{sv(0), sv(1), sv(2)})
	decodeE4M3Stages([]Mem{row(0, 0), row(1, 0), row(2, 0)}, []VecPhysical{tv(0), tv(1), tv(2)}, mask, []VecPhysical{sv(0), sv(1), sv(2)})
	for i := range m {
		VMOVUPS(xmem(i), xv)
		for j := range 3 {
			VFMADD231PS(tv(j), xv, acc(i, j))
		}
	}
	ADDQ(U8(64), x0)
	ADDQ(U8(64), x3)
	ADDQ(U8(64), x6)
	fp8Advance(w0, ilv)
	ADDQ(U8(16), off)
	// Every 64 bytes of a row-major row (every step interleaved): prefetch
	// each row's line pfd bytes past the one just read.
	if !ilv {
		TESTQ(U32(63), off)
		JNZ(LabelRef(name + "_next"))
	}
	LEAQ(Mem{Base: w0, Index: pfd, Scale: 1}, tmp)
	PREFETCHT1(Mem{Base: tmp})
	PREFETCHT1(Mem{Base: tmp, Index: ldw, Scale: 1})
	if ilv {
		PREFETCHT1(Mem{Base: tmp, Index: ldw2, Scale: 1})
	} else {
		PREFETCHT1(Mem{Base: tmp, Index: ldw, Scale: 2})
	}
	Label(name + "_next")
	DECQ(cnt)
	JNZ(LabelRef(name + "_step"))
	MOVQ(U32(128/16), seg)
	TESTQ(steps, steps)
	JNZ(LabelRef(name + "_block"))
	Label(name + "_reduce")
	out := Load(Param("out"), GP64())
	ldo := Load(Param("ldo"), GP64())
	SHLQ(U8(2), ldo)
	add := Load(Param("add"), GP64())
	MOVL(U32(7), tmp.As32())
	KMOVW(tmp.As32(), K1) // lanes 0–2: the three weight rows
	MOVL(U32(7<<8), tmp.As32())
	KMOVW(tmp.As32(), K2) // lanes 8–10: the next activation row's
	// Rows 2p and 2p+1 are reduced together, row 2p's sums left in lanes
	// 0–2 of Z(6p) and row 2p+1's in lanes 8–10; an odd last row alone. The
	// fourth lane of each quartet sums a scratch register and is never
	// stored.
	quartet := func(i int) [4]VecPhysical { return [4]VecPhysical{acc(i, 0), acc(i, 1), acc(i, 2), tv(0)} }
	for i := 0; i+1 < m; i += 2 {
		reduce4x512Pair(quartet(i), quartet(i+1), tv(1), tv(2))
	}
	if m%2 == 1 {
		reduce4x512Any(quartet(m-1), tv(1), tv(2))
	}
	// Row 2p+1's three sums sit 8 lanes (32 bytes) past row 2p's in the
	// register: a store masked to lanes 8–10 at its row's address minus 32
	// bytes writes exactly them (masked-off lanes are neither read nor
	// written).
	next := Mem{Base: out, Index: ldo, Scale: 1, Disp: -32}
	TESTQ(add, add)
	JZ(LabelRef(name + "_store"))
	for i := 0; i < m; i += 2 {
		VMOVUPS_Z(Mem{Base: out}, K1, xmm[25])
		VADDPS(xmm[25], xmm[3*i], xmm[25])
		VMOVUPS(xmm[25], K1, Mem{Base: out})
		if i+1 < m {
			VMOVUPS_Z(next, K2, zmm[25])
			VADDPS(zmm[25], zmm[3*i], zmm[25])
			VMOVUPS(zmm[25], K2, next)
		}
		LEAQ(Mem{Base: out, Index: ldo, Scale: 2}, out)
	}
	VZEROUPPER()
	RET()
	Label(name + "_store")
	for i := 0; i < m; i += 2 {
		VMOVUPS(xmm[3*i], K1, Mem{Base: out})
		if i+1 < m {
			VMOVUPS(zmm[3*i], K2, next)
		}
		LEAQ(Mem{Base: out, Index: ldo, Scale: 2}, out)
	}
	VZEROUPPER()
	RET()
}

// fp8GEMVPair512 emits dotTile1x16FP8AVX512: one activation row's dot
// products with two groups of eight fp8 weight rows (a and b, rows
// wa + j·ldw and wb + j·ldw, with the activations at xa and at xb: the
// same columns, or b's a reduction block behind a's so that the two
// groups' lines do not share cache sets) whose codes hold no NaN code and whose eight
// rows share one scale per block (block b of group g uses *sc[g] + b, the
// first block holding first steps of sixteen codes and every later one
// eight), over kn (a multiple of 16) elements. Per 16 columns it decodes
// each group's eight rows by stages (decodeE4M3Stages) and fuses each into
// its row's accumulator, so sixteen streams of codes from two regions are
// in flight where the one-row tile reads eight from one. Every accumulator sums its
// lanes as dotTile1x8FP8AVX512's does and is reduced by the same tree, so
// each output has that tile's bits. Group a's sums go to out[0:8], group
// b's to out[8:16]. Accumulators Z0–Z15, the scales Z16–Z17, decoded codes
// Z18–Z21 and Z25–Z28, the activation vectors Z22 (a) and Z24 (b), the
// mask Z23.
//
// With prescaled set it emits dotTile1x16FP8PrescaledAVX512 instead, for
// weights whose block scales are powers of two, with each group's
// activations already multiplied by its blocks' scales and by 2^120
// (kernels.prescaleRows): the codes' bits shifted into float32 position
// (decodeE4M3Bits, the value times 2^-120 exactly) go to the FMA without
// the multiply, whose exact product is then the dequantized weight's
// (value·scale, exact for a power of two in range) times x, so the bits
// are the same. It takes no scales and walks kn in one stretch.
func fp8GEMVPair512(prescaled, ilv bool) {
	name := "dotTile1x16FP8AVX512"
	sig := "func(xa *float32, xb *float32, wa *uint8, wb *uint8, ldw int, kn int, sc *[2]*float32, first int, pfa int, pfb int, out *[16]float32)"
	what := "the activations at xa with group a of 8 fp8 weight rows and of those at xb with group b, block-scaled e4m3 codes holding no NaN code, each group's rows sharing the scales at *sc[g]"
	if prescaled {
		name = "dotTile1x16FP8PrescaledAVX512"
		sig = "func(xa *float32, xb *float32, wa *uint8, wb *uint8, ldw int, kn int, pfa int, pfb int, out *[16]float32)"
		what = "the prescaled activations at xa with group a of 8 fp8 weight rows and of those at xb with group b, e4m3 codes holding no NaN code whose block scales the activations hold"
	}
	if ilv {
		name = strings.Replace(name, "AVX512", "IlvAVX512", 1)
		sig = strings.Replace(sig, "ldw int, ", "", 1)
		what = strings.Replace(what, "fp8 weight rows", "interleaved fp8 weight rows", -1)
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(name + " computes the dot products of " + what + ", over kn (a multiple of 16) elements, prefetching group a pfa bytes ahead and group b pfb, and stores group a's sums in out[0:8] and group b's in out[8:16].")
	acc := func(j int) VecPhysical { return zmm[j] }
	sva, svb := Z16, Z17
	tv := func(j int) VecPhysical { return zmm[18+j%4] }
	xv, xvb, mask := Z22, Z24, Z23
	// A group's eight decoded vectors.
	dvs := []VecPhysical{Z18, Z19, Z20, Z21, Z25, Z26, Z27, Z28}
	x := Load(Param("xa"), GP64())
	xb := Load(Param("xb"), GP64())
	var ldw Register
	var rowA, rowB func(j, disp int) Mem
	var basesA, basesB []Register
	if ilv {
		// A group's step of 16 codes per row is 128 bytes in one piece.
		wa, wb := Load(Param("wa"), GP64()), Load(Param("wb"), GP64())
		rowA = func(j, disp int) Mem { return Mem{Base: wa, Disp: 16*j + disp} }
		rowB = func(j, disp int) Mem { return Mem{Base: wb, Disp: 16*j + disp} }
		basesA, basesB = []Register{wa}, []Register{wb}
	} else {
		ldw = Load(Param("ldw"), GP64())
		// Each group's rows through three bases (eightRows).
		rowA, basesA = eightRows(Load(Param("wa"), GP64()), ldw)
		rowB, basesB = eightRows(Load(Param("wb"), GP64()), ldw)
	}
	bases := append(basesA, basesB...)
	pfd := Load(Param("pfa"), GP64()) // the caller's prefetch offsets (kernels.fp8TilePrefetch)
	var pfb Register
	if ilv {
		pfb = Load(Param("pfb"), GP64())
	}
	for j := range 16 {
		VPXORD(acc(j), acc(j), acc(j))
	}
	tmp := GP64()
	MOVL(U32(0x87F00000), tmp.As32())
	VPBROADCASTD(tmp.As32(), mask)
	steps := Load(Param("kn"), GP64())
	SHRQ(U8(4), steps)
	JZ(LabelRef(name + "_reduce"))
	// Steps of the block at hand in cnt; prescaled, one block of them all.
	var sc, cnt Register
	if prescaled {
		cnt = GP64()
		MOVQ(steps, cnt)
	} else {
		sc = Load(Param("sc"), GP64())
		cnt = Load(Param("first"), GP64())
	}
	Label(name + "_block")
	if !prescaled {
		// Each group's scale·2^120, exact for |scale| < 2^8 (fp8InRegister).
		broadcastConst(float32(math.Ldexp(1, 120)), tv(0))
		for g, sv := range []VecPhysical{sva, svb} {
			MOVQ(Mem{Base: sc, Disp: 8 * g}, tmp)
			VBROADCASTSS(Mem{Base: tmp}, sv)
			VMULPS(tv(0), sv, sv)
			ADDQ(U8(4), tmp)
			MOVQ(tmp, Mem{Base: sc, Disp: 8 * g})
		}
	}
	CMPQ(steps, cnt)
	CMOVQLT(steps, cnt)
	SUBQ(cnt, steps)
	Label(name + "_step")
	VMOVUPS(Mem{Base: x}, xv)
	VMOVUPS(Mem{Base: xb}, xvb)
	// Each group's eight rows by stages (decodeE4M3Stages), then their
	// eight FMAs: on a Zen 4 core a one-row product from L2 decoded at
	// 84–85 % of fp8ProductPeak's rate row by row, each code's operations
	// back to back, and at 90–92 % by stages (kernels'
	// BenchmarkFP8OneRowCached).
	for g, sv := range []VecPhysical{sva, svb} {
		row, xg := rowA, xv
		if g == 1 {
			row, xg = rowB, xvb
		}
		srcs := make([]Mem, 8)
		for j := range srcs {
			srcs[j] = row(j, 0)
		}
		var scales []VecPhysical
		if !prescaled {
			scales = slices.Repeat([]VecPhysical{sv}, 8)
		}
		decodeE4M3Stages(srcs, dvs, mask, scales)
		for j := range 8 {
			VFMADD231PS(dvs[j], xg, acc(8*g+j))
		}
	}
	ADDQ(U8(64), x)
	ADDQ(U8(64), xb)
	if ilv {
		for i, b := range bases {
			p := pfd
			if i == 1 {
				p = pfb
			}
			PREFETCHT0(Mem{Base: b, Index: p, Scale: 1})
			PREFETCHT0(Mem{Base: b, Index: p, Scale: 1, Disp: 64})
			fp8Advance(b, true)
		}
		DECQ(cnt)
		JNZ(LabelRef(name + "_step"))
	} else {
		for _, b := range bases {
			ADDQ(U8(16), b)
		}
	}
	// Every fourth step (64 bytes of each row): each row's line pfa (group
	// a) or pfb (group b) bytes past the one just read, from the six bases
	// moved by their offset; pfb is read from the arguments, for want of a
	// register.
	if !ilv {
		TESTQ(U32(3), cnt)
		JNZ(LabelRef(name + "_next"))
		prefetchEightRows(basesA, pfd, ldw, tmp)
		for i, b := range basesB {
			Load(Param("pfb"), tmp)
			LEAQ(Mem{Base: b, Index: tmp, Scale: 1}, tmp)
			prefetchFromBase(i, tmp, ldw)
		}
		Label(name + "_next")
		DECQ(cnt)
		JNZ(LabelRef(name + "_step"))
	}
	MOVQ(U32(128/16), cnt)
	TESTQ(steps, steps)
	JNZ(LabelRef(name + "_block"))
	Label(name + "_reduce")
	out := Load(Param("out"), GP64())
	reduce4x512([4]int{0, 1, 2, 3})
	reduce4x512([4]int{4, 5, 6, 7})
	reduce4x512Any([4]VecPhysical{Z8, Z9, Z10, Z11}, tv(0), tv(1))
	reduce4x512Any([4]VecPhysical{Z12, Z13, Z14, Z15}, tv(0), tv(1))
	VMOVUPS(X0, Mem{Base: out})
	VMOVUPS(X4, Mem{Base: out, Disp: 16})
	VMOVUPS(X8, Mem{Base: out, Disp: 32})
	VMOVUPS(X12, Mem{Base: out, Disp: 48})
	VZEROUPPER()
	RET()
}

// eightRowMaxRows is the most activation rows the tiles of eight weight
// rows take, fp8Tile8W512 and gemmTile8F32512 (kernels.eightRowMaxRows):
// three rows by eight weight rows fill 24 of AVX-512's 32 registers with
// accumulators.
const eightRowMaxRows = 3

// fp8Tile8W512 emits dotTile<m>x8FP8AVX512 (2 ≤ m ≤ 3): m activation rows'
// dot products with 8 fp8 weight rows whose codes hold no NaN code and
// whose blocks share one scale (the eight rows lie in one block of 128
// rows): block b of the tile uses sc[b], the first block holding first
// steps of sixteen codes and every later one eight. Per 16 columns it
// decodes each row's codes (decodeE4M3Vec) and fuses them into the m rows'
// accumulators, so eight streams of codes are read at once, as the one-row
// tile reads them, where the four-weight-row tile reads four. Every
// accumulator sums its lanes in the order of the f32 tiles and
// reduce4x512Any gives reduce4x512's sums, so each output has the bits of
// the f32 product on the dequantized rows. Accumulators Z0–Z23 (row i,
// weight row j at 8i+j), the scale Z24, decoded codes Z25–Z27, activation
// vectors Z28–Z30, the mask Z31.
func fp8Tile8W512(m int, ilv bool) {
	name := fmt.Sprintf("dotTile%dx8FP8AVX512", m)
	doc := fmt.Sprintf("%s computes %d activation rows' dot products with 8 fp8 weight rows of block-scaled e4m3 codes holding no NaN code, whose blocks share the scales at sc, over kn (a multiple of 16) elements, and stores (add 0) or adds them to out (row i at out + i·ldo floats, eight values).", name, m)
	if ilv {
		name = fmt.Sprintf("dotTile%dx8FP8IlvAVX512", m)
		doc = fmt.Sprintf("%s is dotTile%dx8FP8AVX512 for one interleaved group of eight rows (row j at w + j·ldw, ldw 16; each step of 16 codes 128 bytes further), prefetching pfd bytes ahead every step.", name, m)
	}
	TEXT(name, NOSPLIT, "func(x *float32, ldx int, w *uint8, ldw int, kn int, sc *float32, first int, pfd int, out *float32, ldo int, add int)")
	Pragma("noescape")
	Doc(doc)
	const R = 8
	acc := func(i, j int) VecPhysical { return zmm[R*i+j] }
	sv := Z24
	tv := func(j int) VecPhysical { return zmm[25+j%3] }
	xv := func(i int) VecPhysical { return zmm[28+i] }
	mask := Z31
	x0 := Load(Param("x"), GP64())
	ldx := Load(Param("ldx"), GP64())
	SHLQ(U8(2), ldx)
	xmem := func(i int) Mem {
		if i == 0 {
			return Mem{Base: x0}
		}
		return Mem{Base: x0, Index: ldx, Scale: uint8(i)}
	}
	// Rows w + j·ldw through three bases (eightRows).
	w0 := Load(Param("w"), GP64())
	ldw := Load(Param("ldw"), GP64())
	row, bases := eightRows(w0, ldw)
	pfd := Load(Param("pfd"), GP64()) // the caller's prefetch offset (kernels.panelWalkFP8)
	sc := Load(Param("sc"), GP64())
	seg := Load(Param("first"), GP64())
	for i := range m {
		for j := range R {
			VPXORD(acc(i, j), acc(i, j), acc(i, j))
		}
	}
	tmp := GP64()
	MOVL(U32(0x87F00000), tmp.As32())
	VPBROADCASTD(tmp.As32(), mask)
	steps := Load(Param("kn"), GP64())
	SHRQ(U8(4), steps)
	JZ(LabelRef(name + "_reduce"))
	cnt, off := GP64(), GP64()
	XORQ(off, off)
	Label(name + "_block")
	// The block's scale·2^120, exact for |scale| < 2^8 (fp8InRegister).
	broadcastConst(float32(math.Ldexp(1, 120)), tv(0))
	VBROADCASTSS(Mem{Base: sc}, sv)
	VMULPS(tv(0), sv, sv)
	ADDQ(U8(4), sc)
	MOVQ(seg, cnt)
	CMPQ(steps, cnt)
	CMOVQLT(steps, cnt)
	SUBQ(cnt, steps)
	Label(name + "_step")
	for i := range m {
		VMOVUPS(xmem(i), xv(i))
	}
	for j := range R {
		decodeE4M3Vec(row(j, 0), tv(j), mask, sv, true)
		for i := range m {
			VFMADD231PS(tv(j), xv(i), acc(i, j))
		}
	}
	ADDQ(U8(64), x0)
	for _, b := range bases {
		fp8Advance(b, ilv)
	}
	ADDQ(U8(16), off)
	if ilv {
		// Every step: the group's two lines pfd bytes on.
		LEAQ(Mem{Base: w0, Index: pfd, Scale: 1}, tmp)
		PREFETCHT1(Mem{Base: tmp})
		PREFETCHT1(Mem{Base: tmp, Disp: 64})
	} else {
		// Every 64 bytes: each row's line pfd bytes past the one just read.
		TESTQ(U32(63), off)
		JNZ(LabelRef(name + "_next"))
		prefetchEightRows(bases, pfd, ldw, tmp)
	}
	Label(name + "_next")
	DECQ(cnt)
	JNZ(LabelRef(name + "_step"))
	MOVQ(U32(128/16), seg)
	TESTQ(steps, steps)
	JNZ(LabelRef(name + "_block"))
	Label(name + "_reduce")
	storeEightSums(name, m, tv(0), tv(1))
}

// storeEightSums ends a tile of m activation rows by eight weight rows
// whose accumulators are Z0–Z23 (row i, weight row j at 8i+j): it reduces
// each with reduce4x512's tree (reduce4x512Any, t1 and t2 scratch) and
// stores row i's eight sums to out + i·ldo (the tile's out and ldo
// parameters, ldo in floats), or with add ≠ 0 adds them to what is there
// (out + sums, as the Go tail does), and returns.
func storeEightSums(name string, m int, t1, t2 VecPhysical) {
	const R = 8
	acc := func(i, j int) VecPhysical { return zmm[R*i+j] }
	out := Load(Param("out"), GP64())
	ldo := Load(Param("ldo"), GP64())
	SHLQ(U8(2), ldo)
	add := Load(Param("add"), GP64())
	for i := range m {
		reduce4x512Any([4]VecPhysical{acc(i, 0), acc(i, 1), acc(i, 2), acc(i, 3)}, t1, t2)
		reduce4x512Any([4]VecPhysical{acc(i, 4), acc(i, 5), acc(i, 6), acc(i, 7)}, t1, t2)
	}
	TESTQ(add, add)
	JZ(LabelRef(name + "_store"))
	for i := range m {
		VADDPS(Mem{Base: out}, xmm[R*i], xmm[R*i])
		VADDPS(Mem{Base: out, Disp: 16}, xmm[R*i+4], xmm[R*i+4])
		VMOVUPS(xmm[R*i], Mem{Base: out})
		VMOVUPS(xmm[R*i+4], Mem{Base: out, Disp: 16})
		ADDQ(ldo, out)
	}
	VZEROUPPER()
	RET()
	Label(name + "_store")
	for i := range m {
		VMOVUPS(xmm[R*i], Mem{Base: out})
		VMOVUPS(xmm[R*i+4], Mem{Base: out, Disp: 16})
		ADDQ(ldo, out)
	}
	VZEROUPPER()
	RET()
}

// reduce4x512Any is reduce4x512 for accumulators anywhere in Z0–Z31: the
// same sums in the same order, each VHADDPS (which has no EVEX form)
// replaced by the two VSHUFPS that gather the pairs it adds and one VADDPS.
// t1 and t2 are scratch; the sums are left in xmm(a[0]).
func reduce4x512Any(a [4]VecPhysical, t1, t2 VecPhysical) {
	y := func(z VecPhysical) VecPhysical { return ymm[regIndex(z)] }
	x := func(z VecPhysical) VecPhysical { return xmm[regIndex(z)] }
	for _, z := range a {
		VEXTRACTF64X4(U8(1), z, y(t1))
		VADDPS(y(t1), y(z), y(z))
	}
	// hadd(p, q) into p: [p0+p1, p2+p3, q0+q1, q2+q3] per 128-bit lane.
	hadd := func(q, p VecPhysical) {
		VSHUFPS(U8(0x88), y(q), y(p), y(t1))
		VSHUFPS(U8(0xDD), y(q), y(p), y(t2))
		VADDPS(y(t2), y(t1), y(p))
	}
	hadd(a[1], a[0])
	hadd(a[3], a[2])
	hadd(a[2], a[0])
	VEXTRACTF32X4(U8(1), y(a[0]), x(t1))
	VADDPS(x(t1), x(a[0]), x(a[0]))
}

// reduce4x512Pair is reduce4x512Any for two quartets of accumulators at
// once, a (sums left in lane 0 of zmm(a[0])) and b (sums left in lane 2 of
// zmm(a[0]), elements 8–11), in about 23 instructions where two calls of
// reduce4x512Any take 38: each pair a[k], b[k] is folded into one register
// holding a[k]'s 256-bit sum in its low half and b[k]'s in its high half,
// and the rest of the tree runs on both halves together. Every lane takes
// the same additions with the same operands in the same order as in
// reduce4x512Any, so the sums are bit for bit the same. t1 and t2 are
// scratch; a's registers are overwritten, b's are not.
func reduce4x512Pair(a, b [4]VecPhysical, t1, t2 VecPhysical) {
	for k := range 4 {
		VSHUFF32X4(U8(0x44), b[k], a[k], t1) // [a.lo256 | b.lo256]
		VSHUFF32X4(U8(0xEE), b[k], a[k], t2) // [a.hi256 | b.hi256]
		VADDPS(t2, t1, a[k])
	}
	// hadd(q, p) into p: [p0+p1, p2+p3, q0+q1, q2+q3] in every 128-bit lane.
	hadd := func(q, p VecPhysical) {
		VSHUFPS(U8(0x88), q, p, t1)
		VSHUFPS(U8(0xDD), q, p, t2)
		VADDPS(t2, t1, p)
	}
	hadd(a[1], a[0])
	hadd(a[3], a[2])
	hadd(a[2], a[0])
	// Lane 1 onto lane 0 and lane 3 onto lane 2.
	VSHUFF32X4(U8(0xF5), a[0], a[0], t1)
	VADDPS(t1, a[0], a[0])
}

// regIndex is the number of vector register z (Z0 → 0 … Z31 → 31).
func regIndex(z VecPhysical) int {
	for i, r := range zmm {
		if r == z {
			return i
		}
	}
	panic(fmt.Sprintf("not a zmm register: %v", z))
}

// gemmTile8F32512 emits gemmTile{m}x8F32AVX512 (m ≤ 3): m activation rows
// (x + i·ldx) against eight f32 weight rows (w + j·ldw) over kn (a multiple
// of 16) elements. Per sixteen columns it loads the m rows' activation
// vectors once and each weight row's vector once, fusing it into the m
// rows' accumulators: eight weight loads and m activation loads for 8m
// FMAs, where the four-weight-row strips load their m activation vectors
// for every four weight rows. So it suits weights held in L1 (a decoded
// block) under activation rows read from L2. Every output has one
// sixteen-lane accumulator summed over the block in column order and
// reduced by reduce4x512's tree (reduce4x512Any, the same sums), so its
// bits are those of dotTile512; the sums of row i are stored to (add = 0)
// or added to (add ≠ 0) out + i·ldo, eight values. Before its loop it
// prefetches into L1 the output lines of the m rows after its own (out +
// (m+i)·ldo), which a caller walking the rows in passes writes next: a
// prompt's outputs are too many for L2, and waiting for them at the end of
// every call cost its products 0–11 % on an Intel Xeon core (medians of
// fifteen alternations in one process; docs/performance-log.md, "Prompt
// products through groups of eight weight rows, on the Intel host").
func gemmTile8F32512(m int) {
	name := fmt.Sprintf("gemmTile%dx8F32AVX512", m)
	TEXT(name, NOSPLIT, "func(x *float32, ldx int, w *float32, ldw int, kn int, out *float32, ldo int, add int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes %d activation rows' dot products with 8 f32 weight rows over kn (a multiple of 16) elements and stores (add 0) or adds them to out (row i at out + i·ldo floats, eight values).", name, m))
	x := Load(Param("x"), GP64())
	ldx := Load(Param("ldx"), GP64())
	SHLQ(U8(2), ldx)
	xr := rowPointers(x, ldx, m)
	w0 := Load(Param("w"), GP64())
	ldw := Load(Param("ldw"), GP64())
	SHLQ(U8(2), ldw)
	row, bases := eightRows(w0, ldw)
	acc := func(i, j int) VecPhysical { return zmm[8*i+j] }
	xv := func(i int) VecPhysical { return zmm[24+i] }
	wv, t1, t2 := Z27, Z28, Z29
	for i := range m {
		for j := range 8 {
			VPXORD(acc(i, j), acc(i, j), acc(i, j))
		}
	}
	pf := Load(Param("out"), GP64())
	pld := Load(Param("ldo"), GP64())
	SHLQ(U8(2), pld)
	for range m {
		ADDQ(pld, pf)
	}
	for i := range m {
		PREFETCHT0(Mem{Base: pf})
		if i < m-1 {
			ADDQ(pld, pf)
		}
	}
	off := GP64()
	XORQ(off, off)
	cnt := Load(Param("kn"), GP64())
	SHRQ(U8(4), cnt)
	JZ(LabelRef(name + "_reduce"))
	Label(name + "_loop")
	for i := range m {
		VMOVUPS(Mem{Base: xr[i], Index: off, Scale: 1}, xv(i))
	}
	for j := range 8 {
		VMOVUPS(row(j, 0), wv)
		for i := range m {
			VFMADD231PS(xv(i), wv, acc(i, j))
		}
	}
	ADDQ(U8(64), off)
	for _, b := range bases {
		ADDQ(U8(64), b)
	}
	DECQ(cnt)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_reduce")
	storeEightSums(name, m, t1, t2)
}

// widenIlvGroup emits widenIlvGroupAVX512: n32 chunks of 32 values of one
// group of eight rows in the interleaved bf16 layout of
// Matrix.InterleaveBF16 (src, 512 bytes a chunk: row r's 64 bytes at 64·r,
// value k in the low half of word k and value k+16 in its high half) widened
// to f32 rows at dst + r·ldd floats, in column order: the shift and the mask
// of gemmStrip512's interleaved steps, so the values are exactly the
// widened bf16. For every line of src it reads it prefetches the line as far
// past pf into L2, so the caller can have the block it widens next on its
// way.
func widenIlvGroup() {
	name := "widenIlvGroupAVX512"
	TEXT(name, NOSPLIT, "func(dst *float32, ldd int, src *uint16, n32 int, pf *uint16)")
	Pragma("noescape")
	Doc(name + " widens n32 chunks of 32 values of a group of eight interleaved bf16 rows (src) into eight f32 rows (dst + r·ldd floats), prefetching as far past pf.")
	d := Load(Param("dst"), GP64())
	ldd := Load(Param("ldd"), GP64())
	SHLQ(U8(2), ldd)
	row, bases := eightRows(d, ldd)
	src := Load(Param("src"), GP64())
	pf := Load(Param("pf"), GP64())
	cnt := Load(Param("n32"), GP64())
	highMask(Z31)
	TESTQ(cnt, cnt)
	JZ(LabelRef(name + "_done"))
	Label(name + "_loop")
	for r := range 8 {
		VMOVDQU32(Mem{Base: src, Disp: 64 * r}, zmm[r])
		PREFETCHT1(Mem{Base: pf, Disp: 64 * r})
	}
	for r := range 8 {
		VPSLLD(U8(16), zmm[r], zmm[8+r])
		VPANDD(zmm[r], Z31, zmm[r])
		VMOVUPS(zmm[8+r], row(r, 0))
		VMOVUPS(zmm[r], row(r, 64))
	}
	ADDQ(U32(64*8), src)
	ADDQ(U32(64*8), pf)
	for _, b := range bases {
		ADDQ(U32(128), b)
	}
	DECQ(cnt)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// cpuVendor emits cpuVendorID: CPUID leaf 0's vendor string registers, so
// that the kernels can pick between walks whose speed differs by core
// design (the bits never depend on it). It touches no vector register and
// runs on any amd64 CPU, so it alone has no VZEROUPPER.
func cpuVendor() {
	TEXT("cpuVendorID", NOSPLIT, "func() (ebx, edx, ecx uint32)")
	Doc("cpuVendorID returns CPUID leaf 0's EBX, EDX and ECX: the vendor string's three four-byte parts in order.")
	XORL(EAX, EAX)
	XORL(ECX, ECX)
	CPUID()
	Store(EBX, ReturnIndex(0))
	Store(EDX, ReturnIndex(1))
	Store(ECX, ReturnIndex(2))
	RET()
}
