package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/gotypes"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The AMX instructions are not in the Go assembler, so they are written as
// bytes: VEX-encoded, tile registers 0-7, memory operands base+index with
// no displacement. Only physical registers are used around them, so avo's
// register allocator never hands out one the bytes name.

// rawBytes emits b as BYTE directives.
func rawBytes(b ...byte) {
	for _, v := range b {
		Instruction(&ir.Instruction{Opcode: "BYTE", Operands: []Op{U8(v)}})
	}
}

// vex3 is the three-byte VEX prefix of an 0F38 instruction: r, x and b are
// the fourth bits of the ModRM reg, SIB index and base fields, vvvv the
// extra register operand (1111 when none) and pp the implied prefix
// (0: none, 1: 66, 2: F3, 3: F2).
func vex3(r, x, b, vvvv, pp byte) []byte {
	return []byte{0xC4, (^r&1)<<7 | (^x&1)<<6 | (^b&1)<<5 | 0x02, (^vvvv&15)<<3 | pp}
}

// tileMem emits a tile load (TILELOADD, pp F2) or store (TILESTORED, pp F3)
// of tile t at [base + index·1].
func tileMem(pp byte, t int, base, index GPPhysical) {
	bi, ii := byte(base.PhysicalIndex()), byte(index.PhysicalIndex())
	if bi&7 == 5 || ii == 4 {
		panic(fmt.Sprintf("tileMem: base %s needs a displacement or index %s is RSP", base.Asm(), index.Asm()))
	}
	b := vex3(0, ii>>3, bi>>3, 0, pp)
	rawBytes(append(b, 0x4B, byte(t&7)<<3|0x04, (ii&7)<<3|bi&7)...)
}

func tileLoad(t int, base, index GPPhysical)  { tileMem(3, t, base, index) }
func tileStore(t int, base, index GPPhysical) { tileMem(2, t, base, index) }

// tileZero emits TILEZERO t.
func tileZero(t int) { rawBytes(append(vex3(0, 0, 0, 0, 3), 0x49, 0xC0|byte(t)<<3)...) }

// tdpbf16ps emits TDPBF16PS c, a, b: c[m][n] += Σ_k a[m][k]·b[k][n] over
// bf16 pairs, rounded to float32 after each product in k order.
func tdpbf16ps(c, a, b int) {
	rawBytes(append(vex3(0, 0, 0, byte(b), 2), 0x5C, 0xC0|byte(c)<<3|byte(a))...)
}

// ldtilecfg emits LDTILECFG [base] (base not RSP, RBP, R12 or R13).
func ldtilecfg(base GPPhysical) {
	bi := byte(base.PhysicalIndex())
	rawBytes(append(vex3(0, 0, bi>>3, 0, 0), 0x49, bi&7)...)
}

// tileRelease emits TILERELEASE.
func tileRelease() { rawBytes(append(vex3(0, 0, 0, 0, 0), 0x49, 0xC0)...) }

// amxIlvSlab writes amxIlvSlab1 (pieces in one B tile: up to five
// activation rows) or amxIlvSlab2 (hi and mid pieces in one, lo in the
// other: six to eight rows).
//
// Each activation row of the slab is split exactly into three bf16 pieces
// (x = hi + mid + lo; see amxPieces). A weight tile is eight rows of one
// 32-column chunk of an interleaved bf16 group (512 bytes, its pairs the
// layout's values i and i+16); the piece tile holds, for each of the
// chunk's sixteen pairs, every piece's matching pair. TDPBF16PS adds each
// pair's two products to its float32 sum in the order of the pairs, so every
// piece's sum over a row depends on Cols alone. A call takes pairs of
// groups one after the other, each group with its own stream, both over the
// whole reduction, so that the tiles are configured once for many pairs;
// carry loads the sums of an earlier call to continue them.
func amxIlvSlab(twoB bool) {
	name := "amxIlvSlab1"
	if twoB {
		name = "amxIlvSlab2"
	}
	TEXT(name, NOSPLIT, "func(cfg *byte, w *uint16, gstride, pairs, pstride int, act *uint16, chunks int, c *float32, n int, carry int, pf int)")
	Pragma("noescape")
	Doc(name + " adds the piece sums of n activation rows (act, amxPieces' layout) by pairs of interleaved bf16 groups (the first at w, pstride bytes from pair to pair, a pair's second group gstride bytes after its first; chunks of 32 columns each) to the tile sums at c, 1,536 bytes a pair (loaded first when carry is set, else zero), prefetching pf bytes ahead in both groups; cfg is the slab's tile configuration.")
	locals := AllocLocal(24)
	wNext, cNext, pairsLeft := locals, locals.Offset(8), locals.Offset(16)
	Load(Param("cfg"), RAX)
	ldtilecfg(RAX)
	Load(Param("w"), RAX)
	MOVQ(RAX, wNext)
	Load(Param("c"), RAX)
	MOVQ(RAX, cNext)
	// Strides (bytes): a C row holds 3n sums; a piece tile row 12n bytes in
	// the one-tile form, 8n (hi, mid) and 4n (lo) in the two-tile form; a
	// chunk of pieces is sixteen rows of 12n bytes.
	sums := func() {
		Load(Param("n"), R13)
		MOVQ(cNext, R11)
		MOVQ(R13, R10)
		IMUL3Q(U32(12), R10, R10) // ldc = 12n
	}
	// C tiles: group 1 at c (and c+8n for lo in the two-tile form), group 2
	// eight rows further.
	cBases := func() {
		MOVQ(R11, R12)
		LEAQ(Mem{Base: R10, Index: R10, Scale: 1}, RCX) // 2·ldc
		LEAQ(Mem{Base: RCX, Index: RCX, Scale: 1}, RCX) // 4·ldc
		LEAQ(Mem{Base: R12, Index: RCX, Scale: 2}, R12) // c + 8·ldc
		if twoB {
			LEAQ(Mem{Base: R11, Index: R13, Scale: 8}, RSI) // c + 8n
			LEAQ(Mem{Base: R12, Index: R13, Scale: 8}, RDX) // c + 8·ldc + 8n
		}
	}
	cTiles := func(op func(int, GPPhysical, GPPhysical)) {
		if twoB {
			op(0, R11, R10)
			op(1, RSI, R10)
			op(2, R12, R10)
			op(3, RDX, R10)
		} else {
			op(0, R11, R10)
			op(1, R12, R10)
		}
	}
	Load(Param("pairs"), RAX)
	MOVQ(RAX, pairsLeft)
	TESTQ(RAX, RAX)
	JZ(LabelRef(name + "_done"))
	Label(name + "_pair")
	Load(Param("carry"), RAX)
	TESTQ(RAX, RAX)
	JZ(LabelRef(name + "_zero"))
	sums()
	cBases()
	cTiles(tileLoad)
	JMP(LabelRef(name + "_start"))
	Label(name + "_zero")
	for t := range 4 {
		if t < 2 || twoB {
			tileZero(t)
		}
	}
	Label(name + "_start")
	MOVQ(wNext, RSI)
	MOVQ(RSI, RDX)
	Load(Param("gstride"), RAX)
	ADDQ(RAX, RDX)
	Load(Param("act"), RBX)
	Load(Param("chunks"), R8)
	Load(Param("pf"), RAX)
	LEAQ(Mem{Base: RSI, Index: RAX, Scale: 1}, R11)
	LEAQ(Mem{Base: RDX, Index: RAX, Scale: 1}, R12)
	MOVQ(U32(64), RDI)
	// R9: the piece tile's row stride, RCX/RAX the lo tile and its stride,
	// R13 a chunk of pieces.
	Load(Param("n"), R13)
	MOVQ(R13, R10)
	IMUL3Q(U32(12), R10, R10)
	if twoB {
		LEAQ(Mem{Base: R13, Index: R13, Scale: 1}, RAX) // 2n
		LEAQ(Mem{Base: RAX, Index: RAX, Scale: 1}, RAX) // 4n
		LEAQ(Mem{Base: RAX, Index: RAX, Scale: 1}, R9)  // 8n
		MOVQ(R9, RCX)
		SHLQ(U8(4), RCX)
		ADDQ(RBX, RCX) // lo tile: 16 rows of 8n bytes on
	} else {
		MOVQ(R10, R9)
	}
	MOVQ(R10, R13)
	SHLQ(U8(4), R13) // 16·12n
	TESTQ(R8, R8)
	JZ(LabelRef(name + "_store"))
	Label(name + "_loop")
	for _, p := range []GPPhysical{R11, R12} {
		for l := range 8 {
			PREFETCHT0(Mem{Base: p, Disp: 64 * l})
		}
	}
	tileLoad(4, RSI, RDI)
	tileLoad(5, RDX, RDI)
	tileLoad(6, RBX, R9)
	if twoB {
		tileLoad(7, RCX, RAX)
		tdpbf16ps(0, 4, 6)
		tdpbf16ps(1, 4, 7)
		tdpbf16ps(2, 5, 6)
		tdpbf16ps(3, 5, 7)
	} else {
		tdpbf16ps(0, 4, 6)
		tdpbf16ps(1, 5, 6)
	}
	for _, p := range []GPPhysical{RSI, RDX, R11, R12} {
		ADDQ(U32(512), p)
	}
	ADDQ(R13, RBX)
	if twoB {
		ADDQ(R13, RCX)
	}
	DECQ(R8)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_store")
	sums()
	cBases()
	cTiles(tileStore)
	ADDQ(U32(1536), cNext)
	Load(Param("pstride"), RAX)
	ADDQ(RAX, wNext)
	DECQ(pairsLeft)
	JNZ(LabelRef(name + "_pair"))
	Label(name + "_done")
	tileRelease()
	VZEROUPPER() // no vector register is used; kept as every kernel ends
	RET()
}

// amxPiecesRow writes amxPiecesRowAVX512: the hi, mid and lo pairs of one
// activation row's whole chunks (see kernels.amxPieces), each piece's
// sixteen pairs of a chunk scattered down the sixteen rows of its tile.
func amxPiecesRow() {
	name := "amxPiecesRowAVX512"
	TEXT(name, NOSPLIT, "func(x *float32, chunks int, hi, mid, lo *uint16, row, loRow, chunk int)")
	Pragma("noescape")
	Doc(name + " splits chunks of 32 values of x into bf16 pieces and writes each piece's pair (i, i+16) at hi, mid or lo + i·row (lo + i·loRow) bytes, chunk bytes further per chunk.")
	x := Load(Param("x"), GP64())
	cnt := Load(Param("chunks"), GP64())
	hi := Load(Param("hi"), GP64())
	mid := Load(Param("mid"), GP64())
	lo := Load(Param("lo"), GP64())
	chunk := Load(Param("chunk"), GP64())
	// Dword indices i·row/4 and i·loRow/4 of the sixteen tile rows.
	iota := Z20
	idx := func(stride gotypes.Component, dst VecPhysical) {
		s := GP64()
		Load(stride, s)
		SHRQ(U8(2), s)
		VPBROADCASTD(s.As32(), dst)
	}
	idx(Param("row"), Z22)
	idx(Param("loRow"), Z23)
	// iota = 0..15 built from the lane index constant.
	VMOVDQU32(amxIota, iota)
	VPMULLD(iota, Z22, Z22)
	VPMULLD(iota, Z23, Z23)
	highMask(Z24)
	e := GP32()
	MOVL(U32(0x7f800000), e)
	VPBROADCASTD(e, Z25)
	MOVL(U32(0x00400000), e)
	VPBROADCASTD(e, Z26)
	TESTQ(cnt, cnt)
	JZ(LabelRef(name + "_done"))
	Label(name + "_loop")
	var piece [3][2]VecPhysical
	for h := range 2 {
		v := zmm[h]
		VMOVUPS(Mem{Base: x, Disp: 64 * h}, v)
		H, R, M, L := zmm[2+h], zmm[4+h], zmm[6+h], zmm[8+h]
		VPANDD(v, Z24, H)
		VSUBPS(H, v, R)
		VPANDD(R, Z24, M)
		VSUBPS(M, R, L)
		// Infinite or NaN values: hi is the value itself (a NaN made
		// quiet), mid and lo zero.
		VPANDD(v, Z25, zmm[10+h])
		VPCMPEQD(zmm[10+h], Z25, K1)
		VCMPPS(U8(3), v, v, K2) // unordered: NaN
		VPORD(Z26, v, K2, v)
		VPANDD(v, Z24, K1, H)
		VPXORD(M, M, K1, M)
		VPXORD(L, L, K1, L)
		if h == 1 {
			// The second value of a pair fills a word's high half: its
			// low bits (lo of a denormal) must not reach the first's.
			VPANDD(L, Z24, L)
		}
		piece[0][h], piece[1][h], piece[2][h] = H, M, L
	}
	for p, dst := range []Register{hi, mid, lo} {
		a, b := piece[p][0], piece[p][1]
		VPSRLD(U8(16), a, a)
		VPORD(b, a, a)
		KXNORW(K3, K3, K3)
		ix := Z22
		if p == 2 {
			ix = Z23
		}
		VPSCATTERDD(a, K3, Mem{Base: dst, Index: ix, Scale: 4})
	}
	ADDQ(U32(128), x)
	ADDQ(chunk, hi)
	ADDQ(chunk, mid)
	ADDQ(chunk, lo)
	DECQ(cnt)
	JNZ(LabelRef(name + "_loop"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

var amxIota Mem

func amxIotaData() {
	amxIota = GLOBL("amxIota", RODATA|NOPTR)
	for i := range 16 {
		DATA(4*i, U32(uint32(i)))
	}
}

// amxScoreTiles writes amxScoreTilesAMX: the lightning indexer's weighted
// ReLU scores of whole tiles of 32 float32 keys whose values are exact in
// bf16 (fp8 keys times power-of-two scales), on AMX tiles.
//
// A key value is its own bf16 (its high half; a NaN made quiet), and each
// query value is split exactly into three bf16 pieces (amxPiecesRow's), so
// a head's dot product is the sum of three exact products per value, chunk
// by chunk in the order key·hi, key·mid, key·lo of the query. A word pair
// holds the values i and i+16 of a 32-value chunk. The tiles are blocked
// two by two: tiles 0–3 hold the sums of keys 0–15 and 16–31 against heads
// 0–15 and 16–31 of a 32-head group, tiles 4 and 5 the two halves of the
// keys for a chunk (sixteen rows of 64 bytes, chunks·64 bytes apart),
// tiles 6 and 7 a piece of the query for the chunk and the two halves of
// the heads (qB: for each group and chunk, the three pieces of heads 0–15,
// then of heads 16–31, 1 KiB each). Each product goes to another sum tile
// than the one before it, so the tile unit keeps four sums in flight. A
// key's sums depend on that key and the query alone.
//
// The keys of the next tile are converted into the other half of kp during
// the current tile's last group, eight keys after each chunk's products,
// so that the tile unit and the vector unit work at once, and the keys of
// the tile after it are prefetched meanwhile. A group's sums leave through
// cs (four tiles of 1 KiB, then the keys' running sums, 64 bytes each):
// max(dot, 0)·w lane by lane for heads 0–15 and then 16–31; after the last
// group each key's sixteen lanes are reduced into out. Only physical
// registers are used: the tile instructions' bytes name them.
func amxScoreTiles() {
	name := "amxScoreTilesAMX"
	TEXT(name, NOSPLIT, "func(cfg *byte, qB *uint16, groups int, chunks int, w *float32, keys *[]float32, tiles int, kp *uint16, cs *float32, out *float32)")
	Pragma("noescape")
	Doc(name + " computes the weighted ReLU scores of a prepared query (qB: groups of 32 heads, chunks of 32 values; head weights w) against tiles tiles of 32 keys exact in bf16 (their slice headers at keys) into out, on AMX tiles; kp is space for two tiles of bf16 keys, cs for four sum tiles and 32 running sums.")
	const keys, keysPerChunk = 32, 8
	locals := AllocLocal(72)
	slot := func(i int) Mem { return locals.Offset(8 * i) }
	groupsLeft, chunksLeft, wNext := slot(0), slot(1), slot(2)
	convHdr, convDst, convLeft, convStep := slot(3), slot(4), slot(5), slot(6)
	savedRSI, savedRDI := slot(7), slot(8)
	Load(Param("cfg"), RAX)
	ldtilecfg(RAX)
	// Z24: the high halves' mask; Z25: a NaN's quiet bit; Z27: zero.
	MOVL(U32(0xffff0000), EAX)
	VPBROADCASTD(EAX, Z24)
	MOVL(U32(0x00400000), EAX)
	VPBROADCASTD(EAX, Z25)
	VPXORD(Z27, Z27, Z27)
	// R11: a key's row (chunks·64 bytes); RAX: sixteen keys' rows, from
	// the first half of a tile's keys to the second.
	Load(Param("chunks"), R11)
	SHLQ(U8(6), R11)
	MOVQ(R11, RAX)
	SHLQ(U8(4), RAX)
	Load(Param("keys"), RBX)
	Load(Param("tiles"), R8)
	Load(Param("out"), R9)
	Load(Param("kp"), R12)
	LEAQ(Mem{Base: R12, Index: RAX, Scale: 2}, R13) // the other half of kp
	TESTQ(R8, R8)
	JZ(LabelRef(name + "_done"))
	// convertKeys converts up to convStep keys of the conversion under way
	// (convLeft keys from the header at convHdr to convDst) and saves where
	// it stopped; the keys of the tile after them are prefetched when more
	// than ahead tiles remain (R8, from the current one). It uses RSI,
	// RDI, RDX, RCX and R10.
	convertKeys := func(tag string, ahead int) {
		MOVQ(convHdr, RSI)
		MOVQ(convDst, R10)
		Label(name + tag + "_key")
		MOVQ(Mem{Base: RSI}, RDX)
		MOVQ(RDX, RDI)
		CMPQ(R8, U8(ahead))
		JLE(LabelRef(name + tag + "_nopf"))
		MOVQ(Mem{Base: RSI, Disp: 24 * keys}, RDI)
		Label(name + tag + "_nopf")
		Load(Param("chunks"), RCX)
		Label(name + tag + "_chunk")
		VMOVUPS(Mem{Base: RDX}, Z16)
		VMOVUPS(Mem{Base: RDX, Disp: 64}, Z17)
		PREFETCHT0(Mem{Base: RDI})
		PREFETCHT0(Mem{Base: RDI, Disp: 64})
		for h, k := range []OpmaskPhysical{K1, K2} {
			v := zmm[16+h]
			VCMPPS(U8(3), v, v, k) // unordered: NaN
			VPORD(Z25, v, k, v)
		}
		// The second value of a pair fills a word's high half: its low
		// bits must not reach the first's.
		VPANDD(Z17, Z24, Z17)
		VPSRLD(U8(16), Z16, Z16)
		VPORD(Z17, Z16, Z16)
		VMOVDQU32(Z16, Mem{Base: R10})
		ADDQ(U32(128), RDX)
		ADDQ(U32(128), RDI)
		ADDQ(U8(64), R10)
		DECQ(RCX)
		JNZ(LabelRef(name + tag + "_chunk"))
		ADDQ(U8(24), RSI)
		DECQ(convLeft)
		JZ(LabelRef(name + tag + "_stop"))
		DECQ(convStep)
		JNZ(LabelRef(name + tag + "_key"))
		Label(name + tag + "_stop")
		MOVQ(RSI, convHdr)
		MOVQ(R10, convDst)
	}
	// startConversion sets up the conversion of the 32 keys at RSI into
	// R13's half of kp.
	startConversion := func() {
		MOVQ(RSI, convHdr)
		MOVQ(R13, convDst)
		MOVQ(U32(keys), RCX)
		MOVQ(RCX, convLeft)
	}
	MOVQ(RBX, RSI)
	startConversion()
	MOVQ(U32(keys), RCX)
	MOVQ(RCX, convStep)
	convertKeys("_first", 1)
	XCHGQ(R12, R13) // R12: the current tile's keys
	Label(name + "_tile")
	Load(Param("cs"), RDX)
	for r := range keys {
		VMOVUPS(Z27, Mem{Base: RDX, Disp: 4096 + 64*r})
	}
	Load(Param("qB"), RSI)
	Load(Param("w"), RDI)
	MOVQ(RDI, wNext)
	Load(Param("groups"), RCX)
	MOVQ(RCX, groupsLeft)
	Label(name + "_group")
	for t := range 4 {
		tileZero(t)
	}
	// The last group of a tile with one after it converts that tile's
	// keys as it goes.
	MOVQ(U32(0), convLeft)
	CMPQ(groupsLeft, U8(1))
	JNE(LabelRef(name + "_noconv"))
	CMPQ(R8, U8(1))
	JLE(LabelRef(name + "_noconv"))
	MOVQ(RSI, savedRSI)
	LEAQ(Mem{Base: RBX, Disp: 24 * keys}, RSI)
	startConversion()
	MOVQ(savedRSI, RSI)
	Label(name + "_noconv")
	MOVQ(R12, RDI)
	Load(Param("chunks"), RCX)
	MOVQ(RCX, chunksLeft)
	MOVQ(U32(64), R10)
	Label(name + "_chunk")
	tileLoad(4, RDI, R11)
	LEAQ(Mem{Base: RDI, Index: RAX, Scale: 1}, RCX)
	tileLoad(5, RCX, R11)
	for p := range 3 { // the query's hi, mid and lo
		for g := range 2 {
			LEAQ(Mem{Base: RSI, Disp: 1024 * (3*g + p)}, RCX)
			tileLoad(6+g, RCX, R10)
		}
		for kt := range 2 {
			for g := range 2 {
				tdpbf16ps(2*kt+g, 4+kt, 6+g)
			}
		}
	}
	ADDQ(U8(64), RDI)
	ADDQ(U32(6*1024), RSI)
	// Eight of the next tile's keys while the tile unit works.
	CMPQ(convLeft, U8(0))
	JE(LabelRef(name + "_chunkdone"))
	MOVQ(RSI, savedRSI)
	MOVQ(RDI, savedRDI)
	MOVQ(U32(keysPerChunk), RCX)
	MOVQ(RCX, convStep)
	convertKeys("_during", 2)
	MOVQ(savedRSI, RSI)
	MOVQ(savedRDI, RDI)
	MOVQ(U32(64), R10)
	Label(name + "_chunkdone")
	DECQ(chunksLeft)
	JNZ(LabelRef(name + "_chunk"))
	// The keys a short reduction left unconverted.
	CMPQ(convLeft, U8(0))
	JE(LabelRef(name + "_sums"))
	MOVQ(U32(keys), RCX)
	MOVQ(RCX, convStep)
	convertKeys("_rest", 2)
	Label(name + "_sums")
	DECQ(groupsLeft)
	MOVQ(U32(64), R10)
	Load(Param("cs"), RDX)
	for t := range 4 {
		LEAQ(Mem{Base: RDX, Disp: 1024 * t}, RCX)
		tileStore(t, RCX, R10)
	}
	MOVQ(wNext, RDI)
	VMOVUPS(Mem{Base: RDI}, Z28)
	VMOVUPS(Mem{Base: RDI, Disp: 64}, Z29)
	ADDQ(U32(128), RDI)
	MOVQ(RDI, wNext)
	for r := range keys {
		kt, i := r/16, r%16
		run := zmm[r%16]
		VMOVUPS(Mem{Base: RDX, Disp: 4096 + 64*r}, run)
		for g, t := range []VecPhysical{Z30, Z31} {
			VMOVUPS(Mem{Base: RDX, Disp: 1024*(2*kt+g) + 64*i}, t)
			VMAXPS(Z27, t, t) // max(dot, 0); a NaN dot gives 0
			VMULPS([]VecPhysical{Z28, Z29}[g], t, t)
			VADDPS(t, run, run)
		}
		VMOVUPS(run, Mem{Base: RDX, Disp: 4096 + 64*r})
	}
	CMPQ(groupsLeft, U8(0))
	JNE(LabelRef(name + "_group")) // RSI still walks qB
	for r := range keys {
		VMOVUPS(Mem{Base: RDX, Disp: 4096 + 64*r}, Z0)
		hsum512() // the AVX-512 score tiles' tree
		VMOVSS(X0, Mem{Base: R9, Disp: 4 * r})
	}
	ADDQ(U32(4*keys), R9)
	ADDQ(U32(24*keys), RBX)
	XCHGQ(R12, R13)
	DECQ(R8)
	JNZ(LabelRef(name + "_tile"))
	Label(name + "_done")
	tileRelease()
	VZEROUPPER()
	RET()
}
