package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/cpmla/cpmla/checkpoints"
	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/mpi"
	"github.com/cpmla/cpmla/config"
	"github.com/cpmla/cpmla/cp"
	"github.com/cpmla/cpmla/engine"
	"github.com/cpmla/cpmla/kernels"
	"github.com/cpmla/cpmla/model"
)

// multiProcess is this process's part of an MPI deployment: world rank 0
// leads (runs the engine and, for serve, the HTTP server); the others follow
// the plans it broadcasts.
type multiProcess struct {
	proc      mpi.Process
	procs     *engine.Procs
	leader    bool
	weights   int64 // the most loaded rank's weight bytes
	heartbeat func()
}

// deployment is what a multi-process run needs to know before weights load.
type deployment struct {
	comm, model               string
	weightSeed                uint64
	tp, pcp, dcp, interleave  int
	backend, dcpComm, kvDType string
	blockSize                 int // 0: engine.DefaultBlockSize in joinProcesses
	expertParallel            bool
	quantization              string
	// collectiveTimeout bounds every collective across processes (0: the
	// default): a rank that does not arrive within it fails the job.
	collectiveTimeout time.Duration
}

// defaultCollectiveTimeout is --collective-timeout's default.
const defaultCollectiveTimeout = 30 * time.Second

// addCollectiveTimeoutFlag adds --collective-timeout, the deadline of every
// collective under --comm mpi.
func addCollectiveTimeoutFlag(f *pflag.FlagSet, dst *time.Duration) {
	f.DurationVar(dst, "collective-timeout", defaultCollectiveTimeout, "deadline of every collective across processes (--comm mpi): a rank that does not arrive within it ends the job, naming the rank")
}

// checkCollectiveTimeout bounds --collective-timeout.
func checkCollectiveTimeout(d time.Duration) error {
	if d <= 0 || d > 24*time.Hour {
		return fmt.Errorf("--collective-timeout %v must be in (0, 24h]; 30s is the usual setting", d)
	}
	return nil
}

// defaultModel is the --model of generate, serve and eval: the built-in
// trained checkpoint, which answers what it was trained on. The other
// commands (verify, bench, model) default to config.DefaultPreset, whose
// shapes they were built around.
const defaultModel = "cpmla-tiny"

// modelUsage is the help of every --model flag.
var modelUsage = "preset with random weights (" + strings.Join(config.PresetNames(), ", ") + "), built-in trained checkpoint (" +
	strings.Join(checkpoints.Names(), ", ") + ") or checkpoint directory"

// loadModel resolves --model (a preset's random weights or a checkpoint
// directory) and applies --quantization.
func loadModel(name string, seed uint64, quantization string) (*config.Model, model.TensorSource, error) {
	cfg, src, err := model.Source(name, seed)
	if err != nil {
		return nil, nil, err
	}
	return model.Quantize(cfg, src, quantization)
}

// addModelFlags adds the flags every engine command shares about how the
// weights are held: --enable-expert-parallel and --quantization (vLLM's).
func addModelFlags(f *pflag.FlagSet, expertParallel *bool, quantization *string) {
	f.BoolVar(expertParallel, "enable-expert-parallel", false, "spread the routed experts whole over the TP × PCP ranks instead of slicing each over TP")
	f.StringVar(quantization, "quantization", "", "fp8: block-quantize an unquantized checkpoint's Linear weights (128×128 e4m3 blocks) at load")
}

// parallel is the engine's view of the deployment's layout.
func (d deployment) parallel(bp *cp.BackendPlan) engine.Parallel {
	return engine.Parallel{Layout: d.layout(), Interleave: d.interleave, Backend: bp, ExpertParallel: d.expertParallel}
}

// layout is the deployment's parallel layout.
func (d deployment) layout() comm.Layout { return comm.Layout{TP: d.tp, PCP: d.pcp, DCP: d.dcp} }

// backendPlan is the attention backend plan of the deployment for model cfg
// (cp.NewBackendPlan refuses a combination it cannot serve): the one place
// the commands map their flags to a cp.BackendConfig.
func (d deployment) backendPlan(cfg *config.Model) (*cp.BackendPlan, error) {
	return cp.NewBackendPlan(cp.BackendConfig{
		Layout: d.layout(), Interleave: d.interleave, BlockSize: d.blockSize / max(d.dcp, 1),
		KVDtype: d.kvDType, Backend: d.backend, Comm: d.dcpComm, HeadsPerRank: cfg.NumHeads / max(d.tp, 1),
		QKNopeHeadDim: cfg.QKNopeHeadDim, Sparse: cfg.Sparse(),
	})
}

// executors is what the engine runs its steps on for this deployment, and
// the weight bytes of its most loaded rank: the other processes' driver
// procs with their weights procWeights under --comm mpi (procs not nil), one
// rank's model, or in-process ranks. release frees the one rank's model
// once the engine is done with it (it does nothing for the others).
func (d deployment) executors(procs *engine.Procs, procWeights int64, cfg *config.Model, src model.TensorSource, bp *cp.BackendPlan) (factory engine.ExecutorFactory, weights int64, release func(), err error) {
	switch {
	case procs != nil:
		return procs.Factory(), procWeights, func() {}, nil
	case d.tp*d.pcp == 1:
		m, err := model.Build(cfg, src, model.Shard{TPSize: 1})
		if err != nil {
			return nil, 0, nil, err
		}
		return engine.SingleRank(m), engine.WeightBytes(m), func() { m.Close() }, nil
	}
	factory, weights, err = engine.InProcess(cfg, src, d.parallel(bp))
	return factory, weights, func() {}, err
}

// joinProcesses starts MPI when --comm mpi is set and prepares this
// process's rank (model shard, TP/PCP/DCP groups); for the leader,
// mp.procs is the broadcasting executor's driver. It returns nil for
// --comm inproc.
func joinProcesses(o deployment, stderr io.Writer) (*multiProcess, error) {
	switch o.comm {
	case "", "inproc":
		return nil, nil
	case "mpi":
	default:
		return nil, fmt.Errorf("--comm %q: use inproc (ranks are goroutines) or mpi (one process per rank under mpirun)", o.comm)
	}
	cfg, err := loadConfig(o.model)
	if err != nil {
		return nil, err
	}
	if o.blockSize == 0 {
		o.blockSize = engine.DefaultBlockSize
	}
	layout := o.layout()
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	bp, err := o.backendPlan(cfg)
	if err != nil {
		return nil, err
	}
	timeout := o.collectiveTimeout
	if timeout <= 0 {
		timeout = defaultCollectiveTimeout
	}
	proc, err := mpi.Init(mpi.Options{Timeout: timeout, AbortGrace: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	cfg, src, err := loadModel(o.model, o.weightSeed, o.quantization)
	if err != nil {
		proc.Abort(1, err)
	}
	mp := &multiProcess{proc: proc, leader: proc.World().Rank() == 0}
	mp.procs, mp.weights, err = engine.NewProcs(context.Background(), cfg, src, proc.World(), func() engine.Parallel { p := o.parallel(bp); p.CollectiveTimeout = timeout; return p }())
	if err != nil {
		proc.Abort(1, err)
	}
	if mp.leader {
		mp.heartbeat = mp.procs.Heartbeat(timeout / 4)
		fmt.Fprintf(stderr, "cpmla: rank 0 of %d processes (%s) leads; the others follow its plans\n", proc.World().Size(), proc.Host())
	}
	return mp, nil
}

// runRanks is the start of every engine command that may span processes:
// it applies --threads-per-rank (threadsPerRank), joins the processes of
// an MPI deployment and calls lead on the process that drives the engine —
// with the followers' driver and the most loaded rank's weight bytes under
// --comm mpi, nil and 0 in process. Every other process follows its ranks
// until the leader shuts the deployment down after lead returns.
func runRanks(threadsPerRank int, d deployment, stderr io.Writer, lead func(procs *engine.Procs, procWeights int64) error) error {
	if err := applyThreads(threadsPerRank, d.tp*d.pcp); err != nil {
		return err
	}
	mp, err := joinProcesses(d, stderr)
	if err != nil {
		return err
	}
	if mp == nil {
		return lead(nil, 0)
	}
	defer mp.end()
	roomBesideKernels(kernels.Threads())
	if !mp.leader {
		return mp.follow()
	}
	return lead(mp.procs, mp.weights)
}

// roomBesideKernels makes the Go runtime run at least one more goroutine at
// once than the kernels' threads. mpirun binds each of two or fewer ranks to
// one core by default, and Go sizes GOMAXPROCS from the affinity mask: one P,
// on which the leader's step loop, the transport and the reader of the
// tokens (the HTTP server, the benchmark) would wait for each other; a
// measured first token came 0.57 s after its prefill. With a P to spare, the
// kernel's scheduler shares the core between them instead.
func roomBesideKernels(kernelThreads int) {
	if want := kernelThreads + 1; runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want)
	}
}

// follow runs a follower until the leader shuts the deployment down.
// Signals are left to the leader: it ends the job by broadcasting shutdown.
func (mp *multiProcess) follow() error {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM)
	err := mp.procs.Follow()
	if err != nil {
		// Leave the leader its grace to answer 503 and end the job itself
		// before this process's exit makes mpirun end it.
		fmt.Fprintf(os.Stderr, "cpmla: rank %d: %v\n", mp.proc.World().Rank(), err)
		time.Sleep(engineFailureGrace)
	}
	return err
}

// end finishes this process's part: the leader stops its heartbeat and
// shuts the followers down; every process then ends MPI.
func (mp *multiProcess) end() {
	if mp.leader {
		mp.heartbeat()
		if err := mp.procs.Shutdown(); err != nil {
			mp.proc.Abort(1, err)
		}
	}
	mp.proc.Close()
}
