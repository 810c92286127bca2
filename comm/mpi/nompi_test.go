//go:build !mpi

package mpi_test

import (
	"strings"
	"testing"

	"github.com/cpmla/cpmla/comm/mpi"
)

// TestInitRefusedWithoutTag pins that a build without the mpi tag refuses
// Init and says how to get a build that has MPI.
func TestInitRefusedWithoutTag(t *testing.T) {
	if mpi.Available {
		t.Fatal("Available is true in a build without the mpi tag")
	}
	p, err := mpi.Init(mpi.Options{})
	if p != nil || err == nil {
		t.Fatalf("Init = %v, %v; want a refusal", p, err)
	}
	for _, want := range []string{"build tag mpi", "go build -tags mpi", "apt-get install libopenmpi-dev openmpi-bin"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not mention %q", err, want)
		}
	}
}
