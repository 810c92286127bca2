//go:build mpi

package mpi

/*
#cgo pkg-config: ompi-c
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static int cp_init(int *provided) { return MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, provided); }
static int cp_funneled(void) { return MPI_THREAD_FUNNELED; }
static MPI_Comm cp_world(void) { return MPI_COMM_WORLD; }
static MPI_Request cp_null_request(void) { return MPI_REQUEST_NULL; }
static int cp_errors_return(MPI_Comm c) { return MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN); }
static int cp_rank_size(MPI_Comm c, int *rank, int *size) {
	int rc = MPI_Comm_rank(c, rank);
	return rc != MPI_SUCCESS ? rc : MPI_Comm_size(c, size);
}
static int cp_processor_name(char *buf, int *len) { return MPI_Get_processor_name(buf, len); }
static void cp_error_string(int code, char *buf, int *len) {
	if (MPI_Error_string(code, buf, len) != MPI_SUCCESS) *len = 0;
}
static int cp_isend(const void *b, int nb, int dest, int tag, MPI_Comm c, MPI_Request *q) {
	return MPI_Isend(b, nb, MPI_BYTE, dest, tag, c, q);
}
static int cp_irecv(void *b, int nb, int src, int tag, MPI_Comm c, MPI_Request *q) {
	return MPI_Irecv(b, nb, MPI_BYTE, src, tag, c, q);
}
// cp_poll tests the n requests up to spins times and gives the processor
// away between tests: sched_yield when sleep_ns is 0, else nanosleep. It
// returns -1 when all completed, 0 when some are pending, or the (positive)
// MPI error code. (No out-parameters: a pointer to a Go variable passed to C
// would move it to the heap on every call.)
static int cp_poll(MPI_Request *q, int n, int spins, long sleep_ns) {
	for (int i = 0; i < spins; i++) {
		int done = 0;
		int rc = MPI_Testall(n, q, &done, MPI_STATUSES_IGNORE);
		if (rc != MPI_SUCCESS) return rc;
		if (done) return -1;
		if (sleep_ns > 0) {
			struct timespec ts = {0, sleep_ns};
			nanosleep(&ts, NULL);
		} else {
			sched_yield();
		}
	}
	return 0;
}
// cp_test tests one request: -1 completed, 0 pending, else the MPI error.
static int cp_test(MPI_Request *q) {
	int done = 0;
	int rc = MPI_Test(q, &done, MPI_STATUS_IGNORE);
	return rc != MPI_SUCCESS ? rc : -done;
}
static int cp_create_group(MPI_Comm parent, const int *ranks, int n, int tag, MPI_Comm *out) {
	MPI_Group pg, g;
	int rc = MPI_Comm_group(parent, &pg);
	if (rc != MPI_SUCCESS) return rc;
	rc = MPI_Group_incl(pg, n, ranks, &g);
	MPI_Group_free(&pg);
	if (rc != MPI_SUCCESS) return rc;
	rc = MPI_Comm_create_group(parent, g, tag, out);
	MPI_Group_free(&g);
	return rc;
}
static int cp_abort(int code) { return MPI_Abort(MPI_COMM_WORLD, code); }
static int cp_finalize(void) { return MPI_Finalize(); }
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"
)

// commHandle is an MPI communicator; requestHandle an MPI request.
type (
	commHandle    = C.MPI_Comm
	requestHandle = C.MPI_Request
)

// Error is an MPI call that did not return MPI_SUCCESS.
type Error struct {
	Call string // the MPI function, e.g. "MPI_Iallgather"
	Code int    // the MPI error code
	Msg  string // MPI_Error_string of Code
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s (MPI error %d)", e.Call, e.Msg, e.Code) }

// check turns an MPI return code into an *Error (nil for MPI_SUCCESS).
func check(call string, rc C.int) error {
	if rc == C.MPI_SUCCESS {
		return nil
	}
	var buf [C.MPI_MAX_ERROR_STRING]C.char
	var n C.int
	C.cp_error_string(rc, &buf[0], &n)
	return &Error{Call: call, Code: int(rc), Msg: C.GoStringN(&buf[0], n)}
}

// cbuf is a block of C memory, so that MPI may keep pointers into it while
// an operation is pending without Go pointer rules or pinning.
type cbuf struct {
	p unsafe.Pointer
	n int
}

// grow makes b at least n bytes long (keeping nothing of its contents).
func (b *cbuf) grow(n int) {
	if n <= b.n {
		return
	}
	if b.p != nil {
		C.free(b.p)
	}
	b.p = C.calloc(C.size_t(n), 1)
	if b.p == nil {
		panic(fmt.Sprintf("mpi: out of C memory allocating %d bytes", n))
	}
	b.n = n
}

// free releases the memory; MPI must not use it any more.
func (b *cbuf) free() {
	if b.p != nil {
		C.free(b.p)
	}
	b.p, b.n = nil, 0
}

func (b *cbuf) bytes(off, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(b.p, off)), n)
}

func (b *cbuf) int64s(n int) []int64       { return unsafe.Slice((*int64)(b.p), n) }
func (b *cbuf) cints(n int) []C.int        { return unsafe.Slice((*C.int)(b.p), n) }
func (b *cbuf) ptr(off int) unsafe.Pointer { return unsafe.Add(b.p, off) }

// requests is a C array of MPI requests.
type requests struct {
	buf cbuf
	n   int // in use
}

func newRequests(capacity int) *requests {
	r := &requests{}
	r.buf.grow(max(capacity, 1) * int(unsafe.Sizeof(C.MPI_Request(nil))))
	return r
}

func (r *requests) slice() []C.MPI_Request {
	return unsafe.Slice((*C.MPI_Request)(r.buf.p), r.buf.n/int(unsafe.Sizeof(C.MPI_Request(nil))))
}

// next returns the address of a fresh request slot.
func (r *requests) next() *C.MPI_Request {
	s := r.slice()
	q := &s[r.n]
	*q = C.cp_null_request()
	r.n++
	return q
}

func (r *requests) reset() { r.n = 0 }

// poll tests the requests in use, spinning spins times and yielding (or
// sleeping sleepNS) between tests.
func (r *requests) poll(spins int, sleepNS int64) (bool, error) {
	if r.n == 0 {
		return true, nil
	}
	rc := C.cp_poll(&r.slice()[0], C.int(r.n), C.int(spins), C.long(sleepNS))
	if rc > 0 {
		return false, check("MPI_Testall", rc)
	}
	return rc < 0, nil
}

// completed reports whether request i is complete (testing it once).
func (r *requests) completed(i int) bool {
	return C.cp_test(&r.slice()[i]) < 0
}

// mpiInit calls MPI_Init_thread asking for MPI_THREAD_FUNNELED on the
// calling (locked) thread and returns the world communicator's rank, size
// and this process's processor name.
func mpiInit() (world commHandle, rank, size int, host string, err error) {
	var provided C.int
	if err := check("MPI_Init_thread", C.cp_init(&provided)); err != nil {
		return nil, 0, 0, "", err
	}
	if provided < C.cp_funneled() {
		return nil, 0, 0, "", fmt.Errorf("MPI_Init_thread provided thread level %d, cpmla needs MPI_THREAD_FUNNELED (%d); use an MPI library built with thread support", provided, C.cp_funneled())
	}
	world = C.cp_world()
	if err := check("MPI_Comm_set_errhandler", C.cp_errors_return(world)); err != nil {
		return nil, 0, 0, "", err
	}
	var r, s C.int
	if err := check("MPI_Comm_rank/size", C.cp_rank_size(world, &r, &s)); err != nil {
		return nil, 0, 0, "", err
	}
	var buf [C.MPI_MAX_PROCESSOR_NAME]C.char
	var n C.int
	if err := check("MPI_Get_processor_name", C.cp_processor_name(&buf[0], &n)); err != nil {
		return nil, 0, 0, "", err
	}
	return world, int(r), int(s), C.GoStringN(&buf[0], n), nil
}

func mpiFinalize() error { return check("MPI_Finalize", C.cp_finalize()) }

func mpiAbort(code int) { C.cp_abort(C.int(code)) }

// cint converts a byte count or offset for an MPI call; callers check
// fitsCInt first.
func cint(n int) C.int { return C.int(n) }

// fitsCInt reports whether n bytes can be passed as an MPI count.
func fitsCInt(n int) bool { return n >= 0 && n <= math.MaxInt32 }

func isend(b unsafe.Pointer, nb, dest, tag int, c commHandle, q *C.MPI_Request) error {
	return check("MPI_Isend", C.cp_isend(b, cint(nb), cint(dest), cint(tag), c, q))
}

func irecv(b unsafe.Pointer, nb, src, tag int, c commHandle, q *C.MPI_Request) error {
	return check("MPI_Irecv", C.cp_irecv(b, cint(nb), cint(src), cint(tag), c, q))
}

// createGroup creates the communicator of the listed ranks of parent (in
// that order); only they call it.
func createGroup(parent commHandle, ranks []int, tag int) (commHandle, int, int, error) {
	cr := make([]C.int, len(ranks))
	for i, r := range ranks {
		cr[i] = C.int(r)
	}
	var out C.MPI_Comm
	if err := check("MPI_Comm_create_group", C.cp_create_group(parent, &cr[0], C.int(len(cr)), C.int(tag), &out)); err != nil {
		return nil, 0, 0, err
	}
	if err := check("MPI_Comm_set_errhandler", C.cp_errors_return(out)); err != nil {
		return nil, 0, 0, err
	}
	var r, s C.int
	if err := check("MPI_Comm_rank/size", C.cp_rank_size(out, &r, &s)); err != nil {
		return nil, 0, 0, err
	}
	return out, int(r), int(s), nil
}
