package comm

import (
	"errors"
	"fmt"
)

// FirstRankError picks the error to report from the ranks' errors of one
// run, indexed by rank: a ledger mismatch in preference to the errors it
// caused on other ranks (timeouts, cancellations), else the lowest rank's
// error, named with its rank. It returns nil when no rank failed.
func FirstRankError(errs []error) error {
	var mm *MismatchError
	for _, err := range errs {
		if errors.As(err, &mm) {
			return err
		}
	}
	for rank, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", rank, err)
		}
	}
	return nil
}
