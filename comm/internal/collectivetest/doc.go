// Package collectivetest holds what the tests of every transport check
// their collectives against: the members' inputs, the reference results
// from the definitions in docs/collectives.md, a bit-exact comparison and
// one set of preallocated buffers per member with every op to run on them.
//
// It is imported by tests only. It must never hold a transport's own
// logic: a reference here is the definition written as one plain loop, so
// a transport cannot pass by sharing a mistake with it.
package collectivetest
