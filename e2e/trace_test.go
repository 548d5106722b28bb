package e2e

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/trace"
)

// Histories of the main job: a slice of the real GenTD26 production trace (12 pods, the
// last 8 hours; only when ../shared/data is present) and a synthetic trace that stands in
// for it everywhere.
var (
	gentd26Trace *trace.Trace
	synthTrace   trace.Trace
)

const (
	gentd26NS = "e2e-gentd26"
	synthNS   = "e2e-synth"
)

func gentd26Dir() string {
	return filepath.Join(filepath.Dir(repoRootOrDot()), "shared", "data", "gentd26")
}

func repoRootOrDot() string {
	if repoRoot != "" {
		return repoRoot
	}
	return "."
}

func init() {
	backfills["synthetic"] = func(dir string, end time.Time) (string, error) {
		synthTrace = trace.Synthesize(trace.SynthOptions{Workloads: 6, PodsPerWorkload: 2, Duration: 12 * time.Hour,
			Step: time.Minute, Seed: 3, End: end, Namespace: synthNS, WorkloadPrefix: "syn"})
		return writeOpenMetrics(dir, "synthetic.om", synthTrace)
	}
	backfills["gentd26"] = func(dir string, end time.Time) (string, error) {
		if _, err := os.Stat(gentd26Dir()); err != nil {
			return writeOpenMetrics(dir, "gentd26-absent.om", trace.Trace{})
		}
		tr, _, err := trace.ReadGenTD26(gentd26Dir(), trace.GenTD26Options{MaxPods: 12, Duration: 8 * time.Hour, Namespace: gentd26NS, End: end})
		if err != nil {
			return "", err
		}
		gentd26Trace = &tr
		return writeOpenMetrics(dir, "gentd26.om", tr)
	}
}

func TestMainJobRealTrace(t *testing.T) {
	if gentd26Trace == nil {
		t.Skipf("no GenTD26 data at %s: the synthetic variant (TestMainJobSynthetic) covers the same path", gentd26Dir())
	}
	checkMainJob(t, gentd26NS, *gentd26Trace, 10)
}

func TestMainJobSynthetic(t *testing.T) {
	checkMainJob(t, synthNS, synthTrace, 6)
}

// checkMainJob creates one Deployment and one recommendation-only autoscaler per
// workload of the backfilled trace and checks every recommendation against the trace.
func checkMainJob(t *testing.T, ns string, tr trace.Trace, minWorkloads int) {
	ctx := context.Background()
	createNamespace(t, ns)
	workloads := tr.Workloads()
	if len(workloads) < minWorkloads {
		t.Fatalf("trace has %d workloads, want at least %d", len(workloads), minWorkloads)
	}
	for _, w := range workloads {
		create(t, gpuDeployment(ns, w.Name, "inference", int32(len(w.Pods))), autoscaler(ns, w.Name, w.Name))
	}
	startRecommender(t, "--metric-source=dcgm")

	for _, w := range workloads {
		pods := podsOf(tr, w.Name)
		var gfr *gpufracv1.GPUFractionRecommendation
		waitFor(t, 90*time.Second, "recommendation of "+w.Name, func() (bool, error) {
			gfr = recommendation(t, ns, w.Name)
			c := condition(gfr, gpufracv1.ConditionRecommendationProvided)
			return c != nil && c.Status == metav1.ConditionTrue, nil
		})
		// Bootstrap: the recommendation came from history, not from live samples (there
		// are none): its history spans hours, though the recommender started seconds ago.
		cr := gfr.Status.ContainerRecommendations[0]
		if cr.HistoryHours < 1 && spanHours(pods) >= 2 {
			t.Errorf("%s: %dh of history after the first cycle, trace has %.1fh", w.Name, cr.HistoryHours, spanHours(pods))
		}
		now := gfr.Status.LastUpdateTime.Time
		peak, median := recentPeak(pods, now), median(pods)
		mem, cpu := cr.Target.Memory.AsApproximateFloat64(), cr.Target.Compute.AsApproximateFloat64()
		// The recent peak + 15 % headroom, or the whole share of the GPU it is rounded
		// down to (packing-aware sizing, deliberate: that share still leaves at least
		// --fit-memory-headroom above the peak).
		if floor := expectedShare(peak*1.15, peak); mem < floor-1 {
			t.Errorf("%s: memory target %.0f MiB below the recent peak %.0f MiB + 15%% headroom (%.0f MiB after rounding to a GPU share)", w.Name, mem/(1<<20), peak/(1<<20), floor/(1<<20))
		}
		if upper := cr.UpperBound.Memory.AsApproximateFloat64(); mem > upper {
			t.Errorf("%s: memory target %.0f above upper bound %.0f", w.Name, mem, upper)
		}
		if cpu < median-0.001 || cpu > 1 {
			t.Errorf("%s: compute target %.3f outside [median %.3f, 1]", w.Name, cpu, median)
		}
		checkAgainstIndependent(t, gfr, pods)
	}
	_ = ctx
}

func spanHours(pods []trace.Pod) float64 {
	first, last := time.Time{}, time.Time{}
	for _, p := range pods {
		for _, pt := range p.Memory {
			if first.IsZero() || pt.T.Before(first) {
				first = pt.T
			}
			if pt.T.After(last) {
				last = pt.T
			}
		}
	}
	return last.Sub(first).Hours()
}

// recentPeak is the highest memory sample of the intervals overlapping the peak window
// (7 days, the recommender's default since rare spikes were kept for a week).
func recentPeak(pods []trace.Pod, now time.Time) float64 {
	from := now.Add(-e2ePeakWindow - time.Millisecond).Truncate(time.Hour)
	peak := 0.0
	for _, p := range pods {
		for _, pt := range p.Memory {
			if !pt.T.Before(from) && !pt.T.After(now) {
				peak = math.Max(peak, pt.V)
			}
		}
	}
	return peak
}

func median(pods []trace.Pod) float64 {
	var v []float64
	for _, p := range pods {
		for _, pt := range p.Compute {
			v = append(v, pt.V)
		}
	}
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	return v[len(v)/2]
}
