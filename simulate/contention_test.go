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
// requests add to a run without them: the measured 19.4 % (after a day; the updater
// replaces pods whose request grew, updater.Config.ComputeRequestGrowth, and the tenant
// reserve is learnt from contention, at most estimate.DefaultContentionTenantReserveMax:
// 18.9 % with a cap of 0.12, 14.1 % with the flat reserve before the loop) and a
// margin.
const requestCost = 0.21

// TestContentionBudgetSynthetic replays a busy 4-day synthetic trace (30 workloads × 2
// pods, 30 % of them deployed while it runs; seed 3, which the compute request's
// defaults were not measured on: they were set on seed 1 and GenTD26, the tenant
// reserve on seeds 1–7 at large, docs/benchmarks/savings.md) on 141 GiB GPUs, where
// memory lets many bursty pods share one GPU, with and without compute requests for
// time-sliced pods (estimate.Config.ComputeRequest plus the tenant reserve;
// ContentionBudget < 0 turns them off). Without them contention exceeds the goal;
// with them it is within the goal, from an empty history and after a day. The price is
// bounded: at most requestCost more GPU-minutes than without (measured 9.4 % from an
// empty history and 19.4 % after a day with the closed loop's reserve; 7.3 % and 18.9 %
// with its cap at 0.12; 8.8 % and 14.1 %
// with the flat reserve; 9.1 % and 7.8 % before the updater replaced pods whose request
// grew), gpufrac stays ahead of vpa-memory, and no pod runs over its allocation more
// than without them.
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
		if on.GPUMinutes >= vpa.GPUMinutes {
			t.Errorf("warm-up %s: gpufrac holds %v GPU-minutes, vpa-memory %v: the baseline is ahead", warmUp, on.GPUMinutes, vpa.GPUMinutes)
		}
		if on.PodLimitOverrunMinutes > off.PodLimitOverrunMinutes {
			t.Errorf("warm-up %s: %v pod-minutes over the allocation with compute requests, %v without", warmUp, on.PodLimitOverrunMinutes, off.PodLimitOverrunMinutes)
		}
	}
}

// TestTenantReserveCapSynthetic replays a 2-day synthetic trace of gpufrac simulate
// --format synthetic's defaults (20 workloads × 2 pods, all deployed from the start;
// seed 134, not among the seeds 101–120 the cap was chosen on, docs/benchmarks/savings.md,
// "A higher cap for compute-heavy tenants"; it pins one run of the hold-out, make
// bench-holdout-synthetic, whose seeds a later change must not be tuned on) on 141 GiB
// GPUs after a day of history, with the closed loop's reserve capped at 0.12 (the cap
// before) and at the default. Compute-heavy tenants whose shared GPUs saturate in more
// than 2 % of their samples reach 0.12, and the run ends over the contention goal; the
// default cap keeps it within the goal with no pod over its allocation, at most 10 %
// more GPU-minutes.
func TestTenantReserveCapSynthetic(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 2 days of 40 pods twice")
	}
	o := trace.SynthReplayOptions()
	o.Seed = 134
	tr := trace.Synthesize(o)
	run := func(maxReserve float64) PolicyResult {
		o := Options{GPUMemoryBytes: 141 * gib, WarmUp: 24 * time.Hour, Policies: []string{PolicyGPUFrac}}
		o.Recommender.Estimator.ContentionTenantReserveMax = maxReserve
		res, err := Run(&tr, o)
		if err != nil {
			t.Fatal(err)
		}
		return res.Policies[0]
	}
	low, def := run(0.12), run(0)
	t.Logf("contention %.2f %% → %.2f %% of pod-minutes, GPUs per pod %.3f → %.3f", 100*low.ContentionShare, 100*def.ContentionShare, low.GPUsPerPod, def.GPUsPerPod)
	if low.ContentionShare <= contentionGoal {
		t.Fatalf("with the cap at 0.12 contention is %.2f %%, within the goal: the trace does not test the cap", 100*low.ContentionShare)
	}
	if def.ContentionShare > contentionGoal {
		t.Errorf("contention in %.2f %% of pod-minutes with the default cap, want ≤ %.1f %%", 100*def.ContentionShare, 100*contentionGoal)
	}
	if def.PodLimitOverrunMinutes > 0 {
		t.Errorf("%v pod-minutes over the allocation with the default cap", def.PodLimitOverrunMinutes)
	}
	if def.GPUMinutes > 1.1*low.GPUMinutes {
		t.Errorf("%v GPU-minutes with the default cap, %v with 0.12: more than 10 %% lost", def.GPUMinutes, low.GPUMinutes)
	}
}
