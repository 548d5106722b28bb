package metrics

import (
	"context"
	"fmt"
	"strings"
	"time"

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

// SharedDevicesQuery returns an instant query whose result, evaluated at t, has one
// element per device (the selector's device labels) on which two or more pods, in any
// namespace, reported a field of the source that is not measured per process in
// (t-window, t]: the only devices where CopiesQuery can find a copied value. An empty
// result means no copy was possible in the window, and a long read skips CopiesQuery,
// whose count_values over every pod at every step cost as much as the data query. It
// returns "" when every field is per process or the selector names no device.
func SharedDevicesQuery(src Source, sel Selector, window time.Duration) string {
	if len(sel.Device) == 0 {
		return ""
	}
	all := sel
	all.AllNamespaces, all.Raw = true, true
	dev := strings.Join(sel.Device, ", ")
	var parts []string
	for _, sig := range []Signal{SignalMemory, SignalCompute} {
		for _, f := range src.Fields(sig) {
			if f.PerProcess {
				continue
			}
			parts = append(parts, fmt.Sprintf("count by (%s) (count by (%s, %s, %s) (%s)) > 1",
				dev, sel.Labels.Namespace, sel.Labels.Pod, dev, f.query(all, "count_over_time", window)))
		}
	}
	return strings.Join(parts, " or ")
}

// SharedDevices runs SharedDevicesQuery over (from, to] and reports whether any device
// had two or more pods there; true without asking when the query is "". Errors are
// returned like any query's; the caller then runs CopiesQuery.
func (r *Reader) SharedDevices(ctx context.Context, src Source, sel Selector, from, to time.Time) (bool, error) {
	q := SharedDevicesQuery(src, sel, to.Sub(from))
	if q == "" {
		return true, nil
	}
	vec, err := r.Vector(ctx, q, to)
	return len(vec) > 0, err
}
