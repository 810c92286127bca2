// Package hostnet builds separate network hosts for tests out of Linux
// network namespaces: a bridge in the caller's namespace, and per host a
// namespace joined to the bridge by a veth pair, with its own address. A
// process started inside a host's namespace reaches the other hosts only
// over its link, so the tests can cut that link, slow it down or kill the
// host's processes and watch what the processes on the other hosts do.
//
// It needs root, iproute2 (ip, tc) and a kernel with network namespaces,
// veth and bridges; New skips the test when any is missing. Slowing a link
// uses tc netem when the kernel has it and degrades, saying so, to a tbf
// rate limit when it does not.
//
// It is for tests only: it must never be imported by the engine or the
// commands, never leave a namespace, link or process behind (every New
// registers its own clean-up), and never touch an interface it did not
// create.
package hostnet
