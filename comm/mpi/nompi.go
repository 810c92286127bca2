//go:build !mpi

package mpi

import "errors"

// Available reports whether this binary was built with the MPI transport
// (build tag mpi).
const Available = false

func initMPI(Options) (Process, error) {
	return nil, errors.New("this cpmla binary was built without the MPI transport (build tag mpi); " +
		"install OpenMPI (apt-get install libopenmpi-dev openmpi-bin) and build with `go build -tags mpi ./cmd/cpmla`, or use the in-process transport")
}
