package recommender

import (
	"context"
	"maps"
	"slices"

	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// LabelHintEvery is how many cycle intervals apart, at least, the recommender looks for
// GPU series whose workload labels it does not read (metrics.LabelHints): one instant
// query, run only in a cycle where a workload with a running pod got no sample at all, so a
// cycle's queries stay fixed (issue 17) and a cluster whose samples are all read never
// runs it. Its finding names the cause in the NoSamples and NoSamplesWhileRunning
// condition messages of the workloads of those namespaces until the next look.
const LabelHintEvery = 10

// diagnoseLabels looks for GPU series the label settings do not read (LabelHintEvery)
// when a workload with a running pod got no sample this cycle, and keeps what it found
// per namespace (labelHint; "" for metrics none of whose series names a pod), logging each finding when it is new. A failed query is logged and leaves
// the last finding.
func (r *Recommender) diagnoseLabels(ctx context.Context, c *cycle) {
	if len(r.order()) == 0 || !r.labelHintsAt.IsZero() && c.now.Sub(r.labelHintsAt) < LabelHintEvery*r.Config.Interval {
		return
	}
	empty := false
	for _, e := range c.entries {
		if c.byRef[e.ref] != e || !r.runsAny(e.ref.Namespace, e.podNames) {
			continue
		}
		if t := r.tracked[history.WorkloadKey(e.ref)]; t != nil && t.gaps.loaded &&
			t.gaps.kept[metrics.SignalMemory]+t.gaps.kept[metrics.SignalCompute] == 0 {
			empty = true
			break
		}
	}
	if !empty {
		return
	}
	r.labelHintsAt = c.now
	ns := map[string]bool{}
	for w := range r.tracked {
		ns[w.Namespace] = true
	}
	sel := metrics.Selector{Labels: r.Reader.Labels, Namespaces: slices.Sorted(maps.Keys(ns)), Direct: r.Config.LabelMode == "direct"}
	hints, err := r.Reader.LabelHints(ctx, r.order(), sel, c.now)
	log := klog.FromContext(ctx)
	if err != nil {
		log.V(1).Info("Looking for GPU series with other workload labels failed", "err", err)
		return
	}
	prev := r.labelHints
	r.labelHints = map[string]metrics.LabelHint{}
	for _, h := range hints {
		if _, ok := r.labelHints[h.Namespace]; ok {
			continue
		}
		r.labelHints[h.Namespace] = h
		if prev[h.Namespace] != h {
			log.Info("GPU series carry workload labels the recommender does not read; their workloads get no samples",
				"namespace", h.Namespace, "metric", h.Metric, "labels", h.Layout, "flags", h.Flags)
		}
	}
}

// runsAny reports whether one of the pods of namespace ns is running now.
func (r *Recommender) runsAny(ns string, pods map[string]bool) bool {
	for p := range pods {
		if runningNow(r.cur.livePods[[2]string{ns, p}]) {
			return true
		}
	}
	return false
}

// labelHint returns what the last look (diagnoseLabels) found for namespace ns, or for
// every namespace (metrics whose series name no pod at all), for a condition message;
// "" when it found nothing there.
func (r *Recommender) labelHint(ns string) string {
	if h, ok := r.labelHints[ns]; ok {
		return h.String()
	}
	if h, ok := r.labelHints[""]; ok {
		return h.String()
	}
	return ""
}
