package recommender

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/internal/statuswrite"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/workload"
)

// cycle is the state of one RunOnce, built by its steps in order.
type cycle struct {
	now time.Time
	// ran is set once every step has run: the cycle listed its objects, read what it
	// could and wrote its statuses (some writes, or the read, may still have failed).
	// Start renews the status Lease after such a cycle only.
	ran bool
	// entries are the autoscalers this shard owns; byRef the one in charge of each
	// workload (over every shard's autoscalers).
	entries []*entry
	byRef   map[workload.Ref]*entry
	// excluded are the autoscalers that name this shard in namespaces its selector
	// leaves out (ownedOnly): marked, not recommended for (notSelected).
	excluded []*entry
	// targets are the workloads this shard recommends for, per namespace; seen the same
	// as a set.
	targets map[string][]workload.Ref
	seen    map[history.WorkloadKey]bool
	// newNS are the namespaces, sorted, with a workload whose history is not loaded yet
	// (bootstrap from HistoryLength ago); oldNS those of the other workloads.
	newNS, oldNS []string
	// down are the scrape targets down at now (metrics.Reader.DownTargets), read once
	// for every load of the cycle.
	down []metrics.Target
	// attr attributes samples to workloads: the live pods and their top-most controller.
	attr *workload.Attributor
	// livePods are the pods that exist now, by namespace and name.
	livePods map[[2]string]*corev1.Pod
	// templates holds the newest live pod of each workload, for its spec.
	templates map[history.WorkloadKey]*corev1.Pod
	// containers holds the names of the containers (init containers too) of each
	// workload's existing pods, whatever their phase.
	containers map[history.WorkloadKey]map[string]bool
	// latency is the guardrail latency read this cycle per autoscaler, seconds.
	latency map[types.NamespacedName]float64
	// exported holds the per-autoscaler metrics being built (exporter.go).
	exported *snapshot
	// loadErr is the failed read of Prometheus (wrapping ErrMetricsUnavailable): every
	// recommendation is then kept and marked MetricsUnavailable.
	loadErr error
	// writeErrs are the autoscalers whose status could not be written.
	writeErrs []error
}

// entry is one autoscaler in a cycle.
type entry struct {
	gfa       *gpufracv1.GPUFractionAutoscaler
	ref       workload.Ref
	targetErr error
	pods      int
	podNames  map[string]bool                  // live pods of the workload
	winner    *gpufracv1.GPUFractionAutoscaler // the autoscaler in charge when this one is a duplicate
	foreign   bool                             // owned by another recommender shard (Config.Shard)
}

// step is one timed step of RunOnce; its error ends the cycle.
type step struct {
	name string // the step label of gpufrac_recommender_cycle_step_duration_seconds
	run  func(context.Context, *cycle) error
}

// steps are the steps of a cycle, in order (as VPA's recommender RunOnce).
func (r *Recommender) steps() []step {
	return []step{
		{"load_autoscalers", r.loadAutoscalers},
		{"load_pods", r.loadPods},
		{"load_metrics", r.loadMetrics},
		{"garbage_collect", r.garbageCollect},
		{"update_recommendations", r.updateRecommendations},
		{"maintain_checkpoints", r.maintainCheckpoints},
		{"export_metrics", r.exportMetrics},
	}
}

// RunOnce runs one cycle at r.Now(): its steps, each timed into
// gpufrac_recommender_cycle_step_duration_seconds. It returns an error when listing
// objects or reading Prometheus failed; recommendations are then left unchanged except
// for the MetricsUnavailable condition.
func (r *Recommender) RunOnce(ctx context.Context) error {
	start := time.Now()
	defer func() { cycleDuration.Observe(time.Since(start).Seconds()) }()
	c := &cycle{now: r.Now(), latency: map[types.NamespacedName]float64{}, exported: &snapshot{keepConsts: r.exportConsts}}
	r.cur = c
	for _, s := range r.steps() {
		t := time.Now()
		err := s.run(ctx, c)
		cycleStepDuration.WithLabelValues(s.name).Observe(time.Since(t).Seconds())
		if err != nil {
			return err
		}
	}
	c.ran = true
	return errors.Join(append([]error{c.loadErr}, c.writeErrs...)...)
}

// loadAutoscalers lists the autoscalers, resolves their targets, picks the one in charge
// of each workload, keeps those this shard owns and tracks their workloads. Its errors
// are listing errors.
func (r *Recommender) loadAutoscalers(ctx context.Context, c *cycle) error {
	var list gpufracv1.GPUFractionAutoscalerList
	if err := r.Client.List(ctx, &list); err != nil {
		cycleErrors.WithLabelValues("list").Inc()
		return fmt.Errorf("listing GPUFractionAutoscalers: %w", err)
	}
	r.owners.Reset()
	c.entries = make([]*entry, 0, len(list.Items))
	c.byRef, c.targets, c.seen = map[workload.Ref]*entry{}, map[string][]workload.Ref{}, map[history.WorkloadKey]bool{}
	for i := range list.Items {
		gfa := &list.Items[i]
		e := &entry{gfa: gfa}
		e.ref, e.targetErr = workload.Resolve(ctx, r.Client, r.Scale, gfa.Namespace, gfa.Spec.TargetRef)
		c.entries = append(c.entries, e)
		if e.targetErr != nil {
			continue
		}
		// The admission webhook rejects a second autoscaler, but one admitted while it
		// was down can exist: the oldest is in charge (contract.Precedes, the same
		// order the webhook and the updater use); the others get no recommendation.
		cur, dup := c.byRef[e.ref]
		if dup && !contract.Precedes(gfa, cur.gfa) {
			continue
		}
		c.byRef[e.ref] = e
		if dup {
			continue // the workload is tracked already; only its autoscaler changed
		}
		c.targets[e.ref.Namespace] = append(c.targets[e.ref.Namespace], e.ref)
		c.seen[history.WorkloadKey(e.ref)] = true
	}
	var err error
	if c.entries, c.excluded, err = r.ownedOnly(ctx, c.entries, c.byRef, c.targets, c.seen); err != nil {
		cycleErrors.WithLabelValues("list").Inc()
		return err
	}
	r.track(c)
	r.restoreCheckpoints(ctx, c)
	return nil
}

// track forgets the workloads whose autoscaler is gone (or belongs to another shard),
// starts tracking new ones, and splits their namespaces into c.newNS and c.oldNS.
func (r *Recommender) track(c *cycle) {
	for w := range r.tracked {
		if !c.seen[w] {
			delete(r.tracked, w)
			delete(r.methods, w)
			delete(r.checkpoints, w)
			r.model.Forget(w)
		}
	}
	nsNew, nsOld := map[string]bool{}, map[string]bool{}
	for w := range c.seen {
		t := r.tracked[w]
		if t == nil {
			t = &tracking{}
			r.tracked[w] = t
		}
		if !t.bootstrapped {
			nsNew[w.Namespace] = true
		} else {
			nsOld[w.Namespace] = true
		}
	}
	c.newNS, c.oldNS = slices.Sorted(maps.Keys(nsNew)), slices.Sorted(maps.Keys(nsOld))
	workloadsTracked.Set(float64(len(r.tracked)))
}

// loadPods lists the pods of the targets' namespaces and attributes each to its
// top-most controller: c.attr, c.livePods, c.templates and each entry's pod count. Its
// errors are listing errors.
//
// The pods are the informer cache's own objects, never copied: read from the pod
// informer's namespace index once it has synced (WatchPods), else listed without a deep
// copy (client.UnsafeDisableDeepCopy), which still copies each pod's struct into the
// list (10.5 MB of the in-use heap at 10,000 pods, kept for the cycle). Nothing in a
// cycle writes to a pod, and copying 10,000 pods every minute was most of a steady
// cycle's allocations (make bench-scale, docs/benchmarks.md). They must stay read-only.
func (r *Recommender) loadPods(ctx context.Context, c *cycle) error {
	c.attr = &workload.Attributor{Live: map[[2]string]workload.Ref{}, KSM: r.ownership, Targets: c.targets}
	c.livePods = map[[2]string]*corev1.Pod{}
	c.templates = map[history.WorkloadKey]*corev1.Pod{}
	c.containers = map[history.WorkloadKey]map[string]bool{}
	for ns := range c.targets {
		if objs, ok := r.indexedPods(ns); ok {
			for _, o := range objs {
				if p, ok := o.(*corev1.Pod); ok {
					r.addPod(ctx, c, p)
				}
			}
			continue
		}
		var pods corev1.PodList
		if err := r.Client.List(ctx, &pods, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			cycleErrors.WithLabelValues("list").Inc()
			return fmt.Errorf("listing pods in %s: %w", ns, err)
		}
		for i := range pods.Items {
			r.addPod(ctx, c, &pods.Items[i])
		}
	}
	return nil
}

// indexedPods returns the cached pods of namespace ns from the pod informer's namespace
// index, and false when there is no index (WatchPods not called or not supported) or the
// informer has not synced yet.
func (r *Recommender) indexedPods(ns string) ([]any, bool) {
	if r.podIndex == nil || !r.podIndex.HasSynced() {
		return nil, false
	}
	objs, err := r.podIndex.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	return objs, err == nil
}

// WatchPods reads the pods of each cycle from c's pod informer's namespace index instead
// of listing them through the client (loadPods), when the informer exposes its indexer
// (client-go's SharedIndexInformer, as controller-runtime's informers are).
func (r *Recommender) WatchPods(ctx context.Context, c ctrlcache.Cache) error {
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	if ix, ok := inf.(podIndex); ok {
		r.podIndex = ix
	}
	return nil
}

// podIndex is an informer with its indexer.
type podIndex interface {
	HasSynced() bool
	GetIndexer() cache.Indexer
}

// addPod attributes one live pod (loadPods).
func (r *Recommender) addPod(ctx context.Context, c *cycle, p *corev1.Pod) {
	ref, ok := r.owners.TopController(ctx, p)
	if !ok {
		return
	}
	c.attr.Live[[2]string{p.Namespace, p.Name}] = ref
	c.livePods[[2]string{p.Namespace, p.Name}] = p
	if old := c.templates[history.WorkloadKey(ref)]; old == nil || old.CreationTimestamp.Before(&p.CreationTimestamp) {
		c.templates[history.WorkloadKey(ref)] = p // the newest: the current template
	}
	names := c.containers[history.WorkloadKey(ref)]
	if names == nil {
		names = map[string]bool{}
		c.containers[history.WorkloadKey(ref)] = names
	}
	for _, pc := range workload.Containers(p) {
		names[pc.Container.Name] = true
	}
	if e := c.byRef[ref]; e != nil && !workload.Ended(p) {
		e.pods++
		if e.podNames == nil {
			e.podNames = map[string]bool{}
		}
		e.podNames[p.Name] = true
	}
}

// loadMetrics reads Prometheus into the history model: the sources present (detect),
// the scrape targets down (once for both loads), then the samples since the
// last load for tracked workloads and HistoryLength of history for new ones. A failed read is c.loadErr, not an error of the step: the cycle goes on and
// keeps every recommendation.
func (r *Recommender) loadMetrics(ctx context.Context, c *cycle) error {
	var err error
	if len(c.seen) > 0 {
		err = r.detect(ctx, c.now)
	}
	if err == nil && len(c.oldNS)+len(c.newNS) > 0 {
		c.down, err = r.Reader.DownTargets(ctx, c.now)
	}
	end, whole, held := c.now, true, false
	if err == nil && len(c.oldNS)+len(c.newNS) > 0 {
		end, whole, held = r.dataEnd(ctx, c.now)
	}
	if err == nil && len(c.oldNS) > 0 {
		from := r.lastLoad
		if from.IsZero() || end.Sub(from) > r.Config.HistoryLength {
			from = end.Add(-r.Config.HistoryLength)
		}
		err = r.load(ctx, c.oldNS, from, end, c.down, c.attr, true, whole)
	}
	if err == nil && len(c.newNS) > 0 {
		histEnd := end
		if !whole {
			histEnd = r.lastLoad // what Prometheus holds whole windows of
		}
		if err = r.load(ctx, c.newNS, r.resumeFrom(histEnd), histEnd, c.down, c.attr, false, true); err == nil {
			for _, t := range r.tracked {
				t.bootstrapped = true
			}
			klog.FromContext(ctx).Info("Loaded history", "namespaces", c.newNS, "length", r.Config.HistoryLength)
		}
	}
	if err != nil {
		cycleErrors.WithLabelValues("prometheus").Inc()
		c.loadErr = fmt.Errorf("%w: %w", ErrMetricsUnavailable, err)
		r.failedReads++
	} else {
		r.failedReads = 0
		r.diagnoseLabels(ctx, c)
		if len(c.seen) > 0 && whole {
			if held {
				// Not where Prometheus held no sample within its lookback (a stall: the
				// load ended at now, and the stall's length is no arrival spacing).
				r.arrivals.add("", []metrics.Sample{{Time: end}}, time.Time{})
			}
			r.lastLoad = end
		}
	}
	return nil
}

// dataEnd returns where the cycle's loads end and whether they are whole (read compute
// and feed the model; see below). A live load starts where the last one ended, so a
// compute window read before Prometheus holds its samples was never read again: with
// the recommender's clock 3 minutes ahead of Prometheus' (or samples ingested 3 minutes
// late: remote write, federation) every live compute window was empty, and after 3
// cycles NoSamplesWhileRunning blamed an exporter while the recommendation stayed
// frozen. So the loads end at or before Prometheus' newest sample of the sources'
// fields (held, metrics.NewestSampleQuery) where that is before now, and at or before
// now otherwise.
//
// The compute windows of every load lie on one grid of --interval steps, that of the
// first load's end (Prometheus' newest sample rounded down onto the grid that ends at
// now, so its windows are those a load up to now reads): each load ends at the last
// grid point at or before held (or now), so no load ends on a sample's own time (which
// changes the samples each window holds), and successive loads read every window once:
// none overlaps another (a compute sample fed twice) and none is left out (one never
// fed), whatever the cycles' timing.
//
// Where no whole window since the last load's end is held (Prometheus holds nothing
// newer, a scrape interval longer than --interval, a stall, a cycle early), whole is
// false: the live load reads memory up to now for the cycle's gap checks only (a stall
// still counts towards NoSamplesWhileRunning) and feeds nothing to the model, and the
// next load starts where the last one ended and reads it all; a history load of a new
// workload ends there too. Where Prometheus holds no sample within its lookback (5
// minutes), or the query fails, the bound is now. The newest sample is Prometheus'
// own: where only some exporters' samples arrive late, their last windows are still
// read early.
//
// held reports whether Prometheus held a sample within its lookback (the end was bound
// by what it holds, not by a stall's now): Recommender.arrivals counts those ends only.
func (r *Recommender) dataEnd(ctx context.Context, now time.Time) (end time.Time, whole, held bool) {
	bound := now
	newest, held := r.newestSample(ctx, now)
	if held && newest.Before(now) {
		bound = newest
	}
	step := r.Config.Interval
	if r.lastLoad.IsZero() || !r.lastLoad.Before(now) {
		return now.Add(-(now.Sub(bound) + step - 1) / step * step), true, held
	}
	n := bound.Sub(r.lastLoad) / step // whole windows held since the last load
	if n <= 0 {
		return now, false, held
	}
	return r.lastLoad.Add(n * step), true, held
}

// newestSample returns the time of Prometheus' newest sample of the sources' fields
// (metrics.NewestSampleQuery); ok is false where it holds none within its lookback or
// the query failed (logged).
func (r *Recommender) newestSample(ctx context.Context, now time.Time) (time.Time, bool) {
	q := metrics.NewestSampleQuery(r.order())
	if q == "" {
		return time.Time{}, false
	}
	vec, err := r.Reader.Vector(ctx, q, now)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Reading Prometheus' newest sample failed; loading up to now", "err", err)
		return time.Time{}, false
	}
	if len(vec) == 0 {
		return time.Time{}, false
	}
	held := time.UnixMilli(int64(math.Round(float64(vec[0].Value) * 1000)))
	// No sample beyond the lookback counts (a proxy that rewrote the answer).
	return held, now.Sub(held) <= metrics.MaxSampleSkew
}

// resumeFrom is where the history load of the workloads not bootstrapped yet starts:
// HistoryLength before now, or, when every one of them was fed part of it by a load
// that failed (tracking.fedTo), the earliest end of what was fed.
func (r *Recommender) resumeFrom(now time.Time) time.Time {
	from := now.Add(-r.Config.HistoryLength)
	var resume time.Time
	for _, t := range r.tracked {
		if t.bootstrapped {
			continue
		}
		if t.fedTo.IsZero() {
			return from
		}
		if resume.IsZero() || t.fedTo.Before(resume) {
			resume = t.fedTo
		}
	}
	if resume.After(from) {
		return resume
	}
	return from
}

// garbageCollect drops, after a successful load, the history and the per-pod source
// records that left the history window.
func (r *Recommender) garbageCollect(_ context.Context, c *cycle) error {
	if c.loadErr == nil && len(c.seen) > 0 {
		r.model.GC(c.now, r.Config.HistoryLength)
		r.gcSources(c.now)
	}
	return nil
}

// updateRecommendations records DuplicateTarget events and computes and writes the
// recommendation of every owned autoscaler (status.go reconcile): each computed in turn,
// then written, Config.StatusWriteConcurrency autoscalers at once; a failed write is one of
// c.writeErrs and the others go on. A write that finds its object gone (NotFound: the
// autoscaler deleted after the cycle listed it, and its recommendation with it by
// garbage collection) or its namespace being deleted is no failure (deleted): nothing is
// left to write, and a recommendation deleted while its autoscaler stays is created
// again next cycle.
func (r *Recommender) updateRecommendations(ctx context.Context, c *cycle) error {
	r.noteDuplicates(c)
	writes := r.newWrites(len(c.entries))
	for i, e := range c.entries {
		write, err := r.reconcile(ctx, e, c.byRef[e.ref] == e, c.loadErr, c.now)
		if err != nil {
			writes.errs[i] = err
			continue
		}
		writes.start(i, func() error { return write(ctx) })
	}
	errs := writes.wait()
	listed := map[types.UID]bool{}
	for i, e := range c.entries {
		listed[e.gfa.UID] = true
		err := errs[i]
		if deleted(err) {
			klog.FromContext(ctx).V(1).Info("Autoscaler, recommendation or namespace deleted during the cycle; nothing written", "autoscaler", klog.KObj(e.gfa), "err", err)
			r.writeFails.Succeeded(e.gfa.UID)
			continue
		}
		if err != nil {
			c.writeErrs = append(c.writeErrs, fmt.Errorf("%s/%s: %w", e.gfa.Namespace, e.gfa.Name, err))
			r.statusWriteFailed(e.gfa, err)
			continue
		}
		r.writeFails.Succeeded(e.gfa.UID)
	}
	for _, e := range c.excluded {
		if err := r.notSelected(ctx, e.gfa); err != nil && !deleted(err) {
			c.writeErrs = append(c.writeErrs, fmt.Errorf("%s/%s: %w", e.gfa.Namespace, e.gfa.Name, err))
		}
	}
	r.writeFails.Retain(listed)
	if len(c.writeErrs) > 0 {
		cycleErrors.WithLabelValues("write").Inc()
	}
	return nil
}

// writes are one cycle's API writes, Config.StatusWriteConcurrency in flight at once
// (updateRecommendations, maintainCheckpoints), each write's error kept at its index:
// errs[i] is the error of write i, or one the caller set for a write it did not start.
type writes struct {
	g    errgroup.Group
	errs []error
}

// newWrites returns writes for n writes.
func (r *Recommender) newWrites(n int) *writes {
	w := &writes{errs: make([]error, n)}
	w.g.SetLimit(r.Config.StatusWriteConcurrency)
	return w
}

// start runs write i, waiting while the limit's writes are in flight.
func (w *writes) start(i int, write func() error) {
	w.g.Go(func() error {
		w.errs[i] = write()
		return nil
	})
}

// wait returns each write's error once every write started is done.
func (w *writes) wait() []error {
	_ = w.g.Wait() // each write's error is in errs
	return w.errs
}

// statusWriteFailed counts a failed write of gfa's recommendation or status (reconcile):
// from the statuswrite.Threshold-th failure in a row of the same autoscaler on, each one
// counts in gpufrac_recommender_status_write_failures_total (by API status reason) and a
// StatusWriteFailed Warning event goes on the autoscaler, once per message, so a write
// that fails every cycle shows outside the logs.
func (r *Recommender) statusWriteFailed(gfa *gpufracv1.GPUFractionAutoscaler, err error) {
	n, count, event := r.writeFails.Failed(gfa.UID, err)
	if count {
		statusWriteFailures.WithLabelValues(statuswrite.Reason(err)).Inc()
	}
	if event && r.Events != nil {
		r.Events.Eventf(gfa, nil, corev1.EventTypeWarning, statuswrite.EventReason, "Recommend",
			"%s", fmt.Sprintf("the recommendation could not be written for %d cycles in a row (the last one written stays in force): %v", n, err))
	}
}

// deleted reports whether a write failed because what it writes is going away: the
// object is gone (NotFound) or its namespace is being deleted (Forbidden with the
// NamespaceTerminating cause, which the API server's namespace lifecycle check gives any
// create there).
func deleted(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)
}

// noteDuplicates marks each autoscaler that is not in charge of its workload with the
// winner, and records a DuplicateTarget event on the winner when its message changed.
func (r *Recommender) noteDuplicates(c *cycle) {
	losers := map[workload.Ref][]*gpufracv1.GPUFractionAutoscaler{}
	for _, e := range c.entries {
		if e.targetErr == nil && c.byRef[e.ref] != e {
			e.winner = c.byRef[e.ref].gfa
			losers[e.ref] = append(losers[e.ref], e.gfa)
		}
	}
	noted := map[types.UID]string{}
	for ref, ls := range losers {
		w := c.byRef[ref].gfa
		msg := contract.WinnerMessage(w, ls, w.Spec.TargetRef.Kind, w.Spec.TargetRef.Name)
		noted[w.UID] = msg
		if r.dupNoted[w.UID] != msg && r.Events != nil {
			r.Events.Eventf(w, nil, corev1.EventTypeWarning, gpufracv1.ReasonDuplicateTarget, "Recommend", "%s", msg)
		}
	}
	r.dupNoted = noted
}

// exportMetrics publishes the per-autoscaler and per-pod metrics built this cycle.
func (r *Recommender) exportMetrics(_ context.Context, c *cycle) error {
	c.exported.addPods(c.livePods, c.byRef, r.Config.Policy.GPUMemoryBytes)
	Autoscalers.set(c.exported)
	return nil
}
