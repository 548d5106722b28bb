package recommend

import (
	"fmt"
	"math"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/recommender/estimate"
	"github.com/gpufrac/gpufrac/recommender/history"
	"github.com/gpufrac/gpufrac/recommender/policy"
)

// FlagSet is what Flags registers on: the methods the standard library's flag.FlagSet
// (cmd/recommender) and spf13/pflag's FlagSet (gpufrac simulate, cobra) share.
type FlagSet interface {
	Float64Var(p *float64, name string, value float64, usage string)
	DurationVar(p *time.Duration, name string, value time.Duration, usage string)
	StringVar(p *string, name string, value string, usage string)
	BoolVar(p *bool, name string, value bool, usage string)
}

// Flags are the command-line options of the recommendation step (estimator, history
// and policy) that cmd/recommender and gpufrac simulate share, so both take the same
// names, defaults, checks and errors: AddFlags registers them, Complete checks them
// once parsed. Documented in docs/recommender.md.
type Flags struct {
	c                      *Config
	minMemory, fitHeadroom string
	spreadBackends         string
	young                  bool
}

// AddFlags registers the flags on fs; they write into c (read it after Complete).
func (f *Flags) AddFlags(fs FlagSet, c *Config) {
	f.c = c
	d := Config{}.WithDefaults()
	fs.Float64Var(&c.LowConfidence, "low-confidence", d.LowConfidence, "Confidence, ratio 0–1, under which LowConfidence is set and the recommendation is not applied.")
	fs.DurationVar(&c.Estimator.FullConfidenceHistory, "full-confidence-history", estimate.DefaultFullConfidenceHistory, "History length at which confidence reaches 100%.")
	fs.Float64Var(&c.Estimator.ComputeMargin, "compute-margin", estimate.DefaultComputeMargin, "Safety margin on compute, ratio (VPA's).")
	fs.Float64Var(&c.Estimator.ContentionBudget, "contention-budget", estimate.DefaultContentionBudget, "Probability, ratio 0–1 (exclusive), that time-sliced co-tenants whose computeRequests sum to at most one GPU ask together for more than 1 + --contention-slowdown GPUs in one cycle; sizes each TimeSlicing container's computeRequest (its effective compute, docs/recommender.md). Negative: no computeRequest.")
	fs.Float64Var(&c.Estimator.ContentionSlowdown, "contention-slowdown", estimate.DefaultContentionSlowdown, "Overload, ratio of one GPU (positive), that --contention-budget bounds: co-tenants asking for 1 + this many GPUs run that much slower under time-slicing.")
	fs.Float64Var(&c.Estimator.ContentionTenantReserveMax, "contention-tenant-reserve-max", estimate.DefaultContentionTenantReserveMax, "Largest --contention-tenant-reserve the closed loop gives a TimeSlicing container, share of one GPU (0–1]; for a container that saturates its GPU on its own in more than --contention-budget of its samples, × that share ÷ the budget, at most 1 (docs/recommender.md).")
	fs.Float64Var(&c.Estimator.ContentionEvidence, "contention-evidence", estimate.DefaultContentionEvidence, "Weight, in compute samples, of the prior that a TimeSlicing container without evidence saturates no GPU: its reserve scales with saturated samples ÷ (samples on a shared GPU + this) ÷ --contention-budget (docs/recommender.md). 0: the default. Negative: no closed loop, every container reserves --contention-tenant-reserve.")
	fs.Float64Var(&c.Estimator.ContentionTenantReserve, "contention-tenant-reserve", estimate.DefaultContentionTenantReserve, "Share of one GPU (0–1) a TimeSlicing container's computeRequest adds to its effective compute when the share of its samples on a shared GPU that found the GPU saturated equals --contention-budget; the closed loop scales it with that share, at most --contention-tenant-reserve-max (with --contention-evidence negative: every container's flat reserve) (docs/recommender.md). Negative: none.")
	fs.DurationVar(&c.Estimator.ContentionWindow, "contention-window", estimate.DefaultContentionWindow, "Width, whole hours 1h–24h, of the windows of the day (UTC) on which the --contention-budget bound is conditioned: a computeRequest is the container's effective compute in its busiest window, so co-tenants whose loads peak in the same hours keep the budget (docs/recommender.md). 24h (default): the whole day (loads assumed independent); 3h is the setting measured in docs/benchmarks/savings.md.")
	fs.Float64Var(&c.Estimator.MemorySpreadFactor, "memory-spread-factor", estimate.DefaultMemorySpreadFactor, "For the autoscalers of --memory-spread-backends, a memoryLimit above the memory target whose headroom is never below this many times the workload's spread (its highest per-interval memory peak over its median one, minus 1, at most 1), ratio: burst room above a pod placed by its observed peak; the target (the need the sharing mode and GPU totals read) keeps the policy's headroom. Negative: off (no memoryLimit). The default is measured in docs/benchmarks/savings.md.")
	fs.Float64Var(&c.Estimator.MemoryLimitMinHeadroom, "memory-limit-min-headroom", estimate.DefaultMemoryLimitMinHeadroom, "For the autoscalers of --memory-spread-backends, the least headroom of the memoryLimit above the workload's highest per-interval memory peak, ratio (0.5: a limit at least 1.5 x that peak; at most 1): burst room for a workload whose peaks have not spread yet. Negative: none (the spread alone). The default is measured in docs/benchmarks/savings.md.")
	fs.Float64Var(&c.Estimator.MemoryLimitTypicalFactor, "memory-limit-typical-factor", estimate.DefaultMemoryLimitTypicalFactor, "For the autoscalers of --memory-spread-backends, the least memoryLimit as a multiple of the workload's median per-interval memory peak (its typical level; 2: GenTD26's published per-pod peak-to-mean memory ratios are at most 2.0), so a pod whose rare peak has not shown yet keeps the room its kind reaches; the limit stays at most twice the highest peak. Negative: none. The default is measured in docs/benchmarks/savings.md.")
	fs.StringVar(&f.spreadBackends, "memory-spread-backends", joinBackends(DefaultMemorySpreadBackends), "Comma-separated backends (spec.backend.type; none set: annotations) whose autoscalers get the memoryLimit of --memory-spread-factor; the others' limit is the target. Default: annotations, which places pods by their observed memory peak (the webhook's --annotation-memory-request observed-peak) so the larger limit costs no GPUs; drop it when the webhook runs --annotation-memory-request none. Empty: none.")
	fs.DurationVar(&c.History.MemoryAggregationInterval, "memory-aggregation-interval", history.DefaultMemoryAggregationInterval, "Interval whose per-pod peak is one memory sample.")
	fs.DurationVar(&c.History.HalfLife, "half-life", history.DefaultHalfLife, "Decay half-life of the histograms (VPA's).")
	fs.DurationVar(&c.History.PeakWindow, "memory-peak-window", history.DefaultPeakWindow, "Window of the recent memory peak the target never goes below (rare spikes stay in the target this long).")
	fs.StringVar(&f.minMemory, "min-memory", "", "Smallest memory recommended (quantity, bytes; default 512Mi: a CUDA context and allocator pools).")
	fs.StringVar(&f.fitHeadroom, "fit-memory-headroom", resource.NewQuantity(policy.DefaultFitMemoryHeadroomBytes, resource.BinarySI).String(), "Least room above the recent memory peak for rounding a memory target down to a whole share of one GPU (½, ⅓, …), a quantity; 0 turns packing-aware sizing off.")
	fs.Float64Var(&c.Policy.FitNearLimit, "fit-near-limit", 0, "Ratio 0–1 of the recent memory peak to a whole share of one GPU from which a target is not rounded down to that share; set it to the updater's --near-limit (0.9) so no rounded pod starts near its limit. 0: off (the default; measured in docs/benchmarks/savings.md).")
	fs.DurationVar(&c.Estimator.YoungMinAtLevel, "young-min-at-level", estimate.DefaultYoungMinAtLevel, "With --young-evidence, how long a new workload's memory must have held its level (no sample more than 5 % above its highest) before it gets a young recommendation (a 100 % margin) with less than one --memory-aggregation-interval of history, once its GPU has run a kernel (a compute sample above 0); until then its pods keep a whole GPU. Negative: a whole interval. The default is measured in docs/benchmarks/savings.md.")
	fs.BoolVar(&f.young, "young-evidence", true, "Young workloads (confidence under --low-confidence) earn confidence from the hours their memory stays at its level, with a 1/n margin on the memory target (docs/recommender.md); false: confidence from the history's length only.")
}

// Complete checks the parsed flags and writes those that need parsing (quantities,
// switches) into the Config given to AddFlags. Its errors name the flag; a value the
// Config would read as unset and replace by its default (0, or a duration or
// --compute-margin of 0 or below) is an error, not the default.
func (f *Flags) Complete() error {
	c := f.c
	if r := c.LowConfidence; !(r > 0 && r <= 1) {
		return fmt.Errorf("--low-confidence %v: want a ratio in (0, 1]", r)
	}
	// The Config reads 0 (and, for these, a negative value) as unset and puts the default
	// in its place: refuse them, so a run never uses another setting than the one given.
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"full-confidence-history", c.Estimator.FullConfidenceHistory},
		{"memory-aggregation-interval", c.History.MemoryAggregationInterval},
		{"half-life", c.History.HalfLife},
		{"memory-peak-window", c.History.PeakWindow},
	} {
		if d.v <= 0 {
			return fmt.Errorf("--%s %v: want a positive duration", d.flag, d.v)
		}
	}
	if m := c.Estimator.ComputeMargin; m <= 0 {
		return fmt.Errorf("--compute-margin %v: want a positive ratio", m)
	}
	if c.Estimator.YoungMinAtLevel == 0 {
		return fmt.Errorf("--young-min-at-level 0s: want a positive duration, or a negative one for a whole --memory-aggregation-interval")
	}
	for _, z := range []struct {
		flag, off string
		v         float64
	}{
		{"contention-tenant-reserve", "none", c.Estimator.ContentionTenantReserve},
		{"memory-spread-factor", "no memoryLimit", c.Estimator.MemorySpreadFactor},
		{"memory-limit-min-headroom", "none", c.Estimator.MemoryLimitMinHeadroom},
		{"memory-limit-typical-factor", "none", c.Estimator.MemoryLimitTypicalFactor},
	} {
		if z.v == 0 {
			return fmt.Errorf("--%s 0: want a positive value, or a negative one for %s", z.flag, z.off)
		}
	}
	// ContentionSpace takes ln(1/budget)/slowdown: a budget of 0 or ≥ 1, or a slowdown
	// ≤ 0, gives no finite positive s (estimate.Config.ContentionSpace).
	if b := c.Estimator.ContentionBudget; b == 0 || b >= 1 {
		return fmt.Errorf("--contention-budget %v: want a probability between 0 and 1 (exclusive), or a negative value for no computeRequest", b)
	}
	if s := c.Estimator.ContentionSlowdown; s <= 0 {
		return fmt.Errorf("--contention-slowdown %v: want a positive ratio of one GPU", s)
	}
	if r := c.Estimator.ContentionTenantReserve; r >= 1 {
		return fmt.Errorf("--contention-tenant-reserve %v: want a share of one GPU under 1, or a negative value for none", r)
	}
	if m := c.Estimator.ContentionTenantReserveMax; !(m > 0 && m <= 1) {
		return fmt.Errorf("--contention-tenant-reserve-max %v: want a share of one GPU in (0, 1]", m)
	}
	if e := c.Estimator.ContentionEvidence; math.IsNaN(e) || math.IsInf(e, 0) {
		return fmt.Errorf("--contention-evidence %v: want a number of samples, or a negative value for no closed loop", e)
	}
	if err := estimate.ValidateContentionWindow("contention-window", c.Estimator.ContentionWindow); err != nil {
		return err
	}
	if f.minMemory != "" {
		m, err := resource.ParseQuantity(f.minMemory)
		if err != nil || m.Sign() <= 0 {
			return fmt.Errorf("--min-memory %q: want a positive quantity such as 512Mi", f.minMemory)
		}
		c.Policy.MinMemoryBytes = m.AsApproximateFloat64()
	}
	fit, err := resource.ParseQuantity(f.fitHeadroom)
	if err != nil || fit.Sign() < 0 {
		return fmt.Errorf("--fit-memory-headroom %q: want a quantity such as 2Gi, or 0", f.fitHeadroom)
	}
	c.Policy.FitMemoryHeadroomBytes = fit.AsApproximateFloat64()
	if fit.IsZero() {
		c.Policy.FitMemoryHeadroomBytes = -1 // off
	}
	if r := c.Policy.FitNearLimit; r < 0 || r > 1 {
		return fmt.Errorf("--fit-near-limit %v: want a ratio 0-1", r)
	}
	if !f.young {
		c.Estimator.YoungConfidence = -1 // off
	}
	bs, err := parseBackends(f.spreadBackends)
	if err != nil {
		return fmt.Errorf("--memory-spread-backends: %w", err)
	}
	c.MemorySpreadBackends = bs
	return nil
}

// parseBackends parses a comma-separated list of backend types (backend.ParseType); it
// returns an error naming the first unknown one and the known ones. Empty: none (an empty, non-nil
// slice, which Config.WithDefaults keeps).
func parseBackends(s string) ([]gpufracv1.BackendType, error) {
	out := []gpufracv1.BackendType{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		b, err := backend.ParseType(f)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// joinBackends writes backend types as a comma-separated list.
func joinBackends(bs []gpufracv1.BackendType) string {
	s := make([]string, len(bs))
	for i, b := range bs {
		s[i] = string(b)
	}
	return strings.Join(s, ",")
}
