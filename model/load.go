package model

import (
	"fmt"
	"os"

	"github.com/cpmla/cpmla/checkpoints"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/safetensors"
)

// DefaultWeightSeed seeds the random weights of a preset named without a
// checkpoint directory.
const DefaultWeightSeed = 0

// Source resolves a --model argument to its config and tensors: a preset name
// gives deterministic random weights from seed; the name of a built-in
// checkpoint gives its trained weights, read from the binary; a directory
// gives the checkpoint it holds (config.json + safetensors, sharded or not).
func Source(arg string, seed uint64) (*config.Model, TensorSource, error) {
	if fsys, ok := checkpoints.Open(arg); ok {
		cfg, err := config.Load(arg)
		if err != nil {
			return nil, nil, err
		}
		ck, err := safetensors.OpenFS(fsys, "built-in "+arg)
		if err != nil {
			return nil, nil, fmt.Errorf("open built-in checkpoint %s: %w", arg, err)
		}
		return cfg, ck, nil
	}
	if st, err := os.Stat(arg); err == nil && st.IsDir() {
		cfg, err := config.Load(arg)
		if err != nil {
			return nil, nil, err
		}
		ck, err := safetensors.OpenDir(arg)
		if err != nil {
			return nil, nil, fmt.Errorf("open checkpoint %s: %w", arg, err)
		}
		return cfg, ck, nil
	}
	cfg, err := config.Load(arg)
	if err != nil {
		return nil, nil, err
	}
	return cfg, RandomTensors(cfg, seed), nil
}
