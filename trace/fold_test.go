package trace

import (
	"fmt"
	"slices"
	"testing"
)

// foldTrace has w workloads of two pods each, in the namespaces a and b alternately.
func foldTrace(w int) Trace {
	var t Trace
	for i := range w {
		for r := range 2 {
			t.Pods = append(t.Pods, Pod{Namespace: []string{"a", "b"}[i%2], Workload: fmt.Sprintf("w%02d", i), Pod: fmt.Sprintf("w%02d-%d", i, r)})
		}
	}
	return t
}

func TestFoldPartitionsWorkloads(t *testing.T) {
	tr := foldTrace(10)
	for _, seed := range []uint64{1, 2} {
		seen := map[string]int{}
		var sizes []int
		for k := range 3 {
			got, err := Fold{Index: k, Of: 3, Seed: seed}.Apply(tr)
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, len(got.Workloads()))
			for _, w := range got.Workloads() {
				seen[w.Namespace+"/"+w.Name]++
				if len(w.Pods) != 2 {
					t.Errorf("seed %d fold %d: workload %s kept %d of its 2 pods", seed, k, w.Name, len(w.Pods))
				}
			}
		}
		if len(seen) != 10 {
			t.Errorf("seed %d: folds cover %d of 10 workloads", seed, len(seen))
		}
		for w, n := range seen {
			if n != 1 {
				t.Errorf("seed %d: workload %s in %d folds, want 1", seed, w, n)
			}
		}
		slices.Sort(sizes)
		if !slices.Equal(sizes, []int{3, 3, 4}) {
			t.Errorf("seed %d: fold sizes %v, want 3, 3 and 4 workloads", seed, sizes)
		}
	}
}

func TestFoldSeedAndOrder(t *testing.T) {
	tr := foldTrace(12)
	names := func(f Fold) []string {
		got, err := f.Apply(tr)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range got.Pods {
			out = append(out, p.Pod)
		}
		return out
	}
	a, again, other := names(Fold{Index: 0, Of: 3, Seed: 1}), names(Fold{Index: 0, Of: 3, Seed: 1}), names(Fold{Index: 0, Of: 3, Seed: 2})
	if !slices.Equal(a, again) {
		t.Errorf("same seed, different folds: %v and %v", a, again)
	}
	if slices.Equal(a, other) {
		t.Errorf("seeds 1 and 2 gave the same fold %v", a)
	}
	if !slices.IsSorted(a) {
		t.Errorf("fold pods %v not in trace order", a)
	}
	if whole, _ := (Fold{}).Apply(tr); len(whole.Pods) != len(tr.Pods) {
		t.Errorf("no split kept %d of %d pods", len(whole.Pods), len(tr.Pods))
	}
}

func TestParseFold(t *testing.T) {
	if f, err := ParseFold("2/5", 7); err != nil || f != (Fold{Index: 2, Of: 5, Seed: 7}) || f.String() != "2/5 seed 7" {
		t.Errorf(`ParseFold("2/5", 7) = %+v, %v`, f, err)
	}
	if f, err := ParseFold("", 7); err != nil || f.Of != 0 || f.String() != "" {
		t.Errorf(`ParseFold("") = %+v, %v; want no split`, f, err)
	}
	for _, bad := range []string{"3/3", "-1/3", "0/1", "1", "a/b", "1/3/4"} {
		if _, err := ParseFold(bad, 1); err == nil {
			t.Errorf("ParseFold(%q) accepted", bad)
		}
	}
	if _, err := (Fold{Index: 0, Of: 4}).Apply(foldTrace(3)); err == nil {
		t.Error("4 folds of 3 workloads accepted")
	}
}
