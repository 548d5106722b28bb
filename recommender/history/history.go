// Package history keeps what the recommender has learnt about each workload container:
// decaying histograms of GPU memory peaks and GPU compute activity, built with VPA's
// histogram library (k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/util).
//
// Memory is incompressible, so the memory histogram holds one sample per pod per
// aggregation interval: the pod's peak in that interval (as VPA does with daily peaks).
// Compute is compressible, so the compute histogram holds every activity sample, and
// so does one histogram per hour of the day (UTC) that the sample fell in, so that the
// contention bound can be taken conditionally on the time of day (package estimate).
// All pods of one workload feed the same per-container histograms.
package history

import (
	"fmt"
	"math"
	"time"

	vpautil "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/util"

	"github.com/gpufrac/gpufrac/recommender/metrics"
	"github.com/gpufrac/gpufrac/workload"
)

// WorkloadKey identifies a workload: the top-most controller of its pods, the same
// reference the recommender resolves autoscalers' targets to.
type WorkloadKey = workload.Ref

// ContainerKey identifies one container name of a workload's pod template.
type ContainerKey struct {
	WorkloadKey
	Container string
}

// Options configure the model. Zero values are replaced by the defaults.
type Options struct {
	// MemoryAggregationInterval is the length of the interval whose per-pod peak is one
	// memory sample. Default 1h: a day of history then yields 24 peaks (VPA uses 24h,
	// which needs weeks of history before its percentiles mean anything).
	MemoryAggregationInterval time.Duration
	// HalfLife is the decay half-life of both histograms and of the contention evidence
	// (ContainerState.Contention). Default 24h (VPA's default).
	HalfLife time.Duration
	// PeakWindow is how far back RecentPeak looks. Default 7 days: a weekly cycle, and
	// rare memory spikes (a large request, an adapter load) stay in the target for a
	// week. Measured with the simulator on 4-day synthetic traces (gpufrac trace synth,
	// 30 workloads × 2 pods, 24h warm-up): a 24h window let 12 pods run over their
	// allocation for 14 pod-minutes after warm-up, 72h and 7d 3 pods for 3; on the
	// 22.8-hour GenTD26 trace the windows give the same result
	// (docs/benchmarks/simulation.md).
	PeakWindow time.Duration
	// SampleInterval is the expected spacing of compute samples (the recommender's
	// cycle and bootstrap step), used for coverage. Default 1m.
	SampleInterval time.Duration
	// NoComputeByHour skips the hour-of-day compute histograms
	// (ContainerState.ComputeByHour, 19 KiB per container): set where nothing reads them
	// (recommend.Config.WithDefaults sets it when the contention budget is off or its
	// window is the whole day).
	NoComputeByHour bool
}

// Defaults for Options; see the field docs for their sources.
const (
	DefaultMemoryAggregationInterval = time.Hour
	DefaultHalfLife                  = 24 * time.Hour
	DefaultPeakWindow                = 7 * 24 * time.Hour
	DefaultSampleInterval            = time.Minute
)

func (o Options) withDefaults() Options {
	if o.MemoryAggregationInterval <= 0 {
		o.MemoryAggregationInterval = DefaultMemoryAggregationInterval
	}
	if o.HalfLife <= 0 {
		o.HalfLife = DefaultHalfLife
	}
	if o.PeakWindow <= 0 {
		o.PeakWindow = DefaultPeakWindow
	}
	if o.SampleInterval <= 0 {
		o.SampleInterval = DefaultSampleInterval
	}
	return o
}

// Histogram bucket layouts.
var (
	// MemoryBuckets: exponential, first bucket 10 MB, each 5 % wider than the last, up
	// to 4 TiB: VPA's memory layout (1e7 first bucket, ratio 1.05), so one bucket is a
	// 5 % step.
	MemoryBuckets = mustOptions(vpautil.NewExponentialHistogramOptions(metrics.MaxMemoryBytes, 1e7, 1.05, 1e-4))
	// ComputeBuckets: linear, 0.01 of a GPU (10m) per bucket from 0 to 1.
	ComputeBuckets = mustOptions(vpautil.NewLinearHistogramOptions(1.0, 0.01, 1e-4))
)

func mustOptions(o vpautil.HistogramOptions, err error) vpautil.HistogramOptions {
	if err != nil {
		panic(fmt.Sprintf("histogram options: %v", err))
	}
	return o
}

// HoursPerDay is the number of hour-of-day compute histograms (ContainerState.ComputeByHour).
const HoursPerDay = 24

// ContainerState is what is known about one workload container.
type ContainerState struct {
	// Memory holds per-pod per-interval memory peaks, bytes.
	Memory vpautil.Histogram
	// Compute holds activity samples, ratio 0–1.
	Compute vpautil.Histogram
	// ComputeByHour holds the same samples split by the hour of the day (UTC, 0–23) they
	// were taken in, with Compute's layout and half-life; nil for an hour that has no
	// sample yet (no data, never zero). ComputeHourSamples counts the samples of each.
	// Each histogram holds ComputeBuckets.NumBuckets() (101) float64 weights, 808 bytes,
	// so a container with every hour seen keeps 19 KiB more, where Memory and Compute
	// hold 2.4 KiB.
	ComputeByHour      [HoursPerDay]vpautil.Histogram
	ComputeHourSamples [HoursPerDay]int
	// ComputeHourDays says, per hour of the day, whether its samples came from more
	// than one day (UTC date): only then does the hour's histogram show a pattern that
	// repeats, not just when one day's bursts happened to fall.
	ComputeHourDays [HoursPerDay]bool
	// FirstSample and LastSample bound the history seen.
	FirstSample, LastSample time.Time
	// ComputeSamples counts compute samples added; MemoryPeaks counts memory peaks.
	ComputeSamples, MemoryPeaks int
	// ComputeSource is the metric the latest compute samples came from.
	ComputeSource string
	// SharedSamples counts samples that were a shared GPU's device-wide value copied to
	// each of its pods (metrics.Series.SharedSamples): upper bounds, not measurements.
	SharedSamples int
	// Devices is the most GPUs (or MIG instances) one pod of the container used at
	// once (metrics.Series.Devices); above 1, its samples are per-device maxima. A
	// count above 1 lasts while its evidence is within the history window: GC sets it
	// back to 0 (none known) once MultiDeviceAt is older, as a restarted recommender,
	// which loads that window only, would read it.
	Devices int
	// MultiDeviceAt is the latest sample time at which a pod of the container used
	// several devices (metrics.Series.MultiDeviceAt); zero while Devices ≤ 1.
	MultiDeviceAt time.Time
	// MIGProfile is the MIG GPU instance profile the latest samples were read on
	// (metrics.Series.MIGProfile, e.g. "1g.10gb"); "" when none was seen.
	MIGProfile string
	// LevelPeak is the highest memory sample ever seen, bytes, and LevelSince when the
	// memory first reached its level: the sample that rose above the highest sample
	// before its time by more than LevelNoise (LevelSince is then that sample's time).
	// A rise within LevelNoise raises LevelPeak and keeps LevelSince.
	LevelPeak  float64
	LevelSince time.Time
	// ActiveAt is the time of the latest compute sample above 0, when the GPU ran the
	// container's kernels (zero: none seen). A model still downloading or loading its
	// weights shows memory but no activity. Not checkpointed: a restore sets it to the
	// last sample when the compute histogram holds a sample of 0.01 or more.
	ActiveAt time.Time
	// levelAt is the time of the latest memory sample fed, and levelBefore LevelPeak
	// before the samples of that time: a rise is measured against the highest sample
	// before its time, so samples of several pods at one time (one cycle's) give the
	// same level in any order. Not checkpointed (a restore starts from LevelPeak).
	levelAt     time.Time
	levelBefore float64
	// Fidelity is the decaying evidence of the fields the compute samples came from
	// (AddCompute): how much of the compute histogram's weight a low-fidelity field
	// (DCGM_FI_DEV_GPU_UTIL) holds, whatever field the latest samples came from.
	Fidelity Fidelity
	// Contention is the decaying evidence of the container's pods sharing a GPU:
	// samples taken with other pods on the device, and those of them in which the
	// device was saturated (AddDeviceLoad).
	Contention Contention

	opts      Options
	hourFirst [HoursPerDay]int64    // day (unix days, UTC) of the hour's first sample
	windows   map[string]*podWindow // by pod name: the current interval's peak
	peaks     map[int64]float64     // interval start (unix s) → max peak over pods; 0: covered by compute or zeros only (cover)
	// lastCovered is the start of the interval cover last found in peaks (zero: none): a
	// container's compute samples come in time order, about 60 to an interval, and
	// the map lookup per sample was 16 % of the model's feed in a 10,000-pod bootstrap
	// (make bench-scale, docs/benchmarks.md). gc clears it with the peaks it deletes.
	lastCovered time.Time
}

type podWindow struct {
	start time.Time
	peak  float64
}

func newContainerState(o Options) *ContainerState {
	return &ContainerState{
		Memory:  vpautil.NewDecayingHistogram(MemoryBuckets, o.HalfLife),
		Compute: vpautil.NewDecayingHistogram(ComputeBuckets, o.HalfLife),
		opts:    o,
		windows: map[string]*podWindow{},
		peaks:   map[int64]float64{},
	}
}

func (s *ContainerState) touch(t time.Time) {
	if s.FirstSample.IsZero() || t.Before(s.FirstSample) {
		s.FirstSample = t
	}
	if t.After(s.LastSample) {
		s.LastSample = t
	}
}

// IntervalStart returns the start of the memory aggregation interval a sample at t
// belongs to. A sample stamped exactly on a boundary closes the interval before it,
// because max_over_time at t covers (t-interval, t].
func (o Options) IntervalStart(t time.Time) time.Time {
	return t.Add(-time.Millisecond).Truncate(o.MemoryAggregationInterval)
}

// AddMemory records a memory sample (bytes) of one pod. Within one aggregation interval
// only the pod's peak stays in the histogram; a sample older than the pod's current
// interval is ignored.
func (s *ContainerState) AddMemory(pod string, t time.Time, bytes float64) {
	start := s.opts.IntervalStart(t)
	w := s.windows[pod]
	switch {
	case w == nil || start.After(w.start):
		s.windows[pod] = &podWindow{start: start, peak: bytes}
		s.Memory.AddSample(bytes, 1, start)
		s.MemoryPeaks++
	case start.Equal(w.start):
		if bytes > w.peak {
			s.Memory.SubtractSample(w.peak, 1, start)
			s.Memory.AddSample(bytes, 1, start)
			w.peak = bytes
		}
	default:
		return // older than the pod's current interval
	}
	// An interval of zeros is kept too: it is covered (Span), at 0 bytes.
	if !s.hasPeak(start.Unix()) || bytes > s.peaks[start.Unix()] {
		s.peaks[start.Unix()] = bytes
	}
	s.level(t, bytes)
	s.touch(t)
}

// LevelNoise is the relative rise of memory above its highest sample that counts as a
// new level (AtLevel starts again): 0.05, one bucket of MemoryBuckets (VPA's 5 %
// memory bucket step), the resolution the histogram itself keeps.
const LevelNoise = 0.05

func (s *ContainerState) level(t time.Time, bytes float64) {
	if !t.Equal(s.levelAt) {
		s.levelAt, s.levelBefore = t, s.LevelPeak
	}
	switch {
	case s.LevelSince.IsZero() || bytes > s.levelBefore*(1+LevelNoise) && bytes > s.LevelPeak:
		s.LevelPeak, s.LevelSince = bytes, t
	case bytes > s.LevelPeak:
		s.LevelPeak = bytes
	}
}

// AtLevel returns how long memory has stayed at its level at now: the time since the
// sample that first reached the current highest level (LevelSince), bounded by the
// history span (gaps excluded); 0 without memory samples. It is the evidence behind a
// young workload's recommendation (package estimate): an upward trend or a leak keeps
// setting new levels and keeps it short.
func (s *ContainerState) AtLevel(now time.Time) time.Duration {
	if s.LevelSince.IsZero() || now.Before(s.LevelSince) {
		return 0
	}
	return min(now.Sub(s.LevelSince), s.Span())
}

// HasRun reports whether the GPU has run the container's kernels (ActiveAt is set):
// its model is loaded, not still downloading behind a CUDA context.
func (s *ContainerState) HasRun() bool { return !s.ActiveAt.IsZero() }

// LevelIntervals returns AtLevel(now) in whole memory aggregation intervals: the number
// of per-interval peaks seen at the current level.
func (s *ContainerState) LevelIntervals(now time.Time) int {
	return int(s.AtLevel(now) / s.opts.MemoryAggregationInterval)
}

// Interval returns the memory aggregation interval (Options.MemoryAggregationInterval).
func (s *ContainerState) Interval() time.Duration { return s.opts.MemoryAggregationInterval }

// AddCompute records one activity sample, ratio 0–1, in Compute and in the
// histogram of its hour of the day (UTC).
func (s *ContainerState) AddCompute(t time.Time, ratio float64, source string) {
	if ratio > 0 && t.After(s.ActiveAt) {
		s.ActiveAt = t
	}
	s.Compute.AddSample(ratio, 1, t)
	s.ComputeSamples++
	if !s.opts.NoComputeByHour {
		s.addByHour(t, ratio)
	}
	if source != "" {
		s.ComputeSource = source
	}
	s.Fidelity.add(t, source, s.opts.HalfLife)
	s.cover(t)
	s.touch(t)
}

// cover records that the memory aggregation interval of a sample at t holds a sample
// (Span's coverage): an interval without a memory peak yet is kept at 0 bytes, which no
// peak read (RecentPeak, the highest) ever takes for one (a container whose memory was
// not sampled in it, or was set aside as stale, while its compute was).
func (s *ContainerState) cover(t time.Time) {
	if u := t.Add(-time.Millisecond); !s.lastCovered.IsZero() && !u.Before(s.lastCovered) && u.Before(s.lastCovered.Add(s.opts.MemoryAggregationInterval)) {
		return // IntervalStart(t) is covered, in peaks already
	}
	start := s.opts.IntervalStart(t)
	if k := start.Unix(); !s.hasPeak(k) {
		s.peaks[k] = 0
	}
	s.lastCovered = start
}

// hasPeak reports whether the interval starting at k (unix s) is in peaks.
func (s *ContainerState) hasPeak(k int64) bool {
	_, ok := s.peaks[k]
	return ok
}

// Fidelity is decaying evidence of the fields a container's compute samples came from:
// All weighs every compute sample and Low those read from a low-fidelity field
// (metrics.LowFidelity: DCGM_FI_DEV_GPU_UTIL says a kernel ran, not how much of the GPU
// it used), in samples that halve every HalfLife after Ref as the compute histogram's
// weights do, so Low/All is the share of the histogram's weight the low-fidelity samples
// hold. Precise and Coarse are the latest field of each kind.
type Fidelity struct {
	All, Low        float64
	Ref             time.Time
	Precise, Coarse string
}

// add weighs one compute sample at t read from field source.
func (f *Fidelity) add(t time.Time, source string, halfLife time.Duration) {
	keep, w, ref := rebase(f.Ref, t, halfLife)
	low := 0.0
	switch {
	case source == "":
	case metrics.LowFidelity(source):
		low, f.Coarse = w, source
	default:
		f.Precise = source
	}
	f.All, f.Low, f.Ref = f.All*keep+w, f.Low*keep+low, ref
}

// ComputeFieldAt returns the field a compute estimate at percentile q (the target's,
// 0.9) rests on: the low-fidelity field where its samples hold more than 1 − q of the
// compute histogram's weight (the q-th percentile may then be one of them, GPU_UTIL's
// upper bounds read as activity), else the latest precise field, whatever field the
// latest samples came from (dcgm-exporter's profiling fields paused or not collected
// yet for a few scrapes). ComputeSource where the fields are not known.
func (s *ContainerState) ComputeFieldAt(q float64) string {
	f := s.Fidelity
	switch {
	case f.All <= 0:
		return s.ComputeSource
	case f.Low > (1-q)*f.All && f.Coarse != "":
		return f.Coarse
	case f.Precise != "":
		return f.Precise
	}
	return s.ComputeSource
}

// HourCoverage returns the time the compute samples taken in hour h of the day (UTC,
// 0–23) cover at one per SampleInterval: the evidence behind ComputeByHour[h].
func (s *ContainerState) HourCoverage(h int) time.Duration {
	return time.Duration(s.ComputeHourSamples[h]) * s.opts.SampleInterval
}

func (s *ContainerState) addByHour(t time.Time, ratio float64) {
	h, day := t.UTC().Hour(), t.Unix()/86400
	if s.ComputeByHour[h] == nil {
		s.ComputeByHour[h] = vpautil.NewDecayingHistogram(ComputeBuckets, s.opts.HalfLife)
		s.hourFirst[h] = day
	} else if day != s.hourFirst[h] {
		s.ComputeHourDays[h] = true
	}
	s.ComputeByHour[h].AddSample(ratio, 1, t)
	s.ComputeHourSamples[h]++
}

// Contention is decaying evidence of compute contention, weights in samples that halve
// every HalfLife: CoTenant counts samples a pod of the container took on a GPU shared
// with other pods, Saturated those of them in which the GPU's activity was at least
// metrics.SaturatedActivity. Ref is the time the weights are valued at.
type Contention struct {
	CoTenant, Saturated float64
	Ref                 time.Time
}

// at returns the weights decayed to t (never grown: a t before Ref reads them as of Ref).
func (c Contention) at(t time.Time, halfLife time.Duration) (coTenant, saturated float64) {
	if c.Ref.IsZero() || !t.After(c.Ref) {
		return c.CoTenant, c.Saturated
	}
	f := decay(t.Sub(c.Ref), halfLife)
	return c.CoTenant * f, c.Saturated * f
}

// decay is the factor a weight keeps after d: it halves every halfLife.
func decay(d, halfLife time.Duration) float64 {
	return math.Exp2(-float64(d) / float64(halfLife))
}

// AddDeviceLoad records n samples at t taken on a GPU shared with other pods, of which
// saturated had the GPU saturated (0 ≤ saturated ≤ n). A sample older than the evidence
// (t before Contention.Ref: the pods of one workload are fed one series after another)
// enters with the weight it would have kept since t, as VPA's decaying histogram adds it.
func (s *ContainerState) AddDeviceLoad(t time.Time, n, saturated int) {
	if n <= 0 {
		return
	}
	c := s.Contention
	keep, w, ref := rebase(c.Ref, t, s.opts.HalfLife)
	s.Contention = Contention{CoTenant: c.CoTenant*keep + w*float64(n), Saturated: c.Saturated*keep + w*float64(min(saturated, n)), Ref: ref}
}

// rebase values decaying evidence valued at ref (zero: none yet) for a sample at t: the
// factor the evidence keeps, the weight the sample enters with, and the time the sum is
// valued at. A sample older than the evidence (the pods of one workload are fed one
// series after another) enters with the weight it would have kept since t, as VPA's
// decaying histogram adds it.
func rebase(ref, t time.Time, halfLife time.Duration) (keep, w float64, at time.Time) {
	switch {
	case ref.IsZero():
		return 1, 1, t
	case t.After(ref):
		return decay(t.Sub(ref), halfLife), 1, t
	}
	return 1, decay(ref.Sub(t), halfLife), ref
}

// ContentionAt returns the contention evidence decayed to now: the weight of samples on a
// shared GPU and of those on a saturated one. An estimate reads it at EvidenceAt(now):
// decayed to the wall clock, a quiet day halved the evidence against the fixed prior of
// estimate.Config.ContentionEvidence and lowered the tenant reserve without a sample.
func (s *ContainerState) ContentionAt(now time.Time) (coTenant, saturated float64) {
	return s.Contention.at(now, s.opts.HalfLife)
}

// EvidenceAt returns the time the container's evidence is valued at, at now: now, or its
// last sample (LastSample) where that is earlier. A window or a decay measured to the
// wall clock would let time without samples (a workload scaled to zero, an exporter
// down) move an estimate as if it were evidence: the peaks of RecentPeak's window left
// it and the contention evidence decayed towards its prior, so a workload back after a
// quiet day or week got a lower memory target and compute request than it left with.
// No data is not evidence: measured to the last sample, time without samples changes
// nothing, and a workload that keeps reporting is valued at now as before.
func (s *ContainerState) EvidenceAt(now time.Time) time.Time {
	if !s.LastSample.IsZero() && s.LastSample.Before(now) {
		return s.LastSample
	}
	return now
}

// RecentPeak returns the highest memory sample, bytes, of the intervals that overlap
// (now-PeakWindow, now], and false when none of them holds a sample (one that held
// compute alone reads 0: cover). An estimate reads it at
// EvidenceAt(now), so time without samples does not empty the window.
func (s *ContainerState) RecentPeak(now time.Time) (float64, bool) {
	from := s.opts.IntervalStart(now.Add(-s.opts.PeakWindow)).Unix()
	peak, ok := 0.0, false
	for start, v := range s.peaks {
		if start >= from && (!ok || v > peak) {
			peak, ok = v, true
		}
	}
	return peak, ok
}

// Span is the length of history that samples cover, accounting for gaps: the smallest of
// the time between the first and last sample, the time the samples would fill at one
// per SampleInterval (compute) or one per aggregation interval (memory peaks), and,
// where memory was sampled, the aggregation intervals that hold a memory peak of any pod
// (covered). Counts of samples grow with the pods that report at once: twelve replicas
// for an hour, scaled to zero overnight and for an hour again, fill 24 hours at one
// sample each, and read as a whole day of evidence (full confidence) where two hours
// are; the intervals with a peak count each hour once.
func (s *ContainerState) Span() time.Duration {
	if s.LastSample.IsZero() {
		return 0
	}
	span := s.LastSample.Sub(s.FirstSample) + s.opts.SampleInterval
	filled := time.Duration(s.ComputeSamples) * s.opts.SampleInterval
	if m := time.Duration(s.MemoryPeaks) * s.opts.MemoryAggregationInterval; m > filled {
		filled = m
	}
	if c, ok := s.covered(); ok {
		filled = min(filled, c)
	}
	return min(filled, span)
}

// covered bounds the time the history covers by its memory aggregation intervals that
// hold a sample of any pod (peaks: a memory peak, or 0 where only compute or zeros came,
// cover), each counted once however many pods it holds, and false with none. The
// intervals are kept over the peak window before the last sample (gc); the time before
// that window counts whole (an upper bound: the intervals are gone).
func (s *ContainerState) covered() (time.Duration, bool) {
	if len(s.peaks) == 0 {
		return 0, false
	}
	agg := s.opts.MemoryAggregationInterval
	horizon := s.LastSample.Add(-s.opts.PeakWindow - 2*agg)
	n := 0
	for start := range s.peaks {
		if !time.Unix(start, 0).Before(horizon) {
			n++
		}
	}
	before := time.Duration(0)
	if s.FirstSample.Before(horizon) {
		before = horizon.Sub(s.FirstSample)
	}
	return time.Duration(n)*agg + before, true
}

// Empty reports whether no sample was ever recorded.
func (s *ContainerState) Empty() bool { return s.Memory.IsEmpty() && s.Compute.IsEmpty() }

// gc forgets per-pod windows and interval peaks too old to matter: older than the peak
// window before EvidenceAt(now), where an estimate reads RecentPeak.
func (s *ContainerState) gc(now time.Time) {
	horizon := s.EvidenceAt(now).Add(-s.opts.PeakWindow - 2*s.opts.MemoryAggregationInterval)
	for pod, w := range s.windows {
		if w.start.Before(horizon) {
			delete(s.windows, pod)
		}
	}
	for start := range s.peaks {
		if time.Unix(start, 0).Before(horizon) {
			delete(s.peaks, start)
		}
	}
	s.lastCovered = time.Time{}
}

// Model holds the state of every tracked workload container.
type Model struct {
	opts       Options
	containers map[WorkloadKey]map[string]*ContainerState // by workload, then container name
	lastSeen   map[seenKey]time.Time
	// floor: per restored workload, the checkpoint's time; samples at or before it, and
	// compute samples whose window starts before it, are in the restored state already
	// (Restore).
	floor map[WorkloadKey]time.Time
	// versions: per workload, bumped by every change (Version).
	versions map[WorkloadKey]uint64
}

type seenKey struct {
	workload WorkloadKey
	id       metrics.ContainerID
	signal   metrics.Signal
}

// NewModel returns an empty model.
func NewModel(o Options) *Model {
	return &Model{opts: o.withDefaults(), containers: map[WorkloadKey]map[string]*ContainerState{}, lastSeen: map[seenKey]time.Time{},
		floor: map[WorkloadKey]time.Time{}, versions: map[WorkloadKey]uint64{}}
}

// Options returns the model's options with defaults filled in.
func (m *Model) Options() Options { return m.opts }

// Container returns the state of a workload container, or nil when nothing is known.
func (m *Model) Container(k ContainerKey) *ContainerState {
	return m.containers[k.WorkloadKey][k.Container]
}

// Containers returns the names of the containers of a workload that have state.
func (m *Model) Containers(w WorkloadKey) []string {
	var out []string
	for name := range m.containers[w] {
		out = append(out, name)
	}
	return out
}

// Add feeds one series of a signal into the workload container it was attributed to.
// Samples not newer than the last one seen for the same pod container and signal are
// skipped, so overlapping history loads and live cycles never count a sample twice.
func (m *Model) Add(w WorkloadKey, signal metrics.Signal, s metrics.Series) {
	k := ContainerKey{WorkloadKey: w, Container: s.ID.Container}
	st := m.containers[w][k.Container]
	if st == nil {
		if m.containers[w] == nil {
			m.containers[w] = map[string]*ContainerState{}
		}
		st = newContainerState(m.opts)
		m.containers[w][k.Container] = st
	}
	sk := seenKey{workload: w, id: s.ID, signal: signal}
	last, floor := m.lastSeen[sk], m.floor[w]
	added := false
	loads := s.DeviceLoad
	for i, p := range s.Samples {
		if !p.Time.After(last) || !p.Time.After(floor) {
			continue
		}
		if signal == metrics.SignalCompute && p.Time.Add(-s.Window).Before(floor) {
			// A compute window that straddles a restored checkpoint's time (another
			// process' grid of windows): the samples before the checkpoint are in the
			// restored state already, in the window that ended there.
			continue
		}
		last, added = p.Time, true
		switch signal {
		case metrics.SignalMemory:
			st.AddMemory(s.ID.Pod, p.Time, p.Value)
		case metrics.SignalCompute:
			st.AddCompute(p.Time, p.Value, s.SourceAt(i))
			// The device's load at this sample, if it was shared: both lists are in
			// time order, and a load whose sample was dropped or seen before is skipped.
			for len(loads) > 0 && loads[0].Time.Before(p.Time) {
				loads = loads[1:]
			}
			if len(loads) > 0 && loads[0].Time.Equal(p.Time) {
				sat := 0
				if loads[0].Saturated {
					sat = 1
				}
				st.AddDeviceLoad(p.Time, 1, sat)
			}
		}
	}
	m.lastSeen[sk] = last
	if added || s.SharedSamples > 0 || s.Devices > st.Devices {
		m.versions[w]++
	}
	st.SharedSamples += s.SharedSamples
	st.Devices = max(st.Devices, s.Devices)
	if s.Devices > 1 && s.MultiDeviceAt.After(st.MultiDeviceAt) {
		st.MultiDeviceAt = s.MultiDeviceAt
	}
	if s.MIGProfile != "" && len(s.Samples) > 0 {
		st.MIGProfile = s.MIGProfile
	}
}

// Forget drops everything known about a workload (its autoscaler was deleted).
func (m *Model) Forget(w WorkloadKey) {
	delete(m.containers, w)
	delete(m.floor, w)
	for k := range m.lastSeen {
		if k.workload == w {
			delete(m.lastSeen, k)
		}
	}
}

// GC forgets per-pod bookkeeping older than the peak window, lastSeen entries of pods
// not seen for the history length, a count of several devices (Devices) whose last
// evidence (MultiDeviceAt) is older than the history length, and every container whose
// last sample is older than the history length (VPA's expired aggregate state: a
// container renamed or removed from the workload's pods, whose state a running
// recommender and each checkpoint otherwise kept for ever).
func (m *Model) GC(now time.Time, history time.Duration) {
	for w, byName := range m.containers {
		for name, st := range byName {
			if !st.LastSample.IsZero() && st.LastSample.Before(now.Add(-history)) {
				delete(byName, name)
				m.versions[w]++
				continue
			}
			st.gc(now)
			if st.Devices > 1 && st.MultiDeviceAt.Before(now.Add(-history)) {
				st.Devices, st.MultiDeviceAt = 0, time.Time{}
				m.versions[w]++
			}
		}
	}
	for w, t := range m.floor {
		if t.Before(now.Add(-history)) {
			delete(m.floor, w)
		}
	}
	for k, t := range m.lastSeen {
		if t.Before(now.Add(-history)) {
			delete(m.lastSeen, k)
		}
	}
}
