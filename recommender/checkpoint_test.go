package recommender

import (
	"context"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// Checkpoint tests: the real PromQL engine (promtest) over varying DCGM series, a fake
// API server that keeps the GPUFractionCheckpoints, and three recommenders: one that
// bootstraps the whole history (A), one that bootstraps midway and writes checkpoints
// (B), and one that starts later from B's checkpoints (C).

// varyingDCGM writes dcgm-exporter series of pod every 30 s in [since, to) of the
// series that starts at from: FB_USED (MiB) with a daily pattern, noise and a spike at
// 15:00, SM_ACTIVE likewise. The same seed and from give the same values whatever since.
func varyingDCGM(t testing.TB, prom *promtest.Server, p *corev1.Pod, seed uint64, from, since, to time.Time) {
	rng := rand.New(rand.NewPCG(seed, 2))
	var mem, sm []float64
	first := time.Time{}
	for at := from; at.Before(to); at = at.Add(30 * time.Second) {
		day := math.Sin(2 * math.Pi * float64(at.Hour()) / 24)
		m := 10000 + 2000*day + 300*rng.Float64()
		if at.Hour() == 15 && at.Minute() < 2 {
			m = 17000 // the daily spike
		}
		c := math.Max(0, math.Min(1, 0.35+0.2*day+0.1*rng.NormFloat64()))
		if at.Before(since) {
			continue
		}
		if first.IsZero() {
			first = at
		}
		mem, sm = append(mem, math.Round(m)), append(sm, c)
	}
	prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, "GPU-"+p.Name), first, 30*time.Second, mem...)
	prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, "GPU-"+p.Name), first, 30*time.Second, sm...)
}

// rangeStarts serves prom and records the earliest start of its range queries and
// remote reads (data; not the label-values lookups of the sources over the history
// window, detect).
type rangeStarts struct {
	prom     *promtest.Server
	mu       sync.Mutex
	earliest time.Time
}

func (r *rangeStarts) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	at, _, ok := promtest.RemoteReadRange(req)
	if start, err := strconv.ParseFloat(req.FormValue("start"), 64); err == nil && strings.HasSuffix(req.URL.Path, "query_range") {
		at, ok = time.UnixMilli(int64(start*1000)), true
	}
	if ok {
		r.mu.Lock()
		if r.earliest.IsZero() || at.Before(r.earliest) {
			r.earliest = at
		}
		r.mu.Unlock()
	}
	r.prom.ServeHTTP(w, req)
}

// checkpointFixture is two workloads (2 and 1 pods, two namespaces) with 30 h of
// varying history up to end in full, and the same from mid − 1h only in recent.
type checkpointFixture struct {
	objs         []client.Object
	full, recent *promtest.Server
	mid, end     time.Time
}

func newCheckpointFixture(t *testing.T) *checkpointFixture {
	end := time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)
	f := &checkpointFixture{full: promtest.New(t), recent: promtest.New(t), mid: end.Add(-10 * time.Hour), end: end}
	f.objs = append(deployment("ns", "d", 2), gfa("ns", "d", "d"))
	f.objs = append(f.objs, append(deployment("ns2", "e", 1), gfa("ns2", "e", "e"))...)
	from := end.Add(-30 * time.Hour)
	for i, p := range podsOf(f.objs) {
		varyingDCGM(t, f.full, p, uint64(i), from, from, end.Add(time.Second))
		varyingDCGM(t, f.recent, p, uint64(i), from, f.mid.Add(-time.Hour), end.Add(time.Second))
	}
	return f
}

// run makes a recommender with cfg over prom (through rangeStarts) and client c, runs
// one cycle at now, and returns the earliest range start it read.
func (f *checkpointFixture) run(t *testing.T, c client.Client, prom *promtest.Server, cfg Config, now time.Time) time.Time {
	t.Helper()
	rs := &rangeStarts{prom: prom}
	rec := New(c, promReader(t, rs), metrics.DCGM{}, cfg)
	rec.Now = func() time.Time { return now }
	if err := rec.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	return rs.earliest
}

// recs returns the container recommendations of both autoscalers.
func recs(t *testing.T, c client.Client) map[string]gpufracv1.ContainerRecommendation {
	out := map[string]gpufracv1.ContainerRecommendation{}
	for _, n := range [][2]string{{"ns", "d"}, {"ns2", "e"}} {
		gfr := (&harness{c: c}).gfr(t, n[0], n[1])
		if len(gfr.Status.ContainerRecommendations) != 1 {
			t.Fatalf("%s/%s: %d container recommendations, want 1: %+v", n[0], n[1], len(gfr.Status.ContainerRecommendations), gfr.Status.Conditions)
		}
		out[n[0]+"/"+n[1]] = gfr.Status.ContainerRecommendations[0]
	}
	return out
}

// deleteRecommendations removes the recommendations B wrote, so that C's are computed
// afresh rather than kept within noise of B's.
func deleteRecommendations(t *testing.T, c client.Client) {
	for _, n := range [][2]string{{"ns", "d"}, {"ns2", "e"}} {
		gfr := (&harness{c: c}).gfr(t, n[0], n[1])
		if err := c.Delete(context.Background(), gfr); err != nil {
			t.Fatal(err)
		}
	}
}

func checkpointConfig() Config {
	return Config{HistoryLength: 48 * time.Hour, Checkpoints: true}
}

// TestCheckpointRestoreEqualsBootstrap is the equivalence test: recommender A
// bootstraps 30 h of history at end; B bootstraps at mid (10 h earlier) and writes
// checkpoints; C starts at end from B's checkpoints over a Prometheus that holds only
// the samples from an hour before mid. C reads nothing before that hour and its
// recommendations are A's: history hours and confidence exactly, memory within one
// bucket of its histogram (5 %), compute within one bucket (0.01) with the margin —
// the checkpoint's quantization (gpufracv1.HistogramCheckpoint).
func TestCheckpointRestoreEqualsBootstrap(t *testing.T) {
	f := newCheckpointFixture(t)
	cA := fakeClient(f.objs, slimPods)
	if earliest := f.run(t, cA, f.full, Config{HistoryLength: 48 * time.Hour}, f.end); !earliest.Before(f.end.Add(-47 * time.Hour)) {
		t.Fatalf("A's bootstrap read from %s, want the whole history length", earliest)
	}
	want := recs(t, cA)

	cB := fakeClient(copies(f.objs), slimPods)
	written := testutil.ToFloat64(checkpointsWritten)
	f.run(t, cB, f.full, checkpointConfig(), f.mid)
	if n := testutil.ToFloat64(checkpointsWritten) - written; n != 2 {
		t.Fatalf("B wrote %v checkpoints, want 2", n)
	}
	var cps gpufracv1.GPUFractionCheckpointList
	if err := cB.List(context.Background(), &cps); err != nil || len(cps.Items) != 2 {
		t.Fatalf("checkpoints: %v, %d", err, len(cps.Items))
	}
	for _, cp := range cps.Items {
		if len(cp.OwnerReferences) != 1 || cp.OwnerReferences[0].Kind != "GPUFractionAutoscaler" || cp.OwnerReferences[0].Name != cp.Name ||
			!cp.Status.SamplesUntil.Time.Equal(f.mid) || len(cp.Status.Containers) != 1 {
			t.Errorf("checkpoint %s: owners %+v, samples until %s (want %s), %d containers", cp.Name, cp.OwnerReferences, cp.Status.SamplesUntil, f.mid, len(cp.Status.Containers))
		}
	}

	deleteRecommendations(t, cB)
	restored := testutil.ToFloat64(checkpointsRestored)
	earliest := f.run(t, cB, f.recent, checkpointConfig(), f.end)
	if n := testutil.ToFloat64(checkpointsRestored) - restored; n != 2 {
		t.Errorf("C restored %v checkpoints, want 2", n)
	}
	if earliest.Before(f.mid.Add(-2 * time.Hour)) {
		t.Errorf("C read from %s, before its checkpoints' %s", earliest, f.mid)
	}
	got := recs(t, cB)
	for k, w := range want {
		g := got[k]
		if g.HistoryHours != w.HistoryHours || g.ConfidencePercent != w.ConfidencePercent || w.HistoryHours < 29 {
			t.Errorf("%s: history %d h, confidence %d %%; bootstrap %d h, %d %%", k, g.HistoryHours, g.ConfidencePercent, w.HistoryHours, w.ConfidencePercent)
		}
		for _, b := range []struct {
			name string
			g, w gpufracv1.GPUResources
		}{{"target", g.Target, w.Target}, {"lowerBound", g.LowerBound, w.LowerBound}, {"upperBound", g.UpperBound, w.UpperBound}, {"uncappedTarget", g.UncappedTarget, w.UncappedTarget}} {
			if !withinBucket(b.g.Memory, b.w.Memory, 0, 1.05) || !withinBucket(b.g.Compute, b.w.Compute, 0.01*(1+0.15)+0.001, 1) {
				t.Errorf("%s %s: restored memory %v compute %v, bootstrap memory %v compute %v", k, b.name, b.g.Memory, b.g.Compute, b.w.Memory, b.w.Compute)
			}
		}
		if !withinBucket(g.ObservedPeakMemory, w.ObservedPeakMemory, 0, 1) {
			t.Errorf("%s: observed peak %v, bootstrap %v", k, g.ObservedPeakMemory, w.ObservedPeakMemory)
		}
		t.Logf("%s: target memory %v / %v, compute %v / %v (restored / bootstrap)", k, g.Target.Memory, w.Target.Memory, g.Target.Compute, w.Target.Compute)
	}
}

// withinBucket reports whether quantities a and b are both absent, or both present and
// within abs of each other or within a ratio of ratio.
func withinBucket(a, b *resource.Quantity, abs, ratio float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	x, y := a.AsApproximateFloat64(), b.AsApproximateFloat64()
	if math.Abs(x-y) <= abs {
		return true
	}
	return x > 0 && y > 0 && math.Max(x/y, y/x) <= ratio+1e-9
}

func copies(objs []client.Object) []client.Object {
	var out []client.Object
	for _, o := range objs {
		out = append(out, o.DeepCopyObject().(client.Object))
	}
	return out
}

// TestCheckpointIgnoredBootstraps: a checkpoint that must not be restored (one that does
// not decode, of other options or version, too old, of another workload or of another
// autoscaler of the same name) is ignored with its reason counted, and the workload
// bootstraps the whole history length from Prometheus: the same recommendation as a
// recommender that never had a checkpoint, and its checkpoint is replaced by a good
// one. The other workload's valid checkpoint is still restored.
func TestCheckpointIgnoredBootstraps(t *testing.T) {
	f := newCheckpointFixture(t)
	cA := fakeClient(copies(f.objs), slimPods)
	f.run(t, cA, f.full, Config{HistoryLength: 48 * time.Hour}, f.end)
	want := recs(t, cA)["ns/d"]

	for _, c := range []struct {
		reason string
		edit   func(cp *gpufracv1.GPUFractionCheckpoint)
	}{
		{ckptDecode, func(cp *gpufracv1.GPUFractionCheckpoint) { cp.Status.Containers[0].Memory.BucketWeights["x"] = 3 }},
		{ckptDecode, func(cp *gpufracv1.GPUFractionCheckpoint) { cp.Status.Containers[0].IntervalPeaks[0].Bytes = -5 }},
		{ckptOptions, func(cp *gpufracv1.GPUFractionCheckpoint) { cp.Status.Options.HalfLife.Duration = time.Hour }},
		{ckptVersion, func(cp *gpufracv1.GPUFractionCheckpoint) { cp.Status.ModelVersion = "v0" }},
		{ckptTooOld, func(cp *gpufracv1.GPUFractionCheckpoint) { cp.Status.SamplesUntil.Time = f.end.Add(-48 * time.Hour) }},
		{ckptTooOld, func(cp *gpufracv1.GPUFractionCheckpoint) { cp.Status.SamplesUntil.Time = f.end.Add(2 * time.Minute) }},
		{ckptTargetChanged, func(cp *gpufracv1.GPUFractionCheckpoint) { cp.Spec.WorkloadName = "other" }},
		{ckptOtherAutoscaler, func(cp *gpufracv1.GPUFractionCheckpoint) { cp.OwnerReferences[0].UID = "old" }},
	} {
		t.Run(c.reason, func(t *testing.T) {
			cB := fakeClient(copies(f.objs), slimPods)
			f.run(t, cB, f.full, checkpointConfig(), f.mid)
			var cp gpufracv1.GPUFractionCheckpoint
			if err := cB.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "d"}, &cp); err != nil {
				t.Fatal(err)
			}
			c.edit(&cp)
			if err := cB.Update(context.Background(), &cp); err != nil {
				t.Fatal(err)
			}
			deleteRecommendations(t, cB)
			ignored, restored := testutil.ToFloat64(checkpointsIgnored.WithLabelValues(c.reason)), testutil.ToFloat64(checkpointsRestored)
			if earliest := f.run(t, cB, f.full, checkpointConfig(), f.end); !earliest.Before(f.end.Add(-47 * time.Hour)) {
				t.Errorf("read from %s, want the whole history length", earliest)
			}
			if n := testutil.ToFloat64(checkpointsIgnored.WithLabelValues(c.reason)) - ignored; n != 1 {
				t.Errorf("ignored %q %v times, want 1", c.reason, n)
			}
			if n := testutil.ToFloat64(checkpointsRestored) - restored; n != 1 {
				t.Errorf("restored %v, want 1 (the other workload's)", n)
			}
			// The broken checkpoint is replaced by this recommender's (a create that
			// finds it, then a patch).
			var now gpufracv1.GPUFractionCheckpoint
			if err := cB.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "d"}, &now); err != nil || !now.Status.SamplesUntil.Time.Equal(f.end) ||
				now.Status.ModelVersion != gpufracv1.CheckpointModelVersion || now.Spec.WorkloadName != "d" {
				t.Errorf("checkpoint after the bootstrap: %v, samples until %s, version %q, workload %q", err, now.Status.SamplesUntil, now.Status.ModelVersion, now.Spec.WorkloadName)
			}
			got := recs(t, cB)["ns/d"]
			if got.HistoryHours != want.HistoryHours || !withinBucket(got.Target.Memory, want.Target.Memory, 0, 1) ||
				!withinBucket(got.Target.Compute, want.Target.Compute, 0, 1) || !withinBucket(got.UpperBound.Memory, want.UpperBound.Memory, 0, 1) {
				t.Errorf("after an ignored checkpoint: %d h, target %v/%v, upper %v; bootstrap %d h, %v/%v, %v", got.HistoryHours, got.Target.Memory, got.Target.Compute,
					got.UpperBound.Memory, want.HistoryHours, want.Target.Memory, want.Target.Compute, want.UpperBound.Memory)
			}
		})
	}
}

// TestCheckpointWrites: a checkpoint is written after the bootstrap, not again within
// CheckpointInterval, and after it only for the workload whose model changed (the one
// whose pods still report); the other's is not rewritten.
func TestCheckpointWrites(t *testing.T) {
	f := newCheckpointFixture(t)
	writes := map[string]int{}
	var mu sync.Mutex
	count := func(o client.Object) {
		if _, ok := o.(*gpufracv1.GPUFractionCheckpoint); ok {
			mu.Lock()
			writes[o.GetNamespace()]++
			mu.Unlock()
		}
	}
	c := fakeClient(copies(f.objs), interceptor.Funcs{
		List: slimPods.List,
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			err := c.Create(ctx, o, opts...)
			if err == nil {
				count(o)
			}
			return err
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			err := c.Patch(ctx, o, p, opts...)
			if err == nil {
				count(o)
			}
			return err
		},
	})
	// ns2's pod stopped reporting before mid; ns's pods go on.
	prom := promtest.New(t)
	for i, p := range podsOf(f.objs) {
		until := f.end.Add(time.Second)
		if p.Namespace == "ns2" {
			until = f.mid.Add(-90 * time.Minute) // nothing left in the running interval at mid
		}
		varyingDCGM(t, prom, p, uint64(i), f.end.Add(-30*time.Hour), f.end.Add(-30*time.Hour), until)
	}
	rs := &rangeStarts{prom: prom}
	cfg := checkpointConfig()
	cfg.CheckpointInterval = 30 * time.Minute
	rec := New(c, promReader(t, rs), metrics.DCGM{}, cfg)
	now := f.mid
	rec.Now = func() time.Time { return now }
	cycle := func(at time.Time) {
		now = at
		if err := rec.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	cycle(f.mid)
	if writes["ns"] != 1 || writes["ns2"] != 1 {
		t.Fatalf("after the bootstrap: writes %v, want one each", writes)
	}
	cycle(f.mid.Add(10 * time.Minute))
	if writes["ns"] != 1 || writes["ns2"] != 1 {
		t.Errorf("within the interval: writes %v, want none more", writes)
	}
	cycle(f.mid.Add(40 * time.Minute))
	if writes["ns"] != 2 || writes["ns2"] != 1 {
		t.Errorf("after the interval: writes %v, want ns (changed) again and not ns2 (no new sample)", writes)
	}
}

// TestCheckpointClockAhead: a checkpoint whose time is ahead of this process' clock by
// less than one interval (another leader's clock ahead) is restored, not ignored.
func TestCheckpointClockAhead(t *testing.T) {
	f := newCheckpointFixture(t)
	c := fakeClient(copies(f.objs), slimPods)
	f.run(t, c, f.full, checkpointConfig(), f.mid)
	var cp gpufracv1.GPUFractionCheckpoint
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "d"}, &cp); err != nil {
		t.Fatal(err)
	}
	cp.Status.SamplesUntil.Time = f.mid.Add(40 * time.Second)
	if err := c.Update(context.Background(), &cp); err != nil {
		t.Fatal(err)
	}
	restored, tooOld := testutil.ToFloat64(checkpointsRestored), testutil.ToFloat64(checkpointsIgnored.WithLabelValues(ckptTooOld))
	f.run(t, c, f.full, checkpointConfig(), f.mid)
	if n, m := testutil.ToFloat64(checkpointsRestored)-restored, testutil.ToFloat64(checkpointsIgnored.WithLabelValues(ckptTooOld))-tooOld; n != 2 || m != 0 {
		t.Errorf("restored %v, ignored as too old %v; want 2 and 0", n, m)
	}
}

// A restart restores checkpoints of different times (written in different cycles, one
// per cycle here): ns/d's at mid, ns2/e's a minute later, both on the old process' grid
// of compute windows, and the new process' grid is 20 seconds off it. Its history load
// starts at the oldest (resumeFrom), so the window of its grid that straddles e's
// checkpoint holds samples e's restored state already holds (its last window ended at
// the checkpoint): not fed. Each container gets, after its checkpoint's compute samples,
// one per whole window after its checkpoint's time and no more. Before, e got one more
// (the straddling window, half of its samples fed twice).
func TestRestoreFeedsNoStraddlingWindow(t *testing.T) {
	f := newCheckpointFixture(t)
	c := fakeClient(copies(f.objs), slimPods)
	cfg := checkpointConfig()
	cfg.CheckpointWritesPerCycle = 1
	b := New(c, promReader(t, f.full), metrics.DCGM{}, cfg)
	for _, at := range []time.Time{f.mid, f.mid.Add(time.Minute)} {
		b.Now = func() time.Time { return at }
		if err := b.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	type saved struct {
		until   time.Time
		samples int64
	}
	cps := map[string]saved{}
	for _, name := range [][2]string{{"ns", "d"}, {"ns2", "e"}} {
		var cp gpufracv1.GPUFractionCheckpoint
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: name[0], Name: name[1]}, &cp); err != nil || len(cp.Status.Containers) != 1 {
			t.Fatalf("checkpoint %v: %v, %+v", name, err, cp.Status)
		}
		cps[name[1]] = saved{cp.Status.SamplesUntil.Time, cp.Status.Containers[0].ComputeSamples}
	}
	if !cps["e"].until.Equal(cps["d"].until.Add(time.Minute)) {
		t.Fatalf("checkpoints until %v and %v, want a minute apart", cps["d"].until, cps["e"].until)
	}
	rec := New(c, promReader(t, f.full), metrics.DCGM{}, cfg)
	rec.Now = func() time.Time { return f.end.Add(20 * time.Second) }
	if err := rec.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rec.lastLoad.Sub(cps["d"].until)%time.Minute == 0 {
		t.Fatalf("the new grid (load ending %v) is the checkpoints' grid: nothing straddles", rec.lastLoad)
	}
	pods := map[string]int{"d": 2, "e": 1}
	for _, e := range rec.cur.entries {
		cp := cps[e.gfa.Name]
		st := rec.model.Container(history.ContainerKey{WorkloadKey: history.WorkloadKey(e.ref), Container: "main"})
		want := cp.samples + int64(pods[e.gfa.Name])*int64(rec.lastLoad.Sub(cp.until)/time.Minute)
		got := int64(-1)
		if st != nil {
			got = int64(st.ComputeSamples)
		}
		if got != want {
			t.Errorf("%s: %d compute samples, want %d (%d restored, one per pod and whole window of (%v, %v])", e.gfa.Name, got, want, cp.samples, cp.until, rec.lastLoad)
		}
	}
}

// TestOrphanedCheckpointIsAdopted: a checkpoint left without its owner reference
// (`kubectl delete gfa --cascade=orphan`, the autoscaler created again) is the new
// autoscaler's from the recommender's next write: restored by it after a restart,
// deleted with it by garbage collection.
func TestOrphanedCheckpointIsAdopted(t *testing.T) {
	f := newCheckpointFixture(t)
	c := fakeClient(copies(f.objs), slimPods)
	prom := promtest.New(t)
	for i, p := range podsOf(f.objs) {
		varyingDCGM(t, prom, p, uint64(i), f.end.Add(-30*time.Hour), f.end.Add(-30*time.Hour), f.end.Add(time.Second))
	}
	cfg := checkpointConfig()
	cfg.CheckpointInterval = 30 * time.Minute
	rec := New(c, promReader(t, prom), metrics.DCGM{}, cfg)
	now := f.mid
	rec.Now = func() time.Time { return now }
	ctx := context.Background()
	if err := rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "ns", Name: "d"}
	var cp gpufracv1.GPUFractionCheckpoint
	if err := c.Get(ctx, key, &cp); err != nil {
		t.Fatal(err)
	}
	for _, refs := range [][]metav1.OwnerReference{nil, {{APIVersion: gpufracv1.GroupVersion.String(), Kind: "GPUFractionAutoscaler", Name: "d", UID: "earlier", Controller: ptr.To(true)}}} {
		cp.OwnerReferences = refs
		if err := c.Update(ctx, &cp); err != nil {
			t.Fatal(err)
		}
		now = now.Add(40 * time.Minute)
		if err := rec.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, key, &cp); err != nil {
			t.Fatal(err)
		}
		if ctrl := metav1.GetControllerOf(&cp); ctrl == nil || ctrl.UID != "gfa-ns-d" || len(cp.OwnerReferences) != 1 {
			t.Errorf("owners %+v after a write, want the autoscaler gfa-ns-d alone (was %+v)", cp.OwnerReferences, refs)
		}
	}
}
