package comm_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/comm"
)

// TestFirstRankError pins which of a run's rank errors is reported: a
// ledger mismatch wherever it stands (wrapped or not), else the lowest
// failed rank's error with its rank named, else none.
func TestFirstRankError(t *testing.T) {
	timeout := errors.New("collective timeout")
	mismatch := fmt.Errorf("step 3: %w", &comm.MismatchError{Group: "tp[0 1]", Detail: "counts differ"})
	cases := []struct {
		name string
		errs []error
		want string // "" for nil
		is   error  // the error the result must wrap, if any
	}{
		{"none", []error{nil, nil}, "", nil},
		{"no ranks", nil, "", nil},
		{"one rank", []error{nil, nil, timeout}, "rank 2: collective timeout", timeout},
		{"lowest rank", []error{nil, timeout, errors.New("later")}, "rank 1: collective timeout", timeout},
		{"mismatch first", []error{timeout, nil, timeout, mismatch}, mismatch.Error(), mismatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := comm.FirstRankError(tc.errs)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("error (-want +got):\n%s", d)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v does not wrap %v", err, tc.is)
			}
		})
	}
}
