// Package promreg builds the Prometheus collectors of gpufrac's components (one call a
// metric: name, help text, label names) and registers them in one call. It adds nothing
// to client_golang's collectors: the constructors only spell out the Opts.
package promreg

import "github.com/prometheus/client_golang/prometheus"

// Counter returns a counter named name with help text help.
func Counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// CounterVec returns a counter vector named name with help text help, partitioned by
// the label names labels.
func CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// Gauge returns a gauge named name with help text help.
func Gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// GaugeVec returns a gauge vector named name with help text help, partitioned by the
// label names labels.
func GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// Histogram returns a histogram named name with help text help and the upper bounds
// buckets (in the metric's unit, ascending; nil: prometheus.DefBuckets).
func Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

// HistogramVec returns a histogram vector named name with help text help, the upper
// bounds buckets (as Histogram) and the label names labels.
func HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

// Register adds cs to reg in order. It stops at and returns the first registration
// error (a name registered twice, an inconsistent help text or label set); the
// collectors before it stay registered.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
