package estimate

import (
	"math"
	"testing"
	"time"

	vpautil "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/util"

	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
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
	st := m.Container(history.ContainerKey{WorkloadKey: w, Container: "main"})
	e, ok := Config{}.Estimate(st, 0.15, t0.Add(2*time.Hour))
	if want := edge(0.25); !ok || math.Abs(e.ComputeRequest-want) > 1e-9 {
		t.Fatalf("steady 0.25, never on a shared GPU: ComputeRequest %.4f (ok %v), want its level %.4f (the closed loop reserves nothing without evidence)", e.ComputeRequest, ok, want)
	}
	flat := Config{ContentionEvidence: -1}
	if e, _ := flat.Estimate(st, 0.15, t0.Add(2*time.Hour)); math.Abs(e.ComputeRequest-edge(0.25)-DefaultContentionTenantReserve) > 1e-9 {
		t.Errorf("closed loop off: ComputeRequest %.4f, want its level plus the flat reserve %.4f", e.ComputeRequest, edge(0.25)+DefaultContentionTenantReserve)
	}
	if e, _ := (Config{ContentionTenantReserve: -1}).Estimate(st, 0.15, t0.Add(2*time.Hour)); math.Abs(e.ComputeRequest-edge(0.25)) > 1e-9 {
		t.Errorf("reserve off: ComputeRequest %.4f, want the level %.4f", e.ComputeRequest, edge(0.25))
	}
	if e, _ := (Config{ContentionBudget: -1}).Estimate(st, 0.15, t0.Add(2*time.Hour)); e.ComputeRequest != 0 {
		t.Errorf("budget off: ComputeRequest %.4f, want 0 (no reserve without a request)", e.ComputeRequest)
	}
}

// diurnal feeds one pod of w with two days of per-minute compute samples (a pattern of
// the time of day counts once it repeats): during the busy hours [from, to) of the day
// (UTC) it is busy at level busy in every other minute
// (independent of other pods within those hours in the test's binomial count), idle
// otherwise; memory is flat.
func diurnal(m *history.Model, w history.WorkloadKey, pod string, from, to int, busy float64) {
	var cs metrics.Series
	cs.ID = metrics.ContainerID{Namespace: w.Namespace, Pod: pod, Container: "main"}
	for i := range 2 * 24 * 60 {
		at := t0.Add(time.Duration(i) * time.Minute)
		v := 0.0
		if h := at.Hour(); h >= from && h < to && i%2 == 0 {
			v = busy
		}
		cs.Samples = append(cs.Samples, metrics.Sample{Time: at, Value: v})
	}
	m.Add(w, metrics.SignalCompute, cs)
}

// overload returns the probability that k pods, each busy at level hi with probability
// p independently (idle ones at lo), ask for more than limit GPUs.
func overload(k int, p, lo, hi, limit float64) float64 {
	over := 0.0
	for j := 0; j <= k; j++ {
		if float64(j)*hi+float64(k-j)*lo > limit {
			over += binom(k, j) * math.Pow(p, float64(j)) * math.Pow(1-p, float64(k-j))
		}
	}
	return over
}

// TestTimeOfDayComputeRequestCorrelatedPods is the case the whole day's bound misses:
// pods of one kind are busy half of the minutes of the same four hours of the day at
// 0.5 of a GPU and idle otherwise, so their loads are correlated through the time of
// day. Packed by the whole day's effective compute, as many of them share one GPU as
// make them exceed 1 + slowdown GPUs far more often than the budget in those hours,
// and over the whole day; packed by the time-of-day request, the budget holds in every
// hour.
func TestTimeOfDayComputeRequestCorrelatedPods(t *testing.T) {
	m := history.NewModel(history.Options{})
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	diurnal(m, w, "p1", 10, 14, 0.5)
	st := m.Container(history.ContainerKey{WorkloadKey: w, Container: "main"})
	c := Config{ContentionWindow: 3 * time.Hour}.WithDefaults()
	lo, hi, limit := edge(0), edge(0.5), 1+c.ContentionSlowdown
	const busyHours = 4.0 / 24
	perDay := (Config{}).TimeOfDayComputeRequest(st) // default: the whole day
	if whole := c.ComputeRequest(st.Compute); math.Abs(perDay-whole) > 1e-12 {
		t.Fatalf("a 24h window: request %.4f, want the whole day's %.4f", perDay, whole)
	}
	k := int(math.Floor(1 / perDay))
	inPeak := overload(k, 0.5, lo, hi, limit)
	if inPeak <= c.ContentionBudget || busyHours*inPeak <= c.ContentionBudget {
		t.Fatalf("whole-day request %.3f packs %d pods: overload %.4f in the busy hours, %.4f over the day; the case does not test correlation",
			perDay, k, inPeak, busyHours*inPeak)
	}
	got := c.TimeOfDayComputeRequest(st)
	kt := int(math.Floor(1 / got))
	if o := overload(kt, 0.5, lo, hi, limit); o > c.ContentionBudget {
		t.Errorf("time-of-day request %.3f packs %d pods: overload %.4f in the busy hours, budget %.2f", got, kt, o, c.ContentionBudget)
	}
	if got <= perDay || got > hi {
		t.Errorf("time-of-day request %.4f, want above the whole day's %.4f and at most the level %.4f", got, perDay, hi)
	}
}

// TestTimeOfDayComputeRequestFlatLoadAndNoData: a load that does not change over the
// day requests what the whole day's bound requests, and so does a history without
// hour-of-day histograms (state from before they existed) or with too little evidence
// in every window: no data is never zero and never a smaller request.
func TestTimeOfDayComputeRequestFlatLoadAndNoData(t *testing.T) {
	m := history.NewModel(history.Options{})
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	diurnal(m, w, "p1", 0, 24, 0.4)
	st := m.Container(history.ContainerKey{WorkloadKey: w, Container: "main"})
	c := Config{ContentionWindow: 3 * time.Hour}
	whole := c.ComputeRequest(st.Compute)
	if got := c.TimeOfDayComputeRequest(st); math.Abs(got-whole) > 1e-3 {
		t.Errorf("flat load: time-of-day request %.4f, whole day %.4f", got, whole)
	}
	old := *st
	old.ComputeByHour = [history.HoursPerDay]vpautil.Histogram{}
	old.ComputeHourSamples = [history.HoursPerDay]int{}
	if got := c.TimeOfDayComputeRequest(&old); got != whole {
		t.Errorf("no hour-of-day histograms: request %.4f, want the whole day's %.4f", got, whole)
	}
	sparse := history.NewModel(history.Options{})
	feed(sparse, w, "p1", t0.Add(11*time.Hour), 20*time.Minute, 10*gib, 0.5)
	feed(sparse, w, "p1", t0.Add(11*time.Hour+20*time.Minute), 10*time.Minute, 10*gib, 0)
	sst := sparse.Container(history.ContainerKey{WorkloadKey: w, Container: "main"})
	if got, want := c.TimeOfDayComputeRequest(sst), c.ComputeRequest(sst.Compute); got != want {
		t.Errorf("half an hour of samples: request %.4f, want the whole day's %.4f", got, want)
	}
	// One day of a busy afternoon: no hour repeats, so no time-of-day effect is taken.
	day := history.NewModel(history.Options{})
	feed(day, w, "p1", t0, 10*time.Hour, 10*gib, 0)
	feed(day, w, "p1", t0.Add(10*time.Hour), 4*time.Hour, 10*gib, 0.5)
	feed(day, w, "p1", t0.Add(14*time.Hour), 10*time.Hour, 10*gib, 0)
	dst := day.Container(history.ContainerKey{WorkloadKey: w, Container: "main"})
	if got, want := c.TimeOfDayComputeRequest(dst), c.ComputeRequest(dst.Compute); got != want {
		t.Errorf("one day of history: request %.4f, want the whole day's %.4f", got, want)
	}
	if got := (Config{ContentionBudget: -1, ContentionWindow: 3 * time.Hour}).TimeOfDayComputeRequest(st); got != 0 {
		t.Errorf("budget off: request %.4f, want 0", got)
	}
}

func TestValidateContentionWindow(t *testing.T) {
	for _, d := range []time.Duration{time.Hour, 3 * time.Hour, 24 * time.Hour} {
		if err := ValidateContentionWindow("contention-window", d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	for _, d := range []time.Duration{0, -time.Hour, 90 * time.Minute, 25 * time.Hour, time.Minute} {
		if err := ValidateContentionWindow("contention-window", d); err == nil {
			t.Errorf("%s: accepted, want an error", d)
		}
	}
}

// TestTenantReserveFromContention: the closed loop's reserve follows the share of a
// container's samples on a shared GPU that found it saturated, over the budget, with the
// prior of ContentionEvidence samples that nothing saturates; it is capped, it decays
// with the evidence, and it is the flat reserve with the loop off.
func TestTenantReserveFromContention(t *testing.T) {
	m := history.NewModel(history.Options{})
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	feed(m, w, "p1", t0, time.Hour, 10*gib, 0.25)
	st := m.Container(history.ContainerKey{WorkloadKey: w, Container: "main"})
	c := Config{}
	now := t0.Add(time.Hour)
	if got := c.TenantReserve(st, now); got != 0 {
		t.Fatalf("no samples on a shared GPU: reserve %.4f, want 0", got)
	}
	// As many co-tenant samples as the prior weighs, about 2 % of them saturated: the
	// share of prior and evidence together is about 1 %, the budget, so the reserve is
	// about the configured one.
	n := int(DefaultContentionEvidence)
	sat := 2 * n / 100
	st.AddDeviceLoad(now, n, sat)
	want := DefaultContentionTenantReserve * float64(sat) / (float64(n) + DefaultContentionEvidence) / DefaultContentionBudget
	if got := c.TenantReserve(st, now); math.Abs(got-want) > 1e-9 || math.Abs(got-DefaultContentionTenantReserve) > 0.005 {
		t.Errorf("saturated share about the budget: reserve %.4f, want %.4f", got, want)
	}
	// Half a day without a sample (scaled to zero, an exporter down) is no evidence:
	// the reserve stays (it fell towards the prior's 0 as if the GPU had not saturated).
	if later := c.TenantReserve(st, now.Add(12*time.Hour)); math.Abs(later-want) > 1e-9 {
		t.Errorf("12 h without samples: reserve %.4f, want %.4f as at the last sample", later, want)
	}
	// Half a day of samples on a GPU of its own: the evidence weighs less against the
	// prior, the reserve falls.
	m2 := history.NewModel(history.Options{})
	feed(m2, w, "p1", t0, time.Hour, 10*gib, 0.25)
	st2 := m2.Container(history.ContainerKey{WorkloadKey: w, Container: "main"})
	st2.AddDeviceLoad(now, n, sat)
	feed(m2, w, "p1", now, 12*time.Hour, 10*gib, 0.25)
	if later := c.TenantReserve(st2, now.Add(12*time.Hour)); !(later < want && later > 0) {
		t.Errorf("12 h alone on a GPU: reserve %.4f, want between 0 and %.4f", later, want)
	}
	// Every further sample saturated: the reserve stops at the cap.
	st.AddDeviceLoad(now, 10*n, 10*n)
	if got := c.TenantReserve(st, now); got != DefaultContentionTenantReserveMax {
		t.Errorf("always saturated: reserve %.4f, want the cap %.4f", got, DefaultContentionTenantReserveMax)
	}
	if got := (Config{ContentionEvidence: -1}).TenantReserve(st, now); got != DefaultContentionTenantReserve {
		t.Errorf("loop off: reserve %.4f, want the flat %.4f", got, DefaultContentionTenantReserve)
	}
	if got := (Config{ContentionTenantReserve: -1}).TenantReserve(st, now); got != 0 {
		t.Errorf("reserve off: %.4f, want 0", got)
	}
}

// TestSaturatingTenantReserveCapRises: a tenant that keeps its GPU at 100 % on its own
// in more than the budget's share of its samples is not held at
// ContentionTenantReserveMax: the cap rises by its own saturated share ÷ the budget (12 %:
// past a whole GPU, so the loop's reserve is not capped; 2 %: twice the cap), while a
// tenant of the same evidence that reaches 100 % in less than the budget's share stays
// at the cap. Without saturated samples of its own, or with the loop off, nothing changes.
func TestSaturatingTenantReserveCapRises(t *testing.T) {
	c := Config{}
	now := t0.Add(time.Hour)
	n := int(DefaultContentionEvidence)
	tenant := func(ownSaturated float64) *history.ContainerState {
		st := &history.ContainerState{Compute: onOff(1000, ownSaturated, 1)}
		st.AddDeviceLoad(now, 2*n, 2*n*12/100)
		return st
	}
	if got := SaturatedShare(onOff(1000, 0.12, 1)); math.Abs(got-0.12) > 1e-3 { // checkpoint weights are rounded
		t.Fatalf("12 %% of samples at 100 %%: SaturatedShare %.4f, want 0.12", got)
	}
	if got := SaturatedShare(onOff(1000, 0.5, 0.9)); got != 0 {
		t.Fatalf("samples at 90 %%: SaturatedShare %.4f, want 0", got)
	}
	want := DefaultContentionTenantReserve * float64(2*n*12/100) / float64(3*n) / DefaultContentionBudget
	if want <= DefaultContentionTenantReserveMax {
		t.Fatalf("fixture: uncapped reserve %.3f is not above the cap", want)
	}
	if got := c.TenantReserve(tenant(0.12), now); math.Abs(got-math.Min(1, want)) > 1e-9 {
		t.Errorf("saturates alone in 12 %% of its samples: reserve %.4f, want %.4f (the cap raised past a whole GPU)", got, math.Min(1, want))
	}
	if got, cap2 := c.TenantReserve(tenant(0.02), now), 0.02/DefaultContentionBudget*DefaultContentionTenantReserveMax; math.Abs(got-cap2) > 0.002 {
		t.Errorf("saturates alone in 2 %% of its samples: reserve %.4f, want the raised cap %.4f", got, cap2)
	}
	if got := c.TenantReserve(tenant(0.005), now); got != DefaultContentionTenantReserveMax {
		t.Errorf("saturates alone in 0.5 %% of its samples: reserve %.4f, want the cap %.4f", got, DefaultContentionTenantReserveMax)
	}
	if got := c.TenantReserve(tenant(0), now); got != DefaultContentionTenantReserveMax {
		t.Errorf("never at 100 %% alone: reserve %.4f, want the cap %.4f", got, DefaultContentionTenantReserveMax)
	}
	if got := (Config{ContentionEvidence: -1}).TenantReserve(tenant(0.12), now); got != DefaultContentionTenantReserve {
		t.Errorf("loop off: reserve %.4f, want the flat %.4f", got, DefaultContentionTenantReserve)
	}
	// A tenant that saturates alone but whose shared GPUs never saturated reserves nothing.
	quiet := &history.ContainerState{Compute: onOff(1000, 0.12, 1)}
	quiet.AddDeviceLoad(now, 2*n, 0)
	if got := c.TenantReserve(quiet, now); got != 0 {
		t.Errorf("shared GPUs never saturated: reserve %.4f, want 0", got)
	}
}
