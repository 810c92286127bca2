package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/plan"
)

func init() { register(newPlanCmd) }

// sizeFlag is a byte-size flag read with plan.ParseSize ("394MiB",
// "161.16GiB", "413138944"); set records whether the user gave it.
type sizeFlag struct {
	bytes int64
	set   bool
}

func (s *sizeFlag) String() string {
	if !s.set && s.bytes == 0 {
		return ""
	}
	return fmt.Sprint(s.bytes)
}

func (s *sizeFlag) Set(v string) error {
	b, err := plan.ParseSize(v)
	if err != nil {
		return err
	}
	s.bytes, s.set = b, true
	return nil
}

func (s *sizeFlag) Type() string { return "size" }

// ptr returns the size if it was given, else nil.
func (s *sizeFlag) ptr() *int64 {
	if !s.set {
		return nil
	}
	v := s.bytes
	return &v
}

// planShortNames maps vLLM's short spellings to the planner's flags.
var planShortNames = map[string]string{
	"tp":  "tensor-parallel-size",
	"pcp": "prefill-context-parallel-size",
	"dcp": "decode-context-parallel-size",
}

func newPlanCmd() *cobra.Command {
	var (
		cfg                                                   plan.Config
		modelName, deviceName, svgPath                        string
		asJSON                                                bool
		deviceMem, nonKV, graphs, autotune, unaccounted, fiWS sizeFlag
	)
	fiWS = sizeFlag{bytes: plan.DefaultFlashInferWorkspaceBytes}
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Prove that a GPU (or CPU) deployment of a sparse-MLA model fits before launching it",
		Long: `plan computes, per rank, the memory budget of a vLLM-style deployment of a
sparse-MLA model: KV budget after non-KV and CUDA-graph memory, KV tokens
per rank, concurrency at --max-model-len, the autotuner's headroom, the
FlashInfer sparse-MLA workspace and the DCP all-to-all buffer under DCP,
and the attention backend that serves the exact TP/PCP/DCP combination.
Every problem is reported with the setting that fixes it.

Measured inputs (--non-kv-memory, --cudagraph-memory, --autotune-request,
--unaccounted-memory) override the estimates. Sizes accept B, KiB, MiB, GiB,
TiB (binary), KB, MB, GB, TB (decimal) and plain byte counts.`,
		Example: `  cpmla plan --model glm-5 --device b200 --tp 1 --pcp 4 --dcp 4 \
    --gpu-memory-utilization 0.92 --non-kv-memory 161.16GiB --cudagraph-memory 6.15GiB
  cpmla plan --model glm-5 --device h200 --tp 8 --dcp 4 --kv-cache-dtype fp8_ds_mla \
    --dcp-comm-backend a2a --max-num-seqs 128 --num-speculative-tokens 5 --parallel-drafting --json
  cpmla plan --model deepseek-v3.2 --tp 8 --dcp 8 --svg plan.svg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := loadConfig(modelName)
			if err != nil {
				return fmt.Errorf("plan: %w", err)
			}
			dev, err := plan.LookupDevice(deviceName)
			if err != nil {
				return fmt.Errorf("plan: %w", err)
			}
			if err := checkPlanSizes(cfg); err != nil {
				return fmt.Errorf("plan: %w", err)
			}
			cfg.Model, cfg.Device = m, dev
			switch {
			case deviceMem.set:
				cfg.DeviceBytes = deviceMem.bytes
			case dev.Target == plan.TargetCPU:
				if cfg.DeviceBytes, err = plan.HostMemoryBytes(); err != nil {
					return fmt.Errorf("plan: %w", err)
				}
			}
			cfg.Measured = plan.Measured{
				NonKVBytes: nonKV.ptr(), CUDAGraphBytes: graphs.ptr(),
				AutotuneRequestBytes: autotune.bytes, UnaccountedBytes: unaccounted.bytes,
				FlashInferWorkspaceBytes: fiWS.bytes,
			}
			p, err := plan.Compute(cfg)
			if err != nil {
				return err
			}
			if svgPath != "" {
				f, err := os.Create(svgPath)
				if err != nil {
					return fmt.Errorf("plan: create svg: %w", err)
				}
				if err := p.WriteSVG(f); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return fmt.Errorf("plan: close svg: %w", err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", svgPath)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(p); err != nil {
					return fmt.Errorf("plan: write json: %w", err)
				}
				return nil
			}
			return p.WriteTable(out)
		},
	}
	f := cmd.Flags()
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if long, ok := planShortNames[name]; ok {
			name = long
		}
		return pflag.NormalizedName(name)
	})
	f.StringVar(&modelName, "model", "glm-5", "preset ("+strings.Join(config.PresetNames(), ", ")+") or a directory holding config.json")
	f.StringVar(&deviceName, "device", "b200", "device: "+strings.Join(plan.DeviceNames(), ", ")+" (cpu: this host's RAM unless --device-memory)")
	f.Var(&deviceMem, "device-memory", "memory of one device (overrides --device's size), e.g. 178.35GiB")
	f.IntVar(&cfg.TP, "tensor-parallel-size", 1, "tensor parallel size (--tp)")
	f.IntVar(&cfg.PCP, "prefill-context-parallel-size", 1, "prefill context parallel size (--pcp)")
	f.IntVar(&cfg.DCP, "decode-context-parallel-size", 1, "decode context parallel size (--dcp)")
	f.IntVar(&cfg.Interleave, "cp-kv-cache-interleave-size", 1, "tokens per DCP rank before the KV moves to the next rank")
	f.IntVar(&cfg.ExpertParallel, "expert-parallel-size", 0, "ranks sharing the routed experts (0: TP × PCP)")
	f.Float64Var(&cfg.Utilization, "gpu-memory-utilization", plan.DefaultUtilization, "fraction of device memory the engine may use")
	f.IntVar(&cfg.MaxNumBatchedTokens, "max-num-batched-tokens", plan.DefaultMaxNumBatchedTokens, "most tokens scheduled in one step")
	f.IntVar(&cfg.MaxNumSeqs, "max-num-seqs", plan.DefaultMaxNumSeqs, "most sequences in one step")
	f.IntVar(&cfg.MaxModelLen, "max-model-len", 0, "longest request in tokens (0: the model's max_position_embeddings)")
	f.IntVar(&cfg.SpeculativeTokens, "num-speculative-tokens", 0, "MTP speculative tokens per step")
	f.BoolVar(&cfg.ParallelDrafting, "parallel-drafting", false, "drafts run in parallel (2 query rows per speculative token)")
	f.IntVar(&cfg.CaptureSize, "max-cudagraph-capture-size", 0, "largest CUDA-graph batch (0: min(2 × max-num-seqs × (1 + spec), 512))")
	f.StringVar(&cfg.KVDtype, "kv-cache-dtype", plan.DtypeBF16, "MLA cache row dtype: bf16, fp8_ds_mla (cpu also f32)")
	f.StringVar(&cfg.IndexerDtype, "indexer-cache-dtype", plan.DtypeFP8, "indexer key cache dtype: fp8, bf16, f32")
	f.StringVar(&cfg.WeightDtype, "weight-dtype", "", "weight dtype of linear layers: bf16, fp8, nvfp4, f32 (default: the config's torch_dtype)")
	f.StringVar(&cfg.AttentionBackend, "attention-backend", plan.BackendAuto, "auto, sparse-gather (FLASHMLA_SPARSE) or sparse-sharded (FLASHINFER_MLA_SPARSE)")
	f.StringVar(&cfg.DCPCommBackend, "dcp-comm-backend", plan.CommAGRS, "DCP combine: ag_rs or a2a (direct all-to-all buffer)")
	f.IntVar(&cfg.BlockSize, "block-size", plan.DefaultBlockSize, "KV cache block size in tokens")
	f.Var(&nonKV, "non-kv-memory", "measured non-KV memory per rank (weights + activations + non-torch), overrides the estimate")
	f.Var(&graphs, "cudagraph-memory", "measured CUDA-graph memory per rank")
	f.Var(&autotune, "autotune-request", "bytes a kernel autotuner asks for after the KV cache is allocated")
	f.Var(&unaccounted, "unaccounted-memory", "memory outside the utilization budget already in use (runtime context, communication buffers)")
	f.Var(&fiWS, "flashinfer-workspace-bytes", "configured FlashInfer workspace buffer (default 394MiB = 413,138,944 B)")
	f.BoolVar(&asJSON, "json", false, "print one flat JSON object instead of the table")
	f.StringVar(&svgPath, "svg", "", "also draw the per-rank memory breakdown as an SVG bar chart to this file")
	return cmd
}

// maxPlanTokens bounds the planner's token and sequence counts: more than
// any deployment schedules in one step or one request.
const maxPlanTokens = 1 << 31

// checkPlanSizes bounds the planner's counts before its arithmetic (and its
// table of every rank) is sized from them: parallel sizes as every command
// bounds them, step and request sizes below maxPlanTokens.
func checkPlanSizes(c plan.Config) error {
	for _, f := range []struct {
		name string
		v    int
	}{{"--tensor-parallel-size", c.TP}, {"--prefill-context-parallel-size", c.PCP}, {"--decode-context-parallel-size", c.DCP}, {"--expert-parallel-size", c.ExpertParallel}} {
		if f.v > maxRanks {
			return fmt.Errorf("%s %d is more than the %d ranks cpmla plans; use at most %d", f.name, f.v, maxRanks, maxRanks)
		}
	}
	if c.TP > 0 && c.PCP > 0 && c.TP*c.PCP > maxRanks {
		return fmt.Errorf("--tensor-parallel-size %d × --prefill-context-parallel-size %d = %d ranks, more than the %d cpmla plans", c.TP, c.PCP, c.TP*c.PCP, maxRanks)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"--max-num-batched-tokens", c.MaxNumBatchedTokens}, {"--max-num-seqs", c.MaxNumSeqs}, {"--max-model-len", c.MaxModelLen},
		{"--num-speculative-tokens", c.SpeculativeTokens}, {"--max-cudagraph-capture-size", c.CaptureSize}, {"--block-size", c.BlockSize}, {"--cp-kv-cache-interleave-size", c.Interleave}} {
		if f.v > maxPlanTokens {
			return fmt.Errorf("%s %d is more than %d; use a smaller value", f.name, f.v, maxPlanTokens)
		}
	}
	return nil
}
