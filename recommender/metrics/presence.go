package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/common/model"
)

// Presence is what the series a long read can match hold over its time range, found in
// Prometheus' index (Reader.Presence). The data queries of a Selector with Present
// (Source.MemoryPeakQuery, Source.ComputeQuery, FlatQuery) and its DirtyQuery leave out
// the branches that would match no series there: the fields without series, the
// exported_* relabelling where no series was scraped without honor_labels, and the MIG
// instance part where no series has a GPU_I_ID. An empty branch still costs the PromQL
// engine its vector match (`or`), relabelling and aggregation at every step and for
// every series of the other branches: over 1,000 pods × 6 hours of one DCGM field at
// one sample a minute, the compute read with every branch took 3.6× the time of the same
// read with only the branch that has series on the engine of go.mod's Prometheus
// (BenchmarkComputeQueryPresence), 1.4× on Debian's Prometheus 2.42
// (docs/benchmarks.md). Leaving out a branch that matches nothing changes no answer.
type Presence struct {
	// Metrics are the metric names of the fields with a series in the selected
	// namespaces (either label form).
	Metrics map[string]bool
	// Exported is true when a series of a field carries an exported_pod label and an
	// exported_namespace in the selected namespaces (scraped without honor_labels).
	Exported bool
	// MIG is true when a series of an instance-relative field (Field.InstanceRelative)
	// in the selected namespaces carries a GPU_I_ID (MIGInstanceLabel).
	MIG bool
}

// present returns the Presence the selector's data queries are pruned by: nil (every
// branch) for a selector without one or one reading every namespace (CopiesQuery,
// SharedDevicesQuery), which the Presence, found in the selected namespaces only, does
// not describe.
func (s Selector) present() *Presence {
	if s.AllNamespaces {
		return nil
	}
	return s.Present
}

// hasMetric reports whether a query must read metric: always without a Presence.
func (p *Presence) hasMetric(metric string) bool { return p == nil || p.Metrics[metric] }

// exported reports whether a query must read the exported_* label form.
func (p *Presence) exported() bool { return p == nil || p.Exported }

// mig reports whether a query must read MIG instances' series.
func (p *Presence) mig() bool { return p == nil || p.MIG }

// keep returns the fields a query of a selector with p reads, in order: those with
// series, or, where none has, the first (its query then answers nothing, as the whole
// query would).
func (p *Presence) keep(fields []Field) []Field {
	if p == nil {
		return fields
	}
	var out []Field
	for _, f := range fields {
		if p.hasMetric(f.Metric) {
			out = append(out, f)
		}
	}
	if len(out) == 0 && len(fields) > 0 {
		out = fields[:1]
	}
	return out
}

// Presence finds, with three label-values requests (/api/v1/label/<name>/values with
// match[], which read the index and no sample), which of the fields have series in
// sel's namespaces between from and to, whether any of them was scraped without
// honor_labels, and whether any is on a MIG instance. The selectors are wider than the
// data queries' (no pod or extra matchers), so a branch is kept whenever it might
// match. It returns Prometheus' error, or a *PartialResponseError when an answer
// carried warnings: the caller then reads with every branch (a nil Presence).
func (r *Reader) Presence(ctx context.Context, sel Selector, fields []Field, from, to time.Time) (*Presence, error) {
	nsRe := NamespaceRegex(sel.Namespaces)
	ns := sel.Labels.Namespace
	var direct, exported, mig []string
	for _, f := range fields {
		name := fmt.Sprintf("__name__=%q", f.Metric)
		switch {
		case f.Labels != nil:
			direct = append(direct, fmt.Sprintf("{%s,%s=~%q}", name, f.Labels.Namespace, nsRe))
		default:
			direct = append(direct, fmt.Sprintf("{%s,%s=~%q}", name, ns, nsRe))
			if !sel.Direct {
				exported = append(exported, fmt.Sprintf("{%s,%s=~%q,%s!=\"\"}", name, exportedPrefix+ns, nsRe, exportedPrefix+sel.Labels.Pod))
			}
		}
		if f.InstanceRelative {
			mig = append(mig, fmt.Sprintf("{%s,%s=~%q,%s!=\"\"}", name, ns, nsRe, MIGInstanceLabel))
			if !sel.Direct && f.Labels == nil {
				mig = append(mig, fmt.Sprintf("{%s,%s=~%q,%s!=\"\"}", name, exportedPrefix+ns, nsRe, MIGInstanceLabel))
			}
		}
	}
	p := &Presence{Metrics: map[string]bool{}}
	values := func(label string, match []string) (model.LabelValues, error) {
		if len(match) == 0 {
			return nil, nil
		}
		return r.LabelValues(ctx, label, match, from, to)
	}
	vs, err := values(model.MetricNameLabel, append(direct, exported...))
	if err != nil {
		return nil, err
	}
	for _, v := range vs {
		p.Metrics[string(v)] = true
	}
	if vs, err = values(exportedPrefix+sel.Labels.Pod, exported); err != nil {
		return nil, err
	}
	p.Exported = len(vs) > 0
	if vs, err = values(MIGInstanceLabel, mig); err != nil {
		return nil, err
	}
	p.MIG = len(vs) > 0
	return p, nil
}
