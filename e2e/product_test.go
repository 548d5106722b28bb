package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/packing"
	"github.com/gpufrac/gpufrac/trace"
	"github.com/gpufrac/gpufrac/updater"
)

// TestWholeProduct runs every component of gpufrac at once, as local processes against
// the test cluster, on live data only (nothing backfilled for this namespace):
//
//	agent (--simulate, replaying a synthetic trace) → Prometheus → recommender (agent
//	source) → gfr → admission webhook (registered by URL, self-managed CA) + updater
//	(Recreate, windows always open) → replaced pods carrying the recommended fraction.
//
// It checks that pods are replaced with the recommendation applied, that nothing trips
// the latency guardrail or a rollback, and that the applied fractions pack onto fewer
// GPUs than one per pod.
func TestWholeProduct(t *testing.T) {
	const (
		ns        = "e2e-product"
		workloads = 3
		replicas  = 2
		gpuMemory = int64(80) << 30
	)
	start := time.Now()
	// The updater test's webhook helper serves namespaces labelled admLabel=updater and
	// the updater helper reads that webhook's status Lease, so this namespace is labelled
	// for it.
	// Its status Lease lives in updSystemNS, which TestUpdater creates again later: wait
	// (last cleanup, registered first) until the namespace is really gone.
	t.Cleanup(func() {
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			if err := testCluster.Client.Get(context.Background(), types.NamespacedName{Name: updSystemNS}, &corev1.Namespace{}); apierrors.IsNotFound(err) {
				return
			}
		}
		t.Logf("namespace %s still exists 90s after the test", updSystemNS)
	})
	updNamespace(t, updSystemNS, false)
	updNamespace(t, ns, true)

	// The same 2 hours on every run: the synthetic load follows the time of day of its
	// samples (diurnal), and a trace ending at time.Now() replayed a different load at
	// each hour of the day: at some hours a workload's recommendation moved from an MPS
	// partition to time-slicing within the 150 s this test waits (seen 2026-12-04 after
	// 15:00 UTC, on the code that had passed at 14:00), a real change the updater then
	// waits 3 cycles for. The agent replays a trace from its first sample, so the clock
	// time of the samples is free.
	replayed := time.Date(2026, 12, 4, 14, 0, 0, 0, time.UTC)
	tr := trace.Synthesize(trace.SynthOptions{Workloads: workloads, PodsPerWorkload: replicas, Duration: 2 * time.Hour,
		Step: time.Minute, Seed: 26, End: replayed, Namespace: ns, WorkloadPrefix: "prod",
		// Smaller models than the GenTD26-like default (37 GiB median peak): with the
		// default, two pods rarely share an 80 GiB GPU and the packing check (c) would
		// hinge on one pair; here memory leaves room and compute decides the packing.
		Model: trace.SynthModel{PeakMemoryMedianBytes: 12 << 30, PeakMemoryMaxBytes: 16 << 30}})
	csv := writeTraceCSV(t, tr)

	// The webhook first, so the validating webhook checks the autoscalers; pods created
	// now get nothing (no recommendation yet) and hold whole GPUs, like pods that ran
	// before gpufrac was installed.
	startUpdaterWebhook(t)

	ws := tr.Workloads()
	backends := []gpufracv1.BackendType{gpufracv1.BackendMPS, gpufracv1.BackendAnnotations}
	for i, w := range ws {
		g := admAutoscaler(ns, w.Name, gpufracv1.UpdateModeRecreate, backends[i%len(backends)])
		g.Spec.UpdatePolicy.MinReplicas = ptr.To[int32](2) // no ResizeWindows: any time
		create(t, gpuDeployment(ns, w.Name, "inference", replicas), g)
	}
	for _, w := range ws {
		waitRunning(t, ns, w.Name, replicas)
	}
	before := map[types.UID]bool{}
	for _, w := range ws {
		for _, p := range updPods(t, ns, w.Name) {
			before[p.UID] = true
		}
	}

	// Agent as the chart runs it in simulate mode; 60× speed replays the 2h trace in 2
	// minutes, sampled every second and scraped by Prometheus every second.
	port := freePort(t)
	startProcess(t, "agent", "--simulate", "--trace="+csv, "--kubeconfig="+testCluster.Kubeconfig,
		fmt.Sprintf("--listen=127.0.0.1:%d", port), "--interval=1s", "--simulate-speed=60",
		"--simulate-loop=true", "--simulate-gpus=8", "--simulate-gpu-memory=81559Mi")
	if err := testCluster.AddScrapeTarget(t.Context(), fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	// --full-confidence-history=2m: confidence is span/2m, so live history reaches the
	// webhook's default 50 % minimum after about a minute instead of 12 hours.
	stopRecommender := startRecommender(t, "--metric-source=agent", "--gpu-memory=80Gi", "--full-confidence-history=2m",
		"--status-lease-namespace="+updSystemNS)
	// Short updater timings: no warm-up to speak of, and pods may be replaced for being
	// off their target after 5s (the chart's default is 12h), eviction unlimited.
	// The recommender's status Lease on, as the chart runs it: pods change only while
	// the recommender keeps renewing it.
	upd := startUpdater(t, []string{ns}, "--interval=2s", "--warm-up=5s", "--min-pod-age=5s", "--eviction-rate=-1",
		"--recommender-lease-max-age=1m")
	t.Logf("all components up after %s", time.Since(start).Round(time.Second))

	// On failure, each autoscaler's status.updater says why the updater held its pods.
	names := make([]string, len(ws))
	for i, w := range ws {
		names[i] = w.Name
	}
	logUpdaterStatusOnFailure(t, ns, names...)

	// (a) Every pod is a replacement and carries the current recommendation's target.
	ctx := context.Background()
	var recs map[string]*gpufracv1.GPUFractionRecommendation
	waitFor(t, 150*time.Second, "every pod replaced with its recommendation applied", func() (bool, error) {
		recs = map[string]*gpufracv1.GPUFractionRecommendation{}
		for _, w := range ws {
			r := recommendation(t, ns, w.Name)
			if r == nil || len(r.Status.ContainerRecommendations) == 0 {
				return false, fmt.Errorf("%s: no recommendation yet", w.Name)
			}
			recs[w.Name] = r
			cr := r.Status.ContainerRecommendations[0]
			target := cr.Target
			pods := updPods(t, ns, w.Name)
			if len(pods) != replicas {
				return false, fmt.Errorf("%s: %d pods", w.Name, len(pods))
			}
			for _, p := range pods {
				if before[p.UID] {
					return false, fmt.Errorf("%s: pod %s not replaced yet (confidence %v)", w.Name, p.Name, ptr.Deref(r.Status.ConfidencePercent, -1))
				}
				if !updater.IsReady(&p) {
					return false, fmt.Errorf("%s: pod %s not ready", w.Name, p.Name)
				}
				rec, err := gpufracv1.ParseApplied(p.Annotations)
				if err != nil {
					return false, err
				}
				c := rec.Container("inference")
				if c == nil || c.Memory == nil || target.Memory == nil || target.Compute == nil {
					return false, fmt.Errorf("%s: pod %s applied %+v", w.Name, p.Name, rec)
				}
				if c.Memory.Cmp(*target.Memory) != 0 {
					return false, fmt.Errorf("%s: pod %s applied memory %s, target %s", w.Name, p.Name, c.Memory, target.Memory)
				}
				// A TimeSlicing recommendation reserves no compute (deliberate: the webhook
				// writes no compute limit, the updater compares none); Exclusive and MPS
				// ones apply the compute target.
				if cr.PartitionsCompute() {
					if c.Compute == nil || c.Compute.Cmp(*target.Compute) != 0 {
						return false, fmt.Errorf("%s: pod %s (%s) applied compute %v, target %s", w.Name, p.Name, cr.SharingMode, c.Compute, target.Compute)
					}
				} else if c.Compute != nil {
					return false, fmt.Errorf("%s: pod %s (%s) applied compute %s, want none", w.Name, p.Name, cr.SharingMode, c.Compute)
				}
			}
		}
		return true, nil
	})
	t.Logf("all %d pods replaced with their recommendation after %s", workloads*replicas, time.Since(start).Round(time.Second))

	// (b) No guardrail and no rollback.
	for _, w := range ws {
		r := recs[w.Name]
		if c := meta.FindStatusCondition(r.Status.Conditions, gpufracv1.ConditionLatencyGuardrailActive); c != nil && c.Status == metav1.ConditionTrue {
			t.Errorf("%s: LatencyGuardrailActive True: %s", w.Name, c.Message)
		}
		g := &gpufracv1.GPUFractionAutoscaler{}
		if err := testCluster.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: w.Name}, g); err != nil {
			t.Fatal(err)
		}
		if st := g.Status.Updater; st != nil {
			if st.Floor != nil {
				t.Errorf("%s: rollback floor set: %+v", w.Name, *st.Floor)
			}
			if c := meta.FindStatusCondition(st.Conditions, gpufracv1.UpdaterConditionRolledBack); c != nil && c.Status == metav1.ConditionTrue {
				t.Errorf("%s: RolledBack True: %s", w.Name, c.Message)
			}
		}
		cr := r.Status.ContainerRecommendations[0]
		t.Logf("%s (%s): target memory %s compute %s, confidence %d%%, sharing %s",
			w.Name, g.Spec.Backend.Type, cr.Target.Memory, cr.Target.Compute, ptr.Deref(r.Status.ConfidencePercent, 0), cr.SharingMode)
	}
	upd.checkLog(t)

	// (c) The applied fractions pack onto fewer GPUs than one per pod.
	pk := packing.New(gpuMemory)
	n := 0
	for _, w := range ws {
		for _, p := range updPods(t, ns, w.Name) {
			rec, err := gpufracv1.ParseApplied(p.Annotations)
			if err != nil || rec.Container("inference") == nil {
				t.Fatalf("pod %s: applied %v (%v)", p.Name, rec, err)
			}
			c := rec.Container("inference")
			a := packing.Alloc{MemoryBytes: c.Memory.Value()}
			if c.Compute != nil { // none for TimeSlicing: it shares the GPU's time (as the simulator packs it)
				a.ComputeMilli = c.Compute.MilliValue()
			}
			pk.Place(n, a)
			n++
		}
	}
	t.Logf("GPUs: %d at one per pod, %d packed by the applied fractions (80 GiB GPUs); whole test %s",
		n, pk.Held(), time.Since(start).Round(time.Second))
	if pk.Held() >= n {
		t.Errorf("applied fractions need %d GPUs for %d pods, want fewer", pk.Held(), n)
	}

	// (d) The recommender stops (it releases its status Lease), and a recommendation
	// then says a workload's pods are far too large. Nobody keeps that recommendation
	// current, so the updater holds the shrink (recommender-stale) instead of evicting.
	stopRecommender()
	w := ws[len(ws)-1].Name
	r := recommendation(t, ns, w)
	cr := &r.Status.ContainerRecommendations[0]
	quarter := func(q *resource.Quantity) *resource.Quantity {
		return resource.NewQuantity(q.Value()/4, resource.BinarySI)
	}
	cr.Target.Memory, cr.LowerBound.Memory, cr.UpperBound.Memory = quarter(cr.Target.Memory), quarter(cr.LowerBound.Memory), quarter(cr.Target.Memory)
	if err := testCluster.Client.Status().Update(ctx, r); err != nil {
		t.Fatal(err)
	}
	pods := map[types.UID]bool{}
	for _, p := range updPods(t, ns, w) {
		pods[p.UID] = true
	}
	waitFor(t, 90*time.Second, "the shrink held as recommender-stale", func() (bool, error) {
		g := &gpufracv1.GPUFractionAutoscaler{}
		if err := testCluster.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: w}, g); err != nil {
			return false, err
		}
		st := g.Status.Updater
		return st != nil && st.BlockedReason == updater.SkipRecommenderStale, nil
	})
	time.Sleep(5 * time.Second) // more updater cycles (2s each) with the Lease stale
	for _, p := range updPods(t, ns, w) {
		if !pods[p.UID] {
			t.Errorf("%s: pod %s replaced while the recommender was down", w, p.Name)
		}
	}
}
