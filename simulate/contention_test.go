package simulate

import (
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/trace"
)

// contentionGoal is issue 12's goal for compute contention: at most 1.5 % of
// pod-minutes on GPUs whose co-tenants' activity sums above one GPU.
const contentionGoal = 0.015

// requestCost is the most GPU-minutes, ratio, TestContentionBudgetSynthetic lets compute
// requests add to a run without them: the measured 25.2 % (after a day; the updater
// replaces pods whose request grew, updater.Config.ComputeRequestGrowth, and the tenant
// reserve is learnt from contention, at most estimate.DefaultContentionTenantReserveMax,
// raised for a tenant that saturates its GPU on its own: one of this trace's, at 100 % in
// 7 % of its minutes, is then isolated: 23.7 % in the updater's order before the
// workload replaced longest ago went first, updater.ReplacesBefore; 19.4 % with the cap
// alone, 18.9 % with a cap of 0.12, 14.1 % with the flat reserve before the loop) and a
// margin.
const requestCost = 0.27

// TestContentionBudgetSynthetic replays a busy 4-day synthetic trace (30 workloads × 2
// pods, 30 % of them deployed while it runs; seed 3, which the compute request's
// defaults were not measured on: they were set on seed 1 and GenTD26, the tenant
// reserve on seeds 1–7 at large, docs/benchmarks/savings.md) on 141 GiB GPUs, where
// memory lets many bursty pods share one GPU, with and without compute requests for
// time-sliced pods (estimate.Config.ComputeRequest plus the tenant reserve;
// ContentionBudget < 0 turns them off). Without them contention exceeds the goal;
// with them it is within the goal, from an empty history and after a day. The price is
// bounded: at most requestCost more GPU-minutes than without (measured 10.1 % from an
// empty history and 25.2 % after a day with the closed loop's reserve; 9.4 % and 19.4 %
// before its cap rose for tenants that saturate their GPU alone; 7.3 % and 18.9 %
// with its cap at 0.12; 8.8 % and 14.1 %
// with the flat reserve; 9.1 % and 7.8 % before the updater replaced pods whose request
// grew), no baseline is ahead by savings-check's rule, and no pod runs over its
// allocation more than without them.
func TestContentionBudgetSynthetic(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 4 days of 60 pods four times")
	}
	tr := trace.Synthesize(trace.SynthOptions{Workloads: 30, PodsPerWorkload: 2, Duration: 96 * time.Hour, Seed: 3,
		End: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), Model: trace.SynthModel{ArrivingWorkloads: 0.3}})
	run := func(warmUp time.Duration, budget float64) (g, vpa PolicyResult) {
		o := Options{GPUMemoryBytes: 141 * gib, WarmUp: warmUp, Policies: []string{PolicyVPAMemory, PolicyGPUFrac}}
		o.Recommender.Estimator.ContentionBudget = budget
		res, err := Run(&tr, o)
		if err != nil {
			t.Fatal(err)
		}
		return res.Policies[1], res.Policies[0]
	}
	for _, warmUp := range []time.Duration{0, 24 * time.Hour} {
		off, _ := run(warmUp, -1)
		on, vpa := run(warmUp, 0)
		t.Logf("warm-up %s: contention %.2f %% → %.2f %% of pod-minutes, GPUs per pod %.3f → %.3f (vpa-memory %.3f)",
			warmUp, 100*off.ContentionShare, 100*on.ContentionShare, off.GPUsPerPod, on.GPUsPerPod, vpa.GPUsPerPod)
		if warmUp == 0 && off.ContentionShare <= contentionGoal {
			t.Fatalf("without compute requests contention is %.2f %%, within the goal: the trace does not test the lever", 100*off.ContentionShare)
		}
		if on.ContentionShare > contentionGoal {
			t.Errorf("warm-up %s: contention in %.2f %% of pod-minutes with compute requests, want ≤ %.1f %%", warmUp, 100*on.ContentionShare, 100*contentionGoal)
		}
		if on.GPUMinutes > (1+requestCost)*off.GPUMinutes {
			t.Errorf("warm-up %s: %v GPU-minutes with compute requests, %v without: more than %.0f %% lost", warmUp, on.GPUMinutes, off.GPUMinutes, 100*requestCost)
		}
		// savings-check's rule: a baseline is ahead with fewer GPU-minutes and no more
		// pod-minutes over its allocations (after a day vpa-memory holds 1.8 % fewer, with 5
		// pod-minutes over its allocations and 2.73 % of pod-minutes in contention).
		if vpa.GPUMinutes < on.GPUMinutes && vpa.PodLimitOverrunMinutes <= on.PodLimitOverrunMinutes {
			t.Errorf("warm-up %s: gpufrac holds %v GPU-minutes, vpa-memory %v with %v pod-minutes over its allocations (gpufrac %v): the baseline is ahead",
				warmUp, on.GPUMinutes, vpa.GPUMinutes, vpa.PodLimitOverrunMinutes, on.PodLimitOverrunMinutes)
		}
		if on.PodLimitOverrunMinutes > off.PodLimitOverrunMinutes {
			t.Errorf("warm-up %s: %v pod-minutes over the allocation with compute requests, %v without", warmUp, on.PodLimitOverrunMinutes, off.PodLimitOverrunMinutes)
		}
	}
}

// TestSaturatingTenantSynthetic replays a 2-day synthetic trace of gpufrac simulate
// --format synthetic's defaults (20 workloads × 2 pods, all deployed from the start; seed
// 134, a run of the hold-out, make bench-holdout-synthetic) on 80 GiB GPUs after 12 h
// of history and 141 GiB GPUs after a day. One of its workloads keeps its GPU at 100 %
// on its own in 12 % of its minutes. With the closed loop's reserve capped at
// ContentionTenantReserveMax for it as for any tenant, its pods kept sharing and the run
// at 80 GiB ended with 1.64 % of pod-minutes in contention, over the goal; the cap now
// rises with a tenant's own saturated share (estimate.Config.TenantReserve), and both
// runs stay within the goal with no pod over its allocation and within issue 12's
// 1.15 × clairvoyant-memory at 80 GiB (measured 1.08×; 1.00× at 1.64 % before).
func TestSaturatingTenantSynthetic(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 2 days of 40 pods twice")
	}
	o := trace.SynthReplayOptions()
	o.Seed = 134
	tr := trace.Synthesize(o)
	for _, c := range []struct {
		gpu    int64
		warmUp time.Duration
	}{{80 * gib, 12 * time.Hour}, {141 * gib, 24 * time.Hour}} {
		res, err := Run(&tr, Options{GPUMemoryBytes: c.gpu, WarmUp: c.warmUp, Policies: []string{PolicyGPUFrac, PolicyClairvoyantMemory}})
		if err != nil {
			t.Fatal(err)
		}
		g, bound := res.Policies[0], res.Policies[1]
		ratio := g.GPUMinutes / bound.GPUMinutes
		t.Logf("%d GiB after %s: contention %.2f %% of pod-minutes, %.3f × clairvoyant-memory", c.gpu/gib, c.warmUp, 100*g.ContentionShare, ratio)
		if g.ContentionShare > contentionGoal {
			t.Errorf("%d GiB after %s: contention in %.2f %% of pod-minutes, want ≤ %.1f %%", c.gpu/gib, c.warmUp, 100*g.ContentionShare, 100*contentionGoal)
		}
		if over := g.PodLimitOverrunMinutes - g.WarmUpOverrunMinutes; over > 0 {
			t.Errorf("%d GiB after %s: %v pod-minutes over the allocation after warm-up", c.gpu/gib, c.warmUp, over)
		}
		if c.gpu == 80*gib && ratio > 1.15 {
			t.Errorf("80 GiB after 12 h: %.3f × clairvoyant-memory, want ≤ 1.15", ratio)
		}
	}
}
