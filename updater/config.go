package updater

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/packing"
	"github.com/gpufrac/gpufrac/statuslease"
)

// Defaults of Config, shared with cmd/updater's flags and the simulator.
const (
	// DefaultMinPodAge is the age a pod inside its bounds must reach before it is
	// replaced for being off target: VPA's updater's podLifetimeUpdateThreshold (12h).
	DefaultMinPodAge = 12 * time.Hour
	// DefaultThreshold is the relative difference from the target that makes an old
	// enough pod out of date, ratio: VPA's updater's 10 % (minChangePriority).
	DefaultThreshold = 0.1
	// DefaultNearLimit is the observed memory peak ÷ applied memory, ratio, from which
	// memory growth is urgent (VPA has none: it reacts to OOMs only).
	DefaultNearLimit = 0.9
	// DefaultComputeRequestGrowth is Config.ComputeRequestGrowth: 0.25. Measured with
	// gpufrac simulate (docs/benchmarks/savings.md, "Replacing a pod whose compute
	// request grew"): on the 4-day synthetic traces at 141 GiB it took the runs over
	// 1.5 % compute contention from 6 to 2 of 60 (seeds 1–30, the worst from 2.05 % to
	// 1.60 %) for 0.7 % more GPU-minutes there, with GenTD26 after 12 h unchanged; on
	// seeds 1–12, 0.1 left as many runs over, 0.5 more.
	DefaultComputeRequestGrowth = 0.25
	// MinComputeRequestStep is the least rise, milli-GPU, of a compute request that
	// ComputeRequestGrowth counts (2 % of a GPU), so that a small request moving by a
	// few milli-GPU between cycles replaces nothing.
	MinComputeRequestStep = 20
	// DefaultEvictionRate is the cluster-wide eviction rate, evictions per second (one
	// every 10 s).
	DefaultEvictionRate = 0.1
	// DefaultMaxInFlight is the share of a workload's pods that may be being replaced
	// at once, ratio (Config.MaxInFlight, at least one pod).
	DefaultMaxInFlight = 0.5
	// DefaultMaxInFlightPerDevice is the most replacements in flight at once of pods from
	// one device (Config.MaxInFlightPerDevice, --max-in-flight-per-device; DeviceAllows).
	DefaultMaxInFlightPerDevice = 1
	// DefaultFloorDuration is how long a rollback floor holds (Config.FloorDuration,
	// --rollback-floor-duration).
	DefaultFloorDuration = 24 * time.Hour
	// DefaultPersistCycles, DefaultPersistFor and DefaultMinReplacementInterval are the
	// hysteresis defaults (see Hysteresis): a change inside the bounds must be seen in 3
	// consecutive cycles over 5 minutes, and a workload's rounds of replacements start at
	// least an hour apart.
	DefaultPersistCycles          = 3
	DefaultPersistFor             = 5 * time.Minute
	DefaultMinReplacementInterval = time.Hour
	// DefaultRecommenderLeaseMaxAge is cmd/updater's --recommender-lease-max-age: 10m,
	// twice the recommender's longest wait between cycles while Prometheus fails (its
	// --max-backoff default, 5m; it renews its status Lease after those cycles too) and
	// ten of its default 1m intervals.
	DefaultRecommenderLeaseMaxAge = 10 * time.Minute
	// MaxStuckBackoff is the longest pause of a workload's evictions after replacements
	// came back without their fraction (Config.StuckBackoff, doubled for each in a row):
	// a day, so a webhook that never writes the workload's pods (a namespace outside its
	// namespaceSelector) costs one restart a day, not one every StuckBackoff.
	MaxStuckBackoff = 24 * time.Hour
	// MaxRefusalBackoff is the longest wait between two evictions of a workload's pods
	// that the PodDisruptionBudgets refuse in a row (Config.RetryBackoff, doubled after
	// each refusal: refusalBackoff): 15m, so a budget that allows no disruption for
	// days costs one Eviction call (and one admission Lease read, one Warning event) per
	// workload every 15 minutes, not one a cycle, while a budget that frees up within
	// minutes is tried again within minutes.
	MaxRefusalBackoff = 15 * time.Minute
)

// Config holds the updater's settings; cmd/updater maps flags onto it. The zero value
// plus WithDefaults is usable.
type Config struct {
	// Interval is the cycle period. Default 1m.
	Interval time.Duration
	// WarmUp is how long after starting (after winning leader election) nothing is
	// evicted, so a restart never causes an eviction storm. Zero means none (cmd/updater
	// defaults to 2m).
	WarmUp time.Duration
	// MinPodAge is how old a pod inside its bounds must be before it is replaced for
	// being Threshold or more from its target (VPA's long-lived pod rule). Zero means any
	// age (cmd/updater defaults to 12h).
	MinPodAge time.Duration
	// Threshold is the relative difference from the target that counts for pods older
	// than MinPodAge, ratio. Default 0.1.
	Threshold float64
	// NearLimit is the ratio of the recommendation's observed memory peak to a pod's
	// memory at or above which memory growth is urgent. Default 0.9.
	NearLimit float64
	// ComputeRequestGrowth is the rise, ratio of the request a time-sliced pod was
	// placed with (the applied record's writtenComputeRequest), from which a larger
	// recommended computeRequest makes the pod out of date: the scheduler packed its GPU
	// for less load than the pod now brings, so its co-tenants' contention bound no
	// longer holds. A young recommendation's request (contract.Target.Young) replaces
	// nothing. Default DefaultComputeRequestGrowth; negative: off (a new request
	// reaches pods only as they are replaced for another reason).
	ComputeRequestGrowth float64
	// MaxInFlight is the share of a workload's pods that may be being replaced at once,
	// ratio 0–1 (at least one pod). Default DefaultMaxInFlight.
	MaxInFlight float64
	// EvictionRate is the cluster-wide eviction rate limit, evictions per second (a
	// token bucket, golang.org/x/time/rate). Default 0.1 (one every 10s); negative means
	// unlimited.
	EvictionRate float64
	// EvictionBurst is the token bucket's size, evictions. Default (0): one cycle's
	// worth, EvictionRate × Interval rounded up, at least 1 (6 with the defaults):
	// evictions are made at the cycle, so a bucket of 1 held the updater to one eviction
	// a cycle whatever EvictionRate said (0.1/s read as one a minute). The simulator's
	// --replacements-per-minute refills the same bucket per step.
	EvictionBurst int
	// RetryBackoff is how long a pod whose eviction was refused or failed waits before
	// the next attempt. Default 1m.
	RetryBackoff time.Duration
	// ReplacementTimeout is how long a replacement is awaited (counted in flight) after
	// an eviction. Default 10m.
	ReplacementTimeout time.Duration
	// StuckBackoff is how long evictions of a workload pause after a replacement came back
	// without its fraction; each further such replacement in a row doubles the pause, up
	// to MaxStuckBackoff. Default 30m.
	StuckBackoff time.Duration
	// VerificationPeriod is how long after a shrink the guardrails are watched. Default 15m.
	VerificationPeriod time.Duration
	// FloorDuration is how long a rollback floor holds. Default DefaultFloorDuration.
	FloorDuration time.Duration
	// LeaseNamespace and LeaseName locate the admission webhook's status Lease (name
	// default statuslease.DefaultName). LeaseNamespace is required.
	LeaseNamespace, LeaseName string
	// LeaseMaxAge is the oldest renewal of the Lease that counts as fresh. Default 30s.
	LeaseMaxAge time.Duration
	// RecommenderLeaseMaxAge is the oldest renewal of a recommender instance's status
	// Lease (statuslease.RecommenderLeaseName of the autoscaler's
	// spec.recommenders[0].name, in RecommenderLeaseNamespace) under which the updater
	// changes the pods of the autoscalers that instance owns. Older, missing or
	// unreadable: only urgent (protective) growth goes ahead, everything else is held
	// (SkipRecommenderStale), since nobody keeps the recommendation current. Zero or
	// negative: off (no Lease read); cmd/updater defaults it to
	// DefaultRecommenderLeaseMaxAge.
	RecommenderLeaseMaxAge time.Duration
	// RecommenderLeaseNamespace is the namespace of the recommenders' status Leases.
	// Empty: LeaseNamespace.
	RecommenderLeaseNamespace string
	// PersistCycles is how many consecutive cycles a change inside the bounds must be
	// seen in before a pod is replaced for it (Hysteresis). Default 3; 1 disables.
	PersistCycles int
	// PersistFor is how long a change inside the bounds must have persisted, from the
	// first cycle it was seen in. Zero means no duration (cmd/updater defaults to 5m).
	PersistFor time.Duration
	// MinReplacementInterval is the least time between the starts of two rounds of
	// non-urgent replacements of one workload (Hysteresis). Zero means none
	// (cmd/updater defaults to 1h).
	MinReplacementInterval time.Duration
	// MaxReported is the most pods listed in status.updater.updates. Default 20 (the
	// CRD's limit).
	MaxReported int
	// MaxUnreadyBackoff bounds the backoff between replacements of not-Ready pods of one
	// workload (AnnotationReplaceUnready): RetryBackoff, doubled after each, at most
	// this. Default 30m.
	MaxUnreadyBackoff time.Duration
	// MaxInFlightPerDevice is the most replacements in flight at once of pods from one
	// device (a HAMi GPU or a KAI GPU group, where the placement is known). Zero means
	// the default 1; negative means no limit.
	MaxInFlightPerDevice int
	// NoPlacementCheck turns off the check, before each eviction, that the replacement
	// can be placed (Placeable). Default false: the check runs.
	NoPlacementCheck bool
	// Consolidate replaces, once per cycle, the pods of one shared GPU (HAMi device,
	// KAI GPU group) whose replacements all fit on the other shared GPUs in use, so
	// that a binpack scheduler empties it (packing.Consolidation; consolidate.go).
	// Default false.
	Consolidate bool
	// ConsolidationComputeMilli is the most compute, milli-GPU, a GPU may hold after
	// pods moved onto it by consolidation (packing.ConsolidationOptions; 0:
	// packing.DefaultConsolidationComputeMilli).
	ConsolidationComputeMilli int64
	// Backend is the webhook's backend configuration (the same flags as cmd/admission),
	// so the updater reads backend fields and overheads as the webhook writes them.
	Backend backend.Config
	// MinConfidence is the webhook's --min-confidence, percent 0–100: recommendations
	// below it are not applied to replacements, so no pod is replaced for them. Nil
	// means contract.DefaultMinConfidence, the webhook's default.
	MinConfidence *int32
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	positiveOr(&c.Interval, time.Minute)
	positiveOr(&c.RetryBackoff, time.Minute)
	positiveOr(&c.ReplacementTimeout, 10*time.Minute)
	positiveOr(&c.StuckBackoff, 30*time.Minute)
	positiveOr(&c.VerificationPeriod, 15*time.Minute)
	positiveOr(&c.FloorDuration, DefaultFloorDuration)
	positiveOr(&c.MaxUnreadyBackoff, 30*time.Minute)
	positiveOr(&c.LeaseMaxAge, 30*time.Second)
	positiveOr(&c.Threshold, DefaultThreshold)
	positiveOr(&c.NearLimit, DefaultNearLimit)
	if c.ComputeRequestGrowth == 0 {
		c.ComputeRequestGrowth = DefaultComputeRequestGrowth
	}
	positiveOr(&c.PersistCycles, DefaultPersistCycles)
	for _, d := range []*time.Duration{&c.WarmUp, &c.MinPodAge, &c.PersistFor, &c.MinReplacementInterval} {
		*d = max(*d, 0)
	}
	if c.MaxInFlight <= 0 || c.MaxInFlight > 1 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.EvictionRate == 0 {
		c.EvictionRate = DefaultEvictionRate
	}
	if c.EvictionBurst <= 0 {
		c.EvictionBurst = 1
		if c.EvictionRate > 0 {
			c.EvictionBurst = BurstOf(c.EvictionRate, c.Interval)
		}
	}
	if c.LeaseName == "" {
		c.LeaseName = statuslease.DefaultName
	}
	if c.RecommenderLeaseNamespace == "" {
		c.RecommenderLeaseNamespace = c.LeaseNamespace
	}
	if c.MaxInFlightPerDevice == 0 {
		c.MaxInFlightPerDevice = DefaultMaxInFlightPerDevice
	}
	if c.MaxReported <= 0 || c.MaxReported > 20 {
		c.MaxReported = 20
	}
	c.Backend = c.Backend.WithDefaults()
	return c
}

// positiveOr sets *v to d when *v is zero or negative.
func positiveOr[T int | float64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.LeaseNamespace == "" {
		errs = append(errs, errors.New("the admission webhook's namespace (its status Lease) is required"))
	}
	if c.Threshold >= 10 {
		errs = append(errs, fmt.Errorf("--threshold %v: want a ratio such as 0.1", c.Threshold))
	}
	if c.NearLimit > 1 {
		errs = append(errs, fmt.Errorf("--near-limit %v: want a ratio ≤ 1", c.NearLimit))
	}
	if c.ConsolidationComputeMilli < 0 || c.ConsolidationComputeMilli > 1000 {
		errs = append(errs, fmt.Errorf("--consolidation-compute %d: want milli-GPU in 1–1000 (0: the default, %d)", c.ConsolidationComputeMilli, packing.DefaultConsolidationComputeMilli))
	}
	if err := contract.ValidateMinConfidence(c.MinConfidence); err != nil {
		errs = append(errs, err)
	}
	if err := c.Backend.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// BurstOf returns the default EvictionBurst, evictions, for an eviction rate (evictions
// per second, above 0) and the cycle interval: one cycle's worth, rounded up, at least
// 1. gpufrac simulate sizes its replacement bucket with it, so a rate that is not a
// whole number per cycle (1.5 a minute) allows what the updater allows: 3 in 2 cycles.
func BurstOf(rate float64, interval time.Duration) int {
	return max(1, int(math.Ceil(rate*interval.Seconds()-1e-9)))
}
