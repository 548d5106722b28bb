package simulate

import (
	"math"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/recommender/estimate"
	"github.com/gpufrac/gpufrac/recommender/recommend"
	"github.com/gpufrac/gpufrac/trace"
	"github.com/gpufrac/gpufrac/updater"
)

const gib = int64(1 << 30)

// t0 is the start of the hand-made traces: the sample at t0 + (k+1)·1m falls in step k.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// pod builds a one-container pod of its own Deployment whose first sample falls in step
// from, with one memory (GiB) and compute (ratio) sample per minute.
func pod(name string, from int, memGiB, cpu []float64) trace.Pod {
	p := trace.Pod{Namespace: "ns", Workload: name, ReplicaSet: name + "-abc", Pod: name + "-abc-x1", Container: "main"}
	for i := range memGiB {
		at := t0.Add(time.Duration(from+i+1) * time.Minute)
		p.Memory = append(p.Memory, trace.Point{T: at, V: memGiB[i] * float64(gib)})
		p.Compute = append(p.Compute, trace.Point{T: at, V: cpu[i]})
	}
	return p
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func simulateByPolicy(t *testing.T, tr trace.Trace, o Options) map[string]PolicyResult {
	t.Helper()
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	res, err := Run(&tr, o)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]PolicyResult{}
	for _, p := range res.Policies {
		out[p.Policy] = p
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestTwoPodOverrun: two pods time-sliced on one 10 GiB GPU (5 GiB each); pod a goes to
// 7 GiB in its fourth minute, over its 5 GiB slice and, with b's 4 GiB, over the GPU.
func TestTwoPodOverrun(t *testing.T) {
	tr := trace.Trace{Pods: []trace.Pod{
		pod("a", 0, []float64{4, 4, 4, 7}, repeat(0.1, 4)),
		pod("b", 0, []float64{4, 4, 4, 4}, repeat(0.1, 4)),
	}}
	got := simulateByPolicy(t, tr, Options{GPUMemoryBytes: 10 * gib, Policies: []string{PolicyOnePerPod, TimeSlicing(2)}})

	ts := got[TimeSlicing(2)]
	// One GPU for 4 minutes; 8 pod-minutes; a overruns its 5 GiB in minute 4 only; the
	// GPU holds 7 + 4 = 11 GiB > 10 GiB in that minute.
	if ts.GPUMinutes != 4 || ts.PodMinutes != 8 || !near(ts.GPUsPerPod, 0.5) || ts.PeakGPUs != 1 {
		t.Errorf("time-slicing-2 GPU-minutes %v pod-minutes %v ratio %v peak %d, want 4, 8, 0.5, 1", ts.GPUMinutes, ts.PodMinutes, ts.GPUsPerPod, ts.PeakGPUs)
	}
	if ts.PodLimitOverrunMinutes != 1 || ts.PodsWithOverrun != 1 || ts.GPUOverrunMinutes != 1 {
		t.Errorf("time-slicing-2 pod overrun %v (%d pods), GPU overrun %v; want 1 (1), 1", ts.PodLimitOverrunMinutes, ts.PodsWithOverrun, ts.GPUOverrunMinutes)
	}
	// Memory utilisation per GPU-minute: 8/10 three times, then 11/10 capped at 1.
	if want := (0.8*3 + 1) / 4; !near(ts.MemoryUtilisation, want) {
		t.Errorf("time-slicing-2 memory utilisation %v, want %v", ts.MemoryUtilisation, want)
	}
	if !near(ts.ComputeUtilisation, 0.2) || ts.ContentionPodMinutes != 0 {
		t.Errorf("time-slicing-2 compute utilisation %v contention %v, want 0.2, 0", ts.ComputeUtilisation, ts.ContentionPodMinutes)
	}

	one := got[PolicyOnePerPod]
	// A whole GPU each: 8 GPU-minutes, and 7 GiB fits in 10 GiB.
	if one.GPUMinutes != 8 || one.PodLimitOverrunMinutes != 0 || one.GPUOverrunMinutes != 0 || one.PeakGPUs != 2 {
		t.Errorf("one-per-pod %+v", one)
	}
	if want := (4*3 + 7 + 4*4) / 10.0 / 8; !near(one.MemoryUtilisation, want) {
		t.Errorf("one-per-pod memory utilisation %v, want %v", one.MemoryUtilisation, want)
	}
}

// TestContentionMinute: two pods at 30 % activity, both at 60 % in their second minute:
// 120 % on a shared GPU is one contention minute for each.
func TestContentionMinute(t *testing.T) {
	tr := trace.Trace{Pods: []trace.Pod{
		pod("a", 0, repeat(2, 3), []float64{0.3, 0.6, 0.3}),
		pod("b", 0, repeat(2, 3), []float64{0.3, 0.6, 0.3}),
	}}
	got := simulateByPolicy(t, tr, Options{GPUMemoryBytes: 10 * gib, Policies: []string{TimeSlicing(2), PolicyClairvoyant, PolicyClairvoyantMemory}})
	for _, name := range []string{TimeSlicing(2), PolicyClairvoyantMemory} {
		p := got[name]
		if p.GPUMinutes != 3 || p.ContentionPodMinutes != 2 || !near(p.ContentionShare, 2.0/6) {
			t.Errorf("%s: GPU-minutes %v contention %v (%v), want 3, 2 (1/3)", name, p.GPUMinutes, p.ContentionPodMinutes, p.ContentionShare)
		}
		// Compute utilisation: 0.6, 1.2 capped at 1, 0.6.
		if !near(p.ComputeUtilisation, 2.2/3) {
			t.Errorf("%s: compute utilisation %v, want %v", name, p.ComputeUtilisation, 2.2/3)
		}
	}
	// Clairvoyant reserves each pod's peak compute (600m): 1200m does not fit on one GPU.
	c := got[PolicyClairvoyant]
	if c.GPUMinutes != 6 || c.ContentionPodMinutes != 0 || c.PeakGPUs != 2 {
		t.Errorf("clairvoyant: GPU-minutes %v contention %v peak %d, want 6, 0, 2", c.GPUMinutes, c.ContentionPodMinutes, c.PeakGPUs)
	}
	// VsClairvoyant divides by clairvoyant-memory, which time-slicing-2 matches here;
	// clairvoyant-peak holds twice as many GPU-minutes.
	if ts := got[TimeSlicing(2)]; !near(ts.VsClairvoyant, 1) {
		t.Errorf("time-slicing-2 vs clairvoyant-memory %v, want 1", ts.VsClairvoyant)
	}
	if !near(c.VsClairvoyant, 2) {
		t.Errorf("clairvoyant-peak vs clairvoyant-memory %v, want 2", c.VsClairvoyant)
	}
}

// TestLateArrival: pod a runs minutes 1-10, pod b arrives in minute 6. A clairvoyant
// packer puts b (3 GiB, 400m) next to a (6 GiB, 500m) on a 10 GiB GPU.
func TestLateArrival(t *testing.T) {
	tr := trace.Trace{Pods: []trace.Pod{
		pod("a", 0, repeat(6, 10), repeat(0.5, 10)),
		pod("b", 5, repeat(3, 5), repeat(0.4, 5)),
	}}
	all := []string{PolicyOnePerPod, TimeSlicing(4), PolicyClairvoyant}
	got := simulateByPolicy(t, tr, Options{GPUMemoryBytes: 10 * gib, Policies: all})
	if p := got[PolicyOnePerPod]; p.GPUMinutes != 15 || p.PodMinutes != 15 || p.PeakGPUs != 2 {
		t.Errorf("one-per-pod: GPU-minutes %v pod-minutes %v peak %d, want 15, 15, 2", p.GPUMinutes, p.PodMinutes, p.PeakGPUs)
	}
	if p := got[PolicyClairvoyant]; p.GPUMinutes != 10 || p.PeakGPUs != 1 || p.ContentionPodMinutes != 0 || !near(p.GPUsPerPod, 10.0/15) {
		t.Errorf("clairvoyant: GPU-minutes %v peak %d contention %v, want 10, 1, 0", p.GPUMinutes, p.PeakGPUs, p.ContentionPodMinutes)
	}
	// 2.5 GiB slices: a (6 GiB) overruns 10 minutes, b (3 GiB) 5 minutes.
	if p := got[TimeSlicing(4)]; p.PodLimitOverrunMinutes != 15 || p.PodsWithOverrun != 2 || p.GPUMinutes != 10 {
		t.Errorf("time-slicing-4: overrun %v (%d pods) GPU-minutes %v, want 15 (2), 10", p.PodLimitOverrunMinutes, p.PodsWithOverrun, p.GPUMinutes)
	}

	// Installed 5 minutes in: only minutes 6-10 count; a is placed then, b arrives then.
	got = simulateByPolicy(t, tr, Options{GPUMemoryBytes: 10 * gib, Policies: all, WarmUp: 5 * time.Minute})
	if p := got[PolicyOnePerPod]; p.GPUMinutes != 10 || p.PodMinutes != 10 {
		t.Errorf("warm-up one-per-pod: GPU-minutes %v pod-minutes %v, want 10, 10", p.GPUMinutes, p.PodMinutes)
	}
	if p := got[PolicyClairvoyant]; p.GPUMinutes != 5 {
		t.Errorf("warm-up clairvoyant: GPU-minutes %v, want 5", p.GPUMinutes)
	}
	// The report's step counts: all of them replayed, those after the warm-up counted.
	res, err := Run(&tr, Options{GPUMemoryBytes: 10 * gib, Policies: all, WarmUp: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if tr := res.Trace; tr.EvaluatedSteps != tr.Steps-5 || tr.EvaluatedSteps != 5 {
		t.Errorf("steps %d, evaluated %d; want 10 and 5", tr.Steps, tr.EvaluatedSteps)
	}
}

// TestGapIsNoEnd: a pod silent for 14 minutes ran through the gap (a Deployment never
// gives a new pod an old pod's name): one lifetime, charged a GPU for every minute of it,
// and its memory over the gap is its last sample, not 0. With a lookback of 5 minutes
// (traces that reuse pod names) the gap ends it and its next sample starts a new pod.
func TestGapIsNoEnd(t *testing.T) {
	p := pod("a", 0, repeat(6, 3), repeat(0.1, 3))
	q := pod("a", 17, repeat(1, 3), repeat(0.1, 3))
	p.Memory, p.Compute = append(p.Memory, q.Memory...), append(p.Compute, q.Compute...)
	tr := trace.Trace{Pods: []trace.Pod{p}}
	cases := []struct {
		lookback   time.Duration
		lifetimes  int
		gpuMinutes float64
		overrun    float64 // minutes over a 5 GiB half of a 10 GiB GPU
	}{
		{0, 1, 20, 17},
		{5 * time.Minute, 2, 6, 3},
	}
	for _, c := range cases {
		res, err := Run(&tr, Options{GPUMemoryBytes: 10 * gib, Policies: []string{PolicyOnePerPod, TimeSlicing(2)}, Lookback: c.lookback})
		if err != nil {
			t.Fatal(err)
		}
		if res.Trace.Pods != c.lifetimes || res.Trace.TracePods != 1 || res.Policies[0].GPUMinutes != c.gpuMinutes || res.Trace.Steps != 20 {
			t.Errorf("lookback %s: lifetimes %d of %d trace pods, GPU-minutes %v, steps %d; want %d of 1, %v, 20",
				c.lookback, res.Trace.Pods, res.Trace.TracePods, res.Policies[0].GPUMinutes, res.Trace.Steps, c.lifetimes, c.gpuMinutes)
		}
		if got := res.Policies[1].PodLimitOverrunMinutes; got != c.overrun {
			t.Errorf("lookback %s: overrun minutes of 6 GiB on a 5 GiB slice %v, want %v (the silent minutes at the last sample)", c.lookback, got, c.overrun)
		}
	}
}

// gpufracOptions runs gpufrac on a compressed time scale: full confidence after 2h of
// history, so confidence reaches the 0.5 threshold after one hour, a minimum pod age of
// 1h instead of the updater's 12h, and no hysteresis (TestHysteresis covers it).
func gpufracOptions() Options {
	return Options{GPUMemoryBytes: 80 * gib, Policies: []string{PolicyGPUFrac},
		Recommender: recommend.Config{Estimator: estimate.Config{FullConfidenceHistory: 2 * time.Hour}},
		Updater:     UpdaterOptions{MinLifetime: time.Hour, PersistCycles: 1, PersistFor: -1, MinReplacementInterval: -1}}
}

// TestHysteresis: with the updater's default hysteresis the shrink of
// TestColdStartThenShrink (a change inside the bounds) waits until it has persisted for
// updater.DefaultPersistFor: the first cycle that sees it is minute 60, so both pods are
// replaced at the end of minute 65 instead of 60; both belong to one round each.
func TestHysteresis(t *testing.T) {
	tr := trace.Trace{Pods: []trace.Pod{
		pod("a", 0, repeat(20, 120), repeat(0.2, 120)),
		pod("b", 0, repeat(20, 120), repeat(0.2, 120)),
	}}
	o := gpufracOptions()
	o.Updater.PersistCycles, o.Updater.PersistFor, o.Updater.MinReplacementInterval = 0, 0, 0 // defaults
	g := simulateByPolicy(t, tr, o)[PolicyGPUFrac]
	delay := int(updater.DefaultPersistFor / time.Minute)
	want := float64(2*(60+delay) + (60 - delay))
	if g.GPUMinutes != want || g.Replacements != 2 {
		t.Errorf("GPU-minutes %v replacements %d, want %v, 2", g.GPUMinutes, g.Replacements, want)
	}
}

// TestColdStartThenShrink: two workloads of 20 GiB start on whole GPUs. After 15
// minutes at their level with the GPU busy (estimate.DefaultYoungMinAtLevel) the young
// rule makes their recommendation confident: 20 GiB × 1.15 × 2 (n = 1), above half of
// the GPU, so its share is the whole GPU, and the pods on whole GPUs are in date, no
// longer cold starts. At the end of minute 60 confidence reaches 50 % by the clock (60
// minutes of history out of 120) and each pod is an hour old, so both are replaced by a
// fraction, and the second lands next to the first (2 × 23 GiB ≤ 80 GiB).
func TestColdStartThenShrink(t *testing.T) {
	tr := trace.Trace{Pods: []trace.Pod{
		pod("a", 0, repeat(20, 120), repeat(0.2, 120)),
		pod("b", 0, repeat(20, 120), repeat(0.2, 120)),
	}}
	// Each pod's cold start: its first minute and the 15 at the level after it.
	cold := 2 * float64(estimate.DefaultYoungMinAtLevel/time.Minute+1)
	cases := []struct {
		name                string
		edit                func(*Options)
		gpuMinutes, coldMin float64
	}{
		// Minutes 1-60 on two GPUs, 61-120 on one.
		{"defaults", func(*Options) {}, 2*60 + 60, cold},
		// The minimum lifetime holds both until the end of minute 90.
		{"min lifetime 90m", func(o *Options) { o.Updater.MinLifetime = 90 * time.Minute }, 2*90 + 30, cold},
		// One replacement per minute: a at the end of minute 60 (onto a new GPU while b
		// still fills its own), b at the end of minute 61 (next to a).
		{"rate limit 1/min", func(o *Options) { o.Updater.ReplacementsPerMinute = 1 }, 2*61 + 59, cold},
		// Shrinking waits for the window at 00:30-00:40 of each hour: 01:30, the end of
		// minute 90.
		{"resize window", func(o *Options) {
			o.Updater.ResizeWindows = []gpufracv1.ResizeWindow{{Schedule: "30 * * * *", Duration: metav1.Duration{Duration: 10 * time.Minute}}}
		}, 2*90 + 30, cold},
		// The young rule waiting for a whole interval (1 h): cold starts until minute 60.
		{"young rule after an hour", func(o *Options) { o.Recommender.Estimator.YoungMinAtLevel = -1 }, 2*60 + 60, 120},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := gpufracOptions()
			c.edit(&o)
			g := simulateByPolicy(t, tr, o)[PolicyGPUFrac]
			if g.GPUMinutes != c.gpuMinutes || g.ColdStartPodMinutes != c.coldMin || g.Replacements != 2 {
				t.Errorf("GPU-minutes %v cold-start %v replacements %d, want %v, %v, 2", g.GPUMinutes, g.ColdStartPodMinutes, g.Replacements, c.gpuMinutes, c.coldMin)
			}
			if g.PodLimitOverrunMinutes != 0 || g.GPUOverrunMinutes != 0 {
				t.Errorf("overruns %v, %v", g.PodLimitOverrunMinutes, g.GPUOverrunMinutes)
			}
		})
	}
}

// TestUrgentGrowth: after the shrink, memory jumps above the allocation; the recommender
// raises the target at once and the updater grows the pod at the end of the same minute,
// although it is younger than the minimum lifetime.
func TestUrgentGrowth(t *testing.T) {
	mem := append(repeat(20, 70), repeat(45, 20)...)
	tr := trace.Trace{Pods: []trace.Pod{pod("a", 0, mem, repeat(0.2, 90))}}
	res, err := Run(&tr, gpufracOptions())
	if err != nil {
		t.Fatal(err)
	}
	g := res.Policies[0]
	// Whole GPU in minutes 1-60, a 23 GiB target with a limit of about 30 GiB (the
	// memoryLimit's floor, 1.5 × the peak) from 61, 45 GiB used in minute 71: one
	// overrun minute, then at least 45 × 1.15 GiB from minute 72. The cycle that sees
	// the out-of-memory exit raises the workload's rollback floor (29 GiB, the bump of
	// the pod's applied memory), which the target (about 53 GiB) already covers: the
	// webhook writes the target whether or not the floor is published, so the updater
	// does not hold the growth for it (updater.AwaitsFloor; before, awaiting-floor held
	// it a cycle: two overrun minutes, growth at 72).
	if g.Replacements != 2 || g.PodLimitOverrunMinutes != 1 || g.PodsWithOverrun != 1 {
		t.Errorf("replacements %d overrun %v (%d pods), want 2, 1 (1)", g.Replacements, g.PodLimitOverrunMinutes, g.PodsWithOverrun)
	}
	// Shrunk from the whole GPU, then grown 11 minutes later: one reversal.
	if g.Reversals != 1 {
		t.Errorf("reversals %d, want 1 (shrink at 60, growth at 71)", g.Reversals)
	}
	ch := res.detail.changes[0][0]
	if len(ch) != 3 || ch[1].step != 60 || ch[2].step != 71 || ch[2].limit < 45*gib*115/100 {
		t.Errorf("allocation changes %+v: want whole GPU at 0, a fraction at 60, ≥ 51.75 GiB at 71", ch)
	}

	// A resize window open 00:00-01:05 lets the shrink at minute 60 through; the growth
	// at minute 71 is protective (the pod ran out of memory), so it goes ahead outside
	// the window, unless urgentGrowth is off: then it waits for the next window (the next
	// day) and the pod overruns for the last 20 minutes.
	window := []gpufracv1.ResizeWindow{{Schedule: "0 0 * * *", Duration: metav1.Duration{Duration: 65 * time.Minute}}}
	for _, urgent := range []bool{true, false} {
		o := gpufracOptions()
		o.Updater.ResizeWindows = window
		o.Updater.UrgentGrowth = &urgent
		res, err = Run(&tr, o)
		if err != nil {
			t.Fatal(err)
		}
		wantRepl, wantOver, wantRev := 2, 1.0, 1
		if !urgent {
			wantRepl, wantOver, wantRev = 1, 20, 0
		}
		if g := res.Policies[0]; g.Replacements != wantRepl || g.PodLimitOverrunMinutes != wantOver || g.Reversals != wantRev {
			t.Errorf("urgent growth %v: replacements %d overrun %v reversals %d, want %d, %v, %d", urgent, g.Replacements, g.PodLimitOverrunMinutes, g.Reversals, wantRepl, wantOver, wantRev)
		}
	}
}

// TestNearLimitGrowth: a pod sized at 24 GiB (its 20 GiB peak, one 5 % histogram bucket
// up, × 1.15) settles at 21.8 GiB in its fourth hour, 90 % of its allocation, then jumps
// for one minute to 24.6 GiB. The peak near the limit is a sample of need: the updater
// grows the pod at once to the new target (about 25 GiB), although that is under 10 %
// above the allocation (the threshold), so the jump fits. Before, the pod waited for a
// 10 % step and ran over its allocation in the jump.
func TestNearLimitGrowth(t *testing.T) {
	mem := append(append(append(repeat(20, 180), repeat(21.8, 20)...), 24.6), repeat(21.8, 10)...)
	tr := trace.Trace{Pods: []trace.Pod{pod("a", 0, mem, repeat(0.2, len(mem)))}}
	res, err := Run(&tr, gpufracOptions())
	if err != nil {
		t.Fatal(err)
	}
	g := res.Policies[0]
	ch := res.detail.changes[0][0]
	if g.PodLimitOverrunMinutes != 0 || len(ch) < 3 || ch[2].step != 181 || float64(ch[2].limit) < 24.6*float64(gib) {
		t.Errorf("overrun %v pod-minutes, allocation changes %+v: want no overrun, whole GPU at 0, a fraction at 60, ≥ 24.6 GiB at 181 (the first cycle that sees 21.8 GiB)", g.PodLimitOverrunMinutes, ch)
	}
}

// TestRunErrors: an option that cannot work is an error naming its gpufrac simulate flag,
// with the flag's leading "--" as every other flag error of the command (warm-up,
// lookback, policies, consolidation, the backend's and the resize window's were named
// bare or by a phrase); an --interval longer than the trace is one (every figure counts
// whole steps: a 24h step over a 3-minute trace counted 24 h per pod), and so is a
// lookback shorter than the trace's sample spacing (it cut every pod into one-sample
// lifetimes: --lookback 1m over 5-minute samples reported a fifth of the GPU-minutes).
func TestRunErrors(t *testing.T) {
	tr := trace.Trace{Pods: []trace.Pod{pod("a", 0, repeat(1, 3), repeat(0.1, 3))}}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{}, "--gpu-memory 0 bytes"},
		{Options{GPUMemoryBytes: gib, Policies: []string{"magic"}}, `--policies: unknown policy "magic"`},
		{Options{GPUMemoryBytes: gib, Policies: []string{"time-slicing-1"}}, "--policies: unknown policy"},
		{Options{GPUMemoryBytes: gib, Policies: []string{PolicyGPUFrac, PolicyGPUFrac}}, "--policies: policy \"gpufrac\" given twice"},
		{Options{GPUMemoryBytes: gib, WarmUp: time.Hour}, "--warm-up 1h0m0s covers the whole trace"},
		{Options{GPUMemoryBytes: gib, WarmUp: -time.Hour}, "--warm-up -1h0m0s"},
		{Options{GPUMemoryBytes: gib, Lookback: -time.Minute}, "--lookback -1m0s"},
		{Options{GPUMemoryBytes: gib, Lookback: 30 * time.Second}, "--lookback 30s is shorter than the trace's sample spacing (1m0s"},
		{Options{GPUMemoryBytes: gib, Interval: 3 * time.Minute}, "--interval 3m0s is longer than the trace (2m0s"},
		{Options{GPUMemoryBytes: gib, Interval: 24 * time.Hour}, "--interval 24h0m0s is longer than the trace"},
		{Options{GPUMemoryBytes: gib, Updater: UpdaterOptions{ResizeWindows: []gpufracv1.ResizeWindow{{Schedule: "nope"}}}}, "--resize-window-*: resizeWindows[0]: schedule"},
		{Options{GPUMemoryBytes: gib, Updater: UpdaterOptions{ConsolidationComputeMilli: 5000}}, "--consolidation-compute 5000"},
		{Options{GPUMemoryBytes: gib, Updater: UpdaterOptions{Consolidate: true}}, "--consolidate needs"},
		{Options{GPUMemoryBytes: gib, NVFractions: backend.NVFractionsConfig{Request: "bogus"}}, `--nvfractions-request "bogus"`},
		{Options{GPUMemoryBytes: gib, Annotations: backend.AnnotationsConfig{MemoryRequest: "bogus"}}, `--annotation-memory-request "bogus"`},
	} {
		if _, err := Run(&tr, c.o); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want it to start %q", c.o, err, c.want)
		}
		if err := Check(&tr, c.o); err == nil || !strings.HasPrefix(err.Error(), c.want) { // the same, without a replay
			t.Errorf("Check %+v: error %v, want it to start %q", c.o, err, c.want)
		}
	}
	if err := Check(&tr, Options{GPUMemoryBytes: gib, Interval: 2 * time.Minute}); err != nil {
		t.Errorf("Check of a run Run makes: %v", err)
	}
	if _, err := Run(&trace.Trace{}, Options{GPUMemoryBytes: gib}); err == nil {
		t.Error("empty trace: want an error")
	}
	if _, err := Run(&tr, Options{GPUMemoryBytes: gib, Interval: 2 * time.Minute, Policies: []string{PolicyOnePerPod}}); err != nil {
		t.Errorf("an --interval as long as the trace: %v", err)
	}
	if _, err := Run(&tr, Options{GPUMemoryBytes: gib, Lookback: time.Minute, Policies: []string{PolicyOnePerPod}}); err != nil {
		t.Errorf("a --lookback of one sample spacing: %v", err)
	}
}

// TestClairvoyantSeenPeak: installed 5 minutes in, pod a has shown 8 GiB in its first
// five minutes and uses 3 GiB after; b uses 3 GiB throughout; a2, a second pod of a's
// workload, arrives at minute 6 using 1 GiB. clairvoyant-memory sizes each by the
// future alone (3 + 3 + 1 GiB: one 10 GiB GPU); clairvoyant-seen-peak never below what
// the workload had shown (a and a2 at 8 GiB: three GPUs once a2 arrives).
func TestClairvoyantSeenPeak(t *testing.T) {
	a := pod("a", 0, append(repeat(8, 5), repeat(3, 5)...), repeat(0.1, 10))
	a2 := pod("a", 6, repeat(1, 4), repeat(0.1, 4))
	a2.Pod = "a-abc-x2"
	tr := trace.Trace{Pods: []trace.Pod{a, pod("b", 0, repeat(3, 10), repeat(0.1, 10)), a2}}
	got := simulateByPolicy(t, tr, Options{GPUMemoryBytes: 10 * gib, WarmUp: 5 * time.Minute,
		Policies: []string{PolicyClairvoyantMemory, PolicyClairvoyantSeen}})
	if p := got[PolicyClairvoyantMemory]; p.GPUMinutes != 5 || p.PeakGPUs != 1 {
		t.Errorf("clairvoyant-memory: GPU-minutes %v peak %d, want 5, 1", p.GPUMinutes, p.PeakGPUs)
	}
	// Minute 6: a (8 GiB) and b (3 GiB) on two GPUs; minutes 7-10 a2 (8 GiB) on a third.
	p := got[PolicyClairvoyantSeen]
	if p.GPUMinutes != 2+3*4 || p.PeakGPUs != 3 || p.PodLimitOverrunMinutes != 0 || !near(p.VsClairvoyant, 14.0/5) {
		t.Errorf("clairvoyant-seen-peak: GPU-minutes %v peak %d overrun %v vs bound %v, want 14, 3, 0, 2.8", p.GPUMinutes, p.PeakGPUs, p.PodLimitOverrunMinutes, p.VsClairvoyant)
	}
}

// TestLowConfidenceProtectiveGrowth: a young workload at 10 GiB gets a fraction after
// its first quarter hour at the level (a 20 GiB request, 42 GiB limit), then its memory
// jumps to a new level: the young evidence starts again and the recommendation falls
// below the minimum confidence. As the updater does (recommendationGate), a pod whose
// peak nears its allocation is replaced at once with the whole GPU the webhook then
// admits; before, the simulator left it at its fraction until the recommendation was
// confident again, 15 minutes later, over its limit all that time. A jump that does not
// near the allocation replaces nothing while the confidence is low.
func TestLowConfidenceProtectiveGrowth(t *testing.T) {
	for _, c := range []struct {
		level         float64 // GiB from minute 26
		protective    bool
		maxOverrunMin float64
	}{
		{level: 45, protective: true, maxOverrunMin: 1},
		{level: 15, protective: false},
	} {
		mem := append(repeat(10, 25), repeat(c.level, 60)...)
		tr := trace.Trace{Pods: []trace.Pod{pod("a", 0, mem, repeat(0.2, len(mem)))}}
		o := gpufracOptions()
		o.Recommender.Estimator.FullConfidenceHistory = 0 // the default 24 h
		res, err := Run(&tr, o)
		if err != nil {
			t.Fatal(err)
		}
		g, ch := res.Policies[0], res.detail.changes[0][0]
		if len(ch) < 2 || ch[1].alloc.MemoryBytes >= o.GPUMemoryBytes {
			t.Fatalf("level %v GiB: allocation changes %+v, want a fraction after the first level", c.level, ch)
		}
		// The first cycle that sees the new level is the end of minute 26; at 45 GiB
		// the pod is over its limit, and that cycle raises the rollback floor, which the
		// whole GPU the webhook admits the replacement with covers: nothing waits for
		// the floor to be published (updater.AwaitsFloor; before, a cycle: minute 27).
		grewWhole := len(ch) > 2 && ch[2].step == 26 && ch[2].alloc.MemoryBytes == o.GPUMemoryBytes
		if grewWhole != c.protective || g.PodLimitOverrunMinutes > c.maxOverrunMin {
			t.Errorf("level %v GiB: allocation changes %+v, overrun %v pod-minutes; want whole GPU at minute 26: %v, overrun ≤ %v",
				c.level, ch, g.PodLimitOverrunMinutes, c.protective, c.maxOverrunMin)
		}
		if !c.protective && len(ch) > 2 && ch[2].step <= 40 {
			t.Errorf("level %v GiB: replaced at step %d while the recommendation is not confident, for no protective need", c.level, ch[2].step)
		}
	}
}

// TestCheckHole: a trace with no sample for longer than a day and than all the rest of it
// (a stray row stamped 0, or a month away) is an error naming both sides of the hole, and
// Run refuses it before building a grid across it (a stray 1970 row made a 3-hour trace
// 29 million steps, its pod holding a GPU through them); an outage shorter than the rest
// of the trace, or than a day, is replayed.
func TestCheckHole(t *testing.T) {
	at := func(p trace.Pod, d time.Duration) trace.Pod {
		p.Memory = append([]trace.Point{{T: p.Memory[0].T.Add(-d), V: p.Memory[0].V}}, p.Memory...)
		return p
	}
	a := pod("a", 0, repeat(1, 180), repeat(0.1, 180))
	for _, c := range []struct {
		name string
		tr   trace.Trace
		want string
	}{
		{"stray sample 30 days before", trace.Trace{Pods: []trace.Pod{at(a, 30*24*time.Hour), pod("b", 0, repeat(1, 3), repeat(0.1, 3))}}, "no sample for 720h0m0s, between "},
		{"two days of outage in three hours", trace.Trace{Pods: []trace.Pod{at(a, 48*time.Hour)}}, "longer than all the rest of the trace (2h59m0s)"},
		{"a day's outage", trace.Trace{Pods: []trace.Pod{at(a, 24*time.Hour)}}, ""},
		{"an outage shorter than the rest", trace.Trace{Pods: []trace.Pod{at(pod("a", 0, repeat(1, 3000), repeat(0.1, 3000)), 48*time.Hour)}}, ""},
	} {
		err := CheckHole(&c.tr)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if c.want == "" {
			continue
		}
		if _, err := Run(&c.tr, Options{GPUMemoryBytes: gib, Policies: []string{PolicyOnePerPod}}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Run: %v, want %q", c.name, err, c.want)
		}
	}
}
