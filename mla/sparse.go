package mla

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/cpmla/cpmla/kernels"
)

// Workspace is the scratch of SparseAttention, sized once for a top-k width
// and a head count and never grown.
type Workspace struct {
	topk, heads int
	rowBuf      []float32        // [topk, RowDim]: decode space for gathered rows
	rows        [][]float32      // [topk]: the gathered rows of one query row (views or rowBuf parts)
	rowsBF16    [][]uint16       // [topk]: gathered bf16 rows (views) on the fast path
	logits      []float32        // [heads, topk] logits (then softmax weights) and the fast kernels' split partials (kernels.AttendScratchLen)
	slots       []int32          // [topk]: the valid slots of one query row (decoded rows, fast path)
	sel         bf16Selection    // the bf16 rows of a call's query rows (fast path)
	decSel      decodedSelection // the decoded rows of a call's query rows (fast path)
	f32Sel      f32Selection     // the rows of any other source (fast path)
}

// NewWorkspace returns the scratch for SparseAttention calls with at most
// topk indices per row and at most heads heads.
func NewWorkspace(topk, heads int) *Workspace {
	if topk < 0 || heads < 0 {
		panic(fmt.Sprintf("mla: NewWorkspace(topk=%d, heads=%d): sizes must not be negative", topk, heads))
	}
	return &Workspace{
		topk:     topk,
		heads:    heads,
		rowBuf:   make([]float32, topk*RowDim),
		rows:     make([][]float32, topk),
		rowsBF16: make([][]uint16, topk),
		logits:   make([]float32, kernels.AttendScratchLen(heads, topk, LatentDim)),
		slots:    make([]int32, topk),
	}
}

// WorkspaceBytes is the memory NewWorkspace(topk, heads) holds, for start-up
// memory budgets: the decode space of topk rows, two tables of topk slice
// headers (f32 and bf16 rows), the logits scratch of the attention kernels
// (kernels.AttendScratchLen: [heads, topk] logits and the split partials)
// and topk slots.
func WorkspaceBytes(topk, heads int) int64 {
	return int64(topk)*RowDim*4 + int64(topk)*int64(unsafe.Sizeof([]float32(nil))+unsafe.Sizeof([]uint16(nil))) +
		int64(kernels.AttendScratchLen(heads, topk, LatentDim))*4 + int64(topk)*4
}

// Bytes is the memory the workspace holds (WorkspaceBytes of its sizes).
func (ws *Workspace) Bytes() int64 { return WorkspaceBytes(ws.topk, ws.heads) }

// SparseAttention is the absorbed (MQA) sparse MLA attention of the FlashMLA
// sparse kernels, in natural-log units:
//
//	q        [rows, heads, RowDim]  absorbed queries [W_UKᵀ q_nope | q_pe]
//	indices  [rows, topk]           cache slots; any negative entry is no key
//	topkLen  nil or [rows]          only the first topkLen[r] entries of row r count
//	logit    = scale · q·row(slot)
//	out      [rows, heads, LatentDim] = Σ softmax(logit) · row(slot)[0:LatentDim]
//	lse      [rows, heads]          ln Σ exp(logit)
//	maxLogits nil or [rows, heads]  max logit
//
// A row with no valid entry gets out 0, lse −Inf and maxLogits −Inf. Rows of
// kv are read only for valid entries, once per query row, whatever the number
// of heads. With a Workspace of at least (topk, heads) the call does not
// allocate; a nil ws allocates one. When package kernels runs an assembly
// implementation the same math runs on kernels.AttendRows (see fast.go);
// CPMLA_KERNELS=ref selects the plain loop below.
func SparseAttention(out, lse, maxLogits, q []float32, rows, heads int, kv KVSource, indices []int32, topk int, topkLen []int32, scale float32, ws *Workspace) {
	checkLen("SparseAttention", "out", len(out), rows*heads*LatentDim)
	checkLen("SparseAttention", "lse", len(lse), rows*heads)
	checkLen("SparseAttention", "q", len(q), rows*heads*RowDim)
	checkLen("SparseAttention", "indices", len(indices), rows*topk)
	if maxLogits != nil {
		checkLen("SparseAttention", "maxLogits", len(maxLogits), rows*heads)
	}
	if topkLen != nil {
		checkLen("SparseAttention", "topkLen", len(topkLen), rows)
	}
	if ws == nil {
		ws = NewWorkspace(topk, heads)
	}
	if ws.topk < topk || ws.heads < heads {
		panic(fmt.Sprintf("mla: SparseAttention needs a workspace for topk %d and %d heads, it was sized for topk %d and %d heads",
			topk, heads, ws.topk, ws.heads))
	}
	if kernels.Accelerated() {
		sparseAttentionFast(out, lse, maxLogits, q, rows, heads, kv, indices, topk, topkLen, scale, ws)
		return
	}
	negInf := float32(math.Inf(-1))
	for r := range rows {
		// Gather the valid rows once; every head uses them.
		n := 0
		for _, slot := range selectedSlots(r, topk, indices, topkLen) {
			if slot < 0 {
				continue
			}
			ws.rows[n] = kv.Row(slot, ws.rowBuf[n*RowDim:(n+1)*RowDim])[:RowDim]
			n++
		}
		outR := out[r*heads*LatentDim : (r+1)*heads*LatentDim]
		clear(outR)
		lseR := lse[r*heads : (r+1)*heads]
		if n == 0 {
			for h := range lseR {
				lseR[h] = negInf
			}
			if maxLogits != nil {
				for h := range heads {
					maxLogits[r*heads+h] = negInf
				}
			}
			continue
		}
		qR := q[r*heads*RowDim : (r+1)*heads*RowDim]
		gathered := ws.rows[:n]
		// Key-major: each row is loaded once for all heads.
		for j, row := range gathered {
			for h := range heads {
				ws.logits[h*topk+j] = scale * kernels.Dot(qR[h*RowDim:(h+1)*RowDim], row)
			}
		}
		for h := range heads {
			lg := ws.logits[h*topk : h*topk+n]
			if maxLogits != nil {
				m := negInf
				for _, v := range lg {
					m = max(m, v)
				}
				maxLogits[r*heads+h] = m
			}
			lseR[h] = kernels.LogSumExp(lg)
			kernels.Softmax(lg) // logits become the attention weights
		}
		for j, row := range gathered {
			v := row[:LatentDim]
			for h := range heads {
				kernels.Axpy(ws.logits[h*topk+j], v, outR[h*LatentDim:(h+1)*LatentDim])
			}
		}
	}
}

// checkLen panics unless a buffer holds at least want elements.
func checkLen(fn, name string, got, want int) {
	if got < want {
		panic(fmt.Sprintf("mla: %s: %s has %d elements, needs %d", fn, name, got, want))
	}
}

// selectedSlots is query row r's entries of indices ([rows, topk]), the
// first topkLen[r] of them when topkLen is given.
func selectedSlots(r, topk int, indices, topkLen []int32) []int32 {
	lim := topk
	if topkLen != nil {
		lim = max(0, min(lim, int(topkLen[r])))
	}
	return indices[r*topk : r*topk+lim]
}
