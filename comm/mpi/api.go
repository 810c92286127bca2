package mpi

import (
	"os"
	"time"

	"github.com/cpmla/cpmla/comm"
)

// DefaultTimeout is the deadline of every collective and of every Split
// handshake unless Options.Timeout sets another.
const DefaultTimeout = 30 * time.Second

// Options configure the MPI transport of one process.
type Options struct {
	// Timeout bounds each collective (ledger and data phases together) and
	// each Split handshake (DefaultTimeout if zero).
	Timeout time.Duration
	// TraceCapacity is the number of collectives each member records per
	// group for Group.Trace (0: no trace).
	TraceCapacity int
	// AbortGrace is how long Close waits, when it has to abort the job,
	// before calling MPI_Abort, so that peers failing at the same moment
	// can report their own errors before the job is torn down (0: abort at
	// once).
	AbortGrace time.Duration
}

// Process is this process's MPI runtime: its rank in MPI_COMM_WORLD, the
// world group, and the end of the job.
type Process interface {
	// World is the group of every process of the job; its rank is the
	// world rank.
	World() comm.Group
	// Host is the processor name MPI reports for this process.
	Host() string
	// Err is the failure that poisoned this process's world, or nil.
	Err() error
	// Close ends MPI for this process. With no MPI operation pending it
	// calls MPI_Finalize (bounded by the timeout; every process must call
	// Close) and returns. If a failed collective left operations pending,
	// the peers cannot be finalized with; Close writes the world's error
	// to stderr, waits AbortGrace and calls MPI_Abort, which ends every
	// process of the job with exit status 1. It never returns then.
	Close() error
	// Abort writes err to stderr, waits AbortGrace and ends every process
	// of the job with MPI_Abort and exit status code. It never returns.
	Abort(code int, err error)
}

// Launched reports whether this process was started by mpirun (OpenMPI sets
// OMPI_COMM_WORLD_SIZE in every process it launches, PMIx launchers set
// PMIX_RANK).
func Launched() bool {
	_, ompi := os.LookupEnv("OMPI_COMM_WORLD_SIZE")
	_, pmix := os.LookupEnv("PMIX_RANK")
	return ompi || pmix
}

// Init starts MPI on a dedicated OS thread and returns this process's
// runtime. It can be called once per process. In a build without the mpi
// tag it returns an error naming the build command that enables MPI.
func Init(opts Options) (Process, error) { return initMPI(opts) }
