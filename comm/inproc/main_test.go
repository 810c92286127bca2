package inproc_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/cpmla/cpmla/comm"
	"github.com/cpmla/cpmla/comm/inproc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newWorld builds a world or fails the test.
func newWorld(t testing.TB, size int, opts inproc.Options) []comm.Group {
	t.Helper()
	w, err := inproc.NewWorld(size, opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// run calls fn on every rank of a fresh world and returns the errors.
func run(t testing.TB, size int, opts inproc.Options, fn func(ctx context.Context, g comm.Group) error) []error {
	t.Helper()
	return inproc.Run(context.Background(), newWorld(t, size, opts), fn)
}

// mustAll fails the test if any rank returned an error.
func mustAll(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}
