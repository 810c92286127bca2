package model

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/safetensors"
)

// TensorNamer is implemented by tensor sources that can list what they hold
// (checkpoints, in-memory maps); Build then refuses a checkpoint holding
// tensors its config does not account for.
type TensorNamer interface {
	Names() []string
}

// Names lists the map's tensor names, sorted.
func (m TensorMap) Names() []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// weightLoader reads the tensors of one model from a source, checking each
// against its spec and the checkpoint's quantization_config.
type weightLoader struct {
	cfg   *config.Model
	src   TensorSource
	specs map[string]TensorSpec
	// used collects every tensor read (weights and their scales), for the
	// check that nothing in the checkpoint is left unexplained.
	used map[string]bool
}

func newWeightLoader(cfg *config.Model, src TensorSource) *weightLoader {
	l := &weightLoader{cfg: cfg, src: src, specs: map[string]TensorSpec{}, used: map[string]bool{}}
	for _, s := range TensorSpecs(cfg) {
		l.specs[s.Name] = s
	}
	return l
}

// tensor returns the named tensor after checking its shape against its spec.
func (l *weightLoader) tensor(name string) (safetensors.Tensor, TensorSpec, error) {
	s, ok := l.specs[name]
	if !ok {
		return safetensors.Tensor{}, s, fmt.Errorf("tensor %s is not part of a %s model with this config", name, l.cfg.Architecture)
	}
	t, err := l.src.Tensor(name)
	if err != nil {
		return t, s, err
	}
	l.used[name] = true
	if !slices.Equal(t.Shape, s.Shape) {
		return t, s, fmt.Errorf("tensor %s: shape %v, but config.json makes it %v", name, t.Shape, s.Shape)
	}
	return t, s, nil
}

// matrix reads a 2-D weight as a kernels.Matrix: F32 and BF16 as zero-copy
// views where aligned, F16 widened, and F8_E4M3 as codes with the block
// scales of its weight_scale_inv (never as raw codes).
func (l *weightLoader) matrix(name string) (*kernels.Matrix, error) {
	t, spec, err := l.tensor(name)
	if err != nil {
		return nil, err
	}
	if len(t.Shape) != 2 {
		return nil, fmt.Errorf("tensor %s is %d-D, want a [out, in] matrix", name, len(t.Shape))
	}
	scaleName := name + ScaleSuffix
	scale, scaleErr := l.src.Tensor(scaleName)
	if t.DType != safetensors.F8E4M3 {
		if scaleErr == nil {
			return nil, fmt.Errorf("tensor %s is %s but has a %s: block scales belong to F8_E4M3 weights", name, t.DType, scaleName)
		}
		return denseMatrix(t)
	}
	q := l.cfg.Quantization
	switch {
	case !spec.Linear:
		return nil, fmt.Errorf("tensor %s is F8_E4M3, but only Linear weights are stored in fp8", name)
	case q == nil:
		return nil, fmt.Errorf("tensor %s is F8_E4M3, but config.json has no fp8 quantization_config; the engine never runs on raw e4m3 codes (re-export the checkpoint with its quantization_config, or dequantize it)", name)
	case q.NotConverted(ModuleOf(name)):
		return nil, fmt.Errorf("tensor %s is F8_E4M3, but quantization_config.modules_to_not_convert keeps %s in its own dtype", name, ModuleOf(name))
	case scaleErr != nil:
		return nil, fmt.Errorf("tensor %s is F8_E4M3 without its block scales %s: %w", name, scaleName, scaleErr)
	}
	l.used[scaleName] = true
	rows, cols := t.Shape[0], t.Shape[1]
	want := []int{ceilDiv(rows, config.FP8BlockSize), ceilDiv(cols, config.FP8BlockSize)}
	if scale.DType != safetensors.F32 || !slices.Equal(scale.Shape, want) {
		return nil, fmt.Errorf("tensor %s: %s %v, want F32 %v (one scale per %d×%d block of %v)", scaleName, scale.DType, scale.Shape, want, config.FP8BlockSize, config.FP8BlockSize, t.Shape)
	}
	s, err := scale.F32()
	if err != nil {
		if s, err = scale.ToF32(nil); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", scaleName, err)
		}
	}
	if err := checkScales(scaleName, s, q.ScaleFmt); err != nil {
		return nil, err
	}
	m, err := kernels.NewFP8Matrix(rows, cols, t.U8(), s)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	return m, nil
}

// checkScales refuses block scales that are not finite and ≥ 0, or, with
// scale_fmt ue8m0, not powers of two.
func checkScales(name string, s []float32, scaleFmt string) error {
	for i, v := range s {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || v < 0 {
			return fmt.Errorf("tensor %s: block scale %d is %g; scales must be finite and ≥ 0", name, i, v)
		}
		if scaleFmt == "ue8m0" {
			if frac, _ := math.Frexp(float64(v)); frac != 0.5 {
				return fmt.Errorf("tensor %s: block scale %d is %g, not a power of two, but quantization_config.scale_fmt is ue8m0", name, i, v)
			}
		}
	}
	return nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// denseMatrix views a 2-D F32 or BF16 tensor as a kernels.Matrix without
// copying when its data is aligned; F16 (and an unaligned view) is widened
// to f32.
func denseMatrix(t safetensors.Tensor) (*kernels.Matrix, error) {
	m := &kernels.Matrix{Rows: t.Shape[0], Cols: t.Shape[1]}
	if v, err := t.BF16(); err == nil {
		m.BF16 = v
		return m, nil
	}
	if v, err := t.F32(); err == nil {
		m.F32 = v
		return m, nil
	}
	v, err := t.ToF32(nil)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	m.F32 = v
	return m, nil
}

// vector reads a 1-D tensor as float32 (copied).
func (l *weightLoader) vector(name string) ([]float32, error) {
	t, _, err := l.tensor(name)
	if err != nil {
		return nil, err
	}
	if len(t.Shape) != 1 {
		return nil, fmt.Errorf("tensor %s is %d-D, want a vector", name, len(t.Shape))
	}
	v, err := t.ToF32(nil)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	return v, nil
}

// checkAllUsed refuses a checkpoint that holds tensors the config does not
// account for (more experts or layers than config.json says, stray scales),
// naming the first one.
func (l *weightLoader) checkAllUsed() error {
	n, ok := l.src.(TensorNamer)
	if !ok {
		return nil
	}
	var extra []string
	for _, name := range n.Names() {
		if !l.used[name] {
			extra = append(extra, name)
		}
	}
	if len(extra) == 0 {
		return nil
	}
	more := ""
	if len(extra) > 1 {
		more = fmt.Sprintf(" (and %d more)", len(extra)-1)
	}
	return fmt.Errorf("checkpoint holds tensor %s%s that config.json does not account for (%d layers, %d routed experts, %d MTP layers); check num_hidden_layers, n_routed_experts and num_nextn_predict_layers",
		extra[0], more, l.cfg.NumLayers, l.cfg.NRoutedExperts, l.cfg.NumNextNPredict)
}

// weightReads counts what a step reads and computes, part by part (ops):
// the weight bytes of its Linear layers (every product goes through mul,
// which counts the bytes of the weight it reads, once per call whatever the
// number of rows) and their FLOPs, and, added by the attention block, the
// cache rows and indexer keys it reads and the FLOPs of attention and the
// indexer. The step's totals (StepCost) and its roofline part by part
// (bound) are sums over the parts.
type weightReads struct {
	ops []opCost
	// timed has every product timed (opCost.ns): a profile of the step
	// by part, off unless asked for.
	timed bool
}

// opKind says what an opCost counts. Embedding lookups, attention calls of a
// layer and indexer calls have one ratio of FLOPs to bytes each, so
// consecutive calls of one of those kinds are counted as one part without
// changing bound.
type opKind uint8

const (
	opProduct   opKind = iota // a Linear layer's product (weight bytes)
	opLookup                  // embedding rows looked up (weight bytes)
	opAttention               // attention over cache rows (KV bytes)
	opIndexer                 // indexer keys scored (KV bytes)
)

// opCost is what one part of a step read and computed; for a product, also
// its shape (rows activation rows by heads weights shaped as w) and, when
// the step is timed, how long it took.
type opCost struct {
	kind         opKind
	bytes, flops int64
	rows, heads  int
	w            *kernels.Matrix
	ns           int64
}

// add counts one part of the step that is not a product.
func (r *weightReads) add(kind opKind, bytes, flops int64) {
	if n := len(r.ops); n > 0 && r.ops[n-1].kind == kind {
		r.ops[n-1].bytes += bytes
		r.ops[n-1].flops += flops
		return
	}
	r.ops = append(r.ops, opCost{kind: kind, bytes: bytes, flops: flops})
}

// addProduct counts a product of n rows with heads weights shaped as w,
// started at t0 (start).
func (r *weightReads) addProduct(n, heads int, w *kernels.Matrix, bytes, flops int64, t0 time.Time) {
	o := opCost{kind: opProduct, bytes: bytes, flops: flops, rows: n, heads: heads, w: w}
	if r.timed {
		o.ns = int64(time.Since(t0))
	}
	r.ops = append(r.ops, o)
}

// start is the start of a part to time: now when the step is timed.
func (r *weightReads) start() time.Time {
	if !r.timed {
		return time.Time{}
	}
	return time.Now()
}

// took adds the time since t0 to the last part counted when the step is
// timed and that part is of kind (consecutive parts of one kind are one).
func (r *weightReads) took(kind opKind, t0 time.Time) {
	if n := len(r.ops); r.timed && n > 0 && r.ops[n-1].kind == kind {
		r.ops[n-1].ns += int64(time.Since(t0))
	}
}

func (r *weightReads) mul(dst, x []float32, n int, w *kernels.Matrix) {
	t0 := r.start()
	kernels.MatMulT(dst, x, n, w)
	r.addProduct(n, 1, w, matrixBytes(w), 2*int64(n)*int64(w.Rows)*int64(w.Cols), t0)
}

// mulHeads is kernels.MatMulTHeads (one product per head of ws over rows
// strided in x and dst), counted as one part: every head's product has the
// same ratio of FLOPs to bytes.
func (r *weightReads) mulHeads(dst []float32, ldd, hd int, x []float32, ldx, hx, n int, ws []kernels.Matrix, scratch []float32) {
	t0 := r.start()
	kernels.MatMulTHeads(dst, ldd, hd, x, ldx, hx, n, ws, scratch)
	if len(ws) == 0 {
		return
	}
	var bytes, flops int64
	for h := range ws {
		w := &ws[h]
		bytes += matrixBytes(w)
		flops += 2 * int64(n) * int64(w.Rows) * int64(w.Cols)
	}
	r.addProduct(n, len(ws), &ws[0], bytes, flops, t0)
}

// reset starts the count of a step, keeping the parts' storage.
func (r *weightReads) reset() { r.ops = r.ops[:0] }

// cost is the step's totals: weight bytes (products and lookups), cache
// and indexer-key bytes, FLOPs.
func (r *weightReads) cost() StepCost {
	var c StepCost
	for _, o := range r.ops {
		if o.kind == opProduct || o.kind == opLookup {
			c.WeightBytes += o.bytes
		} else {
			c.KVBytes += o.bytes
		}
		c.FLOPs += o.flops
	}
	return c
}

// bound is Σ max(bytes / ReadBW, FLOPs / FMAPeak) over the step's parts, in
// seconds: the step's time if each part ran at its own roofline, one after
// another.
func (r *weightReads) bound(l Limits) float64 {
	var t float64
	for _, o := range r.ops {
		t += o.bound(l)
	}
	return t
}

// roofline is the step's roofline in seconds, taken over its totals:
// max(Σ bytes / ReadBW, Σ compute), where a part's compute is its FLOPs /
// FMAPeak and, for a product of fp8 weights that l.FP8 covers, at least its
// weights at the fp8 product rate of its rows (decoding a weight runs on
// the FMA pipes' ports, so that rate is the core's compute ceiling for such
// a product). Without l.FP8 it is max(Σ bytes / ReadBW, Σ FLOPs /
// FMAPeak), StepCost's roofline.
func (r *weightReads) roofline(l Limits) float64 {
	return max(r.terms(l))
}

// terms is the two terms of roofline in seconds: all bytes / ReadBW, and
// the parts' compute at l.
func (r *weightReads) terms(l Limits) (memory, compute float64) {
	var bytes int64
	for _, o := range r.ops {
		bytes += o.bytes
		compute += o.compute(l)
	}
	return float64(bytes) / l.ReadBW, compute
}

// compute is the part's compute time in seconds: FLOPs / FMAPeak, and for
// a product of fp8 weights that l.FP8 covers at least its weights at the
// fp8 product rate of its rows.
func (o *opCost) compute(l Limits) float64 {
	t := float64(o.flops) / l.FMAPeak
	if o.kind == opProduct && o.w != nil && o.w.FP8 != nil && o.rows > 0 {
		if s, ok := fp8Seconds(l.FP8, o.rows); ok {
			t = max(t, s*float64(o.flops/(2*int64(o.rows)))) // 2·rows FLOPs per weight
		}
	}
	return t
}

// bound is the part's own roofline in seconds: max(bytes / ReadBW, FLOPs /
// FMAPeak), and for a product of fp8 weights that l.FP8 covers, at least
// its weights at the fp8 product rate of its rows.
func (o *opCost) bound(l Limits) float64 {
	return max(float64(o.bytes)/l.ReadBW, o.compute(l))
}

// matrixBytes is the storage a matrix's product reads: its values, and for
// fp8 the block scales its blocks use.
func matrixBytes(w *kernels.Matrix) int64 {
	switch {
	case w.F32 != nil:
		return 4 * int64(len(w.F32))
	case w.BF16 != nil:
		return 2 * int64(len(w.BF16))
	}
	s := w.Scales
	br := (s.RowOff+w.Rows+config.FP8BlockSize-1)/config.FP8BlockSize - s.RowOff/config.FP8BlockSize
	bc := (s.ColOff+w.Cols+config.FP8BlockSize-1)/config.FP8BlockSize - s.ColOff/config.FP8BlockSize
	return int64(len(w.FP8)) + 4*int64(br*bc)
}
