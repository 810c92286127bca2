package oracle

import (
	"testing"

	"github.com/cpmla/cpmla/config"
)

// runFLOPs counts the multiply-adds (×2) of one oracle run over n tokens
// with the LM head on the last `heads` positions.
func runFLOPs(cfg *config.Model, n, heads int) float64 {
	d, h := cfg.HiddenSize, cfg.NumHeads
	dn, dr, dv, dc, dq := cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim, cfg.KVLoraRank, cfg.QLoraRank
	perToken := dq*d + h*(dn+dr)*max(dq, 0) + (dc+dr)*d + h*(dn+dv)*dc + d*h*dv + 3*cfg.IntermediateSize*d
	if dq == 0 {
		perToken += h * (dn + dr) * d
	}
	if cfg.Sparse() {
		perToken += cfg.IndexNHeads*cfg.IndexHeadDim*dq + cfg.IndexHeadDim*d + cfg.IndexNHeads*d
	}
	var attn int
	for t := range n {
		keys := t + 1
		if cfg.Sparse() {
			attn += cfg.IndexNHeads * cfg.IndexHeadDim * (t + 1)
			keys = min(keys, cfg.IndexTopK)
		}
		attn += h * keys * (dn + dr + dv)
	}
	macs := float64(cfg.NumLayers)*(float64(n*perToken)+float64(attn)) + float64(heads*cfg.VocabSize*d)
	return 2 * macs
}

// BenchmarkRunGLM5Mini runs the glm5-mini preset (vocab 129280, hidden 256)
// over 64 tokens with seeded random weights, LM head at every position and
// at the last one only.
func BenchmarkRunGLM5Mini(b *testing.B) {
	cfg, err := config.Load("glm5-mini")
	if err != nil {
		b.Fatal(err)
	}
	const n = 64
	m := mustNew(b, cfg, randomWeights(cfg, 51), Options{KVDType: KVBF16})
	toks := randomTokens(n, cfg.VocabSize, 52)
	for _, bc := range []struct {
		name string
		from int
	}{{"all-positions", 0}, {"last-position", n - 1}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := m.RunWith(toks, RunOptions{LogitsFrom: bc.from}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(runFLOPs(cfg, n, n-bc.from)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
