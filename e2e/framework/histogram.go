package framework

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// Histogram is a cumulative Prometheus histogram summed over the series that matched
// (bucket upper bounds in the metric's unit, seconds for *_seconds).
type Histogram struct {
	// Count is the number of observations.
	Count uint64
	// Bounds are the buckets' upper bounds, ascending (+Inf last).
	Bounds []float64
	// Buckets are the cumulative counts per bound.
	Buckets []uint64
}

// Sub returns h minus an earlier scrape o of the same histogram: the observations made
// between the two scrapes.
func (h Histogram) Sub(o Histogram) Histogram {
	out := Histogram{Count: h.Count - o.Count, Bounds: h.Bounds}
	for i := range h.Buckets {
		var ob uint64
		if i < len(o.Buckets) {
			ob = o.Buckets[i]
		}
		out.Buckets = append(out.Buckets, h.Buckets[i]-ob)
	}
	return out
}

// Add returns the sum of two scrapes of histograms with the same buckets (e.g. the
// deltas of several runs).
func (h Histogram) Add(o Histogram) Histogram {
	if len(h.Bounds) == 0 {
		return o
	}
	out := Histogram{Count: h.Count + o.Count, Bounds: h.Bounds}
	for i := range h.Buckets {
		var ob uint64
		if i < len(o.Buckets) {
			ob = o.Buckets[i]
		}
		out.Buckets = append(out.Buckets, h.Buckets[i]+ob)
	}
	return out
}

// Quantile estimates quantile q (0–1) by linear interpolation inside the bucket holding
// it, as PromQL's histogram_quantile does: +Inf past the last finite bucket, NaN with no
// observations.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 {
		return math.NaN()
	}
	rank := q * float64(h.Count)
	lower, below := 0.0, 0.0
	for i, b := range h.Buckets {
		if float64(b) >= rank {
			in := float64(b) - below
			if in == 0 {
				return h.Bounds[i]
			}
			return lower + (h.Bounds[i]-lower)*(rank-below)/in
		}
		lower, below = h.Bounds[i], float64(b)
	}
	return math.Inf(1)
}

// UpperBound is the upper bound of the bucket holding quantile q: the value the
// quantile is known not to exceed, whatever the interpolation (+Inf past the last
// finite bucket, NaN with no observations).
func (h Histogram) UpperBound(q float64) float64 {
	if h.Count == 0 {
		return math.NaN()
	}
	rank := q * float64(h.Count)
	for i, b := range h.Buckets {
		if float64(b) >= rank {
			return h.Bounds[i]
		}
	}
	return math.Inf(1)
}

// FractionBelow is the share (0–1) of observations in buckets with upper bound ≤ bound;
// NaN with no observations.
func (h Histogram) FractionBelow(bound float64) float64 {
	if h.Count == 0 {
		return math.NaN()
	}
	var n uint64
	for i, b := range h.Buckets {
		if h.Bounds[i] <= bound {
			n = b
		}
	}
	return float64(n) / float64(h.Count)
}

// ParseHistogram reads the Prometheus text exposition from r and sums the series of
// histogram name whose label has value (label "" sums every series). A histogram not
// exposed yet is the empty Histogram; unparsable text is an error.
func ParseHistogram(r io.Reader, name, label, value string) (Histogram, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Histogram{}, err
	}
	fam := fams[name]
	if fam == nil {
		return Histogram{}, nil // not observed yet
	}
	var h Histogram
	for _, m := range fam.GetMetric() {
		if label != "" && !HasLabel(m, label, value) {
			continue
		}
		hg := m.GetHistogram()
		h.Count += hg.GetSampleCount()
		for i, b := range hg.GetBucket() {
			if len(h.Bounds) <= i {
				h.Bounds = append(h.Bounds, b.GetUpperBound())
				h.Buckets = append(h.Buckets, 0)
			}
			h.Buckets[i] += b.GetCumulativeCount()
		}
	}
	return h, nil
}

// HasLabel reports whether metric m has label name=value.
func HasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// ScrapeHistogram GETs url (a /metrics endpoint) with hc (nil: http.DefaultClient) and
// returns ParseHistogram of its body. A non-200 answer is an error.
func ScrapeHistogram(ctx context.Context, hc *http.Client, url, name, label, value string) (Histogram, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Histogram{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Histogram{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Histogram{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return ParseHistogram(resp.Body, name, label, value)
}

// APIServerHistogram scrapes histogram name from the cluster's kube-apiserver /metrics
// (admin credentials), summing the series whose label has value.
func (c *Cluster) APIServerHistogram(ctx context.Context, name, label, value string) (Histogram, error) {
	hc, err := rest.HTTPClientFor(c.RESTConfig)
	if err != nil {
		return Histogram{}, err
	}
	return ScrapeHistogram(ctx, hc, c.APIServerURL+"/metrics", name, label, value)
}
