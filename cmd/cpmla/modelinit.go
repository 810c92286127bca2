package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/model"
)

func init() { register(newModelCmd) }

func newModelCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "model", Short: "Create and inspect model checkpoints"}
	var preset, out string
	var seed uint64
	var shard int64
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Write a checkpoint directory (config.json + safetensors) with seeded random weights",
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("--out is required")
			}
			cfg, err := config.Load(preset)
			if err != nil {
				return err
			}
			if err := model.WriteCheckpoint(out, cfg, model.RandomTensors(cfg, seed), shard); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%s, seed %d)\n", out, preset, seed)
			return nil
		},
	}
	initCmd.Flags().StringVar(&preset, "preset", config.DefaultPreset, "preset name: "+fmt.Sprint(config.PresetNames()))
	initCmd.Flags().Uint64Var(&seed, "seed", model.DefaultWeightSeed, "weight seed")
	initCmd.Flags().StringVar(&out, "out", "", "checkpoint directory to write")
	initCmd.Flags().Int64Var(&shard, "max-shard-bytes", 2<<30, "split the tensors into safetensors shards of at most this many bytes")
	cmd.AddCommand(initCmd)
	return cmd
}
