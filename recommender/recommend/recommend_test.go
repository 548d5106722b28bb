package recommend

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/estimate"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/recommender/policy"
)

func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

// A new recommendation replaces the written one only past the noise: memory 2 %
// relative, compute one histogram bucket after the 15 % margin (11.5m, plus a milli of
// rounding), bounds 10 % relative, and any change of sharing mode.
func TestWithinNoise(t *testing.T) {
	c := Config{}.WithDefaults()
	base := func() *gpufracv1.ContainerRecommendation {
		return &gpufracv1.ContainerRecommendation{SharingMode: gpufracv1.SharingModeMPS,
			Target:     gpufracv1.GPUResources{Memory: q("10000Mi"), Compute: q("300m")},
			LowerBound: gpufracv1.GPUResources{Memory: q("8000Mi")}, UpperBound: gpufracv1.GPUResources{Memory: q("20000Mi")}}
	}
	for _, tc := range []struct {
		name string
		mod  func(r *gpufracv1.ContainerRecommendation)
		want bool
	}{
		{"same", func(*gpufracv1.ContainerRecommendation) {}, true},
		{"memory +1.5%", func(r *gpufracv1.ContainerRecommendation) { r.Target.Memory = q("10150Mi") }, true},
		{"memory +3%", func(r *gpufracv1.ContainerRecommendation) { r.Target.Memory = q("10300Mi") }, false},
		{"compute +5m", func(r *gpufracv1.ContainerRecommendation) { r.Target.Compute = q("305m") }, true},
		{"compute +10m (one bucket)", func(r *gpufracv1.ContainerRecommendation) { r.Target.Compute = q("310m") }, true},
		{"compute +12m (one bucket after the margin, rounded up)", func(r *gpufracv1.ContainerRecommendation) { r.Target.Compute = q("312m") }, true},
		{"compute -12m", func(r *gpufracv1.ContainerRecommendation) { r.Target.Compute = q("288m") }, true},
		{"compute +14m", func(r *gpufracv1.ContainerRecommendation) { r.Target.Compute = q("314m") }, false},
		{"compute +20m", func(r *gpufracv1.ContainerRecommendation) { r.Target.Compute = q("320m") }, false},
		{"upper bound -8%", func(r *gpufracv1.ContainerRecommendation) { r.UpperBound.Memory = q("18400Mi") }, true},
		{"upper bound -15%", func(r *gpufracv1.ContainerRecommendation) { r.UpperBound.Memory = q("17000Mi") }, false},
		{"compute gone", func(r *gpufracv1.ContainerRecommendation) { r.Target.Compute = nil }, false},
		{"sharing mode", func(r *gpufracv1.ContainerRecommendation) { r.SharingMode = gpufracv1.SharingModeTimeSlicing }, false},
	} {
		cur := base()
		tc.mod(cur)
		if got := withinNoise(base(), cur, c); got != tc.want {
			t.Errorf("%s: withinNoise %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestYoungWorkloadWiring checks that the recommendation step hands its LowConfidence to
// the estimator's young rule: 3 h of steady memory give confidence min(3/4, LowConfidence)
// and a 33 % margin, and the rule turned off (YoungConfidence −1) leaves the clock's
// confidence (3 h of 24 h) and no margin.
func TestYoungWorkloadWiring(t *testing.T) {
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	m := history.NewModel(history.Options{})
	var ms, cs metrics.Series
	ms.ID = metrics.ContainerID{Namespace: "ns", Pod: "p1", Container: "main"}
	cs.ID = ms.ID
	for at := t0; at.Before(t0.Add(3 * time.Hour)); at = at.Add(time.Minute) {
		ms.Samples = append(ms.Samples, metrics.Sample{Time: at, Value: 10 << 30})
		cs.Samples = append(cs.Samples, metrics.Sample{Time: at, Value: 0.2})
	}
	m.Add(w, metrics.SignalMemory, ms)
	m.Add(w, metrics.SignalCompute, cs)
	now := t0.Add(3 * time.Hour)
	spec := &gpufracv1.GPUFractionAutoscalerSpec{}
	for _, tc := range []struct {
		name          string
		cfg           Config
		conf, youngPc int32
	}{
		{"default threshold 0.5", Config{}, 50, 33},
		{"threshold 0.8: 3/4", Config{LowConfidence: 0.8}, 75, 33},
		{"rule off", Config{Estimator: estimate.Config{YoungConfidence: -1}}, 13, 0},
	} {
		recs, _, _ := tc.cfg.WithDefaults().Recommend(m, w, spec, nil, nil, gpufracv1.GuardrailNone, now)
		if len(recs) != 1 {
			t.Fatalf("%s: %d recommendations", tc.name, len(recs))
		}
		if r := recs[0]; r.ConfidencePercent != tc.conf || r.YoungMarginPercent != tc.youngPc {
			t.Errorf("%s: confidence %d%%, young margin %d%%; want %d%%, %d%%", tc.name, r.ConfidencePercent, r.YoungMarginPercent, tc.conf, tc.youngPc)
		}
	}
}

// TestMemorySpreadByBackend: a workload whose memory peaks spread well above their median
// gets a memoryLimit with the spread as headroom (the target keeps the policy's) only
// under a backend of MemorySpreadBackends (by default the annotations backend, also when
// the spec names none), none under another (HAMi), with the factor off or with no
// backend listed. A backend change adds or drops the limit at the next cycle, although
// the target is within noise of the one written (withinNoise).
func TestMemorySpreadByBackend(t *testing.T) {
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	m := history.NewModel(history.Options{})
	var ms metrics.Series
	ms.ID = metrics.ContainerID{Namespace: "ns", Pod: "p1", Container: "main"}
	for at := t0; at.Before(t0.Add(48 * time.Hour)); at = at.Add(time.Minute) {
		v := 10.0 * (1 << 30)
		if at.Minute() == 0 && at.Hour()%6 == 0 {
			v = 14 << 30 // a spike every 6 hours: peaks 40 % above the median one
		}
		ms.Samples = append(ms.Samples, metrics.Sample{Time: at, Value: v})
	}
	m.Add(w, metrics.SignalMemory, ms)
	now := t0.Add(48 * time.Hour)
	var last []gpufracv1.ContainerRecommendation
	target := func(cfg Config, bt gpufracv1.BackendType, prev []gpufracv1.ContainerRecommendation) float64 {
		spec := &gpufracv1.GPUFractionAutoscalerSpec{}
		if bt != "" {
			spec.Backend = &gpufracv1.Backend{Type: bt}
		}
		recs, _, _ := cfg.WithDefaults().Recommend(m, w, spec, nil, prev, gpufracv1.GuardrailNone, now)
		last = recs
		if len(recs) != 1 || recs[0].Target.Memory == nil {
			t.Fatalf("%s: recommendations %+v", bt, recs)
		}
		// The target is the need with the policy's headroom either way; the spread
		// shows in the limit written above it.
		if got, want := recs[0].Target.Memory.AsApproximateFloat64(), 14*(1<<30)*(1+estimate.DefaultMemoryHeadroom); got > want*1.05 {
			t.Errorf("%s: memory target %.1f GiB, want the policy's headroom alone (%.1f GiB)", bt, got/(1<<30), want/(1<<30))
		}
		if l := recs[0].MemoryLimit; l != nil {
			return l.AsApproximateFloat64()
		}
		return recs[0].Target.Memory.AsApproximateFloat64()
	}
	noFit := Config{Policy: policy.Config{FitMemoryHeadroomBytes: -1}, // no rounding to a share
		Estimator: estimate.Config{MemorySpreadFactor: estimate.DefaultMemorySpreadFactor}}
	plain := 14 * (1 << 30) * (1 + estimate.DefaultMemoryHeadroom)
	for _, tc := range []struct {
		name   string
		cfg    Config
		bt     gpufracv1.BackendType
		spread bool
	}{
		{"no backend set: annotations", noFit, "", true},
		{"annotations", noFit, gpufracv1.BackendAnnotations, true},
		{"hami", noFit, gpufracv1.BackendHAMi, false},
		{"hami listed", Config{Policy: noFit.Policy, Estimator: noFit.Estimator, MemorySpreadBackends: []gpufracv1.BackendType{gpufracv1.BackendHAMi}}, gpufracv1.BackendHAMi, true},
		{"none listed", Config{Policy: noFit.Policy, Estimator: noFit.Estimator, MemorySpreadBackends: []gpufracv1.BackendType{}}, gpufracv1.BackendAnnotations, false},
		{"factor off", Config{Policy: noFit.Policy, Estimator: estimate.Config{MemorySpreadFactor: -1}}, gpufracv1.BackendAnnotations, false},
		{"the default factor", Config{Policy: noFit.Policy}, gpufracv1.BackendAnnotations, true},
	} {
		got := target(tc.cfg, tc.bt, nil)
		if spread := got > plain*1.05; spread != tc.spread {
			t.Errorf("%s: memory target %.1f GiB (policy headroom alone: %.1f GiB); spread headroom in the limit %v, want %v", tc.name, got/(1<<30), plain/(1<<30), spread, tc.spread)
		}
	}
	// The backend changes under a written recommendation: the limit follows.
	target(noFit, gpufracv1.BackendAnnotations, nil)
	withLimit := last
	if got := target(noFit, gpufracv1.BackendHAMi, withLimit); got > plain*1.05 || last[0].MemoryLimit != nil {
		t.Errorf("annotations -> hami: memory limit %v kept (%.1f GiB)", last[0].MemoryLimit, got/(1<<30))
	}
	if got := target(noFit, gpufracv1.BackendAnnotations, last); got <= plain*1.05 || last[0].MemoryLimit == nil {
		t.Errorf("hami -> annotations: no memory limit (%.1f GiB)", got/(1<<30))
	}
	if target(noFit, gpufracv1.BackendAnnotations, withLimit); last[0].MemoryLimit == nil || last[0].MemoryLimit.Cmp(*withLimit[0].MemoryLimit) != 0 {
		t.Errorf("same backend: limit %v, want the written %v kept", last[0].MemoryLimit, withLimit[0].MemoryLimit)
	}
}

// TestHourOfDayHistogramsOnlyWhenRead: the hour-of-day histograms are kept only while
// the contention budget is on with a window shorter than the day.
func TestHourOfDayHistogramsOnlyWhenRead(t *testing.T) {
	for _, tc := range []struct {
		est  estimate.Config
		skip bool
	}{{estimate.Config{ContentionWindow: 3 * time.Hour}, false}, {estimate.Config{}, true}, {estimate.Config{ContentionWindow: 24 * time.Hour}, true},
		{estimate.Config{ContentionBudget: -1, ContentionWindow: 3 * time.Hour}, true}} {
		if got := (Config{Estimator: tc.est}).WithDefaults().History.NoComputeByHour; got != tc.skip {
			t.Errorf("%+v: NoComputeByHour %v, want %v", tc.est, got, tc.skip)
		}
	}
}

// TestRecommendRecordsDerivation: each container recommendation records the
// percentiles, compute margin and memory interval it was derived with, from the
// Config the recommender runs with (its flags), not the defaults; a target kept within
// noise keeps the derivation it was written with.
func TestRecommendRecordsDerivation(t *testing.T) {
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	spec := &gpufracv1.GPUFractionAutoscalerSpec{}
	for _, tc := range []struct {
		name                string
		cfg                 Config
		memP, compP, margin string
		interval            time.Duration
	}{
		{"defaults", Config{}, "900m", "900m", "150m", time.Hour},
		{"--compute-margin 0.3", Config{Estimator: estimate.Config{ComputeMargin: 0.3}}, "900m", "900m", "300m", time.Hour},
		{"p95 memory, p75 compute, 5 % margin, 30m", Config{Estimator: estimate.Config{MemoryTargetPercentile: 0.95, ComputeTargetPercentile: 0.75, ComputeMargin: 0.05},
			History: history.Options{MemoryAggregationInterval: 30 * time.Minute}}, "950m", "750m", "50m", 30 * time.Minute},
	} {
		cfg := tc.cfg.WithDefaults()
		m := history.NewModel(cfg.History)
		var ms, cs metrics.Series
		ms.ID = metrics.ContainerID{Namespace: "ns", Pod: "p1", Container: "main"}
		cs.ID = ms.ID
		for at := t0; at.Before(t0.Add(30 * time.Hour)); at = at.Add(time.Minute) {
			ms.Samples = append(ms.Samples, metrics.Sample{Time: at, Value: 10 << 30})
			cs.Samples = append(cs.Samples, metrics.Sample{Time: at, Value: 0.2})
		}
		m.Add(w, metrics.SignalMemory, ms)
		m.Add(w, metrics.SignalCompute, cs)
		recs, _, _ := cfg.Recommend(m, w, spec, nil, nil, gpufracv1.GuardrailNone, t0.Add(30*time.Hour))
		if len(recs) != 1 {
			t.Fatalf("%s: %d recommendations", tc.name, len(recs))
		}
		d := recs[0].Derivation
		if d == nil {
			t.Fatalf("%s: no derivation recorded", tc.name)
		}
		if d.MemoryPercentile.Cmp(*q(tc.memP)) != 0 || d.ComputePercentile.Cmp(*q(tc.compP)) != 0 || d.ComputeMargin.Cmp(*q(tc.margin)) != 0 || d.MemoryInterval.Duration != tc.interval {
			t.Errorf("%s: derivation %+v; want memory %s per %v, compute %s + %s", tc.name, d, tc.memP, tc.interval, tc.compP, tc.margin)
		}
		// Written earlier with other settings and within noise: kept with its own.
		prev := recs[0]
		prev.Derivation = &gpufracv1.Derivation{MemoryPercentile: *q("990m"), ComputePercentile: *q("990m"), ComputeMargin: *q("0")}
		kept, _, _ := cfg.Recommend(m, w, spec, nil, []gpufracv1.ContainerRecommendation{prev}, gpufracv1.GuardrailNone, t0.Add(30*time.Hour))
		if got := kept[0].Derivation; got == nil || got.MemoryPercentile.Cmp(*q("990m")) != 0 {
			t.Errorf("%s: a target kept within noise took derivation %+v, want the written one's", tc.name, got)
		}
	}
}

// TestYoungLimitAtShareByBackend: a young workload's memoryLimit is written at the whole
// share of one GPU its target falls in (its upper bound) only for the backends that place
// pods by their observed peak (MemorySpreadBackends, the annotations backend by default);
// others, kai-nvfractions or HAMi unlisted, place pods by the target and get no limit. The
// target is the need under every backend.
func TestYoungLimitAtShareByBackend(t *testing.T) {
	w := history.WorkloadKey{Namespace: "ns", Kind: "Deployment", Name: "web"}
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	// sawBelow: a young target under its share, where the limit matters, was tested.
	sawBelow := false
	for _, hours := range []int{2, 5, 9} { // young: under --low-confidence's 12 h
		m := history.NewModel(history.Options{})
		var ms metrics.Series
		ms.ID = metrics.ContainerID{Namespace: "ns", Pod: "p1", Container: "main"}
		for at := t0; at.Before(t0.Add(time.Duration(hours) * time.Hour)); at = at.Add(time.Minute) {
			ms.Samples = append(ms.Samples, metrics.Sample{Time: at, Value: 20 << 30})
		}
		m.Add(w, metrics.SignalMemory, ms)
		now := t0.Add(time.Duration(hours) * time.Hour)
		var need int64
		for _, tc := range []struct {
			bt      gpufracv1.BackendType
			listed  []gpufracv1.BackendType // nil: the default
			atShare bool
		}{
			{"", nil, true},
			{gpufracv1.BackendAnnotations, nil, true},
			{gpufracv1.BackendKAINVFractions, nil, false},
			{gpufracv1.BackendHAMi, nil, false},
			{gpufracv1.BackendHAMi, []gpufracv1.BackendType{gpufracv1.BackendHAMi}, true},
		} {
			spec := &gpufracv1.GPUFractionAutoscalerSpec{}
			if tc.bt != "" {
				spec.Backend = &gpufracv1.Backend{Type: tc.bt}
			}
			cfg := Config{MemorySpreadBackends: tc.listed}.WithDefaults()
			recs, _, _ := cfg.Recommend(m, w, spec, nil, nil, gpufracv1.GuardrailNone, now)
			if len(recs) != 1 || recs[0].Target.Memory == nil || recs[0].UpperBound.Memory == nil || recs[0].YoungMarginPercent == 0 {
				t.Fatalf("%dh, %q: want one young recommendation, got %+v", hours, tc.bt, recs)
			}
			target, upper := recs[0].Target.Memory.Value(), recs[0].UpperBound.Memory.Value()
			if need == 0 {
				need = target
			}
			if target != need || target > upper {
				t.Errorf("%dh, %q: target %d MiB, upper bound %d MiB; want the need %d MiB, at most the share", hours, tc.bt, target>>20, upper>>20, need>>20)
			}
			lim := recs[0].MemoryLimit
			switch {
			case !tc.atShare && lim != nil:
				t.Errorf("%dh, %q listed %v: memoryLimit %s; want none (placed by the target)", hours, tc.bt, tc.listed, lim)
			case tc.atShare && target < upper && (lim == nil || lim.Value() < upper):
				t.Errorf("%dh, %q listed %v: memoryLimit %v under the upper bound %d MiB", hours, tc.bt, tc.listed, lim, upper>>20)
			}
			sawBelow = sawBelow || target < upper
		}
	}
	if !sawBelow {
		t.Error("no young target under its share: the case the limit is for was not tested")
	}
}
