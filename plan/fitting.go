package plan

// LargestFitting is the largest v in [lo, hi) for which fits holds, found by
// bisection: fits must hold up to some value and fail beyond it. It is
// false when even lo does not fit (or the range is empty). Refusals use it
// to name the setting that works.
func LargestFitting[T int | int64](lo, hi T, fits func(T) bool) (T, bool) {
	if lo >= hi || !fits(lo) {
		return 0, false
	}
	for hi-lo > 1 { // fits(lo); hi is past the range or does not fit
		mid := lo + (hi-lo)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, true
}
