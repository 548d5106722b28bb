package trace

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Fold is one part of a k-fold split of a trace's workloads, for hold-out checks of
// decisions tuned on other parts (cross-validation): the workloads, in order of first
// appearance (Trace.Workloads), are shuffled with Seed and cut into Of parts as equal
// as they can be; fold Index keeps the pods of its part. The zero value (Of 0) keeps
// every workload.
type Fold struct {
	// Index is the part kept, 0 to Of−1.
	Index int
	// Of is the number of parts, at least 2 (0: no split).
	Of int
	// Seed seeds the shuffle (PCG), so a seed gives the same parts of a trace.
	Seed uint64
}

// ParseFold parses "K/N" (fold K of N, 0 ≤ K < N, N ≥ 2) with the seed given; "" is no
// split. It returns an error naming the value for anything else.
func ParseFold(s string, seed uint64) (Fold, error) {
	if s == "" {
		return Fold{}, nil
	}
	k, n, ok := strings.Cut(s, "/")
	ki, err1 := strconv.Atoi(k)
	ni, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || ni < 2 || ki < 0 || ki >= ni {
		return Fold{}, fmt.Errorf("fold %q: want K/N with N at least 2 and K from 0 to N-1 (0/3: the first of three parts)", s)
	}
	return Fold{Index: ki, Of: ni, Seed: seed}, nil
}

// String is "K/N seed S", or "" for no split.
func (f Fold) String() string {
	if f.Of == 0 {
		return ""
	}
	return fmt.Sprintf("%d/%d seed %d", f.Index, f.Of, f.Seed)
}

// Apply returns the trace of f's part of t's workloads (t itself for no split): the
// pods of the kept workloads, in trace order, sharing their samples with t. It returns
// an error when f is out of range or t has fewer workloads than parts.
func (f Fold) Apply(t Trace) (Trace, error) {
	if f.Of == 0 {
		return t, nil
	}
	if f.Of < 2 || f.Index < 0 || f.Index >= f.Of {
		return Trace{}, fmt.Errorf("fold %d/%d: want N at least 2 and K from 0 to N-1", f.Index, f.Of)
	}
	wls := t.Workloads()
	if len(wls) < f.Of {
		return Trace{}, fmt.Errorf("fold %d/%d: the trace has %d workloads, fewer than the %d parts", f.Index, f.Of, len(wls), f.Of)
	}
	rand.New(rand.NewPCG(f.Seed, 0)).Shuffle(len(wls), func(i, j int) { wls[i], wls[j] = wls[j], wls[i] })
	lo, hi := f.Index*len(wls)/f.Of, (f.Index+1)*len(wls)/f.Of
	keep := make([]bool, len(t.Pods))
	for _, w := range wls[lo:hi] {
		for _, i := range w.Pods {
			keep[i] = true
		}
	}
	var out Trace
	for i, p := range t.Pods {
		if keep[i] {
			out.Pods = append(out.Pods, p)
		}
	}
	return out, nil
}
