//go:build mpi

package mpi_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/mpi"
)

// world is this process's world group when the test binary runs under
// mpirun, nil otherwise.
var world comm.Group

// scenarioEnv names a failure scenario (see scenarios_test.go) for a test
// binary that mpirun starts; without it, the binary runs the tests.
const scenarioEnv = "CPMLA_MPI_SCENARIO"

// TestMain runs in one of three roles. Under mpirun with a scenario set, it
// runs that scenario on every rank and exits with its status. Under mpirun
// without one, it initializes MPI and runs the tests on every rank (tests
// that need no MPI job skip). Without mpirun, it runs the tests that start
// mpirun jobs of this same binary; the tests that need a world skip.
func TestMain(m *testing.M) {
	if !mpi.Launched() {
		os.Exit(m.Run())
	}
	if s := os.Getenv(scenarioEnv); s != "" {
		os.Exit(runScenario(s))
	}
	proc, err := mpi.Init(mpi.Options{Timeout: 30 * time.Second, TraceCapacity: 8, AbortGrace: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	world = proc.World()
	code := m.Run()
	if err := proc.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// needWorld skips a test that must run inside an MPI job.
func needWorld(t testing.TB) comm.Group {
	t.Helper()
	if world == nil {
		t.Skip("needs an MPI job: go test -tags mpi -c -o mpi.test ./comm/mpi && mpirun --oversubscribe -np 4 ./mpi.test")
	}
	return world
}

// split makes a sub-group of g or fails the test.
func split(t testing.TB, g comm.Group, name string, members []int) comm.Group {
	t.Helper()
	s, err := comm.Split(g, name, members)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
