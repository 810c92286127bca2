package conformance

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/mla"
	"github.com/cpmla/cpmla/numfmt"
	"github.com/cpmla/cpmla/safetensors"
)

// The kernels a case file can name in __metadata__["kernel"].
const (
	KernelSparsePrefill   = "sparse_mla_prefill"
	KernelSparseDecode    = "sparse_mla_decode"
	KernelDSMLAQuantize   = "fp8_ds_mla_quantize"
	KernelDSMLADequantize = "fp8_ds_mla_dequantize"
	KernelIndexerTopK     = "indexer_topk"
	KernelLSECombine      = "lse_combine"
	KernelDCPLocalSeqLens = "dcp_local_seq_lens"
	KernelDCPLocalize     = "dcp_localize_indices"
)

type runner func(b *binder, m meta) ([]safetensors.Tensor, error)

var runners = map[string]runner{
	KernelSparsePrefill:   runSparsePrefill,
	KernelSparseDecode:    runSparseDecode,
	KernelDSMLAQuantize:   runDSMLAQuantize,
	KernelDSMLADequantize: runDSMLADequantize,
	KernelIndexerTopK:     runIndexerTopK,
	KernelLSECombine:      runLSECombine,
	KernelDCPLocalSeqLens: runDCPLocalSeqLens,
	KernelDCPLocalize:     runDCPLocalize,
}

// inputs lists the tensors each kernel reads (optional ones included). A
// case with any other tensor is refused: a misspelt optional input such as
// "topk_lenght" must not silently change the semantics.
var inputs = map[string][]string{
	KernelSparsePrefill:   {"q", "kv", "indices", "topk_length"},
	KernelSparseDecode:    {"q", "kv_cache", "indices", "topk_length"},
	KernelDSMLAQuantize:   {"kv"},
	KernelDSMLADequantize: {"records"},
	KernelIndexerTopK:     {"q", "k", "w", "ends"},
	KernelLSECombine:      {"out", "lse"},
	KernelDCPLocalSeqLens: {"seq_lens"},
	KernelDCPLocalize:     {"indices", "block_table", "req_id"},
}

// Kernels returns the kernel names Run understands, sorted.
func Kernels() []string {
	return slices.Sorted(maps.Keys(runners))
}

// Run executes the kernel named by the file's __metadata__["kernel"] on the
// file's tensors and returns the output tensors, in the order of the kernel's
// contract (see the package documentation).
func Run(in *safetensors.File) ([]safetensors.Tensor, error) {
	c, err := CaseFromFile(in)
	if err != nil {
		return nil, err
	}
	return RunCase(c)
}

// RunCase is Run over a case already in memory. Every input is validated
// first; a malformed case gives a one-line error and never a panic.
func RunCase(c Case) ([]safetensors.Tensor, error) {
	known := strings.Join(Kernels(), ", ")
	k, ok := c.Metadata["kernel"]
	if !ok {
		return nil, fmt.Errorf(`metadata "kernel" is missing (set it to one of: %s)`, known)
	}
	run, ok := runners[k]
	if !ok {
		return nil, fmt.Errorf("unknown kernel %q in metadata (known: %s)", k, known)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Tensors)) {
		if !slices.Contains(inputs[k], name) {
			return nil, fmt.Errorf("%s: tensor %q is not an input of this kernel (inputs: %s)", k, name, strings.Join(inputs[k], ", "))
		}
	}
	out, err := run(newBinder(c, inputs[k]), meta{c.Metadata})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k, err)
	}
	return out, nil
}

var (
	rowDim    = strconv.Itoa(mla.RowDim)
	recordDim = strconv.Itoa(numfmt.DSMLARecordBytes)
)

// Limits on metadata sizes: generous for any real case, small enough that
// no product of them overflows.
const (
	maxPageSize   = 1 << 20
	maxDCPSize    = 1 << 16
	maxInterleave = 1 << 20
	maxTopK       = 1 << 24
)

// checkTopKLength refuses topk_length entries outside [0, topk].
func checkTopKLength(tl []int32, topk int) error {
	for i, v := range tl {
		if v < 0 || int(v) > topk {
			return fmt.Errorf("topk_length[%d] is %d, want a value in [0, topk=%d]", i, v, topk)
		}
	}
	return nil
}

// flashMLAEmptyLSE turns the engine's −Inf LSE of a row without a valid key
// into FlashMLA's +Inf.
func flashMLAEmptyLSE(lse []float32) {
	for i, v := range lse {
		if math.IsInf(float64(v), -1) {
			lse[i] = float32(math.Inf(1))
		}
	}
}

func runSparsePrefill(b *binder, m meta) ([]safetensors.Tensor, error) {
	scale, err := m.positiveFloat("sm_scale", "0.0625")
	if err != nil {
		return nil, err
	}
	dv, err := m.int("d_v", 1, 1<<20, strconv.Itoa(mla.LatentDim))
	if err != nil {
		return nil, err
	}
	if dv != mla.LatentDim {
		return nil, fmt.Errorf(`metadata "d_v" is %d, but the sparse kernel returns the %d-wide latent (set "d_v" to "%d"; W_UV maps it to the model's v_head_dim afterwards)`, dv, mla.LatentDim, mla.LatentDim)
	}
	q, err := b.f32("q", "s_q", "h_q", rowDim)
	if err != nil {
		return nil, err
	}
	kv, err := b.f32("kv", "s_kv", rowDim)
	if err != nil {
		return nil, err
	}
	idx, err := b.i32("indices", "s_q", "topk")
	if err != nil {
		return nil, err
	}
	tl, _, err := b.i32opt("topk_length", true, "s_q")
	if err != nil {
		return nil, err
	}
	sq, hq, skv, topk := b.dim("s_q"), b.dim("h_q"), b.dim("s_kv"), b.dim("topk")
	if err := checkTopKLength(tl, topk); err != nil {
		return nil, err
	}
	if err := checkSparseSizes(sq, hq, topk); err != nil {
		return nil, err
	}
	for i, v := range idx {
		if v < 0 || int(v) >= skv {
			idx[i] = -1
		}
	}
	out := make([]float32, sq*hq*mla.LatentDim)
	lse := make([]float32, sq*hq)
	maxLogits := make([]float32, sq*hq)
	mla.SparseAttention(out, lse, maxLogits, q, sq, hq, mla.DenseKV(kv), idx, topk, tl, scale, mla.NewWorkspace(topk, hq))
	flashMLAEmptyLSE(lse)
	return []safetensors.Tensor{
		safetensors.FromF32("out", []int{sq, hq, mla.LatentDim}, out),
		safetensors.FromF32("lse", []int{sq, hq}, lse),
		safetensors.FromF32("max_logits", []int{sq, hq}, maxLogits),
	}, nil
}

// checkSparseSizes bounds the outputs and the workspace of a sparse call.
func checkSparseSizes(rows, heads, topk int) error {
	if topk > maxTopK {
		return fmt.Errorf("topk is %d, at most %d is supported", topk, maxTopK)
	}
	if err := checkOutput("out", rows, heads, mla.LatentDim); err != nil {
		return err
	}
	if err := checkOutput("workspace", heads+mla.RowDim, topk); err != nil {
		return err
	}
	return nil
}

// dsmlaRecords is a paged fp8_ds_mla cache viewed as consecutive 656-byte
// records: slot g is record g (block g/P, offset g%P). Rows are decoded on
// demand by the engine's codec.
type dsmlaRecords []byte

func (c dsmlaRecords) Row(slot int32, scratch []float32) []float32 {
	off := int(slot) * numfmt.DSMLARecordBytes
	numfmt.DecodeDSMLA(scratch[:mla.RowDim], c[off:off+numfmt.DSMLARecordBytes])
	return scratch[:mla.RowDim]
}

func runSparseDecode(b *binder, m meta) ([]safetensors.Tensor, error) {
	scale, err := m.positiveFloat("sm_scale", "0.0625")
	if err != nil {
		return nil, err
	}
	page, err := m.int("page_size", 1, maxPageSize, "64")
	if err != nil {
		return nil, err
	}
	b.bind("page_size", page, `metadata "page_size"`)
	q, err := b.f32("q", "b", "s_q", "h_q", rowDim)
	if err != nil {
		return nil, err
	}
	cache, err := b.u8("kv_cache", "num_blocks", "page_size", recordDim)
	if err != nil {
		return nil, err
	}
	idx, err := b.i32("indices", "b", "s_q", "topk")
	if err != nil {
		return nil, err
	}
	tl, hasTL, err := b.i32opt("topk_length", true, "b")
	if err != nil {
		return nil, err
	}
	nb, sq, hq, topk := b.dim("b"), b.dim("s_q"), b.dim("h_q"), b.dim("topk")
	if err := checkTopKLength(tl, topk); err != nil {
		return nil, err
	}
	rows := nb * sq
	if err := checkSparseSizes(rows, hq, topk); err != nil {
		return nil, err
	}
	slots := len(cache) / numfmt.DSMLARecordBytes
	var rowLen []int32
	if hasTL {
		rowLen = make([]int32, rows)
	}
	for r := range rows {
		lim := topk
		if hasTL {
			lim = int(tl[r/sq])
			rowLen[r] = tl[r/sq]
		}
		row := idx[r*topk : (r+1)*topk]
		for j, v := range row {
			if j >= lim {
				row[j] = -1 // not counted: never read, whatever it holds
				continue
			}
			if v != -1 && (v < 0 || int(v) >= slots) {
				return nil, fmt.Errorf("indices[%d,%d,%d] is %d, want -1 or a slot of kv_cache in [0, %d) (num_blocks·page_size)", r/sq, r%sq, j, v, slots)
			}
		}
	}
	out := make([]float32, rows*hq*mla.LatentDim)
	lse := make([]float32, rows*hq)
	mla.SparseAttention(out, lse, nil, q, rows, hq, dsmlaRecords(cache), idx, topk, rowLen, scale, mla.NewWorkspace(topk, hq))
	flashMLAEmptyLSE(lse)
	return []safetensors.Tensor{
		safetensors.FromF32("out", []int{nb, sq, hq, mla.LatentDim}, out),
		safetensors.FromF32("lse", []int{nb, sq, hq}, lse),
	}, nil
}

func runDSMLAQuantize(b *binder, _ meta) ([]safetensors.Tensor, error) {
	kv, err := b.f32("kv", "n", rowDim)
	if err != nil {
		return nil, err
	}
	n := b.dim("n")
	recs := make([]byte, n*numfmt.DSMLARecordBytes)
	for i := range n {
		numfmt.EncodeDSMLA(recs[i*numfmt.DSMLARecordBytes:(i+1)*numfmt.DSMLARecordBytes], kv[i*mla.RowDim:(i+1)*mla.RowDim])
	}
	return []safetensors.Tensor{safetensors.FromU8("records", []int{n, numfmt.DSMLARecordBytes}, recs)}, nil
}

func runDSMLADequantize(b *binder, _ meta) ([]safetensors.Tensor, error) {
	recs, err := b.u8("records", "n", recordDim)
	if err != nil {
		return nil, err
	}
	n := b.dim("n")
	kv := make([]float32, n*mla.RowDim)
	for i := range n {
		numfmt.DecodeDSMLA(kv[i*mla.RowDim:(i+1)*mla.RowDim], recs[i*numfmt.DSMLARecordBytes:(i+1)*numfmt.DSMLARecordBytes])
	}
	return []safetensors.Tensor{safetensors.FromF32("kv", []int{n, mla.RowDim}, kv)}, nil
}

func runIndexerTopK(b *binder, m meta) ([]safetensors.Tensor, error) {
	topk, err := m.int("topk", 0, maxTopK, "2048")
	if err != nil {
		return nil, err
	}
	q, err := b.f32("q", "t", "H", "d")
	if err != nil {
		return nil, err
	}
	k, err := b.f32("k", "s", "d")
	if err != nil {
		return nil, err
	}
	w, err := b.f32("w", "t", "H")
	if err != nil {
		return nil, err
	}
	ends, err := b.i32("ends", "t")
	if err != nil {
		return nil, err
	}
	t, heads, dim, s := b.dim("t"), b.dim("H"), b.dim("d"), b.dim("s")
	for i, e := range ends {
		if e < 0 || int(e) > s {
			return nil, fmt.Errorf("ends[%d] is %d, want a key count in [0, s=%d]", i, e, s)
		}
	}
	if s > math.MaxInt32 {
		return nil, fmt.Errorf("k has %d keys, at most %d are supported", s, math.MaxInt32)
	}
	if err := checkOutput("scores", t, s); err != nil {
		return nil, err
	}
	if err := checkOutput("indices", t, topk); err != nil {
		return nil, err
	}
	slots := make([]int32, s)
	for j := range slots {
		slots[j] = int32(j)
	}
	scores := make([]float32, t*s)
	mla.IndexerScores(scores, q, w, t, heads, dim, mla.DenseKeys{Dim: dim, Data: k}, slots, ends)
	indices := make([]int32, t*topk)
	counts := make([]int32, t)
	mla.IndexerTopK(indices, counts, scores, t, s, topk)
	return []safetensors.Tensor{
		safetensors.FromF32("scores", []int{t, s}, scores),
		safetensors.FromI32("indices", []int{t, topk}, indices),
	}, nil
}

func runLSECombine(b *binder, _ meta) ([]safetensors.Tensor, error) {
	out, err := b.f32("out", "n", "t", "h", "d")
	if err != nil {
		return nil, err
	}
	lse, err := b.f32("lse", "n", "t", "h")
	if err != nil {
		return nil, err
	}
	n, t, h, d := b.dim("n"), b.dim("t"), b.dim("h"), b.dim("d")
	if n < 1 {
		return nil, fmt.Errorf("out and lse hold %d partials, want at least 1 (one per rank)", n)
	}
	dst := make([]float32, t*h*d)
	dstLSE := make([]float32, t*h)
	mla.CombineLSE(dst, dstLSE, out, lse, n, t, h, d)
	return []safetensors.Tensor{
		safetensors.FromF32("out", []int{t, h, d}, dst),
		safetensors.FromF32("lse", []int{t, h}, dstLSE),
	}, nil
}

// dcpLayout reads dcp_size, dcp_rank and interleave.
func dcpLayout(m meta) (kvcache.Layout, int, error) {
	n, err := m.int("dcp_size", 1, maxDCPSize, "2")
	if err != nil {
		return kvcache.Layout{}, 0, err
	}
	r, err := m.int("dcp_rank", 0, maxDCPSize, "0")
	if err != nil {
		return kvcache.Layout{}, 0, err
	}
	if r >= n {
		return kvcache.Layout{}, 0, fmt.Errorf(`metadata "dcp_rank" is %d, but dcp_size is %d (ranks are 0..%d)`, r, n, n-1)
	}
	i, err := m.int("interleave", 1, maxInterleave, "1")
	if err != nil {
		return kvcache.Layout{}, 0, err
	}
	return kvcache.Layout{N: n, I: i}, r, nil
}

func runDCPLocalSeqLens(b *binder, m meta) ([]safetensors.Tensor, error) {
	l, rank, err := dcpLayout(m)
	if err != nil {
		return nil, err
	}
	seq, err := b.i32("seq_lens", "R")
	if err != nil {
		return nil, err
	}
	for i, s := range seq {
		if s < 0 {
			return nil, fmt.Errorf("seq_lens[%d] is %d, want a length ≥ 0", i, s)
		}
	}
	local := make([]int32, len(seq))
	l.LocalSeqLens(local, seq, rank)
	return []safetensors.Tensor{safetensors.FromI32("local_seq_lens", []int{len(seq)}, local)}, nil
}

func runDCPLocalize(b *binder, m meta) ([]safetensors.Tensor, error) {
	l, rank, err := dcpLayout(m)
	if err != nil {
		return nil, err
	}
	bs, err := m.int("block_size", 1, maxPageSize, "64")
	if err != nil {
		return nil, err
	}
	if err := l.Validate(bs); err != nil {
		return nil, fmt.Errorf("metadata block_size/interleave: %w", err)
	}
	compact, err := m.bool("compact")
	if err != nil {
		return nil, err
	}
	idx, err := b.i32("indices", "T", "K")
	if err != nil {
		return nil, err
	}
	bt, err := b.i32("block_table", "R", "max_blocks")
	if err != nil {
		return nil, err
	}
	req, err := b.i32("req_id", "T")
	if err != nil {
		return nil, err
	}
	t, k, nreq, mb := b.dim("T"), b.dim("K"), b.dim("R"), b.dim("max_blocks")
	maxBlock := int32((math.MaxInt32 - (bs - 1)) / bs)
	for i, v := range bt {
		if v > maxBlock {
			return nil, fmt.Errorf("block_table[%d,%d] is %d: its slots overflow int32 with block_size %d (at most %d)", i/mb, i%mb, v, bs, maxBlock)
		}
	}
	for i, r := range req {
		if r < 0 || int(r) >= nreq {
			return nil, fmt.Errorf("req_id[%d] is %d, want a block_table row in [0, %d)", i, r, nreq)
		}
	}
	slots := make([]int32, t*k)
	counts := make([]int32, t)
	for i := range t {
		r := int(req[i])
		counts[i] = int32(l.Localize(slots[i*k:(i+1)*k], idx[i*k:(i+1)*k], bt[r*mb:(r+1)*mb], bs, rank, compact))
	}
	return []safetensors.Tensor{
		safetensors.FromI32("slots", []int{t, k}, slots),
		safetensors.FromI32("valid_counts", []int{t}, counts),
	}, nil
}
