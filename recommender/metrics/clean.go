package metrics

import (
	"context"
	"fmt"
	"strings"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Long reads (a history bootstrap, a catch-up after an outage) split the data queries by
// namespace: the namespaces whose raw samples over the read were all valid are read with
// the range function over the raw samples (Selector.Raw), the others with the robust
// form of Series. The two agree wherever every raw sample of a window is valid — the
// robust form's first branch is the same function over the same samples — so the split
// changes no value; it only spares Prometheus the robust form's four extra range
// functions and its subquery at DefaultSubqueryResolution per step (a 1-hour memory
// window is 240 subquery evaluations per series and step) where nothing needs filtering.
// Measured with the real PromQL engine on 300 pods × 1 day of per-minute samples: compute
// 4.9 s robust against 0.5 s raw, memory peaks 3.1 s against 0.06 s (docs/benchmarks.md).

// DirtyQuery returns an instant query whose result, evaluated at t, has one element per
// namespace (in the selector's namespace label) holding a raw sample of the fields in
// (t-window, t] that cannot be true: NaN, ±Inf, negative, or above the unit's maximum
// (a MIG instance's overshoot too, which only the robust form clamps). Namespaces absent
// from the result had only valid samples there. It reads each raw sample three times
// (max, min and sum over the window: NaN × 0 and ±Inf × 0 are NaN, not 0), once per read
// instead of once per step. With a Presence (Selector.Present) it reads only the
// fields that have series, and the exported_* label form only where a series has it.
func (s Selector) DirtyQuery(fields []Field, window time.Duration) string {
	ns, pod := s.Labels.Namespace, s.Labels.Pod
	nsRe := NamespaceRegex(s.Namespaces)
	w := promDuration(window)
	var parts []string
	add := func(sel, nsLabel string, max float64) {
		r := func(fn string) string { return fmt.Sprintf("%s(%s[%s])", fn, sel, w) }
		q := fmt.Sprintf("count by (%s) (%s > %g or %s < 0 or %s * 0 != 0)", nsLabel, r("max_over_time"), max, r("min_over_time"), r("sum_over_time"))
		if nsLabel != ns {
			q = fmt.Sprintf(`max by (%s) (label_replace(%s, %q, "$1", %q, "(.*)"))`, ns, q, ns, nsLabel)
		}
		parts = append(parts, q)
	}
	for _, f := range s.present().keep(fields) {
		max := f.Unit.max()
		switch {
		case f.Labels != nil:
			l := *f.Labels
			add(fmt.Sprintf(`%s{%s=~%q,%s!=""%s}`, f.Metric, l.Namespace, nsRe, l.Pod, s.extra()), l.Namespace, max)
		case s.Direct || !s.present().exported():
			add(fmt.Sprintf(`%s{%s=~%q,%s!=""%s}`, f.Metric, ns, nsRe, pod, s.extra()), ns, max)
		default:
			add(fmt.Sprintf(`%s{%s=~%q,%s!="",%s=""%s}`, f.Metric, ns, nsRe, pod, exportedPrefix+pod, s.extra()), ns, max)
			add(fmt.Sprintf(`%s{%s=~%q,%s!=""%s}`, f.Metric, exportedPrefix+ns, nsRe, exportedPrefix+pod, s.extra()), exportedPrefix+ns, max)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "max by (" + ns + ") (" + strings.Join(parts, " or ") + ")"
}

// DirtyNamespaces runs sel.DirtyQuery for the fields over (from, to] and returns the
// namespaces holding an impossible raw sample there. Errors (a partial answer too) are
// returned like any query's; the caller then reads every namespace with the robust form.
func (r *Reader) DirtyNamespaces(ctx context.Context, sel Selector, fields []Field, from, to time.Time) (map[string]bool, error) {
	out := map[string]bool{}
	q := sel.DirtyQuery(fields, to.Sub(from))
	if q == "" {
		return out, nil
	}
	vec, err := r.Vector(ctx, q, to)
	if err != nil {
		return nil, err
	}
	for _, s := range vec {
		out[string(s.Metric[model.LabelName(sel.Labels.Namespace)])] = true
	}
	return out, nil
}

// SplitQuery renders a data query (mk: a Source's MemoryPeakQuery, ComputeQuery, or
// FlatQuery, for a selector) over sel split by dirty (DirtyNamespaces): the clean
// namespaces over raw samples, the dirty ones with the robust form, joined with or (their
// series are disjoint). A nil dirty (unknown: its query failed) reads every namespace
// with the robust form.
func SplitQuery(sel Selector, dirty map[string]bool, mk func(Selector) string) string {
	if dirty == nil {
		return mk(sel)
	}
	var clean, robust []string
	for _, ns := range sel.Namespaces {
		if dirty[ns] {
			robust = append(robust, ns)
		} else {
			clean = append(clean, ns)
		}
	}
	raw := sel
	raw.Raw, raw.Namespaces = true, clean
	switch {
	case len(clean) == 0:
		return mk(sel)
	case len(robust) == 0:
		return mk(raw)
	}
	rob := sel
	rob.Namespaces = robust
	return "(" + mk(raw) + ") or (" + mk(rob) + ")"
}

// SharedDevices reports whether any device (the selector's device labels) had two or
// more pods, in any namespace, with series of a field of src that is not measured per
// process in (from, to]: the only devices where CopiesQuery can find a copied value.
// false means no copy was possible there, and a long read skips CopiesQuery, whose
// count_values over every pod at every step cost as much as the data query. It is true
// without asking where every field is per process or the selector names no device.
//
// It reads Prometheus' index through the series API (/api/v1/series: one request, no
// sample decoded), where a count_over_time of every field over every namespace read
// every sample of the window (94 s of Prometheus' 162 s of query evaluation in a
// 10,000-pod × 8-day bootstrap, docs/benchmarks.md). The index knows a series' chunks
// (about 2 hours of samples each), not its samples, so a pod whose last chunk overlaps
// the window may count: the answer can only err towards looking for copies. Series are
// named as the data queries name them: a field's own labels (Field.Labels) and device
// labels (Field.Device), and the exported_namespace and exported_pod of series scraped
// without honor_labels (unless sel.Direct).
//
// Errors are the series request's (wrapped Prometheus error, or a *PartialResponseError
// for an answer with warnings); the caller then runs CopiesQuery.
func (r *Reader) SharedDevices(ctx context.Context, src Source, sel Selector, from, to time.Time) (bool, error) {
	if len(sel.Device) == 0 {
		return true, nil
	}
	type form struct {
		ns, pod string // the labels naming the pod in this form's series
		dev     []string
	}
	var match []string
	forms := map[string][]form{} // per field's metric, its label forms
	for _, sig := range []Signal{SignalMemory, SignalCompute} {
		for _, f := range src.Fields(sig) {
			if f.PerProcess {
				continue
			}
			labels, direct, dev := sel.Labels, sel.Direct, sel.Device
			if f.Labels != nil {
				labels, direct = *f.Labels, true
			}
			if f.Device != nil {
				dev = f.Device
			}
			all := Selector{Labels: labels, Direct: direct, Matchers: sel.Matchers}
			match = append(match, all.workloadSelector(f.Metric, ".+", all.extra()))
			fs := []form{{labels.Namespace, labels.Pod, dev}}
			if !direct {
				match = append(match, fmt.Sprintf(`%s{%s=~".+",%s!=""%s}`, f.Metric, exportedPrefix+labels.Namespace, exportedPrefix+labels.Pod, all.extra()))
				fs = append(fs, form{exportedPrefix + labels.Namespace, exportedPrefix + labels.Pod, dev})
			}
			forms[f.Metric] = fs
		}
	}
	if len(match) == 0 {
		return true, nil
	}
	sets, err := r.Series(ctx, match, from, to)
	if err != nil {
		return false, err
	}
	// Per field and device, the first pod seen there.
	first := map[string]string{}
	var key strings.Builder
	for _, ls := range sets {
		metric := string(ls[model.MetricNameLabel])
		fs := forms[metric]
		if len(fs) == 0 {
			continue
		}
		fm := fs[0]
		if len(fs) > 1 && ls[model.LabelName(fs[1].pod)] != "" {
			fm = fs[1] // scraped without honor_labels
		}
		pod := string(ls[model.LabelName(fm.ns)]) + "/" + string(ls[model.LabelName(fm.pod)])
		key.Reset()
		key.WriteString(metric)
		for _, d := range fm.dev {
			key.WriteByte(0xff)
			key.WriteString(string(ls[model.LabelName(d)]))
		}
		if p, ok := first[key.String()]; !ok {
			first[key.String()] = pod
		} else if p != pod {
			return true, nil
		}
	}
	return false, nil
}

// Series asks the series API (/api/v1/series) for the label sets of the series matching
// any of match with samples between from and to: the index, no sample read (Prometheus
// answers from its chunks' time ranges, so a series whose chunk overlaps the range
// without a sample in it may be listed). It returns Prometheus' error, or a
// *PartialResponseError (ErrPartialResponse) when the answer carried warnings; each
// request counts in Queries as kind "series".
func (r *Reader) Series(ctx context.Context, match []string, from, to time.Time) ([]model.LabelSet, error) {
	return indexRequest(ctx, r, "series", "series", match, func(ctx context.Context) ([]model.LabelSet, promv1.Warnings, error) {
		sets, warnings, _, err := r.API.Series(ctx, match, from, to)
		return sets, warnings, err
	})
}
