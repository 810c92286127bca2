package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/spf13/pflag"

	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/plan"
	"github.com/cpmla/cpmla/spec"
)

// specConfigUsage is --speculative-config's help, the same on every command.
const specConfigUsage = `MTP speculative decoding, vLLM's JSON: '{"method":"mtp","num_speculative_tokens":K}'`

// addSpeculativeFlag registers --speculative-config.
func addSpeculativeFlag(f *pflag.FlagSet, dst *string) {
	f.StringVar(dst, "speculative-config", "", specConfigUsage)
}

// applySpeculative parses --speculative-config into eo (nil when unset).
func applySpeculative(eo *engine.Options, s string) error {
	c, err := spec.ParseConfig(s)
	if err != nil {
		return fmt.Errorf("--speculative-config: %w", err)
	}
	eo.Speculative = c
	return nil
}

// applyCacheFlags parses the cache and memory flags every engine command
// shares (--kv-cache-dtype, --indexer-cache-dtype, --memory-limit,
// --kv-cache-memory, --workspace-bytes NAME=BYTES) into eo.
func applyCacheFlags(eo *engine.Options, kvDType, idxDType, memoryLimit, kvCacheMemory string, workspaces []string) error {
	var err error
	if eo.KVDType, err = kvcache.ParseKVDType(kvDType); err != nil {
		return err
	}
	if eo.IndexerDType, err = kvcache.ParseIndexerDType(idxDType); err != nil {
		return err
	}
	for _, f := range []struct {
		name, v string
		dst     *int64
	}{{"--memory-limit", memoryLimit, &eo.MemoryLimit}, {"--kv-cache-memory", kvCacheMemory, &eo.KVCacheMemory}} {
		if f.v == "" {
			continue
		}
		if *f.dst, err = plan.ParseSize(f.v); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	for _, w := range workspaces {
		name, size, ok := strings.Cut(w, "=")
		if !ok {
			return fmt.Errorf("--workspace-bytes %q: want NAME=BYTES, e.g. logits=64MiB", w)
		}
		b, err := plan.ParseSize(size)
		if err != nil {
			return fmt.Errorf("--workspace-bytes %s: %w", name, err)
		}
		if eo.WorkspaceBytes == nil {
			eo.WorkspaceBytes = map[string]int64{}
		}
		eo.WorkspaceBytes[name] = b
	}
	return nil
}

// specResult is the speculative-decoding part of a bench report, in the
// terms of vLLM's spec-decode metrics.
type specResult struct {
	K                    int       `json:"num_speculative_tokens"`
	Drafts               int64     `json:"num_drafts"`
	DraftTokens          int64     `json:"num_draft_tokens"`
	AcceptedTokens       int64     `json:"num_accepted_tokens"`
	AcceptanceRate       float64   `json:"acceptance_rate"`
	MeanAcceptanceLength float64   `json:"mean_acceptance_length"`
	AcceptanceRatePerPos []float64 `json:"acceptance_rate_per_position"`
}

// newSpecResult reports st, or nil without speculation.
func newSpecResult(c *spec.Config, st spec.Stats) *specResult {
	if c == nil {
		return nil
	}
	r := &specResult{K: c.K(), Drafts: st.Drafts, DraftTokens: st.DraftTokens, AcceptedTokens: st.AcceptedTokens,
		MeanAcceptanceLength: st.MeanAcceptanceLength(), AcceptanceRatePerPos: st.AcceptanceRatePerPos()}
	if st.DraftTokens > 0 {
		r.AcceptanceRate = float64(st.AcceptedTokens) / float64(st.DraftTokens)
	}
	return r
}

// formatRates prints rates as percentages.
func formatRates(r []float64) string {
	var b strings.Builder
	for i, v := range r {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%.1f%%", 100*v)
	}
	return b.String()
}

// sizeValue is a flag of a byte count that accepts what plan.ParseSize
// reads ("4GiB", "512MiB", "1.5GB", "1073741824"), so that every size flag
// of every command takes the same forms. It stores into an int64 or an int.
type sizeValue struct {
	i64 *int64
	i   *int
}

// sizeVar registers a size flag stored in *p with default def.
func sizeVar(f *pflag.FlagSet, p *int64, name string, def int64, usage string) {
	*p = def
	f.Var(sizeValue{i64: p}, name, usage)
}

// sizeIntVar is sizeVar for an int.
func sizeIntVar(f *pflag.FlagSet, p *int, name string, def int, usage string) {
	*p = def
	f.Var(sizeValue{i: p}, name, usage)
}

func (v sizeValue) get() int64 {
	if v.i64 != nil {
		return *v.i64
	}
	if v.i != nil {
		return int64(*v.i)
	}
	return 0
}

// String writes the size with the largest binary unit that divides it.
func (v sizeValue) String() string {
	b := v.get()
	for _, u := range []struct {
		name string
		n    int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && b%u.n == 0 {
			return fmt.Sprintf("%d%s", b/u.n, u.name)
		}
	}
	return fmt.Sprint(b)
}

func (v sizeValue) Set(s string) error {
	b, err := plan.ParseSize(s)
	if err != nil {
		return err
	}
	if v.i != nil {
		if b > math.MaxInt {
			return fmt.Errorf("size %q is larger than %d bytes", s, math.MaxInt)
		}
		*v.i = int(b)
		return nil
	}
	*v.i64 = b
	return nil
}

func (v sizeValue) Type() string { return "size" }
