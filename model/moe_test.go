package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/safetensors"
)

// routeBySort is noaux_tc routing written the slow, obvious way: sort every
// kept expert by selection score (ties to the lowest id) and take the first
// K. Scores are computed exactly as router.route computes them.
func routeBySort(r router, logits, bias []float32) ([]int32, []float32) {
	E := r.experts
	s, sel := make([]float32, E), make([]float32, E)
	for e := range E {
		s[e] = sigmoid(logits[e])
		sel[e] = s[e] + bias[e]
	}
	gs := E / r.groups
	keep := make([]bool, r.groups)
	if r.groups == 1 {
		keep[0] = true
	} else {
		type gscore struct {
			g int
			v float32
		}
		var gsc []gscore
		for g := range r.groups {
			v := slices.Clone(sel[g*gs : (g+1)*gs])
			slices.SortFunc(v, func(a, b float32) int { return cmpDesc(a, b) })
			gsc = append(gsc, gscore{g, v[0] + v[1]})
		}
		slices.SortStableFunc(gsc, func(a, b gscore) int { return cmpDesc(a.v, b.v) })
		for _, x := range gsc[:r.keepGroups] {
			keep[x.g] = true
		}
	}
	var cand []int
	for e := range E {
		if keep[e/gs] {
			cand = append(cand, e)
		}
	}
	slices.SortStableFunc(cand, func(a, b int) int { return cmpDesc(sel[a], sel[b]) })
	idx := make([]int32, r.perTok)
	w := make([]float32, r.perTok)
	var sum float32
	for k := range r.perTok {
		idx[k] = int32(cand[k])
		w[k] = s[cand[k]]
		sum += w[k]
	}
	for k := range w {
		if r.norm {
			w[k] /= sum
		}
		w[k] *= r.scale
	}
	return idx, w
}

func cmpDesc(a, b float32) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

func TestRouterMatchesSortedSelection(t *testing.T) {
	for _, r := range []router{
		{experts: 16, perTok: 4, groups: 1, keepGroups: 1, norm: true, scale: 2.5},
		{experts: 16, perTok: 4, groups: 4, keepGroups: 2, norm: true, scale: 2.5},
		{experts: 256, perTok: 8, groups: 8, keepGroups: 4, norm: true, scale: 2.5},
		{experts: 12, perTok: 3, groups: 3, keepGroups: 1, norm: false, scale: 1},
	} {
		rng := rand.New(rand.NewPCG(uint64(r.experts), uint64(r.groups)))
		sc := newRouteScratch(r)
		idx, w := make([]int32, r.perTok), make([]float32, r.perTok)
		for trial := range 500 {
			logits, bias := make([]float32, r.experts), make([]float32, r.experts)
			for e := range logits {
				logits[e] = float32(rng.NormFloat64())
				bias[e] = float32(0.1 * rng.NormFloat64())
				if trial%3 == 0 {
					// Quantized logits and no bias: many exact ties.
					logits[e] = float32(rng.IntN(3))
					bias[e] = 0
				}
			}
			r.route(idx, w, logits, bias, sc)
			wantIdx, wantW := routeBySort(r, logits, bias)
			if d := cmp.Diff(wantIdx, idx); d != "" {
				t.Fatalf("%+v trial %d: experts (-sorted +router):\n%s", r, trial, d)
			}
			if d := cmp.Diff(wantW, w); d != "" {
				t.Fatalf("%+v trial %d: weights (-sorted +router):\n%s", r, trial, d)
			}
		}
	}
}

func FuzzRouter(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, uint8(3))
	f.Fuzz(func(t *testing.T, raw []byte, shape uint8) {
		r := []router{
			{experts: 16, perTok: 4, groups: 4, keepGroups: 2, norm: true, scale: 2.5},
			{experts: 16, perTok: 4, groups: 1, keepGroups: 1, norm: true, scale: 2.5},
		}[int(shape)%2]
		logits, bias := make([]float32, r.experts), make([]float32, r.experts)
		for e := range logits {
			if e < len(raw) {
				logits[e] = float32(int8(raw[e])) / 16
			}
			if e+r.experts < len(raw) {
				bias[e] = float32(int8(raw[e+r.experts])) / 64
			}
		}
		idx, w := make([]int32, r.perTok), make([]float32, r.perTok)
		r.route(idx, w, logits, bias, newRouteScratch(r))
		wantIdx, wantW := routeBySort(r, logits, bias)
		if !slices.Equal(idx, wantIdx) || !slices.Equal(w, wantW) {
			t.Fatalf("router %v %v, sorted %v %v", idx, w, wantIdx, wantW)
		}
	})
}

func moeConfig(t *testing.T, preset, dtype string) *config.Model {
	t.Helper()
	cfg, err := config.Load(preset)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = WithWeightDType(cfg, dtype); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestMoEMixedBatchAndExpertReads: a routed layer's rows give the same bits
// in any batch, and one step runs each active expert once, over all its rows.
func TestMoEMixedBatchAndExpertReads(t *testing.T) {
	cfg := moeConfig(t, "v32-moe-mini", WeightFP8)
	m, err := Build(cfg, RandomTensors(cfg, 5), Shard{TPSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	newRunner := func() *Runner {
		r, err := NewRunner(m, RunnerOptions{MaxTokens: 40, MaxModelLen: 64, MaxLogitRows: 40, MaxSeqs: 2, BlockSize: 8, NumBlocks: 16})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := make([]int32, 11), make([]int32, 29)
	for i := range a {
		a[i] = int32(17 + 97*i)
	}
	for i := range b {
		b[i] = int32(3000 + 13*i)
	}
	alone := func(toks []int32, table []int32) [][]float32 {
		r := newRunner()
		mustForward(t, r, Seq{Tokens: toks, BlockTable: table, LogitsAll: true})
		var rows [][]float32
		for i := 0; i < r.NumLogitRows(); i++ {
			_, l := r.Logits(i)
			rows = append(rows, slices.Clone(l))
		}
		return rows
	}
	wantA, wantB := alone(a, []int32{0, 1}), alone(b, []int32{2, 3, 4, 5})
	r := newRunner()
	calls := map[int]int{}
	r.RouteTrace = func(layer int, pos, seq int32, experts []int32) {}
	mustForward(t, r, Seq{Tokens: a, BlockTable: []int32{0, 1}, LogitsAll: true}, Seq{Tokens: b, BlockTable: []int32{2, 3, 4, 5}, LogitsAll: true})
	for i := 0; i < r.NumLogitRows(); i++ {
		_, got := r.Logits(i)
		want := wantA
		j := i
		if i >= len(a) {
			want, j = wantB, i-len(a)
		}
		if !slices.Equal(got, want[j]) {
			t.Fatalf("logit row %d differs from its request run alone", i)
		}
	}
	// Every routed layer saw 40 rows × 4 experts, each active expert once.
	for li, layer := range r.ExpertLoad() {
		if layer == nil {
			continue
		}
		var rows int64
		for _, v := range layer {
			rows += v
		}
		if rows != 40*4 {
			t.Errorf("layer %d: %d expert rows, want 160", li, rows)
		}
		calls[li] = 0
		for _, v := range layer {
			if v > 0 {
				calls[li]++
			}
		}
	}
	if got := r.moe.expertCalls; got > int64(2*cfg.NRoutedExperts) {
		t.Errorf("one step made %d expert calls over 2 routed layers of %d experts: some expert ran more than once", got, cfg.NRoutedExperts)
	}
	if len(calls) != 2 {
		t.Errorf("expert load of %d routed layers, want 2", len(calls))
	}
}

// TestMoEDecodeAllocatesNothing: after warm-up a MoE decode step (fp8
// weights) makes no heap allocation.
func TestMoEDecodeAllocatesNothing(t *testing.T) {
	cfg := moeConfig(t, "glm5-moe-mini", WeightFP8)
	m, err := Build(cfg, RandomTensors(cfg, 2), Shard{TPSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(m, RunnerOptions{MaxTokens: 16, MaxModelLen: 64, MaxLogitRows: 2, MaxSeqs: 2, BlockSize: 8, NumBlocks: 16})
	if err != nil {
		t.Fatal(err)
	}
	tab := []int32{0, 1, 2, 3}
	mustForward(t, r, Seq{Tokens: []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}, BlockTable: tab})
	pos := 9
	b := &Batch{Seqs: []Seq{{Tokens: []int32{10}, BlockTable: tab}}}
	step := func() {
		b.Seqs[0].Start = pos
		if err := r.Forward(b); err != nil {
			t.Fatal(err)
		}
		pos++
	}
	step()
	if n := testing.AllocsPerRun(5, step); n != 0 {
		t.Errorf("MoE decode step allocates %v times", n)
	}
}

// TestQuantizeAtLoadIsAnFP8Checkpoint: --quantization fp8 of an f32
// checkpoint serves exactly the tensors an fp8 checkpoint of the same
// weights holds.
func TestQuantizeAtLoadIsAnFP8Checkpoint(t *testing.T) {
	f32 := moeConfig(t, "glm5-moe-mini", WeightF32)
	qcfg, qsrc, err := Quantize(f32, RandomTensors(f32, 9), "fp8")
	if err != nil {
		t.Fatal(err)
	}
	fp8 := moeConfig(t, "glm5-moe-mini", WeightFP8)
	want := RandomTensors(fp8, 9)
	if d := cmp.Diff(fp8.Quantization, qcfg.Quantization); d != "" {
		t.Errorf("quantization config (-checkpoint +at load):\n%s", d)
	}
	for _, name := range want.Names() {
		w := want[name]
		got, err := qsrc.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if w.DType == safetensors.BF16 {
			continue // the f32 source keeps its dtype for unquantized tensors
		}
		if got.DType != w.DType || !slices.Equal(got.Shape, w.Shape) || string(got.Data) != string(w.Data) {
			t.Fatalf("%s: at load %s %v, checkpoint %s %v (data equal %v)", name, got.DType, got.Shape, w.DType, w.Shape, string(got.Data) == string(w.Data))
		}
	}
	if _, _, err := Quantize(f32, RandomTensors(f32, 9), "awq"); err == nil || !strings.Contains(err.Error(), "awq") {
		t.Errorf("--quantization awq: %v", err)
	}
	if _, err := Build(qcfg, qsrc, Shard{}); err != nil {
		t.Fatal(err)
	}
}

// TestLoaderRefusals: a checkpoint whose tensors disagree with its config or
// with the fp8 format is refused, naming the tensor; nothing runs on raw
// e4m3 codes.
func TestLoaderRefusals(t *testing.T) {
	fp8 := moeConfig(t, "v32-moe-mini", WeightFP8)
	bf16 := moeConfig(t, "v32-moe-mini", WeightBF16)
	const w = "model.layers.1.mlp.experts.3.down_proj.weight"
	tests := []struct {
		name string
		cfg  *config.Model
		edit func(TensorMap)
		want []string
	}{
		{"missing scales", fp8, func(m TensorMap) { delete(m, w+ScaleSuffix) }, []string{w, "without its block scales"}},
		{"misshapen scales", fp8, func(m TensorMap) {
			m[w+ScaleSuffix] = safetensors.FromF32(w+ScaleSuffix, []int{1, 1}, []float32{1})
		}, []string{w + ScaleSuffix, "[1 1]", "[2 1]"}},
		{"bf16 scales", fp8, func(m TensorMap) {
			m[w+ScaleSuffix] = safetensors.FromBF16(w+ScaleSuffix, []int{2, 1}, []uint16{0x3F80, 0x3F80})
		}, []string{w + ScaleSuffix, "BF16"}},
		{"nan scale", fp8, func(m TensorMap) {
			m[w+ScaleSuffix] = safetensors.FromF32(w+ScaleSuffix, []int{2, 1}, []float32{1, float32(math.NaN())})
		}, []string{w + ScaleSuffix, "NaN"}},
		{"not a power of two under ue8m0", fp8, func(m TensorMap) {
			m[w+ScaleSuffix] = safetensors.FromF32(w+ScaleSuffix, []int{2, 1}, []float32{0.75, 1})
		}, []string{w + ScaleSuffix, "0.75", "ue8m0"}},
		{"fp8 without quantization_config", bf16, func(m TensorMap) {
			m[w] = safetensors.FromF8E4M3(w, m[w].Shape, make([]byte, 256*128))
			m[w+ScaleSuffix] = safetensors.FromF32(w+ScaleSuffix, []int{2, 1}, []float32{1, 1})
		}, []string{w, "no fp8 quantization_config", "raw e4m3 codes"}},
		{"scales on a bf16 weight", bf16, func(m TensorMap) {
			m[w+ScaleSuffix] = safetensors.FromF32(w+ScaleSuffix, []int{2, 1}, []float32{1, 1})
		}, []string{w, "block scales belong to F8_E4M3 weights"}},
		{"fp8 norm", fp8, func(m TensorMap) {
			const n = "model.layers.1.post_attention_layernorm.weight"
			m[n] = safetensors.FromF8E4M3(n, []int{256}, make([]byte, 256))
		}, []string{"post_attention_layernorm", "F8_E4M3"}},
		{"expert beyond n_routed_experts", fp8, func(m TensorMap) {
			const x = "model.layers.1.mlp.experts.16.gate_proj.weight"
			m[x] = safetensors.FromBF16(x, []int{128, 256}, make([]uint16, 128*256))
		}, []string{"model.layers.1.mlp.experts.16.gate_proj.weight", "does not account for", "n_routed_experts"}},
		{"expert shape", fp8, func(m TensorMap) {
			const x = "model.layers.2.mlp.experts.0.up_proj.weight"
			m[x] = safetensors.FromBF16(x, []int{64, 256}, make([]uint16, 64*256))
		}, []string{"model.layers.2.mlp.experts.0.up_proj.weight", "[64 256]", "[128 256]"}},
	}
	base := map[*config.Model]TensorMap{fp8: RandomTensors(fp8, 4), bf16: RandomTensors(bf16, 4)}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := TensorMap{}
			for k, v := range base[tc.cfg] {
				src[k] = v
			}
			tc.edit(src)
			_, err := Build(tc.cfg, src, Shard{})
			if err == nil {
				t.Fatal("checkpoint accepted")
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
			if _, ierr := Inspect(tc.cfg, src); ierr == nil {
				t.Error("model inspect accepted the checkpoint Build refuses")
			}
		})
	}
	// GLM-5-FP8 keeps the router in bf16: an fp8 router is refused by the
	// exclusion list.
	glm := moeConfig(t, "glm5-moe-mini", WeightFP8)
	src := RandomTensors(glm, 4)
	const g = "model.layers.1.mlp.gate.weight"
	src[g] = safetensors.FromF8E4M3(g, []int{16, 256}, make([]byte, 16*256))
	src[g+ScaleSuffix] = safetensors.FromF32(g+ScaleSuffix, []int{1, 2}, []float32{1, 1})
	if _, err := Build(glm, src, Shard{}); err == nil || !strings.Contains(err.Error(), "modules_to_not_convert") {
		t.Errorf("fp8 router in a GLM-5-FP8 checkpoint: %v", err)
	}
}

// TestInspectMatchesCheckpoint: what model inspect says of a config equals
// what it reads from a checkpoint of that config, and the planner's weight
// estimate agrees with the bytes.
func TestInspectMatchesCheckpoint(t *testing.T) {
	for _, dtype := range []string{WeightFP8, WeightBF16} {
		for _, preset := range []string{"glm5-moe-mini", "v32-moe-mini"} {
			cfg := moeConfig(t, preset, dtype)
			fromCfg, err := Inspect(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			read, err := Inspect(cfg, RandomTensors(cfg, 1))
			if err != nil {
				t.Fatal(err)
			}
			read.FromConfig = true
			if d := cmp.Diff(fromCfg, read); d != "" {
				t.Errorf("%s %s: inspect of the config differs from the checkpoint (-config +checkpoint):\n%s", preset, dtype, d)
			}
			if fromCfg.Layers[0] != "dense" || fromCfg.Layers[1] != "moe" || fromCfg.MTPLayers != 1 {
				t.Errorf("%s: layers %v, %d MTP", preset, fromCfg.Layers, fromCfg.MTPLayers)
			}
			if (dtype == WeightFP8) != (len(fromCfg.FP8) > 0) {
				t.Errorf("%s %s: fp8 tensors %v", preset, dtype, fromCfg.FP8)
			}
			experts := fromCfg.ByPart[PartExperts].Params
			if got, want := fromCfg.ActiveParamsPerToken, fromCfg.Total.Params-fromCfg.ByPart[PartMTP].Params-experts+experts*4/16; got != want {
				t.Errorf("%s: active params %d, want %d", preset, got, want)
			}
		}
	}
}

// TestGLM5MoEShapeFits: glm5-moe-shape has as many experts (a multiple of
// 16) as fit in 8 GiB of fp8 weights, MTP layer included.
func TestGLM5MoEShapeFits(t *testing.T) {
	cfg := moeConfig(t, "glm5-moe-shape", WeightFP8)
	in, err := Inspect(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 8 << 30
	if in.Total.Bytes > limit {
		t.Errorf("glm5-moe-shape weighs %d B in fp8, over 8 GiB", in.Total.Bytes)
	}
	more := cfg.Clone()
	more.NRoutedExperts += 16
	in2, err := Inspect(more, nil)
	if err != nil {
		t.Fatal(err)
	}
	if in2.Total.Bytes <= limit {
		t.Errorf("%d experts would still fit (%d B): glm5-moe-shape should have more", more.NRoutedExperts, in2.Total.Bytes)
	}
	if cfg.HiddenSize != 6144 || cfg.MoEIntermediateSize != 2048 || cfg.NumHeads != 64 {
		t.Errorf("glm5-moe-shape is not GLM-5's shape: hidden %d, expert width %d, heads %d", cfg.HiddenSize, cfg.MoEIntermediateSize, cfg.NumHeads)
	}
}
