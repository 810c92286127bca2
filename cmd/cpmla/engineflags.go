package main

import (
	"fmt"
	"strings"

	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/kvcache"
	"github.com/cpmla/cpmla/plan"
)

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
