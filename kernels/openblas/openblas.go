//go:build openblas && cgo

package openblas

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
*/
import "C"

import "unsafe"

// SetThreads sets OpenBLAS's own thread pool size.
func SetThreads(n int) { C.openblas_set_num_threads(C.int(n)) }

// CoreName is the kernel family OpenBLAS selected.
func CoreName() string { return C.GoString(C.openblas_get_corename()) }

// Sgemm computes c[m, n] = alpha·a[m, k]·op(b) + beta·c with row-major
// operands; op(b) = bᵀ for b [n, k] when transB, else b [k, n].
func Sgemm(transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	tb := uint32(C.CblasNoTrans)
	if transB {
		tb = uint32(C.CblasTrans)
	}
	C.cblas_sgemm(C.CblasRowMajor, C.CblasNoTrans, tb, C.blasint(m), C.blasint(n), C.blasint(k), C.float(alpha),
		(*C.float)(unsafe.Pointer(&a[0])), C.blasint(lda), (*C.float)(unsafe.Pointer(&b[0])), C.blasint(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.blasint(ldc))
}
