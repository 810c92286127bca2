// Package comm is the collective layer every rank of cpmla uses: a small,
// transport-neutral Group interface (AllGather, ReduceScatter, AllReduce,
// AllToAll with equal and variable splits, Broadcast, Barrier) over typed
// slices, the collective ledger that checks every member enters the same
// collective before any data moves, the TP/PCP/DCP process-group layout,
// fault injection for the ledger, and per-group instrumentation.
//
// Transports live in sub-packages: comm/inproc runs every rank as a
// goroutine of one process and moves data by reading the peers' buffers
// directly. A transport implements Group; the typed package-level functions
// (AllGather, ReduceScatter, ...) turn slices into byte views and hand one
// Collective to Group.Do.
//
// Invariants:
//   - Every collective carries a ledger Record (group, sequence number, op,
//     dtype, element count, root, split counts). Members compare records
//     before data moves; a disagreement fails every member with one
//     *MismatchError naming the group, the ranks and each rank's record.
//   - Reductions sum in group-rank order, so every member gets bit-identical
//     results and a repeated run gives the same bits.
//   - Every collective has a deadline and honours context cancellation. A
//     failure of any kind poisons the transport's world: later collectives
//     on it fail at once with the original error.
//
// The package must never let members disagree silently, allocate per call
// on the hot path (a warmed-up collective allocates nothing), or block
// without a deadline.
package comm
