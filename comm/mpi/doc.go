// Package mpi is the multi-process transport of package comm: every rank is
// an MPI process started by mpirun (one per socket, NUMA node or host), and
// a comm.Group is an MPI communicator. It is built only with the build tag
// mpi (cgo against Debian's OpenMPI, libopenmpi-dev); without the tag the
// package compiles to Launched, Available = false and an Init that refuses
// with the command that enables it, so the default build needs neither cgo
// nor MPI.
//
// Every MPI call runs on one goroutine locked to the OS thread that called
// MPI_Init_thread (MPI_THREAD_FUNNELED). Callers hand that goroutine a
// task and wait for its reply; the goroutine starts non-blocking MPI
// operations and polls them, so a collective can end at its deadline or on
// context cancellation instead of blocking inside MPI.
//
// A collective runs in two phases, like the in-process transport. Ledger:
// every member sends its fixed-size ledger record (world rank, sequence
// number, op, dtype, count, root, flags and, for AllToAllV, its split
// counts) to every peer and receives theirs; every member then runs
// comm.CheckLedger on the same records and reaches the same verdict, so a
// disagreement becomes the same *comm.MismatchError on every process and no
// data moves. Data: the bytes move in rounds of direct point-to-point
// transfers, one MPI_Irecv and one MPI_Isend per peer (Broadcast: the root
// sends to every member), never through a ring or a tree, so that no
// transfer between two members waits on a third. When a round outlives the
// deadline, each request is tested on its own and the error names the
// peers whose transfers are still pending and what each moves (whole
// message sizes: MPI reports no progress of a request before it
// completes); a slowed or cut link to one host is then blamed on that host
// alone. Reductions never use MPI's own reduction (whose summation order
// is unspecified) but move the contributions and sum them in group-rank
// order with comm.SumRankOrder, so every member, and the in-process
// transport, gets the same bits.
//
// Sub-groups are MPI communicators created with MPI_Comm_create_group over
// the listed members only (the comm.Group contract lets only members call
// Split), after a handshake with a deadline that checks every member asks
// for the same group.
//
// The package must never let a collective block without a deadline, move
// data before the ledger agrees, reorder a reduction, or let a process that
// has failed a collective carry on as if the others had not seen it: a
// failure poisons the process's world (later collectives fail at once with
// the first error), and Process.Close then ends the whole job with
// MPI_Abort when MPI operations are left pending. MPI errors are returned as
// *Error values, never as aborts from MPI's default error handler.
package mpi
