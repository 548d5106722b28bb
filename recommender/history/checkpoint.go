package history

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	vpav1 "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	vpautil "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/util"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// Checkpoints: a workload's model saved to a GPUFractionCheckpoint's status and restored
// from it (the recommender's checkpoint.go writes and reads the objects). Everything the
// estimator reads is saved; the histograms in VPA's checkpoint form
// (gpufracv1.HistogramCheckpoint says what that quantization loses), everything else
// exactly. Not saved: which samples of each pod were seen (Model.Add's per-pod
// bookkeeping); a restored workload instead skips every sample at or before the
// checkpoint's time (Restore), which is what the recommender had read.

// CheckpointOptions returns the options as a checkpoint records them: a checkpoint is
// restored only into a model whose options are equal.
func (o Options) CheckpointOptions() gpufracv1.CheckpointModelOptions {
	o = o.withDefaults()
	return gpufracv1.CheckpointModelOptions{
		MemoryAggregationInterval: metav1.Duration{Duration: o.MemoryAggregationInterval},
		HalfLife:                  metav1.Duration{Duration: o.HalfLife},
		PeakWindow:                metav1.Duration{Duration: o.PeakWindow},
		SampleInterval:            metav1.Duration{Duration: o.SampleInterval},
		ComputeByHour:             !o.NoComputeByHour,
	}
}

// Version returns a number that changes whenever a sample is added to workload w's
// model (0: never): a checkpoint written at one version needs no rewrite while it stays.
func (m *Model) Version(w WorkloadKey) uint64 { return m.versions[w] }

// SaveCheckpoint returns workload w's containers in checkpoint form, sorted by name; nil
// when nothing is known of w. It returns an error only when a histogram cannot be saved.
func (m *Model) SaveCheckpoint(w WorkloadKey) ([]gpufracv1.ContainerCheckpoint, error) {
	var out []gpufracv1.ContainerCheckpoint
	for _, name := range slices.Sorted(maps.Keys(m.containers[w])) {
		st := m.containers[w][name]
		if st.Empty() {
			continue
		}
		c, err := st.save(name)
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", name, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func (s *ContainerState) save(name string) (gpufracv1.ContainerCheckpoint, error) {
	c := gpufracv1.ContainerCheckpoint{
		ContainerName:  name,
		FirstSample:    metav1.NewMicroTime(s.FirstSample),
		LastSample:     metav1.NewMicroTime(s.LastSample),
		ComputeSamples: int64(s.ComputeSamples),
		MemoryPeaks:    int64(s.MemoryPeaks),
		ComputeSource:  s.ComputeSource,
		SharedSamples:  int64(s.SharedSamples),
		Devices:        int32(s.Devices),
		MIGProfile:     s.MIGProfile,
		LevelPeak:      s.LevelPeak,
		LevelSince:     microTime(s.LevelSince),
		MultiDeviceAt:  microTime(s.MultiDeviceAt),
	}
	if s.Contention.CoTenant > 0 {
		c.Contention = &gpufracv1.ContentionCheckpoint{CoTenantSamples: s.Contention.CoTenant,
			SaturatedSamples: s.Contention.Saturated, Time: metav1.NewMicroTime(s.Contention.Ref)}
	}
	if f := s.Fidelity; f.All > 0 {
		c.Fidelity = &gpufracv1.FidelityCheckpoint{AllSamples: f.All, LowFidelitySamples: f.Low, Time: metav1.NewMicroTime(f.Ref),
			PreciseSource: f.Precise, LowFidelitySource: f.Coarse}
	}
	var err error
	if c.Memory, err = saveHistogram(s.Memory); err != nil {
		return c, fmt.Errorf("memory histogram: %w", err)
	}
	if c.Compute, err = saveHistogram(s.Compute); err != nil {
		return c, fmt.Errorf("compute histogram: %w", err)
	}
	for h, hist := range s.ComputeByHour {
		if hist == nil {
			continue
		}
		hc, err := saveHistogram(hist)
		if err != nil {
			return c, fmt.Errorf("compute histogram of hour %d: %w", h, err)
		}
		c.ComputeByHour = append(c.ComputeByHour, gpufracv1.HourCheckpoint{Hour: int32(h), Histogram: hc,
			Samples: int64(s.ComputeHourSamples[h]), FirstDay: s.hourFirst[h], SeveralDays: s.ComputeHourDays[h]})
	}
	for _, start := range slices.Sorted(maps.Keys(s.peaks)) {
		c.IntervalPeaks = append(c.IntervalPeaks, gpufracv1.IntervalPeak{Start: metav1.Unix(start, 0), Bytes: s.peaks[start]})
	}
	for _, pod := range slices.Sorted(maps.Keys(s.windows)) {
		w := s.windows[pod]
		c.PodWindows = append(c.PodWindows, gpufracv1.PodWindow{Pod: pod, Start: metav1.NewTime(w.start), Peak: w.peak})
	}
	return c, nil
}

func microTime(t time.Time) *metav1.MicroTime {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewMicroTime(t)
	return &mt
}

func fromMicro(t *metav1.MicroTime) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

func saveHistogram(h vpautil.Histogram) (gpufracv1.HistogramCheckpoint, error) {
	cp, err := h.SaveToChekpoint()
	if err != nil {
		return gpufracv1.HistogramCheckpoint{}, err
	}
	out := gpufracv1.HistogramCheckpoint{ReferenceTimestamp: cp.ReferenceTimestamp, TotalWeight: cp.TotalWeight}
	if len(cp.BucketWeights) > 0 {
		out.BucketWeights = make(map[string]uint32, len(cp.BucketWeights))
		for b, w := range cp.BucketWeights {
			out.BucketWeights[strconv.Itoa(b)] = w
		}
	}
	return out, nil
}

// loadHistogram returns a decaying histogram of layout o and the model's half-life
// loaded from hc; an error when a bucket index is not a number, is outside the layout,
// the total weight is not a finite non-negative number, or a histogram with weights has
// its decay reference time outside [from, until] (refs).
func loadHistogram(hc gpufracv1.HistogramCheckpoint, o vpautil.HistogramOptions, halfLife time.Duration, refs refBounds) (vpautil.Histogram, error) {
	if math.IsNaN(hc.TotalWeight) || math.IsInf(hc.TotalWeight, 0) {
		return nil, fmt.Errorf("total weight %v", hc.TotalWeight)
	}
	// The weights are relative to the reference time: the first sample after a restore
	// rescales them by 2^((reference − sample time)/half-life). A reference time at zero
	// or far before the samples makes that rescaling wipe every restored weight (the
	// model keeps only what came after the checkpoint: a shrink); one far after them
	// makes every later sample weigh nothing (the histogram never follows a growth).
	if ref := hc.ReferenceTimestamp.Time; len(hc.BucketWeights) > 0 && (ref.IsZero() || ref.Before(refs.from) || ref.After(refs.until)) {
		return nil, fmt.Errorf("reference time %s outside the samples' %s to %s", ref, refs.from, refs.until)
	}
	cp := vpav1.HistogramCheckpoint{ReferenceTimestamp: hc.ReferenceTimestamp, TotalWeight: hc.TotalWeight, BucketWeights: make(map[int]uint32, len(hc.BucketWeights))}
	for k, w := range hc.BucketWeights {
		b, err := strconv.Atoi(k)
		if err != nil {
			return nil, fmt.Errorf("bucket %q: %w", k, err)
		}
		cp.BucketWeights[b] = w
	}
	h := vpautil.NewDecayingHistogram(o, halfLife)
	if err := h.LoadFromCheckpoint(&cp); err != nil {
		return nil, err
	}
	if len(hc.BucketWeights) > 0 && hc.TotalWeight > 0 && h.IsEmpty() {
		return nil, errors.New("bucket weights too small to load")
	}
	return h, nil
}

// refBounds are the decay reference times a restored histogram may have (load).
type refBounds struct{ from, until time.Time }

// load decodes one container of a checkpoint whose samples end at until into a new
// state with options o. Any value that cannot be the model's (a negative count or peak,
// an hour outside 0–23, a histogram that does not load or whose decay reference time
// cannot be its samples', samples counted into an empty histogram) is an error: a
// checkpoint that decodes only in part is not restored at all.
func load(c gpufracv1.ContainerCheckpoint, o Options, until time.Time) (*ContainerState, error) {
	s := newContainerState(o)
	// A decaying histogram's reference time is that of a sample it was fed (a memory
	// sample is stamped at its aggregation interval's start) rounded to the half-life,
	// moved forward only: within half a half-life of its samples, which lie between the
	// first sample's interval start and until. A zero FirstSample bounds nothing below
	// (but a zero reference time is still refused).
	refs := refBounds{until: until.Add(o.HalfLife)}
	if !c.FirstSample.IsZero() {
		refs.from = c.FirstSample.Add(-o.MemoryAggregationInterval - o.HalfLife)
	}
	var err error
	if s.Memory, err = loadHistogram(c.Memory, MemoryBuckets, o.HalfLife, refs); err != nil {
		return nil, fmt.Errorf("memory histogram: %w", err)
	}
	if s.Compute, err = loadHistogram(c.Compute, ComputeBuckets, o.HalfLife, refs); err != nil {
		return nil, fmt.Errorf("compute histogram: %w", err)
	}
	if c.ComputeSamples < 0 || c.MemoryPeaks < 0 || c.SharedSamples < 0 || c.Devices < 0 {
		return nil, fmt.Errorf("negative count (compute samples %d, memory peaks %d, shared samples %d, devices %d)", c.ComputeSamples, c.MemoryPeaks, c.SharedSamples, c.Devices)
	}
	if c.MemoryPeaks > 0 && s.Memory.IsEmpty() || c.ComputeSamples > 0 && s.Compute.IsEmpty() {
		return nil, fmt.Errorf("%d memory peaks and %d compute samples counted, but a histogram is empty", c.MemoryPeaks, c.ComputeSamples)
	}
	if bad(c.LevelPeak) {
		return nil, fmt.Errorf("level peak %v bytes", c.LevelPeak)
	}
	// Every sample of the checkpoint is at or before until, the end of what was read.
	if c.LastSample.After(until) || c.FirstSample.After(c.LastSample.Time) {
		return nil, fmt.Errorf("first sample %s, last sample %s: not in order before the samples' end %s", c.FirstSample, c.LastSample, until)
	}
	s.FirstSample, s.LastSample = c.FirstSample.Time, c.LastSample.Time
	s.ComputeSamples, s.MemoryPeaks, s.SharedSamples = int(c.ComputeSamples), int(c.MemoryPeaks), int(c.SharedSamples)
	s.ComputeSource, s.MIGProfile, s.Devices = c.ComputeSource, c.MIGProfile, int(c.Devices)
	s.MultiDeviceAt = fromMicro(c.MultiDeviceAt)
	s.LevelPeak, s.LevelSince = c.LevelPeak, fromMicro(c.LevelSince)
	if !s.Compute.IsEmpty() && s.Compute.Percentile(1) > ComputeBuckets.GetBucketStart(1) {
		// ActiveAt is not checkpointed: a compute histogram with a sample of 0.01 or
		// more says the GPU ran the container's kernels, by its last sample at the latest.
		s.ActiveAt = s.LastSample
	}
	if cc := c.Contention; cc != nil {
		if bad(cc.CoTenantSamples) || bad(cc.SaturatedSamples) || cc.SaturatedSamples > cc.CoTenantSamples {
			return nil, fmt.Errorf("contention evidence: %v saturated of %v co-tenant samples", cc.SaturatedSamples, cc.CoTenantSamples)
		}
		s.Contention = Contention{CoTenant: cc.CoTenantSamples, Saturated: cc.SaturatedSamples, Ref: cc.Time.Time}
	}
	if fc := c.Fidelity; fc != nil {
		if bad(fc.AllSamples) || bad(fc.LowFidelitySamples) || fc.LowFidelitySamples > fc.AllSamples {
			return nil, fmt.Errorf("compute fidelity evidence: %v low-fidelity of %v samples", fc.LowFidelitySamples, fc.AllSamples)
		}
		s.Fidelity = Fidelity{All: fc.AllSamples, Low: fc.LowFidelitySamples, Ref: fc.Time.Time, Precise: fc.PreciseSource, Coarse: fc.LowFidelitySource}
	}
	for _, hc := range c.ComputeByHour {
		h := int(hc.Hour)
		if h < 0 || h >= HoursPerDay || s.ComputeByHour[h] != nil {
			return nil, fmt.Errorf("hour %d out of range or repeated", hc.Hour)
		}
		if hc.Samples < 0 {
			return nil, fmt.Errorf("hour %d: negative sample count %d", h, hc.Samples)
		}
		if o.NoComputeByHour {
			continue
		}
		if s.ComputeByHour[h], err = loadHistogram(hc.Histogram, ComputeBuckets, o.HalfLife, refs); err != nil {
			return nil, fmt.Errorf("compute histogram of hour %d: %w", h, err)
		}
		s.ComputeHourSamples[h], s.hourFirst[h], s.ComputeHourDays[h] = int(hc.Samples), hc.FirstDay, hc.SeveralDays
	}
	for _, p := range c.IntervalPeaks {
		if bad(p.Bytes) || p.Start.After(until) {
			return nil, fmt.Errorf("interval peak %v bytes at %s (samples until %s)", p.Bytes, p.Start, until)
		}
		s.peaks[p.Start.Unix()] = p.Bytes
	}
	for _, w := range c.PodWindows {
		// A window opened after until would make every later sample of the pod "older
		// than its current interval" (AddMemory): none of them would count.
		if bad(w.Peak) || w.Pod == "" || w.Start.After(until) {
			return nil, fmt.Errorf("pod window %q: peak %v bytes from %s (samples until %s)", w.Pod, w.Peak, w.Start, until)
		}
		s.windows[w.Pod] = &podWindow{start: w.Start.Time, peak: w.Peak}
	}
	return s, nil
}

// bad reports whether v cannot be bytes of memory: NaN, infinite or negative.
func bad(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 }

// Restore replaces what the model knows of workload w with the containers of a
// checkpoint whose samples end at until, and makes it skip every later sample at or
// before until (the checkpoint holds them), and every later compute sample whose window
// starts before until (a window of this process' grid that straddles it holds samples the
// checkpoint's last window held). On any decoding error (load) it returns the
// error and leaves the model unchanged.
func (m *Model) Restore(w WorkloadKey, until time.Time, containers []gpufracv1.ContainerCheckpoint) error {
	states := map[string]*ContainerState{}
	for _, c := range containers {
		if _, dup := states[c.ContainerName]; dup {
			return fmt.Errorf("container %q saved twice", c.ContainerName)
		}
		st, err := load(c, m.opts, until)
		if err != nil {
			return fmt.Errorf("container %q: %w", c.ContainerName, err)
		}
		states[c.ContainerName] = st
	}
	m.Forget(w)
	m.containers[w] = states
	m.floor[w] = until
	m.versions[w]++
	return nil
}
