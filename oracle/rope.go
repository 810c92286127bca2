package oracle

import (
	"math"

	"github.com/cpmla/cpmla/config"
)

// ropeTable is the rotary frequency table shared by the MLA attention and
// the indexer (same θ, same YaRN correction).
type ropeTable struct {
	invFreq []float64 // [dr/2]
	// attn multiplies cos and sin: mscale(f, mscale)/mscale(f, mscale_all_dim)
	// under YaRN, 1 otherwise.
	attn float64
}

// newRopeTable builds inv_freq_i = θ^(−2i/dr), i < dr/2, with the YaRN
// correction applied whenever rope scaling is configured:
//
//	corr(n)  = dr·ln(L0/(2πn)) / (2 ln θ)
//	low      = max(floor(corr(β_fast)), 0), high = min(ceil(corr(β_slow)), dr−1)
//	ramp_i   = clamp((i − low)/(high − low), 0, 1)   (high += 0.001 if equal)
//	inv'_i   = inv_i/factor · ramp_i + inv_i · (1 − ramp_i)
func newRopeTable(cfg *config.Model) ropeTable {
	dr := cfg.QKRopeHeadDim
	theta := cfg.RopeTheta
	t := ropeTable{invFreq: make([]float64, dr/2), attn: 1}
	for i := range t.invFreq {
		t.invFreq[i] = math.Pow(theta, -float64(2*i)/float64(dr))
	}
	y := cfg.RopeScaling
	if y == nil {
		return t
	}
	corr := func(rotations float64) float64 {
		return float64(dr) * math.Log(float64(y.OriginalMaxPositionEmbeddings)/(rotations*2*math.Pi)) / (2 * math.Log(theta))
	}
	low := math.Max(math.Floor(corr(y.BetaFast)), 0)
	high := math.Min(math.Ceil(corr(y.BetaSlow)), float64(dr-1))
	if low == high {
		high += 0.001
	}
	for i, f := range t.invFreq {
		ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
		t.invFreq[i] = f/y.Factor*ramp + f*(1-ramp)
	}
	t.attn = config.YaRNMScale(y.Factor, y.MScale) / config.YaRNMScale(y.Factor, y.MScaleAllDim)
	return t
}

// rotate applies RoPE at position pos to x (len dr) in place. Interleaved
// pairs are (x[2i], x[2i+1]); half-split pairs are (x[i], x[i+dr/2]).
func (t ropeTable) rotate(x []float64, pos int, interleaved bool) {
	half := len(t.invFreq)
	for i, f := range t.invFreq {
		phi := float64(pos) * f
		c, s := math.Cos(phi)*t.attn, math.Sin(phi)*t.attn
		a, b := i, i+half
		if interleaved {
			a, b = 2*i, 2*i+1
		}
		xa, xb := x[a], x[b]
		x[a] = xa*c - xb*s
		x[b] = xa*s + xb*c
	}
}
