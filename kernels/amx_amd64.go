package kernels

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"golang.org/x/sys/cpu"
)

// enableAMX asks Linux for the AMX tile state (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), once per process; a thread
// that runs a tile instruction without it is killed with SIGILL.
func enableAMX() error {
	amxOnce.Do(func() {
		if !cpu.X86.HasAMXTile || !cpu.X86.HasAMXBF16 || !supported(levelAVX512) {
			amxErr = errors.New("this CPU has no AMX-BF16 tiles (or no AVX-512)")
			return
		}
		const archReqXCompPerm, xfeatureXTileData = 0x1023, 18
		if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXCompPerm, xfeatureXTileData, 0); e != 0 {
			amxErr = fmt.Errorf("the kernel refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM): %w", e)
		}
	})
	return amxErr
}

var (
	amxOnce sync.Once
	amxErr  error
)

// amxConfigs[n] is the tile configuration of a slab of n activation rows
// (palette 1): tiles 0-3 the sums, 4 and 5 the two groups' weight chunks
// (eight rows of 64 bytes), 6 the pieces (sixteen pair rows) and, for more
// than amxOneTileRows rows, 7 the lo pieces; the sums of tiles 0 and 2 take
// tile 6's columns, those of 1 and 3 tile 7's. With one piece tile the sums
// are tiles 0 and 1.
var amxConfigs = func() (c [amxSlabRows + 1][64]byte) {
	for n := 1; n <= amxSlabRows; n++ {
		cfg := &c[n]
		cfg[0] = 1
		set := func(t, rows, colsb int) { cfg[16+2*t], cfg[48+t] = byte(colsb), byte(rows) }
		set(4, ilvRows, 64)
		set(5, ilvRows, 64)
		if n <= amxOneTileRows {
			set(0, ilvRows, 12*n)
			set(1, ilvRows, 12*n)
			set(6, 16, 12*n)
			continue
		}
		set(0, ilvRows, 8*n)
		set(1, ilvRows, 4*n)
		set(2, ilvRows, 8*n)
		set(3, ilvRows, 4*n)
		set(6, 16, 8*n)
		set(7, 16, 4*n)
	}
	return
}()

// amxSlab runs the slab tile for n rows over pairs pairs of groups: the
// first group at w, a pair's second gstride bytes after its first (0: the
// same group twice), pstride bytes from pair to pair; chunks of 32 columns;
// pair q's sums in s[q], added to them when carry.
func amxSlab(n int, w *uint16, gstride, pairs, pstride int, pieces *uint16, chunks int, s []amxSums, carry bool) {
	if pairs < 1 || pairs > amxCallPairs || pairs > len(s) {
		panic(fmt.Sprintf("kernels: amxSlab: %d pairs of groups for %d pairs of sums, want 1 to %d", pairs, len(s), amxCallPairs))
	}
	c := 0
	if carry {
		c = 1
	}
	if n <= amxOneTileRows {
		amxIlvSlab1(&amxConfigs[n][0], w, gstride, pairs, pstride, pieces, chunks, &s[0][0], n, c, amxPrefetch)
		return
	}
	amxIlvSlab2(&amxConfigs[n][0], w, gstride, pairs, pstride, pieces, chunks, &s[0][0], n, c, amxPrefetch)
}

// amxPrefetch is how far ahead of its weight tiles a slab call prefetches
// (bytes of each group's stream): four chunks.
const amxPrefetch = 2048

// amxPiecesRow runs amxPiecesRowAVX512 over x's whole chunks of 32 values:
// each piece's pairs at hi, mid and lo, row bytes apart down a tile (loRow
// for lo), chunk bytes further per chunk.
func amxPiecesRow(x []float32, hi, mid, lo []uint16, row, loRow, chunk int) {
	if len(x)%32 != 0 || len(x) == 0 {
		panic(fmt.Sprintf("kernels: amxPiecesRow: %d values, want whole chunks of 32", len(x)))
	}
	amxPiecesRowAVX512(&x[0], len(x)/32, &hi[0], &mid[0], &lo[0], row, loRow, chunk)
}

// amxScoreConfig is the tile configuration of the indexer's score tiles
// (palette 1): all eight tiles sixteen rows of 64 bytes.
var amxScoreConfig = func() (c [64]byte) {
	c[0] = 1
	for t := range 8 {
		c[16+2*t], c[48+t] = 64, 16
	}
	return
}()

// amxScoreTiles runs amxScoreTilesAMX: tiles whole tiles of 32 keys exact
// in bf16 (their headers from keys on) against a prepared query's pieces
// qB.
func amxScoreTiles(qB *uint16, groups, chunks int, w *float32, keys *[]float32, tiles int, kp *uint16, cs *float32, out *float32) {
	amxScoreTilesAMX(&amxScoreConfig[0], qB, groups, chunks, w, keys, tiles, kp, cs, out)
}
