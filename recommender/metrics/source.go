// Package metrics reads per-container GPU memory and compute from Prometheus.
//
// A Source knows one exporter's metric names and writes the PromQL for each signal; the
// Reader runs those queries through the client_golang API client, decodes the results and
// drops values that cannot be true (DCGM blank sentinels, NaN, ±Inf, negatives, ratios
// above 1). Every query is aggregated by (namespace, pod, container) and restricted to the
// namespaces that have autoscalers, so a cycle costs a fixed number of queries however
// many pods there are.
package metrics

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// ContainerID identifies one container of one pod.
type ContainerID struct {
	Namespace string
	Pod       string
	Container string
}

// String renders the ID as namespace/pod/container.
func (c ContainerID) String() string { return c.Namespace + "/" + c.Pod + "/" + c.Container }

// Sample is one value at one time.
type Sample struct {
	Time  time.Time
	Value float64
}

// Series is the samples of one signal for one container, in time order.
type Series struct {
	ID ContainerID
	// Source names the metric the values came from, e.g. DCGM_FI_PROF_SM_ACTIVE.
	Source  string
	Samples []Sample
	// SharedSamples counts samples that were the same value reported for several pods
	// of one GPU: the device's total copied to each, an upper bound, not the pod's own.
	SharedSamples int
}

// Labels maps the workload labels of a metric. Defaults are dcgm-exporter's Kubernetes
// mapping: namespace, pod, container.
type Labels struct {
	Namespace string
	Pod       string
	Container string
}

// DefaultLabels are the label names dcgm-exporter, HAMi and KAI use with honor_labels.
var DefaultLabels = Labels{Namespace: "namespace", Pod: "pod", Container: "container"}

// SourceLabel is the label the compute query adds to say which metric a value came from.
const SourceLabel = "gpufrac_source"

// Source writes the PromQL for one exporter's metrics. Implementations live one per file
// (dcgm.go, hami.go, kai.go, agent.go).
type Source interface {
	// Name is the source's flag value, e.g. "dcgm".
	Name() string
	// MemoryMetric is the metric family that holds per-pod GPU memory; detection probes it.
	MemoryMetric() string
	// DeviceLabels name the labels that identify one GPU or MIG instance in the
	// source's series, e.g. UUID and GPU_I_ID.
	DeviceLabels() []string
	// MemoryPeakQuery returns PromQL whose result, per (namespace, pod, container,
	// device), is the peak GPU memory in bytes over the window ending at the evaluation
	// time.
	MemoryPeakQuery(sel Selector, window time.Duration) string
	// ComputeQuery returns PromQL whose result, per (namespace, pod, container, device),
	// is the mean GPU activity as a ratio 0–1 over the window, labelled with SourceLabel.
	ComputeQuery(sel Selector, window time.Duration) string
}

// Selector restricts queries to the namespaces that have autoscalers and names the
// labels to group by.
type Selector struct {
	Labels     Labels
	Namespaces []string
	// Device are the source's device labels, kept in the grouping so that pods sharing
	// one GPU can be told apart from one pod seen twice.
	Device []string
	// Direct disables reading exported_* labels: only Labels are used.
	Direct bool
	// SubqueryResolution is the step of the filtering subquery (see Series); 0 means
	// DefaultSubqueryResolution.
	SubqueryResolution time.Duration
}

// exportedPrefix is what Prometheus prepends to a scraped label that clashes with a
// target label when honor_labels is off.
const exportedPrefix = "exported_"

// Series renders fn over metric{…}[window] for the selected namespaces with a
// non-empty pod label (series without a pod are unattributed device usage, not a
// workload), counting only samples in [0, max] (max in the metric's own unit).
//
// A range function over raw samples is exact, but one impossible sample (a DCGM blank
// sentinel, NaN) poisons the window's max or mean. So the raw result is kept where it is
// in range, and where it is not (but the window has samples) replaced by the same
// function over a subquery at SubqueryResolution whose samples outside [0, max] were
// filtered out: the bad sample is dropped, the window's valid samples still count.
//
// Unless Direct is set, series scraped without honor_labels are read too: their
// exported_namespace, exported_pod and exported_container labels are copied over
// namespace, pod and container (which name the exporter's own pod there), so usage is
// never attributed to the exporter, and a cluster that mixes both scrape styles works.
func (s Selector) Series(fn, metric string, max float64, window time.Duration) string {
	ns, pod, ctr := s.Labels.Namespace, s.Labels.Pod, s.Labels.Container
	nsRe := NamespaceRegex(s.Namespaces)
	res := s.SubqueryResolution
	if res <= 0 {
		res = DefaultSubqueryResolution
	}
	if res > window {
		res = window
	}
	robust := func(sel string) string {
		bounds := fmt.Sprintf(" >= 0 <= %g", max)
		w := promDuration(window)
		// The fallback only where the window has raw samples: a subquery would otherwise
		// carry the last sample into empty windows through Prometheus' lookback.
		return fmt.Sprintf("(%s(%s[%s])%s or (%s((%s%s)[%s:%s]) and count_over_time(%s[%s])))", fn, sel, w, bounds, fn, sel, bounds, w, promDuration(res), sel, w)
	}
	if s.Direct {
		return robust(fmt.Sprintf(`%s{%s=~%q,%s!=""}`, metric, ns, nsRe, pod))
	}
	direct := robust(fmt.Sprintf(`%s{%s=~%q,%s!="",%s=""}`, metric, ns, nsRe, pod, exportedPrefix+pod))
	exported := robust(fmt.Sprintf(`%s{%s=~%q,%s!=""}`, metric, exportedPrefix+ns, nsRe, exportedPrefix+pod))
	for _, l := range []string{ns, pod, ctr} {
		exported = fmt.Sprintf(`label_replace(%s, %q, "$1", %q, "(.*)")`, exported, l, exportedPrefix+l)
	}
	return "(" + direct + " or " + exported + ")"
}

// DefaultSubqueryResolution is the step of the filtering subquery Series falls back to:
// 15s, the scrape interval most GPU exporters are run at (dcgm-exporter's default
// collection interval is 30s), so no valid sample is skipped.
const DefaultSubqueryResolution = 15 * time.Second

// by renders the grouping clause "by (namespace, pod, container, <device labels>)".
// Labels that identify the exporter instance or its host (instance, Hostname, hostname)
// are left out, so their series merge with max, never a sum.
func (s Selector) by() string {
	return "by (" + strings.Join(s.keys(), ", ") + ")"
}

func (s Selector) keys() []string {
	return append([]string{s.Labels.Namespace, s.Labels.Pod, s.Labels.Container}, s.Device...)
}

// gauges is a Source over two gauges, one for memory and one for compute, each with
// a scale to bytes and to a 0–1 ratio and its largest possible value in its own unit.
type gauges struct {
	name                      string
	memory, compute           string
	memoryScale, computeScale string // PromQL suffix, e.g. " / 100"
	memoryMax, computeMax     float64
	device                    []string
}

func (g gauges) Name() string           { return g.name }
func (g gauges) MemoryMetric() string   { return g.memory }
func (g gauges) DeviceLabels() []string { return g.device }

func (g gauges) MemoryPeakQuery(sel Selector, window time.Duration) string {
	return fmt.Sprintf("max %s (%s)%s", sel.by(), sel.Series("max_over_time", g.memory, g.memoryMax, window), g.memoryScale)
}

func (g gauges) ComputeQuery(sel Selector, window time.Duration) string {
	return fmt.Sprintf(`label_replace(max %s (%s)%s, %q, %q, "", "")`,
		sel.by(), sel.Series("avg_over_time", g.compute, g.computeMax, window), g.computeScale, SourceLabel, g.compute)
}

// NamespaceRegex renders namespaces as an anchored PromQL regex alternative ("a|b"),
// sorted so the query text is stable.
func NamespaceRegex(namespaces []string) string {
	ns := append([]string(nil), namespaces...)
	sort.Strings(ns)
	for i := range ns {
		ns[i] = regexp.QuoteMeta(ns[i])
	}
	return strings.Join(ns, "|")
}

// promDuration renders d in PromQL duration syntax (whole seconds, at least 1s).
func promDuration(d time.Duration) string {
	s := int64(d / time.Second)
	if s < 1 {
		s = 1
	}
	return fmt.Sprintf("%ds", s)
}

// Sources are the known sources, most precise per-pod attribution first: the order
// auto-detection tries them in.
var Sources = []Source{Agent, HAMi, KAI, DCGM{}}

// NewSource returns the Source registered under name, or an error listing the known names.
func NewSource(name string) (Source, error) {
	var names []string
	for _, s := range Sources {
		if s.Name() == name {
			return s, nil
		}
		names = append(names, s.Name())
	}
	return nil, fmt.Errorf("unknown metric source %q (known: auto, %s)", name, strings.Join(names, ", "))
}
