package metrics

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// Workload labels that the selector does not read. A scrape without honor_labels renames
// an exporter's label to exported_<name> only where the scrape job sets a target label
// of the same name: Prometheus' example kubernetes-service-endpoints job sets namespace
// but no pod, so dcgm-exporter's series carry exported_namespace (the workload's), a
// namespace naming the exporter's and a plain pod. Neither the direct nor the exported_*
// reading of Selector.Series matches them: every autoscaler says NoSamples although
// the series are there. LabelHints finds such series, for the condition message to name
// the cause and the flags that read them.

// LabelHint says that GPU series of a watched namespace carry workload labels the
// selector does not read.
type LabelHint struct {
	// Namespace is the watched namespace the series name (in the label Layout names it);
	// "" for series that name no pod at all, in any namespace (NoPodLayout).
	Namespace string
	// Metric is one metric with such series (the first by name).
	Metric string
	// Layout names the labels the series carry, e.g. "exported_namespace with a plain
	// pod and no exported_pod".
	Layout string
	// Cause says what scrape configuration gives them.
	Cause string
	// Flags are the recommender flags that read them, e.g.
	// "--namespace-label=exported_namespace --label-mode=direct".
	Flags string
}

// String renders the hint for a condition message or a log line.
func (h LabelHint) String() string {
	if h.Namespace == "" {
		return fmt.Sprintf("no series of %s in Prometheus carries %s (%s): the exporter does not attribute GPUs to pods, or names the pod by another label (set --pod-label), or the workload's pods hold no GPU",
			h.Metric, h.Layout, h.Cause)
	}
	return fmt.Sprintf("series of %s in namespace %s carry %s (%s), which the recommender does not read with its label settings; set honor_labels: true on that scrape job, or run the recommender with %s",
		h.Metric, h.Namespace, h.Layout, h.Cause, h.Flags)
}

// labelLayout is one layout of workload labels LabelHintQuery looks for.
type labelLayout struct {
	nsLabel  string // the label that holds the workload's namespace
	matchers string // the other matchers, after the namespace's
	layout   string
	cause    string
	flags    string
}

// labelLayouts are the layouts of workload labels that series may carry and the
// selector does not read: exported_<namespace> with a plain <pod> (a job that sets a
// namespace target label only), a plain <namespace> with exported_<pod> (one that sets
// a pod target label only), and with Direct, both exported (no honor_labels at all).
func (s Selector) labelLayouts() []labelLayout {
	ns, pod := s.Labels.Namespace, s.Labels.Pod
	ens, epod := exportedPrefix+ns, exportedPrefix+pod
	out := []labelLayout{
		{nsLabel: ens, matchers: fmt.Sprintf(`%s!="",%s=""`, pod, epod),
			layout: fmt.Sprintf("%s with a plain %s and no %s", ens, pod, epod),
			cause:  fmt.Sprintf("scraped without honor_labels by a job that sets a %s target label but no %s, as Prometheus' example kubernetes-service-endpoints job", ns, pod),
			flags:  fmt.Sprintf("--namespace-label=%s --label-mode=direct", ens)},
		{nsLabel: ns, matchers: fmt.Sprintf(`%s="",%s!=""`, ens, epod),
			layout: fmt.Sprintf("a plain %s with %s and no %s", ns, epod, ens),
			cause:  fmt.Sprintf("scraped without honor_labels by a job that sets a %s target label but no %s", pod, ns),
			flags:  fmt.Sprintf("--pod-label=%s --label-mode=direct", epod)},
	}
	if s.Direct {
		out = append(out, labelLayout{nsLabel: ens, matchers: fmt.Sprintf(`%s!=""`, epod),
			layout: fmt.Sprintf("%s and %s", ens, epod),
			cause:  "scraped without honor_labels; --label-mode direct reads only the configured labels",
			flags:  "--label-mode=auto"})
	}
	return out
}

// labelHintPart is the label LabelHintQuery adds to say which layout a result is of.
const labelHintPart = "gpufrac_layout"

// LabelHintQuery returns an instant query whose result counts, per metric, watched
// namespace and layout (labelLayouts, numbered in the label gpufrac_layout), the series
// of the sources' fields that carry workload labels the selector does not read, and per
// metric (gpufrac_layout "nopod") the series of a metric none of whose series names a
// pod in any layout; "" when
// the sources have no field read with the selector's labels. It reads the index and the
// latest sample of each series (Prometheus' lookback), one query however many pods.
func LabelHintQuery(sources []Source, sel Selector) string {
	var names []string
	seen := map[string]bool{}
	for _, src := range sources {
		for _, sig := range []Signal{SignalMemory, SignalCompute} {
			for _, f := range src.Fields(sig) {
				if f.Labels == nil && !seen[f.Metric] {
					seen[f.Metric] = true
					names = append(names, f.Metric)
				}
			}
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	metric := strings.Join(quoteAll(names), "|")
	nsRe := NamespaceRegex(sel.Namespaces)
	var parts []string
	for i, l := range sel.labelLayouts() {
		parts = append(parts, fmt.Sprintf(`label_replace(count by (__name__, %s) ({__name__=~%q,%s=~%q,%s%s}), %q, "%d", "", "")`,
			l.nsLabel, metric, l.nsLabel, nsRe, l.matchers, sel.extra(), labelHintPart, i))
	}
	// No series of a metric names a pod, in any layout: the exporter maps no GPU to a
	// pod (dcgm-exporter without its Kubernetes mode), not a label the selector misses.
	all := func(m string) string {
		return fmt.Sprintf(`count by (__name__) ({__name__=~%q%s%s})`, metric, m, sel.extra())
	}
	parts = append(parts, fmt.Sprintf(`label_replace(%s unless on (__name__) %s unless on (__name__) %s, %q, %q, "", "")`,
		all(""), all(fmt.Sprintf(`,%s!=""`, sel.Labels.Pod)), all(fmt.Sprintf(`,%s!=""`, exportedPrefix+sel.Labels.Pod)), labelHintPart, noPodPart))
	return strings.Join(parts, " or ")
}

// noPodPart is the gpufrac_layout of LabelHintQuery's series that name no pod at all.
const noPodPart = "nopod"

// noPodHint is the hint for a metric none of whose series names a pod.
func (s Selector) noPodHint(metric string) LabelHint {
	layout := fmt.Sprintf("a %s label (nor %s)", s.Labels.Pod, exportedPrefix+s.Labels.Pod)
	cause := "though the metric is there"
	if strings.HasPrefix(metric, "DCGM_") {
		cause += "; dcgm-exporter names pods only in its Kubernetes mode (-k, DCGM_EXPORTER_KUBERNETES=true) with the kubelet's pod-resources socket (/var/lib/kubelet/pod-resources) mounted"
	}
	return LabelHint{Metric: metric, Layout: layout, Cause: cause}
}

// LabelHints runs LabelHintQuery at ts and returns one hint per watched namespace and
// layout found, in namespace order, after one with Namespace "" where a metric has
// series and none names a pod; none when every series is read. It returns the
// query's error (Reader.Vector).
func (r *Reader) LabelHints(ctx context.Context, sources []Source, sel Selector, ts time.Time) ([]LabelHint, error) {
	q := LabelHintQuery(sources, sel)
	if q == "" {
		return nil, nil
	}
	vec, err := r.Vector(ctx, q, ts)
	if err != nil {
		return nil, err
	}
	layouts := sel.labelLayouts()
	found := map[[2]string]LabelHint{}
	for _, s := range vec {
		if s.Metric[labelHintPart] == noPodPart {
			h := sel.noPodHint(string(s.Metric[model.MetricNameLabel]))
			if old, ok := found[[2]string{}]; !ok || h.Metric < old.Metric {
				found[[2]string{}] = h
			}
			continue
		}
		var i int
		if _, err := fmt.Sscanf(string(s.Metric[labelHintPart]), "%d", &i); err != nil || i < 0 || i >= len(layouts) {
			continue
		}
		l := layouts[i]
		h := LabelHint{Namespace: string(s.Metric[model.LabelName(l.nsLabel)]), Metric: string(s.Metric[model.MetricNameLabel]),
			Layout: l.layout, Cause: l.cause, Flags: l.flags}
		k := [2]string{h.Namespace, l.layout}
		if old, ok := found[k]; h.Namespace == "" || ok && old.Metric <= h.Metric {
			continue
		}
		found[k] = h
	}
	out := make([]LabelHint, 0, len(found))
	for _, h := range found {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Layout < out[j].Layout
	})
	return out, nil
}
