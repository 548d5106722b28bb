package recommender

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/klog/v2"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/workload"
)

// Metric-source choice per pod (issue 13 kind 2). With --metric-source auto every
// source Prometheus holds over the history window is read, and each pod's samples of a
// signal come from the most precise source (metrics.Sources' order: agent, hami, kai,
// dcgm) that had reported that signal for the pod at or before the sample's time. A
// workload whose pods only dcgm-exporter sees is read from dcgm however many other pods
// the agent sees; a pod the agent starts reporting keeps its earlier dcgm history and is
// read from the agent from then on; and since the rule is a function of what Prometheus
// holds over the window, a recommender that restarts makes the same choice.

// span bounds the times a source reported a signal for a pod.
type span struct{ first, last time.Time }

// podSources is what the recommender knows of one pod's metric sources.
type podSources struct {
	workload history.WorkloadKey
	// seen bounds the samples each source had of each signal for the pod, one entry per
	// signal and source (a few at most: a slice, not maps of maps, holds 10,000 pods in a
	// tenth of the memory).
	seen []sighting
	// created is when the live pod of this name was created (zero when none lives): a
	// source whose samples all lie before it reported an earlier pod of the name (a
	// StatefulSet replica on another node), not this one (sourceFor).
	created time.Time
}

// sighting bounds the samples of one signal that one source had for a pod.
type sighting struct {
	signal metrics.Signal
	source string
	span
}

// find returns the bounds of the signal's samples from the source, and false when it
// had none.
func (p *podSources) find(signal metrics.Signal, source string) (span, bool) {
	for _, x := range p.seen {
		if x.signal == signal && x.source == source {
			return x.span, true
		}
	}
	return span{}, false
}

// set records the bounds of the signal's samples from the source.
func (p *podSources) set(signal metrics.Signal, source string, sp span) {
	for i := range p.seen {
		if p.seen[i].signal == signal && p.seen[i].source == source {
			p.seen[i].span = sp
			return
		}
	}
	p.seen = append(p.seen, sighting{signal: signal, source: source, span: sp})
}

// sourceFor returns the name of the source a sample of the signal at t is read from:
// the first of order that had reported the signal for the pod at or before t; "" when
// none had. From the live pod's creation on, a source that reported the name only
// before it (an earlier pod of the name, on a node with another exporter) is passed
// over: the current pod is read from a source that reports it.
func (p *podSources) sourceFor(signal metrics.Signal, t time.Time, order []metrics.Source) string {
	for _, s := range order {
		sp, ok := p.find(signal, s.Name())
		if !ok || sp.first.After(t) || (!t.Before(p.created) && sp.last.Before(p.created)) {
			continue
		}
		return s.Name()
	}
	return ""
}

// current returns the names of the sources the pod's latest samples are read from (one
// per signal that has any), in order.
func (p *podSources) current(order []metrics.Source) []string {
	var out []string
	for _, s := range order {
		for _, sig := range []metrics.Signal{metrics.SignalMemory, metrics.SignalCompute} {
			if p.sourceFor(sig, farFuture, order) == s.Name() {
				out = append(out, s.Name())
				break
			}
		}
	}
	return out
}

var farFuture = time.Unix(1<<40, 0)

// order returns the sources a cycle reads, most precise first: the configured one, or
// with auto those detected.
func (r *Recommender) order() []metrics.Source {
	if r.Source != nil {
		return []metrics.Source{r.Source}
	}
	return r.detected
}

// detect finds the sources Prometheus holds over the history window
// (metrics.DetectSources). With auto they are the sources read, so a live gap (an
// exporter restart) never hides days of history and never fails the cycle; none found
// is not an error either (workloads get NoSamples naming the metrics looked for). With a
// configured source, only that one is read, and detection only tells whether the agent
// can contradict it (ContradictedQuery), so its failure is logged, not fatal.
func (r *Recommender) detect(ctx context.Context, now time.Time) error {
	found, err := metrics.DetectSources(ctx, r.Reader, now.Add(-r.Config.HistoryLength), now)
	if err != nil && r.Source != nil {
		klog.FromContext(ctx).V(2).Info("Metric source detection failed; the agent is not used to tell stale series", "err", err)
		found, err = nil, nil
	}
	if err != nil {
		return err
	}
	if names(found) != names(r.detected) {
		klog.FromContext(ctx).Info("Metric sources in Prometheus over the history window", "sources", names(found), "historyLength", r.Config.HistoryLength)
	}
	r.detected = found
	r.sourceCounts = nil
	return nil
}

// reads reports whether the source is read this cycle.
func (r *Recommender) reads(src metrics.Source) bool {
	for _, s := range r.order() {
		if s.Name() == src.Name() {
			return true
		}
	}
	return false
}

// agentSeen reports whether the gpufrac agent's series are in Prometheus over the
// history window: only then can it contradict another source (ContradictedQuery).
func (r *Recommender) agentSeen() bool {
	for _, s := range r.detected {
		if s.Name() == metrics.Agent.Name() {
			return true
		}
	}
	return false
}

// names joins the sources' names with commas.
func names(sources []metrics.Source) string {
	var out []string
	for _, s := range sources {
		out = append(out, s.Name())
	}
	return strings.Join(out, ",")
}

// observe records, for the pods of the workloads this load feeds, when each source
// reported each signal.
func (r *Recommender) observe(data []*sourceData, attr *workload.Attributor, bootstrapped bool) {
	if r.pods == nil {
		r.pods = map[[2]string]*podSources{}
	}
	r.sourceCounts = nil
	for _, d := range data {
		for sig, series := range map[metrics.Signal][]metrics.Series{metrics.SignalMemory: d.memory, metrics.SignalCompute: d.compute} {
			for _, s := range series {
				w, ok := r.fedBy(attr, s.ID, bootstrapped)
				if !ok || len(s.Samples) == 0 {
					continue
				}
				k := [2]string{s.ID.Namespace, s.ID.Pod}
				p := r.pods[k]
				if p == nil {
					p = &podSources{}
					r.pods[k] = p
				}
				p.workload = w
				if live := r.cur.livePods[k]; live != nil {
					p.created = live.CreationTimestamp.Time
				}
				sp, ok := p.find(sig, d.src.Name())
				for _, x := range s.Samples {
					if !ok || x.Time.Before(sp.first) {
						sp.first = x.Time
					}
					if !ok || x.Time.After(sp.last) {
						sp.last = x.Time
					}
					ok = true
				}
				p.set(sig, d.src.Name(), sp)
			}
		}
	}
}

// fedBy returns the workload a series is fed to by a load of the given kind, and false
// when it is fed to none.
func (r *Recommender) fedBy(attr *workload.Attributor, id metrics.ContainerID, bootstrapped bool) (history.WorkloadKey, bool) {
	ref, method := attr.Attribute(id.Namespace, id.Pod)
	if method == workload.MethodNone {
		return history.WorkloadKey{}, false
	}
	w := history.WorkloadKey(ref)
	t := r.tracked[w]
	return w, t != nil && t.bootstrapped == bootstrapped
}

// choose keeps, of each series of the source, the samples read from it (sourceFor).
// Shared samples (copied device values) are counted at most once per kept sample. A
// series that says why it was not used (WrongDevice) is kept, to say it.
func (r *Recommender) choose(src metrics.Source, signal metrics.Signal, series []metrics.Series) []metrics.Series {
	order := r.order()
	out := make([]metrics.Series, 0, len(series))
	for _, s := range series {
		p := r.pods[[2]string{s.ID.Namespace, s.ID.Pod}]
		// Copied only from the first sample left out: a load of days of history is
		// millions of samples, most of them all kept.
		kept, keptSrc, copied := s.Samples, s.Sources, false
		for i, x := range s.Samples {
			use := p != nil && p.sourceFor(signal, x.Time, order) == src.Name()
			switch {
			case !use && !copied:
				kept, copied = append(s.Samples[:0:0], s.Samples[:i]...), true
				if s.Sources != nil {
					keptSrc = append(s.Sources[:0:0], s.Sources[:i]...)
				}
			case use && copied:
				kept = append(kept, x)
				if s.Sources != nil {
					keptSrc = append(keptSrc, s.Sources[i])
				}
			}
		}
		s.Sources = keptSrc
		if len(kept) == 0 && s.WrongDevice == "" {
			continue
		}
		if len(kept) < len(s.Samples) {
			s.SharedSamples = min(s.SharedSamples, len(kept))
		}
		s.Samples = kept
		out = append(out, s)
	}
	return out
}

// gcSources forgets what a source reported for a pod once its last sample left the
// history window, as a restarted recommender would never have seen it.
func (r *Recommender) gcSources(now time.Time) {
	horizon := now.Add(-r.Config.HistoryLength)
	r.sourceCounts = nil
	for k, p := range r.pods {
		p.seen = slices.DeleteFunc(p.seen, func(x sighting) bool { return x.last.Before(horizon) })
		if len(p.seen) == 0 || r.tracked[p.workload] == nil {
			delete(r.pods, k)
		}
	}
}

// metricSources counts, per source, the workload's pods read from it (for status).
func (r *Recommender) metricSources(w history.WorkloadKey) []gpufracv1.MetricSourceUsage {
	if r.sourceCounts == nil {
		r.countSources()
	}
	count := r.sourceCounts[w]
	var out []gpufracv1.MetricSourceUsage
	for _, s := range r.order() {
		if n := count[s.Name()]; n > 0 {
			out = append(out, gpufracv1.MetricSourceUsage{Name: s.Name(), Pods: n})
		}
	}
	return out
}

// countSources counts, per workload and source, the pods read from it, in one pass
// over r.pods (metricSources asks for every workload each cycle: a pass per workload
// was 20 million visits at 10,000 pods in 2,000 workloads). What changes r.pods or the
// sources read (observe, gcSources, detect) clears the counts.
func (r *Recommender) countSources() {
	order := r.order()
	r.sourceCounts = map[history.WorkloadKey]map[string]int32{}
	for _, p := range r.pods {
		for _, name := range p.current(order) {
			c := r.sourceCounts[p.workload]
			if c == nil {
				c = map[string]int32{}
				r.sourceCounts[p.workload] = c
			}
			c[name]++
		}
	}
}

// workloadSources returns the sources the workload's pods are read from, or every source
// read this cycle when none is known yet.
func (r *Recommender) workloadSources(w history.WorkloadKey) []metrics.Source {
	used := map[string]bool{}
	for _, u := range r.metricSources(w) {
		used[u.Name] = true
	}
	var out []metrics.Source
	for _, s := range r.order() {
		if used[s.Name()] || len(used) == 0 {
			out = append(out, s)
		}
	}
	return out
}

// fieldsOf names the fields of a signal of the sources with their units, e.g.
// "DCGM_FI_PROF_SM_ACTIVE (ratio)".
func fieldsOf(sources []metrics.Source, sig metrics.Signal) string {
	var out []string
	for _, s := range sources {
		for _, f := range s.Fields(sig) {
			out = append(out, fmt.Sprintf("%s (%s)", f.Metric, f.Unit))
		}
	}
	return strings.Join(out, ", ")
}

// noSourceMessage says that no source was found, naming the metrics looked for.
func noSourceMessage(history time.Duration) string {
	all := metrics.SourceMetrics(metrics.Sources...)
	sort.Strings(all)
	return fmt.Sprintf("no series of any supported GPU metric source in Prometheus over the history window (%s): looked for %s", history, strings.Join(all, ", "))
}
