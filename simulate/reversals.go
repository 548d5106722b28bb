package simulate

import "time"

// ReversalWindow is how far apart two replacements of one pod may be for the second to
// count as a reversal of the first (PolicyResult.Reversals): 24h, one diurnal cycle,
// the estimator's full-confidence history. A workload whose load turns over days may
// grow and shrink its pods back as it should; within a day, a pod moved back is a
// restart spent on a target that did not hold. The report's definitions
// (markdownDefinitions) and docs/cli.md say 24 h: change them with it.
const ReversalWindow = 24 * time.Hour

// reversals counts PolicyResult.Reversals for one policy: per pod (run), the direction
// (+1 grow, −1 shrink) and the step of its last replacement that changed its memory
// (the applied record).
type reversals struct {
	window int // ReversalWindow in steps
	dir    []int8
	at     []int
	n      int
}

// newReversals returns the counter for n pods on steps of step.
func newReversals(n int, step time.Duration) reversals {
	return reversals{window: int(ReversalWindow / step), dir: make([]int8, n), at: make([]int, n)}
}

// replaced records a replacement of pod i at step k that took its memory from before
// to after (bytes), and reports whether it reverses the pod's previous replacement that
// changed it (opposite direction, at most window steps earlier). A replacement that
// leaves the memory as it was (compute only, or a move to another GPU) neither counts
// nor forgets the previous direction.
func (r *reversals) replaced(i, k int, before, after int64) bool {
	var d int8
	switch {
	case after > before:
		d = 1
	case after < before:
		d = -1
	default:
		return false
	}
	rev := r.dir[i] == -d && k-r.at[i] <= r.window
	r.dir[i], r.at[i] = d, k
	if rev {
		r.n++
	}
	return rev
}
