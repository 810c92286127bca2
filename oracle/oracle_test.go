package oracle

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/numfmt"
)

// tinySparse is a GLM-5-like sparse model small enough for unit tests. The
// cache row keeps the real 512 + 64 dims so that the fp8_ds_mla rounding
// applies, and the indexer keeps 128-dim keys for the fp8 indexer rounding.
func tinySparse() *config.Model {
	return &config.Model{
		Name:                  "tiny-sparse",
		Architecture:          "glm_moe_dsa",
		HiddenSize:            32,
		NumLayers:             2,
		NumHeads:              2,
		QLoraRank:             16,
		KVLoraRank:            512,
		QKNopeHeadDim:         16,
		QKRopeHeadDim:         64,
		VHeadDim:              16,
		IndexNHeads:           2,
		IndexHeadDim:          128,
		IndexTopK:             4,
		VocabSize:             64,
		IntermediateSize:      48,
		MaxPositionEmbeddings: 4096,
		RMSNormEps:            1e-5,
		RopeTheta:             1e6,
		RopeInterleave:        true,
		IndexerRopeInterleave: true,
	}
}

// tinyV32 differs from tinySparse the way DeepSeek-V3.2 differs from GLM-5:
// half-split indexer RoPE, θ = 10⁴ and YaRN.
func tinyV32() *config.Model {
	m := tinySparse()
	m.Name = "tiny-v32"
	m.Architecture = "deepseek_v32"
	m.IndexerRopeInterleave = false
	m.RopeTheta = 10000
	m.RMSNormEps = 1e-6
	m.RopeScaling = &config.YaRN{Factor: 40, OriginalMaxPositionEmbeddings: 4096, BetaFast: 32, BetaSlow: 1, MScale: 1, MScaleAllDim: 1}
	return m
}

// tinyDenseQProj is a dense-MLA model with a plain q_proj (q_lora_rank 0),
// half-split main RoPE, a YaRN mscale ≠ 1 and a small latent.
func tinyDenseQProj() *config.Model {
	m := tinySparse()
	m.Name = "tiny-dense-qproj"
	m.Architecture = "deepseek_v2"
	m.QLoraRank = 0
	m.KVLoraRank = 24
	m.QKRopeHeadDim = 8
	m.IndexTopK, m.IndexNHeads, m.IndexHeadDim = 0, 0, 0
	m.RopeInterleave = false
	m.RopeScaling = &config.YaRN{Factor: 40, OriginalMaxPositionEmbeddings: 64, BetaFast: 32, BetaSlow: 1, MScale: 0.707, MScaleAllDim: 0.707}
	return m
}

// tinyTied shares the embedding matrix with the LM head.
func tinyTied() *config.Model {
	m := tinySparse()
	m.Name = "tiny-tied"
	m.TieWordEmbeddings = true
	return m
}

// randomWeights draws every tensor of cfg from a seeded PCG: norm weights
// 1 + 0.1·N(0,1), norm biases 0.1·N(0,1), embeddings N(0,1), linear layers
// N(0,1)/√in so activations stay of order one.
func randomWeights(cfg *config.Model, seed uint64) MapSource {
	shapes := TensorShapes(cfg)
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	slices.Sort(names)
	rng := rand.New(rand.NewPCG(seed, 0x6f7261636c65))
	src := make(MapSource, len(names))
	for _, name := range names {
		shape := shapes[name]
		vals := make([]float32, product(shape))
		for i := range vals {
			g := rng.NormFloat64()
			switch {
			case len(shape) == 1 && strings.HasSuffix(name, ".bias"):
				vals[i] = float32(0.1 * g)
			case len(shape) == 1:
				vals[i] = float32(1 + 0.1*g)
			case name == embedTensorName:
				vals[i] = float32(g)
			default:
				vals[i] = float32(g / math.Sqrt(float64(shape[1])))
			}
		}
		src[name] = Tensor{Values: vals, Shape: slices.Clone(shape)}
	}
	return src
}

func randomTokens(n, vocab int, seed uint64) []int {
	rng := rand.New(rand.NewPCG(seed, 7))
	toks := make([]int, n)
	for i := range toks {
		toks[i] = rng.IntN(vocab)
	}
	return toks
}

func mustNew(t testing.TB, cfg *config.Model, w WeightSource, opt Options) *Model {
	t.Helper()
	m, err := New(cfg, w, opt)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.Name, err)
	}
	return m
}

func mustRun(t testing.TB, m *Model, toks []int) *Result {
	t.Helper()
	r, err := m.Run(toks)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return r
}

var configs = []struct {
	name string
	cfg  func() *config.Model
}{
	{"glm5-like sparse", tinySparse},
	{"v32-like sparse yarn", tinyV32},
	{"dense q_proj", tinyDenseQProj},
	{"tied embeddings", tinyTied},
}

func TestLogProbsNormalize(t *testing.T) {
	for _, tc := range configs {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg()
			m := mustNew(t, cfg, randomWeights(cfg, 1), Options{})
			r := mustRun(t, m, randomTokens(12, cfg.VocabSize, 2))
			for pos, lp := range r.LogProbs {
				if len(lp) != cfg.VocabSize {
					t.Fatalf("position %d: %d logprobs, want %d", pos, len(lp), cfg.VocabSize)
				}
				var s float64
				for _, v := range lp {
					if v > 0 {
						t.Fatalf("position %d: logprob %v > 0", pos, v)
					}
					s += math.Exp(v)
				}
				if math.Abs(s-1) > 1e-12 {
					t.Errorf("position %d: Σ exp(logprob) = %.17g, want 1 within 1e-12", pos, s)
				}
			}
		})
	}
}

func TestCausality(t *testing.T) {
	const n, cut = 14, 6
	for _, tc := range configs {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg()
			m := mustNew(t, cfg, randomWeights(cfg, 3), Options{KVDType: KVBF16})
			a := randomTokens(n, cfg.VocabSize, 4)
			b := slices.Clone(a)
			for i := cut + 1; i < n; i++ {
				b[i] = (b[i] + 1 + i) % cfg.VocabSize
			}
			ra, rb := mustRun(t, m, a), mustRun(t, m, b)
			if diff := cmp.Diff(ra.LogProbs[:cut+1], rb.LogProbs[:cut+1]); diff != "" {
				t.Errorf("logprobs up to position %d changed when later tokens changed (-a +b):\n%s", cut, diff)
			}
			for l := range ra.TopK {
				if diff := cmp.Diff(ra.TopK[l][:cut+1], rb.TopK[l][:cut+1]); diff != "" {
					t.Errorf("layer %d: selected sets up to position %d changed (-a +b):\n%s", l, cut, diff)
				}
			}
			if cmp.Equal(ra.LogProbs[n-1], rb.LogProbs[n-1]) {
				t.Errorf("logprobs at the last position did not change with its tokens; the comparison is vacuous")
			}
		})
	}
}

func TestRepeatedRunIsBitIdentical(t *testing.T) {
	cfg := tinyV32()
	m := mustNew(t, cfg, randomWeights(cfg, 5), Options{KVDType: KVFP8DSMLA, IndexerDType: IndexerFP8})
	toks := randomTokens(10, cfg.VocabSize, 6)
	if diff := cmp.Diff(mustRun(t, m, toks), mustRun(t, m, toks)); diff != "" {
		t.Errorf("two runs differ (-first +second):\n%s", diff)
	}
}

func TestSparseEqualsDenseWhenTopKCoversSequence(t *testing.T) {
	const n = 12
	for _, mk := range []func() *config.Model{tinySparse, tinyV32} {
		sparse := mk()
		sparse.IndexTopK = n
		t.Run(sparse.Name, func(t *testing.T) {
			w := randomWeights(sparse, 7)
			dense := mk()
			dense.IndexTopK = 0
			toks := randomTokens(n, sparse.VocabSize, 8)
			rs := mustRun(t, mustNew(t, sparse, w, Options{KVDType: KVBF16}), toks)
			rd := mustRun(t, mustNew(t, dense, w, Options{KVDType: KVBF16}), toks)
			if diff := cmp.Diff(rd.LogProbs, rs.LogProbs); diff != "" {
				t.Errorf("sparse with top-k %d ≥ %d tokens differs from dense (-dense +sparse):\n%s", n, n, diff)
			}
			if rd.TopK != nil || rd.Margin != nil || rd.NearTies(1) != nil {
				t.Errorf("dense run reports selections: TopK %v Margin %v", rd.TopK, rd.Margin)
			}
			for l := range rs.TopK {
				for pos, sel := range rs.TopK[l] {
					if want := causalSets(n)[pos]; !slices.Equal(sel, want) {
						t.Errorf("layer %d position %d: selected %v, want all of %v", l, pos, sel, want)
					}
					if !math.IsInf(rs.Margin[l][pos], 1) {
						t.Errorf("layer %d position %d: margin %v, want +Inf when every key is selected", l, pos, rs.Margin[l][pos])
					}
				}
			}
		})
	}
}

func TestSparseSelectsTopK(t *testing.T) {
	const n = 16
	cfg := tinySparse()
	w := randomWeights(cfg, 9)
	toks := randomTokens(n, cfg.VocabSize, 10)
	m := mustNew(t, cfg, w, Options{})
	r := mustRun(t, m, toks)
	for l := range r.TopK {
		for pos, sel := range r.TopK[l] {
			if want := min(cfg.IndexTopK, pos+1); len(sel) != want {
				t.Errorf("layer %d position %d: %d selected, want min(K=%d, %d) = %d", l, pos, len(sel), cfg.IndexTopK, pos+1, want)
			}
			if !slices.IsSorted(sel) || len(sel) > 0 && (sel[0] < 0 || int(sel[len(sel)-1]) > pos) {
				t.Errorf("layer %d position %d: selection %v is not ascending within [0, %d]", l, pos, sel, pos)
			}
		}
	}
	// The selected set must be what the indexer's scores say: recompute the
	// layer-0 scores and check every selected key outranks every other one.
	_, is := layerZero(t, m, toks)
	for pos, sel := range is.sel {
		for s := range pos + 1 {
			if slices.Contains(sel, int32(s)) {
				continue
			}
			for _, k := range sel {
				sk, ss := is.scores[pos][k], is.scores[pos][s]
				if ss > sk || ss == sk && s < int(k) {
					t.Errorf("position %d: unselected key %d (score %v) outranks selected key %d (score %v)", pos, s, ss, k, sk)
				}
			}
		}
	}
	// With K < n the sparse model must differ from the dense one.
	dense := tinySparse()
	dense.IndexTopK = 0
	rd := mustRun(t, mustNew(t, dense, w, Options{}), toks)
	if cmp.Equal(rd.LogProbs[n-1], r.LogProbs[n-1]) {
		t.Errorf("sparse top-%d and dense logprobs agree at position %d; the indexer has no effect", cfg.IndexTopK, n-1)
	}
}

// layerZero recomputes layer 0's attention inputs and indexer selection.
func layerZero(t *testing.T, m *Model, toks []int) (*attnState, *indexerSelection) {
	return layerZeroAt(t, m, toks, 0)
}

// layerZeroAt is layerZero with the first token at position pos0.
func layerZeroAt(t *testing.T, m *Model, toks []int, pos0 int) (*attnState, *indexerSelection) {
	t.Helper()
	d := m.cfg.HiddenSize
	xs := make([][]float64, len(toks))
	for i, tok := range toks {
		h := make([]float64, d)
		for j, v := range m.embed[tok*d : (tok+1)*d] {
			h[j] = float64(v)
		}
		xs[i] = make([]float64, d)
		rmsNorm(xs[i], h, m.layers[0].inputNorm, m.cfg.RMSNormEps)
	}
	st := m.attentionInputs(0, xs, pos0)
	if !m.cfg.Sparse() {
		st.sel = causalSets(len(toks))
		return st, nil
	}
	is, err := m.indexerSelect(0, xs, st.cq, pos0)
	if err != nil {
		t.Fatal(err)
	}
	st.sel = is.sel
	return st, is
}

// absorbedAttention computes a layer's attention output in the absorbed MQA
// form (what DSA kernels do): q_abs = W_UKᵀ q_nope, logits over the 576-wide
// cached rows, the 512-wide latent output mapped by W_UV afterwards.
func absorbedAttention(m *Model, l int, st *attnState) [][]float64 {
	cfg := &m.cfg
	kvB, wo := m.layers[l].kvB, m.layers[l].o
	nh, dn, dr, dv, dc := cfg.NumHeads, cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim, cfg.KVLoraRank
	out := make([][]float64, len(st.q))
	for t := range st.q {
		o := make([]float64, nh*dv)
		for h := range nh {
			q := st.q[t][h*(dn+dr) : (h+1)*(dn+dr)]
			qAbs := make([]float64, dc)
			for i := range dn {
				ukRow := kvB[(h*(dn+dv)+i)*dc : (h*(dn+dv)+i+1)*dc]
				for c := range dc {
					qAbs[c] += float64(ukRow[c]) * q[i]
				}
			}
			qFull := append(qAbs, q[dn:]...)
			logits := make([]float64, len(st.sel[t]))
			mx := math.Inf(-1)
			for j, s := range st.sel[t] {
				var v float64
				for c, r := range st.rows[s] {
					v += qFull[c] * r
				}
				logits[j] = cfg.SoftmaxScale() * v
				mx = max(mx, logits[j])
			}
			var z float64
			lat := make([]float64, dc)
			for j, s := range st.sel[t] {
				e := math.Exp(logits[j] - mx)
				z += e
				for c := range dc {
					lat[c] += e * st.rows[s][c]
				}
			}
			for j := range dv {
				uvRow := kvB[(h*(dn+dv)+dn+j)*dc : (h*(dn+dv)+dn+j+1)*dc]
				var v float64
				for c := range dc {
					v += float64(uvRow[c]) * lat[c] / z
				}
				o[h*dv+j] = v
			}
		}
		out[t] = make([]float64, cfg.HiddenSize)
		for r := range out[t] {
			for c, v := range o {
				out[t][r] += float64(wo[r*len(o)+c]) * v
			}
		}
	}
	return out
}

func TestMHAEqualsAbsorbedForm(t *testing.T) {
	for _, tc := range configs {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg()
			m := mustNew(t, cfg, randomWeights(cfg, 11), Options{KVDType: KVBF16})
			st, _ := layerZero(t, m, randomTokens(10, cfg.VocabSize, 12))
			mha := m.attendMHA(0, st)
			abs := absorbedAttention(m, 0, st)
			if diff := cmp.Diff(abs, mha, cmpopts.EquateApprox(1e-10, 1e-12)); diff != "" {
				t.Errorf("MHA form differs from absorbed form (-absorbed +mha):\n%s", diff)
			}
		})
	}
}

// permuteHeads returns a copy of w whose attention heads (and indexer heads
// for sparse models) are reordered by perm, each head carrying its weights.
func permuteHeads(cfg *config.Model, w MapSource, perm, permIdx []int) MapSource {
	out := make(MapSource, len(w))
	for k, v := range w {
		out[k] = v
	}
	rowBlocks := func(name string, block int, p []int) {
		t := w[name]
		cols := t.Shape[1]
		vals := make([]float32, len(t.Values))
		for h, from := range p {
			copy(vals[h*block*cols:(h+1)*block*cols], t.Values[from*block*cols:(from+1)*block*cols])
		}
		out[name] = Tensor{Values: vals, Shape: t.Shape}
	}
	dn, dr, dv := cfg.QKNopeHeadDim, cfg.QKRopeHeadDim, cfg.VHeadDim
	for i := range cfg.NumLayers {
		p := "model.layers." + strconv.Itoa(i) + ".self_attn."
		if cfg.QLoraRank > 0 {
			rowBlocks(p+"q_b_proj.weight", dn+dr, perm)
		} else {
			rowBlocks(p+"q_proj.weight", dn+dr, perm)
		}
		rowBlocks(p+"kv_b_proj.weight", dn+dv, perm)
		o := w[p+"o_proj.weight"]
		vals := make([]float32, len(o.Values))
		cols := o.Shape[1]
		for r := range o.Shape[0] {
			for h, from := range perm {
				copy(vals[r*cols+h*dv:r*cols+(h+1)*dv], o.Values[r*cols+from*dv:r*cols+(from+1)*dv])
			}
		}
		out[p+"o_proj.weight"] = Tensor{Values: vals, Shape: o.Shape}
		if cfg.Sparse() {
			rowBlocks(p+"indexer.wq_b.weight", cfg.IndexHeadDim, permIdx)
			rowBlocks(p+"indexer.weights_proj.weight", 1, permIdx)
		}
	}
	return out
}

func TestHeadPermutationInvariance(t *testing.T) {
	for _, tc := range configs {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg()
			cfg.NumHeads = 3
			if cfg.Sparse() {
				cfg.IndexNHeads = 3
			}
			w := randomWeights(cfg, 13)
			toks := randomTokens(12, cfg.VocabSize, 14)
			base := mustRun(t, mustNew(t, cfg, w, Options{}), toks)
			perm := []int{2, 0, 1}
			permIdx := []int{1, 2, 0}
			got := mustRun(t, mustNew(t, cfg, permuteHeads(cfg, w, perm, permIdx), Options{}), toks)
			if diff := cmp.Diff(base.LogProbs, got.LogProbs, cmpopts.EquateApprox(0, 1e-10)); diff != "" {
				t.Errorf("logprobs changed under head permutation (-base +permuted):\n%s", diff)
			}
			if diff := cmp.Diff(base.TopK, got.TopK); diff != "" {
				t.Errorf("selected sets changed under indexer head permutation (-base +permuted):\n%s", diff)
			}
		})
	}
}

func TestKVCacheRounding(t *testing.T) {
	const n = 24
	maxDiff := func(a, b *Result) float64 {
		var d float64
		for pos := range a.LogProbs {
			for v := range a.LogProbs[pos] {
				d = max(d, math.Abs(a.LogProbs[pos][v]-b.LogProbs[pos][v]))
			}
		}
		return d
	}
	argmax := func(r *Result) []int {
		out := make([]int, len(r.LogProbs))
		for pos, lp := range r.LogProbs {
			for v := range lp {
				if lp[v] > lp[out[pos]] {
					out[pos] = v
				}
			}
		}
		return out
	}
	// Rows are ordered by coarseness: bf16 keeps 8 significant bits,
	// fp8_ds_mla 4 (e4m3 with a shared power-of-two scale per 128 dims), so
	// its error must be the larger one. With top-k ≥ n the selections cannot
	// flip and the difference measures the rounding alone; with top-k < n a
	// flipped selection may add a discrete jump, so only bf16's greedy tokens
	// are pinned there.
	for _, tc := range []struct {
		topK       int
		dtype      string
		bound      float64 // max |Δ logprob| against f32
		sameGreedy bool
	}{
		{n, KVBF16, 0.05, true},
		{n, KVFP8DSMLA, 0.5, false},
		{8, KVBF16, 0.05, true},
	} {
		cfg := tinySparse()
		cfg.IndexTopK = tc.topK
		w := randomWeights(cfg, 15)
		toks := randomTokens(n, cfg.VocabSize, 16)
		run := func(dtype string) *Result { return mustRun(t, mustNew(t, cfg, w, Options{KVDType: dtype}), toks) }
		f32, bf16, r := run(KVF32), run(KVBF16), run(tc.dtype)
		d := maxDiff(f32, r)
		t.Logf("top-k %d, %s: max |Δ logprob| vs f32 = %.3g", tc.topK, tc.dtype, d)
		if d == 0 || d > tc.bound {
			t.Errorf("top-k %d, %s: max |Δ logprob| vs f32 = %g, want in (0, %g]", tc.topK, tc.dtype, d, tc.bound)
		}
		if dBF16 := maxDiff(f32, bf16); tc.dtype != KVBF16 && d <= dBF16 {
			t.Errorf("top-k %d, %s: max |Δ logprob| %g is not larger than bf16's %g", tc.topK, tc.dtype, d, dBF16)
		}
		if diff := cmp.Diff(argmax(f32), argmax(r)); tc.sameGreedy && diff != "" {
			t.Errorf("top-k %d, %s: greedy tokens differ from f32 (-f32 +%s):\n%s", tc.topK, tc.dtype, tc.dtype, diff)
		}
	}
}

func TestCachedRowsAreRepresentable(t *testing.T) {
	cfg := tinySparse()
	w := randomWeights(cfg, 17)
	toks := randomTokens(6, cfg.VocabSize, 18)
	for _, tc := range []struct {
		dtype string
		round func(row []float32)
	}{
		{KVF32, func([]float32) {}},
		{KVBF16, func(row []float32) {
			for i, v := range row {
				row[i] = numfmt.RoundBF16(v)
			}
		}},
		{KVFP8DSMLA, numfmt.RoundDSMLA},
	} {
		t.Run(tc.dtype, func(t *testing.T) {
			st, _ := layerZero(t, mustNew(t, cfg, w, Options{KVDType: tc.dtype}), toks)
			for pos, row := range st.rows {
				f := make([]float32, len(row))
				for i, v := range row {
					f[i] = float32(v)
					if float64(f[i]) != v {
						t.Fatalf("position %d dim %d: %v is not a float32", pos, i, v)
					}
				}
				want := slices.Clone(f)
				tc.round(f)
				if diff := cmp.Diff(want, f); diff != "" {
					t.Errorf("position %d: cached row is not a fixed point of the %s rounding (-cached +re-rounded):\n%s", pos, tc.dtype, diff)
				}
			}
		})
	}
}

func TestIndexerFP8KeysKeepMostSelections(t *testing.T) {
	const n = 32
	cfg := tinyV32()
	cfg.IndexTopK = 8
	w := randomWeights(cfg, 19)
	toks := randomTokens(n, cfg.VocabSize, 20)
	a := mustRun(t, mustNew(t, cfg, w, Options{}), toks)
	b := mustRun(t, mustNew(t, cfg, w, Options{IndexerDType: IndexerFP8}), toks)
	var kept, total int
	for l := range a.TopK {
		for pos := range a.TopK[l] {
			for _, s := range a.TopK[l][pos] {
				total++
				if slices.Contains(b.TopK[l][pos], s) {
					kept++
				}
			}
		}
	}
	recall := float64(kept) / float64(total)
	t.Logf("fp8 indexer keys: top-k recall %.4f (%d/%d)", recall, kept, total)
	if recall < 0.8 || recall == 1 && cmp.Equal(a.LogProbs, b.LogProbs) {
		t.Errorf("fp8 indexer keys: recall %.4f; want ≥ 0.8 and some effect of the rounding", recall)
	}
}

func TestNearTiesOnEngineeredTie(t *testing.T) {
	const n = 10
	cfg := tinySparse()
	w := randomWeights(cfg, 21)
	// Zero the RoPE half of the indexer key norm: keys then carry no
	// position, and a sequence of one repeated token gives every key of
	// layer 0 the same value, so every score of a query ties.
	for _, name := range []string{"model.layers.0.self_attn.indexer.k_norm.weight", "model.layers.0.self_attn.indexer.k_norm.bias"} {
		v := slices.Clone(w[name].Values)
		clear(v[:cfg.QKRopeHeadDim])
		w[name] = Tensor{Values: v, Shape: w[name].Shape}
	}
	m := mustNew(t, cfg, w, Options{})
	tied := mustRun(t, m, slices.Repeat([]int{5}, n))
	k := cfg.IndexTopK
	var want []Tie
	for pos := range n {
		sel := tied.TopK[0][pos]
		if wantSel := causalSets(min(k, pos+1))[min(k, pos+1)-1]; !slices.Equal(sel, wantSel) {
			t.Errorf("position %d: tied keys select %v, want the lowest positions %v", pos, sel, wantSel)
		}
		if pos >= k {
			want = append(want, Tie{Layer: 0, Pos: pos, Margin: 0, KthScore: tied.KthScore[0][pos]})
		}
	}
	var got []Tie
	for _, tie := range tied.NearTies(1e-9) {
		if tie.Layer == 0 {
			got = append(got, tie)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layer-0 near ties (-want +got):\n%s", diff)
	}

	// Varied tokens with 8 indexer heads (so that a score is rarely the
	// exact 0 of all-negative ReLUs) have no near tie on this seed.
	cfg.IndexNHeads = 8
	varied := mustRun(t, mustNew(t, cfg, randomWeights(cfg, 21), Options{}), randomTokens(n, cfg.VocabSize, 22))
	if ties := varied.NearTies(1e-9); len(ties) != 0 {
		t.Errorf("random weights and tokens: near ties %v, want none", ties)
	}
	if ties := varied.NearTies(math.Inf(1)); len(ties) != cfg.NumLayers*(n-k) {
		t.Errorf("NearTies(+Inf) lists %d entries, want every one of the %d finite margins", len(ties), cfg.NumLayers*(n-k))
	}
}

func TestLogitsFrom(t *testing.T) {
	cfg := tinySparse()
	m := mustNew(t, cfg, randomWeights(cfg, 23), Options{})
	toks := randomTokens(9, cfg.VocabSize, 24)
	full := mustRun(t, m, toks)
	for _, from := range []int{0, 4, 8, 9} {
		r, err := m.RunWith(toks, RunOptions{LogitsFrom: from})
		if err != nil {
			t.Fatalf("LogitsFrom %d: %v", from, err)
		}
		want := slices.Clone(full.LogProbs)
		for i := range from {
			want[i] = nil
		}
		if diff := cmp.Diff(want, r.LogProbs); diff != "" {
			t.Errorf("LogitsFrom %d (-want +got):\n%s", from, diff)
		}
		if diff := cmp.Diff(full.TopK, r.TopK); diff != "" {
			t.Errorf("LogitsFrom %d changed the selections (-full +got):\n%s", from, diff)
		}
	}
}

// TestAttentionAndMLPOff checks the embedding → final norm → LM head path:
// with zero output projections both residual branches add nothing, so the
// logprobs are log_softmax(lm_head(RMSNorm(embed[token]))) computed here.
func TestAttentionAndMLPOff(t *testing.T) {
	cfg := tinySparse()
	w := randomWeights(cfg, 25)
	for i := range cfg.NumLayers {
		for _, name := range []string{"self_attn.o_proj.weight", "mlp.down_proj.weight"} {
			full := "model.layers." + strconv.Itoa(i) + "." + name
			w[full] = Tensor{Values: make([]float32, len(w[full].Values)), Shape: w[full].Shape}
		}
	}
	toks := randomTokens(5, cfg.VocabSize, 26)
	r := mustRun(t, mustNew(t, cfg, w, Options{}), toks)
	d := cfg.HiddenSize
	emb, norm, head := w[embedTensorName].Values, w[normTensorName].Values, w[headTensorName].Values
	for pos, tok := range toks {
		var ss float64
		for _, v := range emb[tok*d : (tok+1)*d] {
			ss += float64(v) * float64(v)
		}
		rms := math.Sqrt(ss/float64(d) + cfg.RMSNormEps)
		logits := make([]float64, cfg.VocabSize)
		for v := range logits {
			for i := range d {
				logits[v] += float64(head[v*d+i]) * float64(norm[i]) * float64(emb[tok*d+i]) / rms
			}
		}
		var z float64
		for _, l := range logits {
			z += math.Exp(l)
		}
		for v := range logits {
			logits[v] -= math.Log(z)
		}
		if diff := cmp.Diff(logits, r.LogProbs[pos], cmpopts.EquateApprox(0, 1e-12)); diff != "" {
			t.Errorf("position %d (-independent +oracle):\n%s", pos, diff)
		}
	}
}

func TestNewRefusals(t *testing.T) {
	sparse := tinySparse()
	good := randomWeights(sparse, 27)
	without := func(name string) MapSource {
		w := maps(good)
		delete(w, name)
		return w
	}
	reshaped := func(name string, shape []int) MapSource {
		w := maps(good)
		w[name] = Tensor{Values: w[name].Values, Shape: shape}
		return w
	}
	short := func(name string) MapSource {
		w := maps(good)
		w[name] = Tensor{Values: w[name].Values[1:], Shape: w[name].Shape}
		return w
	}
	moe := tinySparse()
	moe.NRoutedExperts, moe.FirstKDenseReplace = 4, 1
	noQLora := tinySparse()
	noQLora.QLoraRank = 0
	smallLatent := tinyDenseQProj()
	smallIndex := tinySparse()
	smallIndex.IndexHeadDim = 96
	for _, tc := range []struct {
		name string
		cfg  *config.Model
		w    WeightSource
		opt  Options
		want []string // substrings the error must contain
	}{
		{"missing tensor", sparse, without("model.layers.1.self_attn.indexer.k_norm.bias"), Options{}, []string{"model.layers.1.self_attn.indexer.k_norm.bias", "[128]"}},
		{"wrong shape", sparse, reshaped("model.layers.0.self_attn.kv_b_proj.weight", []int{512, 64}), Options{}, []string{"kv_b_proj.weight", "[512 64]", "[64 512]"}},
		{"too few values", sparse, short("model.norm.weight"), Options{}, []string{"model.norm.weight", "31 values"}},
		{"unknown kv dtype", sparse, good, Options{KVDType: "fp16"}, []string{`"fp16"`, `"bf16"`, `"fp8_ds_mla"`}},
		{"unknown indexer dtype", sparse, good, Options{IndexerDType: "int8"}, []string{`"int8"`, `"fp8"`}},
		{"fp8_ds_mla needs 512+64", smallLatent, randomWeights(smallLatent, 1), Options{KVDType: KVFP8DSMLA}, []string{"kv_lora_rank=24", "qk_rope_head_dim=8", `"bf16"`}},
		{"fp8 indexer needs 128", smallIndex, randomWeights(smallIndex, 1), Options{IndexerDType: IndexerFP8}, []string{"index_head_dim=96", `"f32"`}},
		{"incomplete moe config", moe, good, Options{}, []string{"scoring_func", "n_routed_experts = 4"}},
		{"sparse without q latent", noQLora, good, Options{}, []string{"q_lora_rank", "index_topk=0"}},
		{"nil source", sparse, nil, Options{}, []string{"nil weight source"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg, tc.w, tc.opt)
			if err == nil {
				t.Fatal("New succeeded, want an error")
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func maps(w MapSource) MapSource {
	out := make(MapSource, len(w))
	for k, v := range w {
		out[k] = v
	}
	return out
}

func TestRunRefusals(t *testing.T) {
	cfg := tinySparse()
	m := mustNew(t, cfg, randomWeights(cfg, 29), Options{})
	for _, tc := range []struct {
		name string
		toks []int
		ro   RunOptions
		want string
	}{
		{"empty", nil, RunOptions{}, "empty token sequence"},
		{"token too large", []int{1, 64}, RunOptions{}, "token 64 at position 1 is outside the vocabulary [0, 64)"},
		{"negative token", []int{-1}, RunOptions{}, "token -1 at position 0"},
		{"logits from past end", []int{1, 2}, RunOptions{LogitsFrom: 3}, "LogitsFrom=3 is outside [0, 2]"},
		{"too long", make([]int, cfg.MaxPositionEmbeddings+1), RunOptions{LogitsFrom: cfg.MaxPositionEmbeddings + 1}, "exceed max_position_embeddings=4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.RunWith(tc.toks, tc.ro)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("RunWith error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
