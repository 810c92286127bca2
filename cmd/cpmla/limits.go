package main

import (
	"fmt"
	"io/fs"
	"math"
	"os"
	"strings"

	"github.com/cpmla/cpmla/checkpoints"
	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/plan"
)

// Bounds every command applies to its flags before anything is sized from
// them, so that no product of flag values overflows and no loop, goroutine
// count or allocation follows an absurd value.
const (
	// maxRanks bounds every parallel size and the world TP·PCP: more ranks
	// than any deployment cpmla runs or plans.
	maxRanks = 4096
	// maxThreadsPerRank bounds --threads-per-rank (kernel worker goroutines).
	maxThreadsPerRank = 1024
)

// checkParallel refuses parallel sizes outside [1, maxRanks] (and a world
// beyond maxRanks) by flag name, then checks the layout itself; every
// command that takes these flags calls it first.
func checkParallel(tp, pcp, dcp, interleave int) error {
	for _, f := range []struct {
		name string
		v    int
	}{{"--tensor-parallel-size", tp}, {"--prefill-context-parallel-size", pcp}, {"--decode-context-parallel-size", dcp}} {
		switch {
		case f.v < 1:
			return fmt.Errorf("%s %d must be at least 1; use %s 1", f.name, f.v, f.name)
		case f.v > maxRanks:
			return fmt.Errorf("%s %d is more than the %d ranks cpmla runs; use at most %s %d", f.name, f.v, maxRanks, f.name, maxRanks)
		}
	}
	if tp*pcp > maxRanks {
		return fmt.Errorf("--tensor-parallel-size %d × --prefill-context-parallel-size %d = %d ranks, more than the %d cpmla runs; lower one of them",
			tp, pcp, tp*pcp, maxRanks)
	}
	if interleave < 1 || interleave > engine.MaxBlockSize {
		return fmt.Errorf("--cp-kv-cache-interleave-size %d must be in [1, %d]; 1 is the usual setting", interleave, engine.MaxBlockSize)
	}
	return comm.Layout{TP: tp, PCP: pcp, DCP: dcp}.Validate()
}

// checkShardable refuses a tensor-parallel size the model's heads and MLP
// cannot be split by, naming the sizes that work, before any weight exists.
func checkShardable(cfg *config.Model, tp int) error {
	var ok []string
	for t := 1; t <= min(cfg.NumHeads, maxRanks); t++ {
		if cfg.NumHeads%t == 0 && cfg.IntermediateSize%t == 0 {
			ok = append(ok, fmt.Sprint(t))
		}
	}
	if cfg.NumHeads%tp != 0 || cfg.IntermediateSize%tp != 0 {
		return fmt.Errorf("--tensor-parallel-size %d does not divide num_attention_heads %d and intermediate_size %d; use one of %s",
			tp, cfg.NumHeads, cfg.IntermediateSize, strings.Join(ok, ", "))
	}
	return nil
}

// weightSource is what a --model argument's tensors cost this process before
// any rank is built: a preset's random tensors in memory, a checkpoint's
// safetensors files mapped.
type weightSource struct {
	bytes         int64   // in memory or mapped
	bytesPerParam float64 // storage of one parameter
}

// sourceOf measures the weights behind --model without reading them.
func sourceOf(modelArg string, cfg *config.Model) (weightSource, error) {
	params := plan.TotalParams(plan.ParamGroups(cfg, false))
	// A built-in checkpoint is read into memory, a directory's files mapped.
	fsys, ok := checkpoints.Open(modelArg)
	if st, err := os.Stat(modelArg); !ok && err == nil && st.IsDir() {
		fsys, ok = os.DirFS(modelArg), true
	}
	if ok {
		files, err := fs.Glob(fsys, "*.safetensors")
		if err != nil {
			return weightSource{}, err
		}
		var n int64
		for _, f := range files {
			if fi, err := fs.Stat(fsys, f); err == nil {
				n += fi.Size()
			}
		}
		bpp := 2.0
		if params > 0 {
			bpp = float64(n) / float64(params)
		}
		return weightSource{bytes: n, bytesPerParam: bpp}, nil
	}
	bpp := int64(4)
	if cfg.TorchDtype == "bfloat16" {
		bpp = 2
	}
	// The random tensors, plus one tensor's f32 draw before a bf16 copy.
	var total, largest int64
	for _, s := range model.TensorSpecs(cfg) {
		n := int64(1)
		for _, d := range s.Shape {
			n = plan.MulSat(n, int64(max(d, 0)))
		}
		total = plan.AddSat(total, plan.MulSat(n, bpp))
		largest = max(largest, n)
	}
	return weightSource{bytes: plan.AddSat(total, plan.MulSat(largest, 4)), bytesPerParam: float64(bpp)}, nil
}

// rankWeights estimates one rank's weights of layout d (TP-split groups
// divided by TP, routed experts spread whole over the TP × PCP ranks under
// --enable-expert-parallel and sliced by TP otherwise, the rest whole;
// --quantization fp8 stores the quantizable groups at one byte and a scale)
// and the part of them a rank copies instead of sharing with the source:
// the transposed W_UK of its heads in f32 and, under TP, the column slices
// of o_proj and the MLP's down projection.
func rankWeights(cfg *config.Model, src weightSource, d deployment) (weights, copied int64) {
	tp := max(d.tp, 1)
	quant := src.bytesPerParam
	if d.quantization == plan.WeightFP8 {
		quant, _ = plan.WeightBytesPerParam(plan.WeightFP8)
	}
	var w float64
	for _, g := range plan.ParamGroups(cfg, false) {
		n := float64(g.Params)
		switch {
		case g.Sharding == plan.ShardTP:
			n /= float64(tp)
		case g.Sharding == plan.ShardExperts && d.expertParallel:
			n /= float64(tp * max(d.pcp, 1))
		case g.Sharding == plan.ShardExperts:
			n /= float64(tp)
		}
		per := src.bytesPerParam
		if g.Quantized {
			per = min(per, quant)
		}
		w += n * per
	}
	heads := int64(cfg.NumHeads / tp)
	layers := int64(cfg.NumLayers)
	copied = plan.MulSat(layers, heads, int64(cfg.KVLoraRank), int64(cfg.QKNopeHeadDim), 4)
	if tp > 1 {
		cols := float64(cfg.HiddenSize) * (float64(heads)*float64(cfg.VHeadDim) + float64(cfg.IntermediateSize/tp))
		copied = plan.AddSat(copied, int64(math.Min(float64(layers)*cols*src.bytesPerParam, math.MaxInt64/2)))
	}
	if w > math.MaxInt64/2 {
		return math.MaxInt64, copied
	}
	return plan.AddSat(int64(w), copied), copied
}

// availableMemory is what this process may use (engine.AvailableMemory).
var availableMemory = engine.AvailableMemory

// checkProcessFits refuses a start-up whose parts cannot fit in the memory
// this process may use; parts are named byte counts, fix says what to
// change. It is the last check before the first weight is made or mapped.
func checkProcessFits(what string, parts []namedBytes, fix string) error {
	avail, err := availableMemory()
	if err != nil {
		return err
	}
	if total := sumBytes(parts); total > avail.Bytes {
		return fmt.Errorf("%s needs %s (%s), more than the %s this process may use; %s", what, formatSize(total), listBytes(parts), avail, fix)
	}
	return nil
}

func sumBytes(parts []namedBytes) int64 {
	var total int64
	for _, p := range parts {
		total = plan.AddSat(total, p.bytes)
	}
	return total
}

func listBytes(parts []namedBytes) string {
	var list []string
	for _, p := range parts {
		if p.bytes > 0 {
			list = append(list, p.name+" "+formatSize(p.bytes))
		}
	}
	return strings.Join(list, ", ")
}

// maxCount is how many items of size each fit in the memory this process
// may use (at least 1).
func maxCount(each int64) int64 {
	avail, err := availableMemory()
	if err != nil || each <= 0 {
		return 1
	}
	return max(avail.Bytes/each, 1)
}

// namedBytes is one part of a memory estimate.
type namedBytes struct {
	name  string
	bytes int64
}

// formatSize prints a size as GiB with the exact count, or "more than 8
// EiB" for a saturated product.
func formatSize(b int64) string {
	if b == math.MaxInt64 {
		return "more than 8 EiB"
	}
	return fmt.Sprintf("%s (%d bytes)", plan.FormatGiB(b), b)
}

// checkEngineStart is the memory check of every engine command before any
// weight loads: the per-rank budget of the engine options (for the layout
// of d, of which the ranks in this process are eo.RanksPerHost) and the
// whole process, the weight source included.
func checkEngineStart(modelArg string, cfg *config.Model, eo engine.Options, d deployment) error {
	l := d.layout()
	if err := checkShardable(cfg, l.TP); err != nil {
		return err
	}
	src, err := sourceOf(modelArg, cfg)
	if err != nil {
		return err
	}
	weights, copied := rankWeights(cfg, src, d)
	avail, err := availableMemory()
	if err != nil {
		return err
	}
	if err := eo.CheckMemory(cfg, l, weights, avail); err != nil {
		return err
	}
	st, err := eo.Start(cfg, l, weights)
	if err != nil {
		return err
	}
	ranks := int64(max(eo.RanksPerHost, 1))
	return checkProcessFits(fmt.Sprintf("starting %d rank(s) in this process", ranks), []namedBytes{
		{"weights of --model " + modelArg, src.bytes},
		{"per-rank copies", plan.MulSat(ranks, copied)},
		{"step buffers", plan.MulSat(ranks, st.BufferBytes)},
		{"KV caches at start-up", plan.MulSat(ranks, st.KVBytes)},
	}, "use fewer ranks in one process (or --comm mpi across hosts), a larger --tensor-parallel-size, or smaller batch and length limits")
}

// maxConfigFileBytes bounds a config file named by --model (real ones are a
// few KiB).
const maxConfigFileBytes = 1 << 20

// loadConfig is config.Load behind a check that a --model path names a
// directory or a small regular file: a device, a pipe or a huge file is
// refused by name before anything reads it.
func loadConfig(arg string) (*config.Model, error) {
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		switch {
		case !st.Mode().IsRegular():
			return nil, fmt.Errorf("--model %s is not a checkpoint directory but a %s; pass the directory that holds config.json", arg, st.Mode().Type())
		case st.Size() > maxConfigFileBytes:
			return nil, fmt.Errorf("--model %s is a file of %d bytes, not a checkpoint directory; pass the directory that holds config.json", arg, st.Size())
		}
	}
	return config.Load(arg)
}

// checkRandomWeights refuses a preset whose random weights, made in memory
// before they are written, cannot fit in this process.
func checkRandomWeights(preset string, cfg *config.Model) error {
	src, err := sourceOf(preset, cfg)
	if err != nil {
		return err
	}
	return checkProcessFits("the random weights of --preset "+preset, []namedBytes{{"weights", src.bytes}},
		"pick a smaller preset (glm5-mini, v32-mini, glm5-moe-mini): the published configurations are for the planner and for real checkpoints")
}
