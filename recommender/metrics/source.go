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

	"github.com/gpufrac/gpufrac/recommender/mig"
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
	// Devices is the most distinct GPUs (or MIG instances) the container reported on at
	// one time: above 1 for a multi-GPU container, whose per-device values were merged
	// with max here.
	Devices int
	// MultiDeviceAt is the latest sample time at which the container reported on more
	// than one device; zero when it never did. A live pod created shortly before it may
	// be an earlier pod of the same name on another GPU (recommender/load.go feed).
	MultiDeviceAt time.Time
	// MIGProfile is the MIG GPU instance profile the container's series carried
	// (GPU_I_PROFILE, e.g. "1g.10gb"); "" off MIG or where the exporter gives none.
	// Compute is always a share of the whole GPU: an instance-relative field's values
	// were converted with the profile's slice count (Field.InstanceRelative).
	MIGProfile string
	// WrongDevice says why series of the container were not used: they named a GPU its
	// pod was not on (Reader.Allocation); "" when none did. A Series may then have no
	// samples.
	WrongDevice string
	// DeviceLoad lists, for the compute samples taken while the container's GPU had
	// other pods on it, whether the GPU was saturated (its activity at least
	// SaturatedActivity), in time order; nil for a container alone on its GPU, for memory,
	// and where the device is not known. It is the evidence of compute contention the
	// tenant reserve is learnt from (history.ContainerState.Contention).
	DeviceLoad []DeviceLoad
	// Sources names, per sample, the field it was read from where the container's
	// samples came from several (a field preferred for some steps and missing at
	// others: dcgm-exporter's profiling fields paused or not yet collected after a
	// restart, GPU_UTIL filling in); nil when every sample came from Source, which
	// names the latest sample's field.
	Sources []string
	// Window is the span each sample aggregates, ending at its time (a max_over_time
	// or avg_over_time window); 0 for raw samples. A sample stamped after its
	// container ended whose window still covers the container's life is restamped at
	// the end of that life (workload.StampInLife), never dropped.
	Window time.Duration
}

// SampleSources returns the field of each sample: Sources, or Source for every sample
// where they all came from it.
func (s Series) SampleSources() []string {
	if s.Sources != nil {
		return s.Sources
	}
	out := make([]string, len(s.Samples))
	for i := range out {
		out[i] = s.Source
	}
	return out
}

// SourceAt returns the field sample i was read from.
func (s Series) SourceAt(i int) string {
	if s.Sources != nil {
		return s.Sources[i]
	}
	return s.Source
}

// DeviceLoad is one compute sample's view of a GPU shared with other pods: when, and
// whether the GPU's activity (all tenants together) was at least SaturatedActivity.
type DeviceLoad struct {
	Time      time.Time
	Saturated bool
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

// SaturatedActivity is the device-wide activity, ratio 0–1, at or above which a GPU
// shared by several pods counts as saturated: its tenants asked for the whole GPU in that
// sample and time-slicing made them wait. 0.95: DCGM's engine-activity fields read the
// share of the sample interval the engine was busy, and a busy GPU's reads fall a few
// points below 1 where a context switch or the sampling edge leaves it idle.
const SaturatedActivity = 0.95

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
	// Fields lists the published metrics read for a signal, each with its unit, in
	// order of preference.
	Fields(signal Signal) []Field
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
	// AllNamespaces ignores Namespaces and reads every namespace (CopiesQuery).
	AllNamespaces bool
	// SubqueryResolution is the step of the filtering subquery (see Series); 0 means
	// DefaultSubqueryResolution.
	SubqueryResolution time.Duration
	// Matchers, when set, are label matchers added to every series selector of Series,
	// e.g. `job="dcgm-exporter",instance=~"10.0.0.5:9400"` (TargetsQuery).
	Matchers string
	// Raw makes Series apply its function to the raw samples, none filtered: for
	// queries that ask whether series exist, not what they say (TargetsQuery).
	Raw bool
	// Present, when not nil, says which branches of the data queries have series over
	// the read's time range (Reader.Presence); the others are left out. nil, and any
	// selector with AllNamespaces: every branch.
	Present *Presence
}

// extra renders Matchers as a suffix of a selector's matcher list.
func (s Selector) extra() string {
	if s.Matchers == "" {
		return ""
	}
	return "," + s.Matchers
}

// exportedPrefix is what Prometheus prepends to a scraped label that clashes with a
// target label when honor_labels is off.
const exportedPrefix = "exported_"

// Series renders fn over metric{…}[window] for the selected namespaces with a
// non-empty pod label (series without a pod are unattributed device usage, not a
// workload), counting only samples in [0, max] (max in the metric's own unit).
//
// A range function over raw samples is exact, but one impossible sample (a DCGM blank
// sentinel, NaN, a ratio of 1.37) poisons the window's max or mean. So the raw result is
// kept where every raw sample of the window is valid, and elsewhere (where the window
// has samples) replaced by the same function over a subquery at SubqueryResolution
// whose samples outside [0, max] were filtered out: the bad samples are dropped, the
// window's valid samples still count. The dropped samples are counted by
// DropCountQuery. With Raw, fn is applied to the raw samples, unfiltered.
//
// Unless Direct is set, series scraped without honor_labels are read too: their
// exported_namespace, exported_pod and exported_container labels are copied over
// namespace, pod and container (which name the exporter's own pod there), so usage is
// never attributed to the exporter, and a cluster that mixes both scrape styles works.
// A series with exported_namespace and exported_pod but a plain container label (the
// target set no container) keeps that container.
func (s Selector) Series(fn, metric string, max float64, window time.Duration) string {
	return s.series(fn, metric, "", max, max, window)
}

// series is Series over the series of metric that also match extra (label matchers
// starting with a comma, e.g. `,GPU_I_ID!=""`), whose raw samples in (max, keep] count
// as max instead of being dropped (keep > max: a MIG instance's activity above 1, see
// Field.InstanceRelative).
func (s Selector) series(fn, metric, extra string, max, keep float64, window time.Duration) string {
	ns, pod, ctr := s.Labels.Namespace, s.Labels.Pod, s.Labels.Container
	extra += s.extra()
	nsRe := NamespaceRegex(s.Namespaces)
	if s.AllNamespaces {
		nsRe = ".+"
	}
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
		if s.Raw {
			return fmt.Sprintf("%s(%s[%s])", fn, sel, w)
		}
		// The raw result only where every raw sample of the window is valid: no sample
		// above max (max_over_time), none negative (min_over_time), no NaN or ±Inf (a
		// sum whose product with 0 is 0: NaN × 0 and ±Inf × 0 are NaN, which equals
		// nothing; one read of the samples, where comparing the sum with itself read
		// them twice). A mean poisoned by one 1.37 among 0.5s is still in range, so the
		// result alone cannot tell.
		clean := fmt.Sprintf("%s(%s[%s])%s and max_over_time(%s[%s]) <= %g and min_over_time(%s[%s]) >= 0 and sum_over_time(%s[%s]) * 0 == 0",
			fn, sel, w, bounds, sel, w, max, sel, w, sel, w)
		// The fallback only where the window has raw samples: a subquery would otherwise
		// carry the last sample into empty windows through Prometheus' lookback.
		valid := sel + bounds
		if keep > max {
			valid = fmt.Sprintf("clamp_max(%s >= 0 <= %g, %g)", sel, keep, max)
		}
		return fmt.Sprintf("((%s) or (%s((%s)[%s:%s]) and count_over_time(%s[%s])))", clean, fn, valid, w, promDuration(res), sel, w)
	}
	direct := robust(s.workloadSelector(metric, nsRe, extra))
	if s.Direct {
		return direct
	}
	if !s.present().exported() {
		return "(" + direct + ")" // no series scraped without honor_labels (Presence)
	}
	exported := robust(fmt.Sprintf(`%s{%s=~%q,%s!=""%s}`, metric, exportedPrefix+ns, nsRe, exportedPrefix+pod, extra))
	for _, l := range []string{ns, pod} {
		exported = fmt.Sprintf(`label_replace(%s, %q, "$1", %q, "(.*)")`, exported, l, exportedPrefix+l)
	}
	// The container only where it was renamed too: a target that sets namespace and pod
	// labels but no container (Prometheus' example kubernetes-pods job) leaves the
	// exporter's own container label as it is, and "(.*)" would match the absent
	// exported_container and remove it.
	exported = fmt.Sprintf(`label_replace(%s, %q, "$1", %q, "(.+)")`, exported, ctr, exportedPrefix+ctr)
	return "(" + direct + " or " + exported + ")"
}

// workloadSelector renders the series selector of metric in the namespaces matching
// nsRe with a non-empty pod label and the extra matchers (a suffix starting with a
// comma): with Direct, as labelled; otherwise only the series scraped with honor_labels
// (no exported_pod label), whose labels name the workload. Selector.series reads it
// through the robust form, ComputeSamples as raw samples.
func (s Selector) workloadSelector(metric, nsRe, extra string) string {
	ns, pod := s.Labels.Namespace, s.Labels.Pod
	if s.Direct {
		return fmt.Sprintf(`%s{%s=~%q,%s!=""%s}`, metric, ns, nsRe, pod, extra)
	}
	return fmt.Sprintf(`%s{%s=~%q,%s!="",%s=""%s}`, metric, ns, nsRe, pod, exportedPrefix+pod, extra)
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

// orOn renders " or on (<keys>) " joining the fields of one signal in order of
// preference. A MIG profile label is kept in the results but not matched on: a field
// whose series lack it (an older exporter) must still give way to a preferred one.
func (s Selector) orOn() string {
	var keys []string
	for _, k := range s.keys() {
		if k != MIGProfileLabel {
			keys = append(keys, k)
		}
	}
	return " or on (" + strings.Join(keys, ", ") + ") "
}

// Unit is the unit a metric is published in.
type Unit string

// Units of published metrics; each converts to gpufrac's signals (bytes; ratio 0–1).
const (
	// UnitBytes: bytes, valid in [0, MaxMemoryBytes].
	UnitBytes Unit = "bytes"
	// UnitMiB: mebibytes (dcgm-exporter's framebuffer fields), ×1048576 to bytes.
	UnitMiB Unit = "MiB"
	// UnitRatio: 0–1.
	UnitRatio Unit = "ratio"
	// UnitPercent: 0–100, ÷100 to a ratio.
	UnitPercent Unit = "percent"
)

// max is the largest value that can be true in the unit; larger ones are dropped.
func (u Unit) max() float64 {
	switch u {
	case UnitMiB:
		return MaxMemoryBytes / MiB
	case UnitRatio:
		return 1
	case UnitPercent:
		return 100
	}
	return MaxMemoryBytes
}

// scale is the PromQL suffix converting the unit to bytes or a ratio.
func (u Unit) scale() string {
	switch u {
	case UnitMiB:
		return fmt.Sprintf(" * %d", MiB)
	case UnitPercent:
		return " / 100"
	}
	return ""
}

// convert is scale in Go: v in the unit to bytes or a ratio, with the same operation
// (× MiB, ÷ 100), so a value converted here equals the query's.
func (u Unit) convert(v float64) float64 {
	switch u {
	case UnitMiB:
		return v * MiB
	case UnitPercent:
		return v / 100
	}
	return v
}

// Field is one published metric a source reads for a signal, with its unit and, where
// the exporter uses other names than the selector's, its own label names.
type Field struct {
	// Metric is the metric name as published.
	Metric string
	// Unit is the unit the metric is published in.
	Unit Unit
	// Labels, when set, are the metric's own workload label names (HAMi ≤ 2.8:
	// podnamespace, podname, ctrname); results are relabelled to the selector's names.
	// An empty Container means the metric has no container label (pod-level usage).
	Labels *Labels
	// Device are the metric's device labels, relabelled in order onto the source's
	// DeviceLabels; nil means the source's own.
	Device []string
	// PerProcess: the exporter measures each pod's own processes (gpufrac's agent), so
	// equal values of pods on one GPU are never a device value copied to each.
	PerProcess bool
	// KeepsLastValue: an accounting gauge the exporter keeps at its last value after the
	// pod's process exited (HAMi's, KAI's), so a flat memory reading while the container
	// is idle may be stale (StaleMemory). DCGM's framebuffer memory and the agent's
	// per-process memory are freed and drop when the process exits: flat and idle there
	// is a model held in memory, a real need.
	KeepsLastValue bool
	// InstanceRelative: on a MIG instance (a series with GPU_I_ID) the metric is a ratio
	// of the instance, not of the whole GPU (dcgm-exporter's profiling fields). Its raw
	// samples there in (1, mig.MaxOvershoot] are clamped to 1 (a saturated instance)
	// and counted (ClampMIGOvershoot) instead of being dropped, and decoded values are
	// converted to a share of the whole GPU with the instance profile's slice count
	// (Reader.decode, mig.Profile.ComputeShare).
	InstanceRelative bool
	// NoContainer: the exporter writes no container label on the metric (pod-level
	// usage: KAI's gpu-fractioning daemon), so a container label on its series is the
	// scrape target's (a ServiceMonitor or PodMonitor adds the exporter's own container
	// name, with honor_labels or without) and is removed: the recommender attributes the
	// usage to the pod's GPU container.
	NoContainer bool
	// LowFidelity: the metric says a kernel ran, not how much of the GPU it used
	// (DCGM_FI_DEV_GPU_UTIL), so its values are upper bounds of activity. The estimate
	// rests on it where its samples hold enough of a container's compute histogram to
	// set the target percentile (history.ContainerState.Fidelity), whatever field the
	// latest samples came from.
	LowFidelity bool
}

// migPart is one subset of a field's series, selected by extra label matchers, whose raw
// samples up to keep (in the field's unit) are kept, those above the unit's maximum
// clamped to it.
type migPart struct {
	extra string
	keep  float64
}

// migParts split a field's series: for an instance-relative field, off MIG (no
// GPU_I_ID) and on a MIG instance, where samples up to mig.MaxOvershoot times the unit's
// maximum are kept (the off-MIG part alone where p finds no series on a MIG instance);
// other fields are one part.
func (f Field) migParts(p *Presence) []migPart {
	if !f.InstanceRelative {
		return []migPart{{"", f.Unit.max()}}
	}
	if !p.mig() {
		return []migPart{{fmt.Sprintf(`,%s=""`, MIGInstanceLabel), f.Unit.max()}}
	}
	return []migPart{
		{fmt.Sprintf(`,%s=""`, MIGInstanceLabel), f.Unit.max()},
		{fmt.Sprintf(`,%s!=""`, MIGInstanceLabel), f.Unit.max() * mig.MaxOvershoot},
	}
}

// query renders fn over the field's valid samples in the window, aggregated with max by
// the selector's keys, in bytes or as a ratio, with the selector's label names.
func (f Field) query(sel Selector, fn string, window time.Duration) string {
	fs := sel
	if f.Labels != nil {
		fs.Labels, fs.Direct = *f.Labels, true
	}
	if f.Device != nil {
		fs.Device = f.Device
	}
	var inner []string
	for _, p := range f.migParts(sel.present()) {
		q := fs.series(fn, f.Metric, p.extra, f.Unit.max(), p.keep, window)
		if f.NoContainer {
			q = fmt.Sprintf(`label_replace(%s, %q, "", "", "")`, q, fs.Labels.Container)
		}
		inner = append(inner, q)
	}
	q := fmt.Sprintf("max %s (%s)%s", fs.by(), strings.Join(inner, " or "), f.Unit.scale())
	from, to := fs.keys(), sel.keys()
	renamed := false
	for i := range from {
		if i < len(to) && from[i] != to[i] && from[i] != "" {
			q = fmt.Sprintf(`label_replace(%s, %q, "$1", %q, "(.*)")`, q, to[i], from[i])
			renamed = true
		}
	}
	if renamed {
		q = fmt.Sprintf("max %s (%s)", sel.by(), q)
	}
	return q
}

// gauges is a Source over published gauges: for each signal, fields in order of
// preference (the first that exists for a container wins).
type gauges struct {
	name            string
	memory, compute []Field
	device          []string
}

func (g gauges) Name() string           { return g.name }
func (g gauges) MemoryMetric() string   { return g.memory[0].Metric }
func (g gauges) DeviceLabels() []string { return g.device }

// Fields returns the fields read for a signal, in order of preference.
func (g gauges) Fields(signal Signal) []Field {
	if signal == SignalMemory {
		return g.memory
	}
	return g.compute
}

func (g gauges) MemoryPeakQuery(sel Selector, window time.Duration) string {
	return preferred(g.memory, sel, "max_over_time", window)
}

func (g gauges) ComputeQuery(sel Selector, window time.Duration) string {
	return preferred(g.compute, sel, "avg_over_time", window)
}

// preferred renders fn over each field's valid samples in the window (Field.query),
// labelled with SourceLabel, joined in the fields' order of preference: per container
// and device, the first field that has a value.
func preferred(fields []Field, sel Selector, fn string, window time.Duration) string {
	var parts []string
	for _, f := range sel.present().keep(fields) {
		parts = append(parts, fmt.Sprintf(`label_replace(%s, %q, %q, "", "")`, f.query(sel, fn, window), SourceLabel, f.Metric))
	}
	return strings.Join(parts, sel.orOn())
}

// FlatQuery returns PromQL whose result, per (namespace, pod, container, device), is the
// standard deviation (bytes) of the memory fields' valid samples over the window: 0 where
// the series stayed flat (a stale series repeats its last value). Read next to the
// memory peak query over the same steps to tell stale memory (issue 13 kind 8).
func FlatQuery(src Source, sel Selector, window time.Duration) string {
	var parts []string
	for _, f := range sel.present().keep(src.Fields(SignalMemory)) {
		parts = append(parts, f.query(sel, "stddev_over_time", window))
	}
	return strings.Join(parts, sel.orOn())
}

// CopyValueLabel carries the copied value in CopiesQuery's answer (count_values).
const CopyValueLabel = "gpufrac_value"

// CopiesQuery returns PromQL that finds device values copied to several pods, in every
// namespace: for each field of the signal that is not measured per process, the same
// aggregation as the data query (max_over_time for memory, avg_over_time for compute,
// over window, in bytes or a ratio) over all namespaces, reduced to one value per pod
// and device, then count_values by device: one series per (device, value, field) that
// two or more pods carried, valued with how many. The answer is small (only copied
// values). Data queries are scoped to the namespaces with autoscalers, so without it a
// copy held by a pod in another namespace would never be compared (issue 13 kind 14).
// It returns "" when every field is per process (the agent).
//
// The aggregation is over the raw samples (Selector.Raw), not the robust expression of
// the data queries: it is matched against the data's values, and wherever a window held
// an impossible sample the two differ, so that value is not taken for a copy and stays
// a per-pod value (an upper bound, never shrunk). The robust form cost five range
// functions and a subquery per step over every namespace: the most expensive query of
// a history bootstrap (make bench-scale: 191 s of Prometheus' 352 s for 1,000 pods × 1
// day, docs/benchmarks.md).
func CopiesQuery(src Source, sel Selector, signal Signal, window time.Duration) string {
	fn := "max_over_time"
	if signal == SignalCompute {
		fn = "avg_over_time"
	}
	if len(sel.Device) == 0 {
		return "" // no device to compare on
	}
	all := sel
	all.AllNamespaces, all.Raw = true, true
	dev := strings.Join(sel.Device, ", ")
	var parts []string
	for _, f := range src.Fields(signal) {
		if f.PerProcess {
			continue
		}
		parts = append(parts, fmt.Sprintf(`label_replace(count_values by (%s) (%q, max by (%s, %s, %s) (%s)) > 1, %q, %q, "", "")`,
			dev, CopyValueLabel, sel.Labels.Namespace, sel.Labels.Pod, dev, f.query(all, fn, window), SourceLabel, f.Metric))
	}
	return strings.Join(parts, " or ")
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

// dropFilters are the PromQL filters that select a field's impossible raw samples, by
// drop reason, for a metric selector %[1]s and the largest valid value %[2]s.
var dropFilters = []struct{ reason, filter string }{
	{DropNaN, "(%[1]s != %[1]s)"},
	{DropInf, "(abs(%[1]s) == Inf)"},
	{DropNegative, "(%[1]s < 0 > -Inf)"},
	{DropOutOfRange, "(%[1]s > %[2]s < Inf)"},
}

// DropCountQuery returns an instant query, to evaluate at the returned time, whose
// result counts the raw samples of the fields in the window (from, to] that cannot be
// true — NaN, ±Inf, negative, above the unit's maximum — per (namespace, pod) in the
// selector's label names and "reason" (DropNaN, DropInf, DropNegative, DropOutOfRange),
// and, for instance-relative fields on a MIG instance, those above the maximum that were
// clamped to it (ClampMIGOvershoot; above mig.MaxOvershoot times it they are out of
// range).
// These samples are filtered out inside the memory and compute queries, so this
// companion query is how they are counted.
//
// Raw samples are counted exactly by their timestamps: a subquery at the selector's
// resolution yields, at each step, the timestamp of the latest raw sample if it is
// impossible, and changes()+1 counts the distinct ones. The window is aligned to the
// resolution so consecutive loads count each sample once; a step longer than the
// scrape interval would skip samples (as it would in the data queries). It returns ""
// when the aligned window is empty.
func (s Selector) DropCountQuery(fields []Field, from, to time.Time) (string, time.Time) {
	res, fromA, toA := s.countWindow(from, to)
	if !toA.After(fromA) {
		return "", toA
	}
	w := promDuration(toA.Sub(fromA))
	after := fmt.Sprintf("%.3f", float64(fromA.UnixMilli())/1000)
	ns, pod := s.Labels.Namespace, s.Labels.Pod
	nsRe := NamespaceRegex(s.Namespaces)
	var parts []string
	count := func(sel string, labels Labels, reason, filter string) {
		q := fmt.Sprintf(`sum by (%s, %s) (changes((timestamp(%s) > %s and %s)[%s:%s]) + 1)`,
			labels.Namespace, labels.Pod, sel, after, filter, w, promDuration(res))
		if labels.Namespace != ns {
			q = fmt.Sprintf(`label_replace(%s, %q, "$1", %q, "(.*)")`, q, ns, labels.Namespace)
		}
		if labels.Pod != pod {
			q = fmt.Sprintf(`label_replace(%s, %q, "$1", %q, "(.*)")`, q, pod, labels.Pod)
		}
		parts = append(parts, fmt.Sprintf(`label_replace(label_replace(%s, "reason", %q, "", ""), "gpufrac_part", "%d", "", "")`, q, reason, len(parts)))
	}
	// add counts the impossible samples of sel (above keep is out of range) and, where
	// keep > max, those clamped to max.
	add := func(sel string, labels Labels, max, keep float64) {
		for _, d := range dropFilters {
			count(sel, labels, d.reason, fmt.Sprintf(d.filter, sel, fmt.Sprintf("%g", keep)))
		}
		if keep > max {
			count(sel, labels, ClampMIGOvershoot, fmt.Sprintf("(%s > %g <= %g)", sel, max, keep))
		}
	}
	for _, f := range fields {
		max := f.Unit.max()
		for _, p := range f.migParts(nil) {
			switch {
			case f.Labels != nil:
				l := *f.Labels
				add(fmt.Sprintf(`%s{%s=~%q,%s!=""%s}`, f.Metric, l.Namespace, nsRe, l.Pod, p.extra), l, max, p.keep)
			case s.Direct:
				add(fmt.Sprintf(`%s{%s=~%q,%s!=""%s}`, f.Metric, ns, nsRe, pod, p.extra), s.Labels, max, p.keep)
			default:
				add(fmt.Sprintf(`%s{%s=~%q,%s!="",%s=""%s}`, f.Metric, ns, nsRe, pod, exportedPrefix+pod, p.extra), s.Labels, max, p.keep)
				add(fmt.Sprintf(`%s{%s=~%q,%s!=""%s}`, f.Metric, exportedPrefix+ns, nsRe, exportedPrefix+pod, p.extra),
					Labels{Namespace: exportedPrefix + ns, Pod: exportedPrefix + pod}, max, p.keep)
			}
		}
	}
	return fmt.Sprintf("sum by (%s, %s, reason) (%s)", ns, pod, strings.Join(parts, " or ")), toA
}

// countWindow aligns the window (from, to] of a counting query to the subquery
// resolution, which it also returns, so consecutive windows count each sample once.
func (s Selector) countWindow(from, to time.Time) (res time.Duration, fromA, toA time.Time) {
	res = s.SubqueryResolution
	if res <= 0 {
		res = DefaultSubqueryResolution
	}
	return res, from.Truncate(res), to.Truncate(res)
}

// MissingLabelsQuery returns an instant query, to evaluate at the returned time, whose
// single value counts the raw samples of the fields in the window (from, to] whose
// series carry no pod label (nor exported_pod): a GPU with no pod bound at scrape time,
// unattributed device usage that the data queries exclude (pod!=""). They belong to no
// namespace, so the count is cluster-wide. The window is aligned to the subquery
// resolution as in DropCountQuery, so consecutive windows count each sample once. It
// returns "" when the aligned window is empty.
func (s Selector) MissingLabelsQuery(fields []Field, from, to time.Time) (string, time.Time) {
	_, fromA, toA := s.countWindow(from, to)
	if !toA.After(fromA) {
		return "", toA
	}
	w := promDuration(toA.Sub(fromA))
	var parts []string
	for _, f := range fields {
		sel := fmt.Sprintf(`%s{%s=""}`, f.Metric, s.Labels.Pod)
		switch {
		case f.Labels != nil:
			sel = fmt.Sprintf(`%s{%s=""}`, f.Metric, f.Labels.Pod)
		case !s.Direct:
			sel = fmt.Sprintf(`%s{%s="",%s=""}`, f.Metric, s.Labels.Pod, exportedPrefix+s.Labels.Pod)
		}
		parts = append(parts, fmt.Sprintf(`label_replace(sum(count_over_time(%s[%s])), "gpufrac_part", "%d", "", "")`, sel, w, len(parts)))
	}
	if len(parts) == 0 {
		return "", toA
	}
	return "sum(" + strings.Join(parts, " or ") + ")", toA
}
