package cp

import "fmt"

// Partition is the prefill-context-parallel (PCP) split of one step's tokens
// over P ranks (DualChunkSwap). The prefill tokens of each request are cut
// into 2P chunks of c = ceil(q/(2P)) tokens (the last ones clipped, possibly
// empty); rank r takes chunks r and 2P−1−r, so every rank gets one early and
// one late chunk and the causal work is balanced. Decode requests are not
// split: every rank holds all their tokens.
//
// Every rank builds the same Partition from the replicated step plan, so the
// per-rank row counts, their all-rank maximum (the padded row count every
// collective over the PCP group uses) and the restore index agree without
// communication. Build does not allocate; the buffers are sized by the
// constructor's maximum token count.
type Partition struct {
	p, maxTokens int
	tokens       [][]int32 // [P][MaxRows] batch token index, −1 = padding
	offsets      [][]int32 // [P][MaxRows] token offset within its request, −1 = padding
	rows         []int     // [P] real rows per rank
	maxRows      int
	total        int
	restore      []int32 // [total] row of the gathered [P·MaxRows] buffer holding token i
}

// NewPartition returns a partition over p PCP ranks for steps of at most
// maxTokens tokens.
func NewPartition(p, maxTokens int) (*Partition, error) {
	if p < 1 || maxTokens < 1 {
		return nil, fmt.Errorf("cp: PCP partition needs at least 1 rank and 1 token, got prefill-context-parallel-size %d and max-num-batched-tokens %d", p, maxTokens)
	}
	pt := &Partition{p: p, maxTokens: maxTokens, tokens: make([][]int32, p), offsets: make([][]int32, p),
		rows: make([]int, p), restore: make([]int32, maxTokens)}
	for r := range p {
		pt.tokens[r] = make([]int32, maxTokens)
		pt.offsets[r] = make([]int32, maxTokens)
	}
	return pt, nil
}

// Build partitions a step whose requests have queryLens[i] query tokens each,
// laid out one request after another in the batch; prefill[i] says whether
// request i is split (a prefill) or replicated (a decode).
func (pt *Partition) Build(queryLens []int32, prefill []bool) error {
	if len(prefill) != len(queryLens) {
		return fmt.Errorf("cp: PCP partition of %d requests got %d prefill flags", len(queryLens), len(prefill))
	}
	total := 0
	for i, q := range queryLens {
		if q < 0 {
			return fmt.Errorf("cp: PCP partition: request %d has %d query tokens", i, q)
		}
		total += int(q)
	}
	if total > pt.maxTokens {
		return fmt.Errorf("cp: PCP partition of %d tokens, built for at most %d (max-num-batched-tokens)", total, pt.maxTokens)
	}
	clear(pt.rows)
	start := 0
	for i, q32 := range queryLens {
		q := int(q32)
		for r := range pt.p {
			if !prefill[i] {
				pt.appendRange(r, start, 0, q)
				continue
			}
			c := (q + 2*pt.p - 1) / (2 * pt.p)
			for _, chunk := range [2]int{r, 2*pt.p - 1 - r} {
				lo, hi := min(chunk*c, q), min((chunk+1)*c, q)
				pt.appendRange(r, start, lo, hi)
			}
		}
		start += q
	}
	pt.total = total
	pt.maxRows = 0
	for _, n := range pt.rows {
		pt.maxRows = max(pt.maxRows, n)
	}
	for r := range pt.p {
		for j := pt.rows[r]; j < pt.maxRows; j++ {
			pt.tokens[r][j], pt.offsets[r][j] = -1, -1
		}
	}
	for i := range total {
		pt.restore[i] = -1
	}
	for r := range pt.p { // rank order: a replicated token is restored from rank 0's copy
		for j, tok := range pt.tokens[r][:pt.rows[r]] {
			if pt.restore[tok] < 0 {
				pt.restore[tok] = int32(r*pt.maxRows + j)
			}
		}
	}
	return nil
}

func (pt *Partition) appendRange(r, start, lo, hi int) {
	for o := lo; o < hi; o++ {
		n := pt.rows[r]
		pt.tokens[r][n] = int32(start + o)
		pt.offsets[r][n] = int32(o)
		pt.rows[r] = n + 1
	}
}

// Rows is the number of real rows of rank r.
func (pt *Partition) Rows(r int) int { return pt.rows[r] }

// MaxRows is the all-rank maximum of Rows: the padded row count of every
// collective over the PCP group in this step.
func (pt *Partition) MaxRows() int { return pt.maxRows }

// Tokens is rank r's padded row list [MaxRows]: the batch index of each
// row's token, −1 for padding rows. The slice is valid until the next Build.
func (pt *Partition) Tokens(r int) []int32 { return pt.tokens[r][:pt.maxRows] }

// Offsets is rank r's padded list [MaxRows] of each row's offset within its
// request's query tokens (its position is the request's computed length
// plus the offset), −1 for padding rows.
func (pt *Partition) Offsets(r int) []int32 { return pt.offsets[r][:pt.maxRows] }

// Restore is the restore index [tokens]: token i of the batch is row
// Restore()[i] of the all-gathered [P·MaxRows, D] buffer.
func (pt *Partition) Restore() []int32 { return pt.restore[:pt.total] }

// RestoreRows writes the rows of the all-gathered buffer gathered
// [P·MaxRows, d] back in batch order into dst [tokens, d].
func (pt *Partition) RestoreRows(dst, gathered []float32, d int) error {
	if len(dst) < pt.total*d || len(gathered) < pt.p*pt.maxRows*d {
		return fmt.Errorf("cp: PCP restore needs dst of %d and gathered of %d values ([%d, %d] from [%d·%d, %d]), got %d and %d",
			pt.total*d, pt.p*pt.maxRows*d, pt.total, d, pt.p, pt.maxRows, d, len(dst), len(gathered))
	}
	for i, row := range pt.restore[:pt.total] {
		copy(dst[i*d:(i+1)*d], gathered[int(row)*d:(int(row)+1)*d])
	}
	return nil
}
