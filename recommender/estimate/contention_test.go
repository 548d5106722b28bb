package estimate

import (
	"math"
	"testing"
	"time"

	vpautil "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/util"

	"github.com/gpufrac/gpufrac/recommender/history"
)

// onOff returns a compute histogram of n samples, a share busy of them at level busy
// and the rest idle (0).
func onOff(n int, busyShare, busy float64) vpautil.Histogram {
	h := vpautil.NewHistogram(history.ComputeBuckets)
	for i := 0; i < n; i++ {
		v := 0.0
		if float64(i) < busyShare*float64(n) {
			v = busy
		}
		h.AddSample(v, 1, t0)
	}
	return h
}

// edge is the upper edge of v's compute bucket: the value the histogram reads v as.
func edge(v float64) float64 { return bucketEdge(history.ComputeBuckets.FindBucket(v)) }

func TestComputeRequestSteadyIsItsLevel(t *testing.T) {
	got := Config{}.ComputeRequest(onOff(1000, 1, 0.3))
	if want := edge(0.3); math.Abs(got-want) > 1e-9 {
		t.Fatalf("steady 0.3: request %.4f, want its level %.4f", got, want)
	}
}

func TestComputeRequestOnOffClosedForm(t *testing.T) {
	c := Config{}
	s := c.ContentionSpace()
	if want := math.Log(1/DefaultContentionBudget) / DefaultContentionSlowdown; math.Abs(s-want) > 1e-12 {
		t.Fatalf("space %.4f, want ln(1/budget)/slowdown %.4f", s, want)
	}
	for _, tc := range []struct{ p, h float64 }{{0.1, 0.4}, {0.33, 0.2}, {0.05, 0.9}, {0.5, 0.5}} {
		got := c.ComputeRequest(onOff(10000, tc.p, tc.h))
		lo, hi := edge(0), edge(tc.h)
		want := math.Log((1-tc.p)*math.Exp(s*lo)+tc.p*math.Exp(s*hi)) / s
		if math.Abs(got-want) > 1e-3 {
			t.Errorf("busy %.0f %% at %.2f: request %.4f, want %.4f", 100*tc.p, tc.h, got, want)
		}
		mean := (1-tc.p)*lo + tc.p*hi
		if got < mean || got > hi {
			t.Errorf("busy %.0f %% at %.2f: request %.4f outside [mean %.4f, peak %.4f]", 100*tc.p, tc.h, got, mean, hi)
		}
	}
}

// TestComputeRequestKeepsTheBudget packs as many independent copies of an on/off pod as
// their requests allow on one GPU and computes exactly (binomially) how often they ask
// for more than 1 + slowdown GPUs: never more often than the budget.
func TestComputeRequestKeepsTheBudget(t *testing.T) {
	for _, c := range []Config{{}, {ContentionBudget: 0.05, ContentionSlowdown: 0.3}, {ContentionBudget: 0.001, ContentionSlowdown: 1}} {
		c = c.WithDefaults()
		for _, tc := range []struct{ p, h float64 }{{0.1, 0.4}, {0.33, 0.2}, {0.05, 0.9}, {0.2, 0.3}, {0.02, 0.6}} {
			r := c.ComputeRequest(onOff(10000, tc.p, tc.h))
			k := int(math.Floor(1 / r))
			hi := edge(tc.h)
			over := 0.0 // P(more than (1+slowdown)/hi of k pods busy), idle pods at the bucket edge
			for j := 0; j <= k; j++ {
				if float64(j)*hi+float64(k-j)*edge(0) > 1+c.ContentionSlowdown {
					over += binom(k, j) * math.Pow(tc.p, float64(j)) * math.Pow(1-tc.p, float64(k-j))
				}
			}
			if over > c.ContentionBudget {
				t.Errorf("budget %.3f slowdown %.2f, busy %.0f %% at %.2f: %d pods of request %.3f exceed %.2f GPUs with probability %.4f",
					c.ContentionBudget, c.ContentionSlowdown, 100*tc.p, tc.h, k, r, 1+c.ContentionSlowdown, over)
			}
		}
	}
}

func binom(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r *= float64(n-k+i) / float64(i)
	}
	return r
}

func TestComputeRequestOrdersBurstiness(t *testing.T) {
	c := Config{}
	rare := c.ComputeRequest(onOff(10000, 0.05, 0.5))
	often := c.ComputeRequest(onOff(10000, 0.3, 0.5))
	steady := c.ComputeRequest(onOff(10000, 1, 0.5))
	if !(rare < often && often < steady) {
		t.Fatalf("requests busy 5 %% / 30 %% / 100 %% at 0.5: %.3f, %.3f, %.3f; want increasing", rare, often, steady)
	}
	if rare > 0.5*steady {
		t.Errorf("a pod busy 5 %% of the time reserves %.3f, more than half its level %.3f", rare, steady)
	}
}

func TestComputeRequestOffEmptyAndExtreme(t *testing.T) {
	if got := (Config{ContentionBudget: -1}).ComputeRequest(onOff(100, 0.5, 0.5)); got != 0 {
		t.Errorf("budget off: request %.3f, want 0", got)
	}
	if got := (Config{}).ComputeRequest(vpautil.NewHistogram(history.ComputeBuckets)); got != 0 {
		t.Errorf("empty history: request %.3f, want 0", got)
	}
	if got := (Config{}).ComputeRequest(onOff(100, 0, 0)); got != DefaultMinCompute {
		t.Errorf("always idle: request %.4f, want MinCompute %.4f", got, DefaultMinCompute)
	}
	// A tiny budget and slowdown make s huge: no overflow, the request tends to the peak.
	got := (Config{ContentionBudget: 1e-12, ContentionSlowdown: 0.001}).ComputeRequest(onOff(1000, 0.01, 0.7))
	if math.IsNaN(got) || math.Abs(got-edge(0.7)) > 0.01 {
		t.Errorf("s = %.0f: request %.4f, want about the peak %.4f", (Config{ContentionBudget: 1e-12, ContentionSlowdown: 0.001}).ContentionSpace(), got, edge(0.7))
	}
}

func TestEstimateSetsComputeRequest(t *testing.T) {
	m := history.NewModel(history.Options{})
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	feed(m, w, "p1", t0, 2*time.Hour, 10*gib, 0.25)
	e, ok := Config{}.Estimate(m.Container(history.ContainerKey{WorkloadKey: w, Container: "main"}), 0.15, t0.Add(2*time.Hour))
	if !ok || math.Abs(e.ComputeRequest-edge(0.25)) > 1e-9 {
		t.Fatalf("steady 0.25: ComputeRequest %.4f (ok %v), want %.4f", e.ComputeRequest, ok, edge(0.25))
	}
}
