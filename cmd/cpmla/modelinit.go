package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/checkpoints"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/model"
	"github.com/cpmla/cpmla/plan"
	"github.com/cpmla/cpmla/safetensors"
)

func init() { register(newModelCmd) }

func newModelCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "model", Short: "Create and inspect model checkpoints"}
	cmd.AddCommand(newModelInitCmd(), newModelInspectCmd())
	return cmd
}

func newModelInitCmd() *cobra.Command {
	var preset, out, dtype string
	var seed uint64
	var shard int64
	c := &cobra.Command{
		Use:   "init",
		Short: "Write a checkpoint directory (config.json + sharded safetensors) with seeded random weights",
		Long: `init writes a checkpoint of a preset in the layout published checkpoints use:
HF config.json, safetensors shards with model.safetensors.index.json, the MTP
layer's tensors under model.layers.{num_hidden_layers}. With --weight-dtype fp8
the Linear weights are F8_E4M3 with a float32 weight_scale_inv per 128×128
block and config.json carries the family's quantization_config (DeepSeek:
power-of-two scales, scale_fmt ue8m0; GLM: the modules kept in bf16 listed);
the router, the indexer's head weights, embeddings, LM head and norms stay
bf16 and the router's bias float32.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("--out is required")
			}
			cfg, err := loadConfig(preset)
			if err != nil {
				return err
			}
			if dtype == "" {
				dtype = model.WeightBF16
				if cfg.TorchDtype == "float32" {
					dtype = model.WeightF32
				}
			}
			if cfg, err = model.WithWeightDType(cfg, dtype); err != nil {
				return fmt.Errorf("--weight-dtype: %w", err)
			}
			if err := checkRandomWeights(preset, cfg); err != nil {
				return err
			}
			if err := model.WriteCheckpoint(out, cfg, model.RandomTensors(cfg, seed), shard); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%s, %s weights, seed %d)\n", out, preset, dtype, seed)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&preset, "preset", config.DefaultPreset, "preset name: "+strings.Join(config.PresetNames(), ", "))
	f.Uint64Var(&seed, "seed", model.DefaultWeightSeed, "weight seed")
	f.StringVar(&out, "out", "", "checkpoint directory to write")
	f.StringVar(&dtype, "weight-dtype", "", "weights: fp8 (F8_E4M3 + 128×128 block scales), bf16 or f32 (default: the preset's torch_dtype)")
	sizeVar(f, &shard, "max-shard-bytes", 2<<30, "split the tensors into safetensors shards of at most this size, e.g. 2GiB")
	return c
}

func newModelInspectCmd() *cobra.Command {
	var name string
	var asJSON, ep bool
	var tp, pcp, epSize int
	c := &cobra.Command{
		Use:   "inspect",
		Short: "Describe a checkpoint or preset: layers, parameters and bytes by dtype and part, fp8 tensors, active parameters, per-rank weight bytes",
		Long: `inspect reads a checkpoint directory's config.json and checks every tensor
against it (shape, dtype, fp8 block scales, no tensor the config does not
account for), refusing the first mismatch by name; for a preset it describes
a checkpoint of that config in its published format without making weights.
It reports each layer's kind, parameters and bytes by dtype and by part, the
fp8 tensors, the parameters a token activates, and the planner's weight bytes
per rank for the layout given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if tp < 1 || pcp < 1 || epSize < 0 {
				return fmt.Errorf("--tensor-parallel-size %d, --prefill-context-parallel-size %d must be ≥ 1 and --expert-parallel-size %d ≥ 0", tp, pcp, epSize)
			}
			cfg, err := config.Load(name)
			if err != nil {
				return err
			}
			var src model.TensorSource
			if fsys, ok := checkpoints.Open(name); ok {
				ck, err := safetensors.OpenFS(fsys, "built-in "+name)
				if err != nil {
					return fmt.Errorf("open built-in checkpoint %s: %w", name, err)
				}
				defer ck.Close()
				src = ck
			} else if st, err := os.Stat(name); err == nil && st.IsDir() {
				ck, err := safetensors.OpenDir(name)
				if err != nil {
					return fmt.Errorf("open checkpoint %s: %w", name, err)
				}
				defer ck.Close()
				src = ck
			}
			in, err := model.Inspect(cfg, src)
			if err != nil {
				return err
			}
			if epSize == 0 {
				epSize = 1
				if ep {
					epSize = tp * pcp
				}
			}
			rep := inspectReport{Inspection: in, TP: tp, PCP: pcp, EP: epSize}
			dtype := plan.WeightBF16
			switch {
			case cfg.Quantization != nil:
				dtype = plan.WeightFP8
			case cfg.TorchDtype == "float32":
				dtype = plan.WeightF32
			}
			if rep.WeightBytesPerRank, err = plan.WeightBytesPerRank(cfg, plan.ParamGroups(cfg, true), dtype, tp, epSize); err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			rep.print(cmd.OutOrStdout())
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&name, "model", config.DefaultPreset, modelUsage)
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.IntVar(&tp, "tensor-parallel-size", 1, "tensor parallel size of the layout whose per-rank weight bytes to report")
	f.IntVar(&pcp, "prefill-context-parallel-size", 1, "prefill context parallel size of that layout")
	f.BoolVar(&ep, "enable-expert-parallel", false, "spread the routed experts over the TP × PCP ranks")
	f.IntVar(&epSize, "expert-parallel-size", 0, "ranks sharing the routed experts (0: TP × PCP with --enable-expert-parallel, else 1)")
	return c
}

// inspectReport is model inspect's output: the inspection and the planner's
// per-rank weight bytes for one layout.
type inspectReport struct {
	*model.Inspection
	TP                 int   `json:"tensor_parallel_size"`
	PCP                int   `json:"prefill_context_parallel_size"`
	EP                 int   `json:"expert_parallel_size"`
	WeightBytesPerRank int64 `json:"planner_weight_bytes_per_rank"`
}

func (r inspectReport) print(w io.Writer) {
	fmt.Fprintf(w, "model          %s (%s)\n", r.Model, r.Architecture)
	if r.FromConfig {
		fmt.Fprintln(w, "weights        none read: a checkpoint of this config in its published format")
	}
	fmt.Fprintf(w, "layers         %s; %d MTP layer(s)\n", runs(r.Layers), r.MTPLayers)
	fmt.Fprintf(w, "parameters     %s in %d tensors, %s\n", human(r.Total.Params), r.Total.Tensors, plan.FormatGiB(r.Total.Bytes))
	fmt.Fprintf(w, "active/token   %s\n", human(r.ActiveParamsPerToken))
	if q := r.Quantization; q != nil {
		fmt.Fprintf(w, "quantization   %s %s, blocks %v, scale_fmt %q, not converted %v\n", q.QuantMethod, q.Fmt, q.WeightBlockSize, q.ScaleFmt, q.ModulesToNotConvert)
	}
	fmt.Fprintln(w, "by dtype")
	for _, k := range sortedKeys(r.ByDType) {
		c := r.ByDType[k]
		fmt.Fprintf(w, "  %-12s %6d tensors %12s params %10s\n", k, c.Tensors, human(c.Params), plan.FormatGiB(c.Bytes))
	}
	fmt.Fprintln(w, "by part")
	for _, k := range sortedKeys(r.ByPart) {
		c := r.ByPart[k]
		fmt.Fprintf(w, "  %-15s %6d tensors %12s params %10s\n", k, c.Tensors, human(c.Params), plan.FormatGiB(c.Bytes))
	}
	if len(r.FP8) > 0 {
		fmt.Fprintln(w, "fp8 tensors")
		for _, p := range r.FP8 {
			fmt.Fprintln(w, "  "+p)
		}
	}
	fmt.Fprintf(w, "per rank       %s of weights at TP %d × PCP %d, experts over %d rank(s) (planner estimate)\n", plan.FormatGiB(r.WeightBytesPerRank), r.TP, r.PCP, r.EP)
}

// runs writes layer kinds as runs: "0-2 dense, 3-77 moe".
func runs(kinds []string) string {
	var parts []string
	for i := 0; i < len(kinds); {
		j := i
		for j+1 < len(kinds) && kinds[j+1] == kinds[i] {
			j++
		}
		if i == j {
			parts = append(parts, fmt.Sprintf("%d %s", i, kinds[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d %s", i, j, kinds[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

func human(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}
