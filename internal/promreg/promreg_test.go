package promreg

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestConstructorsKeepNameHelpLabelsAndBuckets(t *testing.T) {
	h := HistogramVec("h_seconds", "H help.", []float64{1, 2}, "step")
	h.WithLabelValues("load").Observe(1.5)
	want := `# HELP h_seconds H help.
# TYPE h_seconds histogram
h_seconds_bucket{step="load",le="1"} 0
h_seconds_bucket{step="load",le="2"} 1
h_seconds_bucket{step="load",le="+Inf"} 1
h_seconds_sum{step="load"} 1.5
h_seconds_count{step="load"} 1
`
	if err := testutil.CollectAndCompare(h, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	c := CounterVec("c_total", "C help.", "a", "b")
	c.WithLabelValues("x", "y").Add(3)
	if err := testutil.CollectAndCompare(c, strings.NewReader("# HELP c_total C help.\n# TYPE c_total counter\nc_total{a=\"x\",b=\"y\"} 3\n")); err != nil {
		t.Error(err)
	}
	g := Gauge("g", "G help.")
	g.Set(7)
	if err := testutil.CollectAndCompare(g, strings.NewReader("# HELP g G help.\n# TYPE g gauge\ng 7\n")); err != nil {
		t.Error(err)
	}
}

func TestRegisterStopsAtTheFirstError(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a, b := Counter("a_total", "A."), Gauge("b", "B.")
	if err := Register(reg, a, GaugeVec("v", "V.", "l")); err != nil {
		t.Fatal(err)
	}
	err := Register(reg, Counter("a_total", "A."), b)
	if err == nil {
		t.Fatal("registering a_total twice: no error")
	}
	// Unregister reports whether the collector was registered.
	if aIn, bIn := reg.Unregister(a), reg.Unregister(b); !aIn || bIn {
		t.Errorf("after the error: a registered %v, b registered %v; want a only", aIn, bIn)
	}
}
