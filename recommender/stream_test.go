package recommender

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/metrics/promtest"
)

// isComputeRead matches the compute data query (not its copies companion, not a count).
func isComputeRead(q string) bool {
	return strings.Contains(q, "avg_over_time(DCGM_FI_PROF_SM_ACTIVE") && !strings.Contains(q, "count_values")
}

// readsCompute matches any read of the compute data: the query (isComputeRead), or its
// raw samples, through the remote read or as a range vector of the query API.
func readsCompute(q string) bool {
	const metric = "DCGM_FI_PROF_SM_ACTIVE"
	return isComputeRead(q) ||
		strings.HasPrefix(q, promtest.RemoteReadPrefix) && strings.Contains(q, `__name__="`+metric+`"`) ||
		strings.HasPrefix(q, metric+"{") && strings.HasSuffix(q, "ms]")
}

// Issue 17: history is fed to the model one slice at a time, and a load that fails part
// way never shrinks a recommendation. A recommender restarts over a workload whose
// written recommendation came from 48 hours of history (a quiet first day, a busy
// second one) and loads it in one-hour slices; from the tenth compute read on, every
// compute read fails, after the quiet hours of the slices before were fed. The cycle
// fails and every written target stays (the quiet hours alone would shrink them), with
// MetricsUnavailable. The next cycle resumes after the last slice fed (fewer compute
// reads than the same load from the start) and writes what a recommender that read the
// whole history at once writes.
//
// The reads count in either form: which one a slice takes (raw samples, or the query
// where the series index says no compute series is there) depends on how the test's
// TSDB answers label values for its head, which varied between runs under -race.
func TestHistoryStreamFailureMidway(t *testing.T) {
	objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
	h := newEngineHarness(t, objs, metrics.DCGM{})
	for i, p := range podsOf(objs) {
		uuid := "GPU-" + string(rune('a'+i))
		quiet := h.now.Add(-24 * time.Hour)
		addDCGM(t, h.prom, p, uuid, quiet, 24*120, 10000, 0.2)
		addDCGM(t, h.prom, p, uuid, h.now.Add(2*time.Minute), 24*120+4, 30000, 0.7)
	}
	ctx := context.Background()
	if err := h.rec.RunOnce(ctx); err != nil { // the recommender before the restart
		t.Fatal(err)
	}
	written := h.gfr(t, "ml", "sd").Status.ContainerRecommendations
	if len(written) != 1 {
		t.Fatalf("no recommendation before the restart: %+v", h.gfr(t, "ml", "sd").Status.Conditions)
	}

	// The restarted recommender: two series, so one-hour slices of 60 compute points.
	sliced := Config{HistoryLength: 48 * time.Hour, HistorySliceSamples: 120, HistorySliceAlignment: -1}
	restarted := New(h.c, &metrics.Reader{API: h.prom.API(t), Labels: metrics.DefaultLabels}, metrics.DCGM{}, sliced)
	now := h.now.Add(time.Minute)
	restarted.Now = func() time.Time { return now }
	var mu sync.Mutex
	reads := 0
	h.prom.SetFailureIf(func(q string) bool {
		mu.Lock()
		defer mu.Unlock()
		if readsCompute(q) {
			reads++
			return reads >= 10
		}
		return false
	}, errors.New("query timed out in expression evaluation"))
	if err := restarted.RunOnce(ctx); err == nil {
		t.Fatal("a cycle whose history load failed must fail")
	}
	st := h.gfr(t, "ml", "sd").Status
	got := st.ContainerRecommendations
	if len(got) != 1 || !sameBounds(got[0], written[0]) {
		t.Fatalf("a history load that failed after nine slices changed the recommendation:\n%s\nwas\n%s", bounds(got), bounds(written))
	}
	if c := condition(st, gpufracv1.ConditionMetricsUnavailable); !isTrue(c) {
		t.Errorf("want MetricsUnavailable=True after a failed history load, got %+v", c)
	}
	// The failed slice's read and at most its two fallbacks (remote read, query API,
	// the query), no later slice's.
	if reads < 10 || reads > 12 {
		t.Fatalf("the load went on after its failed slice: %d compute reads, want 10-12", reads)
	}

	h.prom.SetFailureIf(nil, nil)
	now = now.Add(time.Minute)
	before := len(h.prom.Queries())
	if err := restarted.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	computeReads := func(qs []string) int {
		n := 0
		for _, q := range qs {
			if readsCompute(q) {
				n++
			}
		}
		return n
	}
	resumed := computeReads(h.prom.Queries()[before:])
	// The same sliced load from the start, by a recommender with no model that reads
	// Prometheus as the restarted one does.
	var copies []client.Object
	for _, o := range objs {
		copies = append(copies, o.DeepCopyObject().(client.Object))
	}
	fresh := New(newEngineHarness(t, copies, nil).c, &metrics.Reader{API: h.prom.API(t), Labels: metrics.DefaultLabels}, metrics.DCGM{}, sliced)
	fresh.Now = func() time.Time { return now }
	before = len(h.prom.Queries())
	if err := fresh.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if all := computeReads(h.prom.Queries()[before:]); resumed >= all {
		t.Errorf("the resumed load read compute %d times, the whole load %d: it started again instead of after the slices fed", resumed, all)
	}
	whole, _ := newEngineRecommender(t, objs, h.prom, Config{HistoryLength: 48 * time.Hour})
	whole.Source = metrics.DCGM{}
	whole.Now = func() time.Time { return now }
	if err := whole.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	ref := (&harness{c: whole.Client}).gfr(t, "ml", "sd")
	st = h.gfr(t, "ml", "sd").Status
	if len(st.ContainerRecommendations) != 1 || len(ref.Status.ContainerRecommendations) != 1 ||
		!sameBounds(st.ContainerRecommendations[0], ref.Status.ContainerRecommendations[0]) {
		t.Errorf("resumed history load:\n%s\nwhole history at once:\n%s", bounds(st.ContainerRecommendations), bounds(ref.Status.ContainerRecommendations))
	}
	if c := condition(st, gpufracv1.ConditionMetricsUnavailable); !isFalse(c) {
		t.Errorf("MetricsUnavailable must clear once the history is loaded: %+v", c)
	}
	if got := st.ContainerRecommendations[0].Target.Memory.Value(); got < 30000*metrics.MiB {
		t.Errorf("memory target %d bytes after the whole history, below the busy day's 30000 MiB", got)
	}
}

// sameBounds reports whether two container recommendations have equal targets and
// bounds of memory and compute.
func sameBounds(a, b gpufracv1.ContainerRecommendation) bool {
	for _, p := range [][2]gpufracv1.GPUResources{{a.Target, b.Target}, {a.LowerBound, b.LowerBound}, {a.UpperBound, b.UpperBound}} {
		if p[0].Memory == nil || p[1].Memory == nil || p[0].Compute == nil || p[1].Compute == nil ||
			p[0].Memory.Cmp(*p[1].Memory) != 0 || p[0].Compute.Cmp(*p[1].Compute) != 0 {
			return false
		}
	}
	return true
}

// bounds renders container recommendations' targets and bounds.
func bounds(rs []gpufracv1.ContainerRecommendation) string {
	var b strings.Builder
	for _, r := range rs {
		for _, x := range []struct {
			name string
			v    gpufracv1.GPUResources
		}{{"target", r.Target}, {"lower", r.LowerBound}, {"upper", r.UpperBound}} {
			b.WriteString(x.name + " ")
			if x.v.Memory != nil {
				b.WriteString(x.v.Memory.String() + " ")
			}
			if x.v.Compute != nil {
				b.WriteString(x.v.Compute.String() + "; ")
			}
		}
	}
	return b.String()
}

// A history load's slices cover every compute window of the load once. The slices end
// on memory aggregation boundaries (hours) and the load at the cycle's now, which is
// not on one: the compute points of every slice lie on the one grid that ends at now,
// so the last slice, which starts on the hour, neither skips the seconds between the
// hour and its first point (now 12:01:50: a window lost, 359 points for six hours of
// samples every 30 s) nor reads a window the slice before read (now 12:00:30: one raw
// sample at 11:59:45 fed twice, by the point ending 12:00:00 and by the one ending
// 12:00:30). The first steady cycle then reads (now, its own now], as before.
func TestHistorySlicesCoverComputeOnce(t *testing.T) {
	const length = 6 * time.Hour
	for _, c := range []struct {
		name       string
		now        time.Time
		start      time.Time // first SM_ACTIVE sample, then every 30 s up to now
		wantPoints int
	}{
		{"last slice longer than a step", time.Date(2026, 11, 30, 12, 1, 50, 0, time.UTC), time.Date(2026, 11, 30, 6, 2, 0, 0, time.UTC), int(length / time.Minute)},
		{"last slice shorter than a step", time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC), time.Date(2026, 11, 30, 11, 59, 45, 0, time.UTC), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := append(deployment("ml", "sd", 1), gfa("ml", "sd", "sd"))
			h := newEngineHarness(t, objs, metrics.DCGM{})
			h.now = c.now
			hourlySlices(h, length) // the load is read in seven
			p := podsOf(objs)[0]
			n := int(c.now.Sub(c.start)/(30*time.Second)) + 1
			h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, "GPU-a"), c.start, 30*time.Second, promtest.Repeat(10000, n)...)
			if c.wantPoints == 1 {
				n = 1 // one raw compute sample
			}
			h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, "GPU-a"), c.start, 30*time.Second, promtest.Repeat(0.3, n)...)
			// Prometheus holds a sample at now, so the load ends at now (Recommender.dataEnd).
			h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, "GPU-a"), c.now, time.Second, 10000)
			if err := h.rec.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			s := h.rec.model.Container(history.ContainerKey{WorkloadKey: history.WorkloadKey{Namespace: "ml", Kind: "Deployment", Name: "sd"}, Container: "main"})
			if s == nil {
				t.Fatal("no history")
			}
			if s.ComputeSamples != c.wantPoints {
				t.Errorf("%d compute points fed, want %d (one per minute window of (now-%v, now] that holds a sample)", s.ComputeSamples, c.wantPoints, length)
			}
			// The next cycle reads the minute after: one point, nothing read twice.
			h.now = h.now.Add(time.Minute)
			h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, "GPU-a"), c.now.Add(30*time.Second), 30*time.Second, 0.3, 0.3)
			if err := h.rec.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			if s.ComputeSamples != c.wantPoints+1 {
				t.Errorf("after the first steady cycle %d compute points, want %d", s.ComputeSamples, c.wantPoints+1)
			}
		})
	}
}

// computePoints: over loads of several lengths and slice ends off the minute grid, the
// slices' points are the ⌊(to − from) ÷ step⌋ points of the grid ending at to, each in
// one slice, each with its window inside the load.
func TestComputePointsPartitionTheLoad(t *testing.T) {
	step := time.Minute
	to := time.Date(2026, 11, 30, 12, 1, 50, 0, time.UTC)
	for _, length := range []time.Duration{30 * time.Second, step, 90 * time.Second, 3*time.Hour + 17*time.Second, 48 * time.Hour} {
		from := to.Add(-length)
		seen := map[time.Time]int{}
		for a, first := from, true; first || a.Before(to); first = false {
			b := a.Truncate(time.Hour).Add(time.Hour) // hourly slices, as sliceEnd cuts them
			if b.After(to) {
				b = to
			}
			s := computePoints(from, to, a, b, step)
			for p := s.first; s.ok && !p.After(s.last); p = p.Add(step) {
				if p.Sub(to)%step != 0 || !p.After(a) || p.After(b) {
					t.Errorf("load %v: point %v off the grid ending %v or outside its slice (%v, %v]", length, p, to, a, b)
				}
				seen[p]++
			}
			a = b
		}
		want := max(int(length/step), 1)
		if len(seen) != want {
			t.Errorf("load %v: %d points, want %d", length, len(seen), want)
		}
		for p, n := range seen {
			if n != 1 || (length >= step && p.Add(-step).Before(from)) {
				t.Errorf("load %v: point %v read %d times, window from %v (load from %v)", length, p, n, p.Add(-step), from)
			}
		}
	}
}

// Issue 17: a long load whose devices were never shared by several pods asks the
// series index once for the whole load, not once per slice (metrics.Reader.SharedDevices:
// no slice can then have a shared device); where a device was shared somewhere in the
// load, every slice asks, and only the slices where it was look for copies.
func TestSharedDevicesAskedOncePerLoad(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const length = 6 * time.Hour
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "no device shared", true: "one device shared for an hour"}[shared], func(t *testing.T) {
			objs := append(deployment("ml", "sd", 2), gfa("ml", "sd", "sd"))
			h := newEngineHarness(t, objs, metrics.DCGM{})
			h.now = now
			hourlySlices(h, length) // the load is read in six or seven
			pods := podsOf(objs)
			start := now.Add(-length)
			n := int(length/time.Minute) + 1
			for i, p := range pods {
				gpu := fmt.Sprintf("GPU-%d", i)
				h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, p, gpu), start, time.Minute, promtest.Repeat(10000, n)...)
				h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, p, gpu), start, time.Minute, promtest.Repeat(0.3, n)...)
			}
			if shared {
				// A short-lived pod of another namespace on the first pod's GPU, an
				// hour in the middle of the load.
				other := pods[0].DeepCopy()
				other.Namespace, other.Name = "team-b", "intruder"
				at := start.Add(3 * time.Hour)
				h.prom.Add(t, dcgmLabels(metrics.DCGMFBUsed, other, "GPU-0"), at, time.Minute, promtest.Repeat(5000, 60)...)
				h.prom.Add(t, dcgmLabels(metrics.DCGMSMActive, other, "GPU-0"), at, time.Minute, promtest.Repeat(0.2, 60)...)
			}
			if err := h.rec.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			asked, copies := countQueries(h.prom, promtest.SeriesPrefix+metrics.DCGMFBUsed), countQueries(h.prom, "count_values")
			if !shared && (asked != 1 || copies != 0) {
				t.Errorf("%d series requests and %d copies queries over a load with no shared device, want 1 and 0", asked, copies)
			}
			if shared && (asked < 7 || copies == 0) {
				t.Errorf("%d series requests and %d copies queries with a device shared for an hour, want the load's and one per slice (at least 7), and copies looked for", asked, copies)
			}
		})
	}
}

// The controller owners (kube_pod_owner, kube_replicaset_owner) of a long load are read
// from the series index once for the load, not queried per slice; where a pod's name
// moved to another owner during the load, each slice reads its own, so that a name's
// owner is the one of its slice's time.
func TestOwnersReadOncePerLoad(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const length = 6 * time.Hour
	for _, moved := range []bool{false, true} {
		t.Run(map[bool]string{false: "one owner each", true: "a name moved to another owner"}[moved], func(t *testing.T) {
			objs := append(deployment("ml", "own", 2), gfa("ml", "own", "own"))
			h := newEngineHarness(t, objs, metrics.DCGM{})
			h.now = now
			hourlySlices(h, length) // the load is read in six or seven
			start := now.Add(-length)
			n := int(length/time.Minute) + 1
			ksm := map[string]string{"job": "kube-state-metrics", "owner_is_controller": "true", "namespace": "ml"}
			for i, p := range podsOf(objs) {
				addDCGM(t, h.prom, p, fmt.Sprintf("GPU-%d", i), now, n, 10000, 0.3)
				owner := p.OwnerReferences[0].Name
				labels := map[string]string{"__name__": ksmPodOwner, "pod": p.Name, "uid": string(p.UID), "owner_kind": "ReplicaSet", "owner_name": owner}
				for k, v := range ksm {
					labels[k] = v
				}
				if moved && i == 0 {
					// The name's first three hours under another ReplicaSet.
					before := maps.Clone(labels)
					before["owner_name"] = "other-5c4d3b2a1"
					h.prom.Add(t, before, start, time.Minute, promtest.Repeat(1, 180)...)
					h.prom.Add(t, labels, start.Add(3*time.Hour), time.Minute, promtest.Repeat(1, n-180)...)
					continue
				}
				h.prom.Add(t, labels, start, time.Minute, promtest.Repeat(1, n)...)
			}
			if err := h.rec.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			asked, queried := countQueries(h.prom, promtest.SeriesPrefix+ksmPodOwner), countQueries(h.prom, "max_over_time("+ksmPodOwner)
			if queried != 0 {
				t.Errorf("%d kube_pod_owner queries: want the owners read from the series index only", queried)
			}
			if !moved && asked != 1 {
				t.Errorf("%d kube_pod_owner series requests over a load of one owner per name, want 1", asked)
			}
			if moved && asked < 7 {
				t.Errorf("%d kube_pod_owner series requests where a name moved to another owner, want the load's and one per slice (at least 7)", asked)
			}
		})
	}
}

// Slices end on multiples of Prometheus' block range (2 hours) as well as of the memory
// aggregation interval, so that no stored chunk is cut by a slice boundary: at 10,000
// series the budget's 100 minutes become 2 hours, not 1; a larger budget is cut at the
// last even hour it reaches; an aggregation interval of 90 minutes ends them on
// multiples of 6 hours; a negative alignment keeps the aggregation interval alone.
func TestSliceEndsOnBlockBoundaries(t *testing.T) {
	h := newEngineHarness(t, nil, metrics.DCGM{})
	a := time.Date(2026, 11, 30, 3, 17, 0, 0, time.UTC) // a load's first slice starts anywhere
	to := a.Add(8 * 24 * time.Hour)
	for _, c := range []struct {
		name   string
		series int
		align  time.Duration
		from   time.Time
		want   time.Time
	}{
		{"10,000 series, first slice", 10000, 0, a, time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)},
		{"10,000 series, on a block boundary", 10000, 0, time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)},
		{"2,000 series", 2000, 0, time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)},
		{"3,000 series", 3000, 0, time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)},
		{"10,000 series, aggregation interval alone", 10000, -1, time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)},
		{"the last slice ends at to", 10, 0, to.Add(-3 * time.Hour), to},
	} {
		t.Run(c.name, func(t *testing.T) {
			h.rec.Config.HistorySliceSamples, h.rec.Config.HistorySliceAlignment = DefaultHistorySliceSamples, c.align
			if c.align == 0 {
				h.rec.Config.HistorySliceAlignment = DefaultHistorySliceAlignment
			}
			if got := h.rec.sliceEnd(c.from, to, c.series); !got.Equal(c.want) {
				t.Errorf("slice from %v for %d series ends %v, want %v", c.from, c.series, got, c.want)
			}
		})
	}
	for _, c := range []struct{ agg, align, want time.Duration }{
		{time.Hour, 2 * time.Hour, 2 * time.Hour},
		{90 * time.Minute, 2 * time.Hour, 6 * time.Hour},
		{24 * time.Hour, 2 * time.Hour, 24 * time.Hour},
		{7 * time.Hour, 2 * time.Hour, 14 * time.Hour},
		{25 * time.Hour, 2 * time.Hour, 25 * time.Hour}, // 50 h is over a day: the interval alone
		{time.Hour, -1, time.Hour},
	} {
		opts := h.rec.model.Options()
		opts.MemoryAggregationInterval = c.agg
		r := &Recommender{Config: Config{HistorySliceAlignment: c.align}, model: history.NewModel(opts)}
		if got := r.sliceAlignment(); got != c.want {
			t.Errorf("aggregation %v, alignment %v: slices on multiples of %v, want %v", c.agg, c.align, got, c.want)
		}
	}
}

// hourlySlices has h's history loads last length and be read in one-hour slices: a
// budget of 60 samples a slice, on the memory aggregation interval alone.
func hourlySlices(h *engineHarness, length time.Duration) {
	h.rec.Config.HistoryLength, h.rec.Config.HistorySliceSamples, h.rec.Config.HistorySliceAlignment = length, 60, -1
}
