package metrics

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// Target is a Prometheus scrape target: its job and instance labels.
type Target struct {
	Job, Instance string
}

// String renders the target as job/instance.
func (t Target) String() string { return t.Job + "/" + t.Instance }

// DownTargetsQuery is the instant query that lists the scrape targets whose last scrape
// failed: Prometheus writes up 0 for them.
const DownTargetsQuery = `group by (job, instance) (up == 0)`

// DownTargets returns the scrape targets that are down at ts (up == 0), sorted. None
// when every target is up, and none where Prometheus holds no up series (data federated
// or remote-written without it): the cross-check then has nothing to say. It returns the
// query's error (a *PartialResponseError for an answer with warnings).
func (r *Reader) DownTargets(ctx context.Context, ts time.Time) ([]Target, error) {
	vec, err := r.Vector(ctx, DownTargetsQuery, ts)
	if err != nil {
		return nil, err
	}
	var out []Target
	for _, s := range vec {
		if t := (Target{Job: string(s.Metric["job"]), Instance: string(s.Metric["instance"])}); t.Job != "" || t.Instance != "" {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// PodTarget is a pod whose series of a source were scraped from a target.
type PodTarget struct {
	Namespace, Pod string
	Target         Target
	// Metric is the source's field the series was of.
	Metric string
}

// TargetsQuery returns PromQL whose result lists, per (namespace, pod, job, instance)
// in the selector's names, the pods whose series of the source's fields (memory and
// compute) within the window were scraped from one of the targets, labelled with
// SourceLabel (the field). Only the targets' series are read (their job and instance
// are matched), so a long window costs the samples of those targets alone. It returns
// "" for no target.
func TargetsQuery(src Source, sel Selector, targets []Target, window time.Duration) string {
	if len(targets) == 0 {
		return ""
	}
	jobs, instances := map[string]bool{}, map[string]bool{}
	for _, t := range targets {
		jobs[t.Job], instances[t.Instance] = true, true
	}
	return podTargetsQuery(src, sel, fmt.Sprintf(`job=~%q,instance=~%q`, alternatives(jobs), alternatives(instances)), window)
}

// ServedQuery returns PromQL whose result lists, per (namespace, pod, job, instance) in
// the selector's names and SourceLabel (the field), the pods whose series of the
// source's fields were scraped from any target within the window: TargetsQuery for
// every target.
func ServedQuery(src Source, sel Selector, window time.Duration) string {
	return podTargetsQuery(src, sel, "", window)
}

// podTargetsQuery is TargetsQuery's PromQL over the series that match matchers ("":
// every series).
func podTargetsQuery(src Source, sel Selector, matchers string, window time.Duration) string {
	ts := sel
	ts.Device, ts.Raw = []string{"job", "instance"}, true
	ts.Matchers = matchers
	var parts []string
	for _, sig := range []Signal{SignalMemory, SignalCompute} {
		for _, f := range src.Fields(sig) {
			f.Device = nil // group by job and instance, whatever the field's device labels
			parts = append(parts, fmt.Sprintf(`label_replace(max by (%s, %s, job, instance) (%s), %q, %q, "", "")`,
				sel.Labels.Namespace, sel.Labels.Pod, f.query(ts, "last_over_time", window), SourceLabel, f.Metric))
		}
	}
	return strings.Join(parts, " or ")
}

// alternatives renders values as an anchored regex alternative, sorted.
func alternatives(values map[string]bool) string {
	var out []string
	for v := range values {
		out = append(out, regexp.QuoteMeta(v))
	}
	sort.Strings(out)
	return strings.Join(out, "|")
}

// PodsOnTargets runs TargetsQuery at ts and returns the pods whose series of the source
// within the window before ts came from one of the targets (only pairs whose target is
// in the list: job and instance are matched separately in the query), less those whose
// field another target, not in the list, served within AgentCoverage before ts
// (ServedQuery, run only when some pod was found): a pod scraped by two exporters or
// two jobs lost nothing when one of them is down. It returns the queries' error.
func (r *Reader) PodsOnTargets(ctx context.Context, src Source, sel Selector, targets []Target, window time.Duration, ts time.Time) ([]PodTarget, error) {
	q := TargetsQuery(src, sel, targets, window)
	if q == "" {
		return nil, nil
	}
	vec, err := r.Vector(ctx, q, ts)
	if err != nil {
		return nil, err
	}
	want := map[Target]bool{}
	for _, t := range targets {
		want[t] = true
	}
	var out []PodTarget
	for _, s := range vec {
		t := Target{Job: string(s.Metric["job"]), Instance: string(s.Metric["instance"])}
		p := PodTarget{Namespace: string(s.Metric[model.LabelName(sel.Labels.Namespace)]), Pod: string(s.Metric[model.LabelName(sel.Labels.Pod)]),
			Target: t, Metric: string(s.Metric[SourceLabel])}
		if want[t] && p.Namespace != "" && p.Pod != "" {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	// A pod whose field another target, not down, still serves (two exporters or two
	// scrape jobs on one GPU) lost nothing: its data of that field is whole.
	served, err := r.Vector(ctx, ServedQuery(src, sel, AgentCoverage), ts)
	if err != nil {
		return nil, err
	}
	type podField struct{ namespace, pod, metric string }
	others := map[podField]bool{}
	for _, s := range served {
		if t := (Target{Job: string(s.Metric["job"]), Instance: string(s.Metric["instance"])}); !want[t] {
			others[podField{string(s.Metric[model.LabelName(sel.Labels.Namespace)]), string(s.Metric[model.LabelName(sel.Labels.Pod)]), string(s.Metric[SourceLabel])}] = true
		}
	}
	out = slices.DeleteFunc(out, func(p PodTarget) bool { return others[podField{p.Namespace, p.Pod, p.Metric}] })
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Pod+"/"+out[i].Target.String() < out[j].Namespace+"/"+out[j].Pod+"/"+out[j].Target.String()
	})
	return out, nil
}
