package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/kernels"
)

// localRanks is the number of ranks sharing this host's cores: the in-process
// world, or under mpirun the processes OpenMPI placed on this node.
func localRanks(inProcess int) int {
	if v, err := strconv.Atoi(os.Getenv("OMPI_COMM_WORLD_LOCAL_SIZE")); err == nil && v > 0 {
		return v
	}
	return max(inProcess, 1)
}

// addThreadsFlag registers --threads-per-rank on cmd.
func addThreadsFlag(cmd *cobra.Command, dst *int) {
	cmd.Flags().IntVar(dst, "threads-per-rank", 0, "threads a rank's kernels may use (0: this host's cores divided by the ranks sharing it)")
}

// applyThreads sets the kernels' threads per rank: the flag, or the host's
// cores divided by the ranks sharing them, so that ranks do not oversubscribe
// the machine.
func applyThreads(flag, ranks int) error {
	n := flag
	if n < 0 || n > maxThreadsPerRank {
		return fmt.Errorf("--threads-per-rank must be in [0, %d] (0 picks cores / local ranks), got %d", maxThreadsPerRank, n)
	}
	if n == 0 {
		n = max(1, runtime.NumCPU()/localRanks(ranks))
	}
	kernels.SetThreads(n)
	return nil
}
