package trace

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// sharedData returns ../shared/data/<name> relative to the module root (found by
// walking up to go.mod), skipping the test when the folder is absent.
func sharedData(tb testing.TB, name string) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
	p := filepath.Join(dir, "..", "shared", "data", name)
	if st, err := os.Stat(p); err != nil || !st.IsDir() {
		tb.Skipf("shared data %s absent", p)
	}
	return p
}

// writeFiles writes name → content files into a new temporary directory.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var testEnd = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// tinyTrace is a hand-made two-workload trace with values that are exact in
// binary floating point.
func tinyTrace() Trace {
	at := func(min int) time.Time { return testEnd.Add(time.Duration(min-3) * time.Minute) }
	pts := func(vs ...float64) []Point {
		var out []Point
		for i, v := range vs {
			out = append(out, Point{T: at(i), V: v})
		}
		return out
	}
	rs := "a-" + TemplateHash("a")
	return Trace{Pods: []Pod{
		{Namespace: "ns", Workload: "a", ReplicaSet: rs, Pod: rs + "-" + PodSuffix("a0"), Container: "inference", ID: "a0",
			Memory:     pts(10<<30, 12<<30, 11<<30, 0),
			Compute:    pts(0, 0.25, 0.5, 0),
			LatencyP95: []Point{{T: at(2), V: 12.5}}},
		{Namespace: "ns", Workload: "a", ReplicaSet: rs, Pod: rs + "-" + PodSuffix("a1"), Container: "inference", ID: "a1",
			Memory:  pts(20 << 30),
			Compute: []Point{{T: at(1), V: 1}}},
		{Namespace: "other", Workload: "b", ReplicaSet: "b-" + TemplateHash("b"), Pod: "b-" + TemplateHash("b") + "-" + PodSuffix("b0"), Container: "c",
			Memory:  pts(1<<20, 3<<20),
			Compute: pts(0.125, 0)},
	}}
}

// wantInputError fails unless err is an *InputError whose message is want.
func wantInputError(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant %s", err, want)
	}
	var ie *InputError
	if !errors.As(err, &ie) {
		t.Fatalf("error %T is not an *InputError", err)
	}
}

// dutyCycleStats returns the share of compute samples at 0 and their mean over every
// pod of tr, and fails on a sample outside 0..1.
func dutyCycleStats(t *testing.T, tr Trace) (zeroShare, mean float64) {
	t.Helper()
	var zero, all int
	var sum float64
	for _, p := range tr.Pods {
		for _, pt := range p.Compute {
			if pt.V < 0 || pt.V > 1 {
				t.Fatalf("pod %s: compute %v out of 0..1", p.Pod, pt.V)
			}
			all++
			sum += pt.V
			if pt.V == 0 {
				zero++
			}
		}
	}
	if all == 0 {
		t.Fatal("no compute samples")
	}
	return float64(zero) / float64(all), sum / float64(all)
}
