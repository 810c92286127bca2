package cp

import (
	"fmt"
	"math"

	"github.com/cpmla/cpmla/kvcache"
)

// LocalizeRows turns rows rows of global top-k positions [rows, k] into this
// rank's cache slots [rows, k] through kvcache.Layout.Localize (the one
// ownership function), and writes the number of kept slots of each row to
// valid [rows]. Row i belongs to request rowReq[i], whose block table is
// blockTables[rowReq[i]]. With compact the kept slots of a row are packed to
// its front (sparse-sharded); without, every column stays in place and the
// dropped ones become −1 (sparse-gather). slots may alias positions. It does
// not allocate.
func LocalizeRows(l kvcache.Layout, rank int, slots, valid, positions []int32, rows, k int,
	blockTables [][]int32, rowReq []int32, blockSize int, compact bool) error {
	if len(slots) < rows*k || len(positions) < rows*k || len(valid) < rows || len(rowReq) < rows {
		return fmt.Errorf("cp: localize %d rows of %d needs slots and positions of %d and valid and rowReq of %d, got %d, %d, %d, %d",
			rows, k, rows*k, rows, len(slots), len(positions), len(valid), len(rowReq))
	}
	for i := range rows {
		req := int(rowReq[i])
		if req < 0 || req >= len(blockTables) {
			return fmt.Errorf("cp: localize row %d names request %d, only %d block tables given", i, req, len(blockTables))
		}
		valid[i] = int32(l.Localize(slots[i*k:(i+1)*k], positions[i*k:(i+1)*k], blockTables[req], blockSize, rank, compact))
	}
	return nil
}

// NeutralizeEmptyRows gives every row whose localized top-k set is empty on
// this rank (valid[i] == 0) output 0 and LSE −Inf for all heads, whatever a
// kernel left there (a kernel may report +Inf or leave garbage for a row with
// no key), so the DCP combine sees an empty partial. out is [rows, heads, d],
// lse [rows, heads]. It does not allocate.
func NeutralizeEmptyRows(out, lse []float32, valid []int32, rows, heads, d int) {
	neg := float32(math.Inf(-1))
	for i := range rows {
		if valid[i] != 0 {
			continue
		}
		clear(out[i*heads*d : (i+1)*heads*d])
		for h := range heads {
			lse[i*heads+h] = neg
		}
	}
}
