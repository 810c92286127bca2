package plan_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/plan"
)

// TestLargestFitting compares the bisection with a scan of every value of
// small ranges, for every threshold in and around them, and counts that it
// asks fits about logarithmically many values.
func TestLargestFitting(t *testing.T) {
	type result struct {
		V  int
		OK bool
	}
	for lo := 0; lo < 4; lo++ {
		for hi := lo - 1; hi < lo+40; hi++ {
			for last := lo - 2; last < hi+2; last++ { // fits(v) ⇔ v ≤ last
				t.Run(fmt.Sprintf("lo=%d/hi=%d/last=%d", lo, hi, last), func(t *testing.T) {
					var want result
					for v := lo; v < hi && v <= last; v++ {
						want = result{v, true}
					}
					calls := 0
					v, ok := plan.LargestFitting(lo, hi, func(v int) bool {
						calls++
						if v < lo || v >= hi {
							t.Errorf("fits(%d) asked outside [%d, %d)", v, lo, hi)
						}
						return v <= last
					})
					if d := cmp.Diff(want, result{v, ok}); d != "" {
						t.Errorf("(-want +got):\n%s", d)
					}
					if calls > 8 {
						t.Errorf("fits asked %d times for a range of %d", calls, hi-lo)
					}
				})
			}
		}
	}
	// int64 ranges beyond int32.
	v, ok := plan.LargestFitting(int64(1), int64(1)<<40, func(v int64) bool { return v <= 3<<33 })
	if !ok || v != 3<<33 {
		t.Errorf("int64: %d, %v; want %d, true", v, ok, int64(3)<<33)
	}
}
