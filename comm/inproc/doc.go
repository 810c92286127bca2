// Package inproc is the in-process transport of package comm: every rank is
// a goroutine of one process, and a collective is a rendezvous after which
// each member reads its peers' send buffers directly (no staging copies).
//
// A collective runs in two phases. Arrive: the member publishes its ledger
// record and buffers and waits for every member (bounded by the world's
// timeout and the caller's context); then every member checks the same
// ledger and reaches the same verdict. Finish: the member fills its receive
// buffer from the peers' send buffers (reductions sum in group-rank order)
// and waits until every member has finished reading, so that no caller
// reuses a buffer a peer still reads. The finish wait is bounded by the
// peers' copying work only, because a member either completes the arrive
// phase or withdraws from it atomically.
//
// It must never allocate on the heap per collective once a group has been
// used (a decode step allocates nothing), never block without a deadline,
// and never move data before the ledger agrees. Any failure poisons the
// world: every later collective on any of its groups fails at once with the
// first error.
package inproc
