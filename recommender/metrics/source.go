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

// Source writes the PromQL for one exporter's metrics. Implementations live one per file.
type Source interface {
	// Name is the source's flag value, e.g. "dcgm".
	Name() string
	// MemoryPeakQuery returns PromQL whose result, per (namespace, pod, container), is
	// the peak GPU memory in bytes over the window ending at the evaluation time.
	MemoryPeakQuery(sel Selector, window time.Duration) string
	// ComputeQuery returns PromQL whose result, per (namespace, pod, container), is the
	// mean GPU activity as a ratio 0–1 over the window, labelled with SourceLabel.
	ComputeQuery(sel Selector, window time.Duration) string
}

// Selector restricts queries to the namespaces that have autoscalers.
type Selector struct {
	Labels     Labels
	Namespaces []string
}

// matcher renders the label matchers shared by every query: namespace in the set and a
// non-empty pod label (series without a pod are unattributed device usage, not a workload).
func (s Selector) matcher() string {
	return fmt.Sprintf(`%s=~%q,%s!=""`, s.Labels.Namespace, NamespaceRegex(s.Namespaces), s.Labels.Pod)
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

// by renders the grouping clause "by (namespace, pod, container)".
func (s Selector) by() string {
	return fmt.Sprintf("by (%s, %s, %s)", s.Labels.Namespace, s.Labels.Pod, s.Labels.Container)
}

// promDuration renders d in PromQL duration syntax (whole seconds, at least 1s).
func promDuration(d time.Duration) string {
	s := int64(d / time.Second)
	if s < 1 {
		s = 1
	}
	return fmt.Sprintf("%ds", s)
}

// NewSource returns the Source registered under name, or an error listing the known names.
func NewSource(name string) (Source, error) {
	switch name {
	case "dcgm":
		return DCGM{}, nil
	}
	return nil, fmt.Errorf("unknown metric source %q (known: dcgm)", name)
}
