// Package openblas is the optional OpenBLAS comparator of the kernel
// benchmarks: a cgo binding of cblas_sgemm and benchmarks that run the same
// math (the Linear layer; sparse MLA attention as gather + two sgemm calls)
// next to package kernels in one run.
//
// Everything but this file is behind the build tag openblas and needs
// libopenblas-dev (apt-get install libopenblas-dev):
//
//	CGO_ENABLED=1 go test -tags openblas ./kernels/openblas -run XXX -bench .
//
// OpenBLAS chooses its kernels from OPENBLAS_CORETYPE when the process
// starts; unset, it detects the CPU (AVX-512 kernels on this machine's
// Zen 5), while the machine's environment presets Haswell (AVX2 kernels).
// CoreName reports the choice, and the benchmarks print it.
//
// The engine never imports this package and the default build never needs
// cgo or OpenBLAS.
package openblas
