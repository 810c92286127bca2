package kernels

import (
	"fmt"
	"math"

	"github.com/cpmla/cpmla/config"
)

// Rope is a rotary position embedding over vectors of Dim elements (Dim/2
// rotation pairs), with an optional DeepSeek-style YaRN frequency correction.
// It is immutable after NewRope and safe for concurrent use.
//
// Layouts: interleaved (GPT-J, DeepSeek interleaved=True, the MLA q_pe/k_pe
// layout) rotates pairs (x[2i], x[2i+1]); half-split (NeoX, the DeepSeek-V3.2
// indexer layout) rotates pairs (x[i], x[i+Dim/2]). Pair i turns by the angle
// pos·inv_freq_i:
//
//	(a, b) → (a·cos φ − b·sin φ, a·sin φ + b·cos φ)
type Rope struct {
	dim     int
	invFreq []float64
	// cosSinScale multiplies cos and sin: YaRN's
	// mscale(factor, mscale)/mscale(factor, mscale_all_dim), 1 without YaRN
	// (and 1 for every published DeepSeek-V3.2 / GLM-5 configuration).
	cosSinScale float64
}

// NewRope precomputes the frequencies of a rotary embedding over dim elements
// in float64: inv_freq_i = theta^(−2i/dim) for i < dim/2. A non-nil yarn
// applies the YaRN correction always (as vLLM and HF do, whatever the context
// length): with [low, high] from YaRNRange and
// ramp_i = clamp((i − low)/(high − low), 0, 1),
//
//	inv_freq'_i = inv_freq_i/factor · ramp_i + inv_freq_i · (1 − ramp_i)
//
// so the fast pairs i ≤ low keep their frequency and the slow pairs i ≥ high
// are divided by factor. It panics if dim is not a positive even number, theta
// is not > 1, or yarn has a non-positive factor, original length or beta.
func NewRope(dim int, theta float64, yarn *config.YaRN) *Rope {
	if dim <= 0 || dim%2 != 0 {
		panic(fmt.Sprintf("kernels: NewRope: dim must be even and > 0, got %d (the MLA rope width is 64)", dim))
	}
	if !(theta > 1) || math.IsInf(theta, 0) {
		panic(fmt.Sprintf("kernels: NewRope: theta must be a finite number > 1, got %g (DeepSeek-V3.2 uses 10000, GLM-5 1e6)", theta))
	}
	r := &Rope{dim: dim, invFreq: make([]float64, dim/2), cosSinScale: 1}
	for i := range r.invFreq {
		r.invFreq[i] = math.Pow(theta, -float64(2*i)/float64(dim))
	}
	if yarn == nil {
		return r
	}
	if !(yarn.Factor > 0) || yarn.OriginalMaxPositionEmbeddings <= 0 || !(yarn.BetaFast > 0) || !(yarn.BetaSlow > 0) {
		panic(fmt.Sprintf("kernels: NewRope: YaRN needs factor, original_max_position_embeddings, beta_fast and beta_slow > 0, got %+v (DeepSeek-V3.2: factor 40, 4096, 32, 1)", *yarn))
	}
	low, high := YaRNRange(dim, theta, yarn)
	for i, f := range r.invFreq {
		ramp := min(max((float64(i)-low)/(high-low), 0), 1)
		r.invFreq[i] = f/yarn.Factor*ramp + f*(1-ramp)
	}
	r.cosSinScale = config.YaRNMScale(yarn.Factor, yarn.MScale) / config.YaRNMScale(yarn.Factor, yarn.MScaleAllDim)
	return r
}

// YaRNRange returns the pair-index bounds [low, high] of the YaRN ramp for a
// rotary width dim: with corr(β) = dim·ln(L0/(2πβ))/(2 ln theta) and L0 the
// original context length, low = max(⌊corr(beta_fast)⌋, 0) and
// high = min(⌈corr(beta_slow)⌉, dim − 1); high is nudged by 0.001 when the two
// coincide so the ramp never divides by zero. DeepSeek-V3.2 (dim 64, theta
// 10000, L0 4096, β 32/1) gives low = 10, high = 23.
func YaRNRange(dim int, theta float64, yarn *config.YaRN) (low, high float64) {
	corr := func(beta float64) float64 {
		return float64(dim) * math.Log(float64(yarn.OriginalMaxPositionEmbeddings)/(2*math.Pi*beta)) / (2 * math.Log(theta))
	}
	low = max(math.Floor(corr(yarn.BetaFast)), 0)
	high = min(math.Ceil(corr(yarn.BetaSlow)), float64(dim-1))
	if low == high {
		high += 0.001
	}
	return low, high
}

// Dim is the number of elements the rotation acts on.
func (r *Rope) Dim() int { return r.dim }

// InvFreq returns the dim/2 (YaRN-corrected) inverse frequencies. The slice
// belongs to r and must not be modified.
func (r *Rope) InvFreq() []float64 { return r.invFreq }

// CosSinScale is the factor applied to cos and sin (YaRN mscale ratio; 1 for
// every model without YaRN or with mscale = mscale_all_dim).
func (r *Rope) CosSinScale() float64 { return r.cosSinScale }

// Apply rotates x (len(x) = Dim) in place for position pos. The angle
// pos·inv_freq_i and its cos/sin are computed in float64 and rounded once to
// float32 — more accurate than the fp32 tables of the reference code, whose
// angle error grows with pos — and the rotation is float32 with every product
// rounded before the add, so the bits do not depend on FMA fusion. It panics
// if len(x) != Dim or pos < 0.
func (r *Rope) Apply(x []float32, pos int, interleaved bool) {
	r.check(len(x), pos)
	half := r.dim / 2
	p := float64(pos)
	for i, f := range r.invFreq {
		s, c := math.Sincos(p * f)
		rotatePair(x, i, half, float32(c*r.cosSinScale), float32(s*r.cosSinScale), interleaved)
	}
}

// Angles writes position pos's cos and sin of every pair, as Apply rounds
// them, to cs (len(cs) = Dim): cs[2i] = cos, cs[2i+1] = sin of pair i. A step
// computes them once per token for all the heads and layers that Rotate
// with them. It panics if len(cs) != Dim or pos < 0.
func (r *Rope) Angles(cs []float32, pos int) {
	r.check(len(cs), pos)
	p := float64(pos)
	for i, f := range r.invFreq {
		s, c := math.Sincos(p * f)
		cs[2*i], cs[2*i+1] = float32(c*r.cosSinScale), float32(s*r.cosSinScale)
	}
}

// Rotate is Apply with the cos and sin Angles wrote for the position: the
// same bits. It panics if len(x) or len(cs) is not Dim.
func (r *Rope) Rotate(x, cs []float32, interleaved bool) {
	if len(x) != r.dim || len(cs) != r.dim {
		panic(fmt.Sprintf("kernels: Rope.Rotate: len(x)=%d, len(cs)=%d, the rope acts on %d elements", len(x), len(cs), r.dim))
	}
	half := r.dim / 2
	for i := range half {
		rotatePair(x, i, half, cs[2*i], cs[2*i+1], interleaved)
	}
}

// rotatePair turns pair i of x by the angle whose cos and sin are cf and sf,
// every product rounded before the add.
func rotatePair(x []float32, i, half int, cf, sf float32, interleaved bool) {
	ia, ib := i, i+half
	if interleaved {
		ia, ib = 2*i, 2*i+1
	}
	a, b := x[ia], x[ib]
	x[ia] = float32(a*cf) - float32(b*sf)
	x[ib] = float32(a*sf) + float32(b*cf)
}

// Apply64 is Apply in float64 throughout, for the oracle.
func (r *Rope) Apply64(x []float64, pos int, interleaved bool) {
	r.check(len(x), pos)
	half := r.dim / 2
	p := float64(pos)
	for i, f := range r.invFreq {
		s, c := math.Sincos(p * f)
		c *= r.cosSinScale
		s *= r.cosSinScale
		ia, ib := i, i+half
		if interleaved {
			ia, ib = 2*i, 2*i+1
		}
		a, b := x[ia], x[ib]
		x[ia] = float64(a*c) - float64(b*s)
		x[ib] = float64(a*s) + float64(b*c)
	}
}

func (r *Rope) check(n, pos int) {
	if n != r.dim {
		panic(fmt.Sprintf("kernels: Rope.Apply: len(x)=%d, the rope acts on %d elements", n, r.dim))
	}
	if pos < 0 {
		panic(fmt.Sprintf("kernels: Rope.Apply: negative position %d", pos))
	}
}
