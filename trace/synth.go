package trace

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"
)

// Synthesize defaults for the length of a trace and the time between samples.
const (
	// DefaultSynthDuration is one day, so the diurnal curve shows once.
	DefaultSynthDuration = 24 * time.Hour
	// DefaultSynthStep is one minute: GenTD26 samples about once a minute, and
	// Prometheus scrapes dcgm-exporter every 15 s to 1 min.
	DefaultSynthStep = time.Minute
)

// SynthOptions configures Synthesize. Zero (or negative) fields take the documented
// defaults.
type SynthOptions struct {
	// Workloads is the number of Deployments (default 4).
	Workloads int
	// PodsPerWorkload is the number of replicas per Deployment (default 1).
	PodsPerWorkload int
	// Duration of the trace (default DefaultSynthDuration).
	Duration time.Duration
	// Step between samples (default DefaultSynthStep), rounded down to whole
	// seconds.
	Step time.Duration
	// Seed of the random generator; the same options give the same trace.
	Seed uint64
	// End is the time of the last sample, truncated to Step (default time.Now()).
	End time.Time
	// Namespace of all pods (default "synth").
	Namespace string
	// Container name of all pods (default "inference").
	Container string
	// WorkloadPrefix names Deployments "<prefix>-000", ... (default "wl").
	WorkloadPrefix string
	// Model holds the distributions per-workload parameters are drawn from.
	Model SynthModel
}

// SynthModel parameterises the synthetic inference model. Zero fields take the
// defaults in DefaultSynthModel; a negative field means 0, which turns a rate
// (bursts, restarts, spikes, adapter switches, cache growth) or a spread off. "Published" marks numbers from the GenTD26 data
// README (measured on the full 144-pod trace, Lin et al., SoCC 2025); "assumption"
// marks choices of this package that no published statistic pins down.
type SynthModel struct {
	// PeakMemoryMedianBytes is the median per-pod peak GPU memory (published: 37.1 GiB).
	PeakMemoryMedianBytes float64
	// PeakMemorySigma is the log-normal sigma of per-workload peak memory
	// (assumption: 0.15, i.e. about ±15 %).
	PeakMemorySigma float64
	// PeakMemoryMaxBytes caps per-workload peak memory (published max: 47.3 GiB).
	PeakMemoryMaxBytes float64
	// PeakToMeanMin and PeakToMeanMax bound the uniform per-workload peak/mean memory
	// ratio (published range: 1.6–2.0).
	PeakToMeanMin, PeakToMeanMax float64
	// ActiveFraction is the mean share of samples with a busy GPU; the rest have a duty
	// cycle of exactly 0 (published: 67 % of duty-cycle samples are 0, so 0.33).
	ActiveFraction float64
	// ActiveFractionConcentration is the concentration (α+β) of the Beta
	// distribution of per-workload ActiveFraction (assumption: 4).
	ActiveFractionConcentration float64
	// ActiveDutyMean is the mean duty cycle (ratio) of busy samples (derived from
	// the published mean duty cycle 7 % / 0.33 busy = 0.21).
	ActiveDutyMean float64
	// ActiveDutyConcentration is the concentration of the Beta distribution of
	// per-workload busy duty cycle (assumption: 6).
	ActiveDutyConcentration float64
	// ActiveDutyNoise is the log-normal sigma of a busy sample's duty cycle around
	// its workload's level (assumption: 0.5).
	ActiveDutyNoise float64
	// MeanBusyMinutes is the mean length of a busy period, minutes (assumption: 8;
	// Stable Diffusion requests take 10–80 s, bursts of a few requests).
	MeanBusyMinutes float64
	// DiurnalAmplitudeMin and DiurnalAmplitudeMax bound the uniform amplitude A of
	// the daily load curve 1 + A·cos(2π(h − peak)/24h) (assumption: 0.3–0.8).
	DiurnalAmplitudeMin, DiurnalAmplitudeMax float64
	// PeakHourMin and PeakHourMax bound the uniform UTC hour of the daily load
	// peak (assumption: 10–20, so workloads peak together as in one region).
	PeakHourMin, PeakHourMax float64
	// BurstsPerDay is the rate of load bursts during which nearly every sample is
	// busy (probability 0.95) at 1.5× duty cycle (assumption: 1 per day).
	BurstsPerDay float64
	// BurstMinutes is the mean (exponential) burst length, minutes (assumption: 20).
	BurstMinutes float64
	// CacheGrowthPerDayMax bounds the uniform per-workload slow memory growth
	// (caches, fragmentation), fraction of the plateau per day since the last
	// restart (assumption: 0–0.1).
	CacheGrowthPerDayMax float64
	// AdapterSwitchesPerHour is the rate of memory level changes (LoRA adapters
	// loaded and unloaded; assumption: 2 per hour).
	AdapterSwitchesPerHour float64
	// AdapterLevelSigma is the normal sigma of the memory level after a switch,
	// relative to the plateau, clamped to 0.7–1.3 (assumption: 0.1).
	AdapterLevelSigma float64
	// SpikeProbability is the probability that a busy sample has a memory spike
	// (activations of a large request) towards the peak (assumption: 0.01). Every
	// pod gets one sample at its workload's peak.
	SpikeProbability float64
	// RestartsPerDay is the rate of pod restarts: memory 0 and duty 0 for one
	// sample, then a 3-sample model load ramp; cache growth restarts (assumption: 0.5).
	RestartsPerDay float64
	// LatencyMedianSeconds is the median per-workload base p95 latency, seconds
	// (assumption: 35, the order of GenTD26 request latencies).
	LatencyMedianSeconds float64
	// LatencySigma is the log-normal sigma of per-workload base latency (assumption: 0.4).
	LatencySigma float64
	// ArrivingWorkloads is the share of workloads (0–1) that are deployed while the
	// trace runs instead of before it: their pods' samples start at a uniform time
	// between 10 % and 75 % of the trace (their own draws are the same, cut before
	// that time). Default 0 (every workload present from the start), so existing
	// seeded traces are unchanged; gpufrac simulate --synth-arriving and gpufrac trace
	// synth --arriving set it.
	ArrivingWorkloads float64
}

// DefaultSynthModel is the model Synthesize uses for zero fields of SynthModel;
// see SynthModel for each value's source.
var DefaultSynthModel = SynthModel{
	PeakMemoryMedianBytes:       37.1 * (1 << 30),
	PeakMemorySigma:             0.15,
	PeakMemoryMaxBytes:          47.3 * (1 << 30),
	PeakToMeanMin:               1.6,
	PeakToMeanMax:               2.0,
	ActiveFraction:              0.33,
	ActiveFractionConcentration: 4,
	ActiveDutyMean:              0.07 / 0.33,
	ActiveDutyConcentration:     6,
	ActiveDutyNoise:             0.5,
	MeanBusyMinutes:             8,
	DiurnalAmplitudeMin:         0.3,
	DiurnalAmplitudeMax:         0.8,
	PeakHourMin:                 10,
	PeakHourMax:                 20,
	BurstsPerDay:                1,
	BurstMinutes:                20,
	CacheGrowthPerDayMax:        0.1,
	AdapterSwitchesPerHour:      2,
	AdapterLevelSigma:           0.1,
	SpikeProbability:            0.01,
	RestartsPerDay:              0.5,
	LatencyMedianSeconds:        35,
	LatencySigma:                0.4,
}

func (m *SynthModel) defaults() {
	d := DefaultSynthModel
	set := func(p *float64, v float64) {
		if *p == 0 {
			*p = v
		} else if *p < 0 {
			*p = 0
		}
	}
	set(&m.PeakMemoryMedianBytes, d.PeakMemoryMedianBytes)
	set(&m.PeakMemorySigma, d.PeakMemorySigma)
	set(&m.PeakMemoryMaxBytes, d.PeakMemoryMaxBytes)
	set(&m.PeakToMeanMin, d.PeakToMeanMin)
	set(&m.PeakToMeanMax, d.PeakToMeanMax)
	set(&m.ActiveFraction, d.ActiveFraction)
	set(&m.ActiveFractionConcentration, d.ActiveFractionConcentration)
	set(&m.ActiveDutyMean, d.ActiveDutyMean)
	set(&m.ActiveDutyConcentration, d.ActiveDutyConcentration)
	set(&m.ActiveDutyNoise, d.ActiveDutyNoise)
	set(&m.MeanBusyMinutes, d.MeanBusyMinutes)
	set(&m.DiurnalAmplitudeMin, d.DiurnalAmplitudeMin)
	set(&m.DiurnalAmplitudeMax, d.DiurnalAmplitudeMax)
	set(&m.PeakHourMin, d.PeakHourMin)
	set(&m.PeakHourMax, d.PeakHourMax)
	set(&m.BurstsPerDay, d.BurstsPerDay)
	set(&m.BurstMinutes, d.BurstMinutes)
	set(&m.CacheGrowthPerDayMax, d.CacheGrowthPerDayMax)
	set(&m.AdapterSwitchesPerHour, d.AdapterSwitchesPerHour)
	set(&m.AdapterLevelSigma, d.AdapterLevelSigma)
	set(&m.SpikeProbability, d.SpikeProbability)
	set(&m.RestartsPerDay, d.RestartsPerDay)
	set(&m.LatencyMedianSeconds, d.LatencyMedianSeconds)
	set(&m.LatencySigma, d.LatencySigma)
	m.ArrivingWorkloads = math.Min(m.ArrivingWorkloads, 1)
	m.MeanBusyMinutes = math.Max(m.MeanBusyMinutes, 1e-3)
	m.ActiveFraction = math.Min(m.ActiveFraction, 0.95)
	m.ActiveDutyMean = math.Min(m.ActiveDutyMean, 0.99)
	m.PeakToMeanMin = math.Max(m.PeakToMeanMin, 1)
	if m.PeakToMeanMax < m.PeakToMeanMin {
		m.PeakToMeanMax = m.PeakToMeanMin
	}
}

// SynthReplayEnd is where gpufrac simulate's synthetic traces end unless told otherwise,
// fixed as GenTD26's is (GenTD26PublishedEnd) so a replay does not depend on the day it
// runs.
var SynthReplayEnd = time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)

// SynthReplayOptions are gpufrac simulate's synthetic defaults: 20 Deployments × 2
// replicas over 48 h, all deployed from the start, ending at SynthReplayEnd, seed 1 (a
// cluster busy enough to share GPUs, with the diurnal curve shown twice).
func SynthReplayOptions() SynthOptions {
	return SynthOptions{Workloads: 20, PodsPerWorkload: 2, Duration: 48 * time.Hour, Seed: 1, End: SynthReplayEnd}
}

// Validate reports options Synthesize would silently replace by its defaults or that
// make no trace: fewer than one workload or pod per workload, a negative duration (0
// takes DefaultSynthDuration) or one under two steps (one sample per pod), a share of arriving workloads outside 0–1, or a
// namespace, container or workload prefix the API server would refuse as a name.
func (o SynthOptions) Validate() error {
	if o.Workloads < 1 || o.PodsPerWorkload < 1 || o.Duration < 0 {
		return fmt.Errorf("synthetic trace: workloads (%d) and pods per workload (%d) must be positive, duration (%s) not negative", o.Workloads, o.PodsPerWorkload, o.Duration)
	}
	if a := o.Model.ArrivingWorkloads; !(a >= 0 && a <= 1) {
		return fmt.Errorf("synthetic trace: share of arriving workloads %v: want 0-1", a)
	}
	step := o.Step.Truncate(time.Second)
	if step <= 0 {
		step = DefaultSynthStep
	}
	if o.Duration > 0 && o.Duration < 2*step {
		return fmt.Errorf("synthetic trace: duration %s is under two steps of %s: one sample per pod, nothing to replay", o.Duration, step)
	}
	return validateNames(o.Namespace, o.Container, o.WorkloadPrefix, "--workload-prefix")
}

func (o *SynthOptions) defaults() {
	if o.Workloads <= 0 {
		o.Workloads = 4
	}
	if o.PodsPerWorkload <= 0 {
		o.PodsPerWorkload = 1
	}
	if o.Duration <= 0 {
		o.Duration = DefaultSynthDuration
	}
	o.Step = o.Step.Truncate(time.Second)
	if o.Step <= 0 {
		o.Step = DefaultSynthStep
	}
	if o.End.IsZero() {
		o.End = time.Now()
	}
	o.End = o.End.Truncate(o.Step).UTC()
	o.Namespace = cmp.Or(o.Namespace, "synth")
	o.Container = cmp.Or(o.Container, "inference")
	o.WorkloadPrefix = cmp.Or(o.WorkloadPrefix, "wl")
	o.Model.defaults()
}

// workloadParams are one workload's draws from SynthModel.
type workloadParams struct {
	peak, mean     float64 // memory bytes
	active, duty   float64 // busy share, busy duty ratio
	amp, peakHour  float64
	growthPerDay   float64
	latencySeconds float64
}

// Synthesize generates a seeded synthetic trace of inference workloads: per
// workload, parameters drawn from opts.Model; per pod, memory samples (a plateau
// while the model is loaded, adapter level changes, slow cache growth, rare spikes
// towards the workload's peak, restarts with a reload ramp), a duty cycle that is
// exactly 0 when idle and follows a two-state busy/idle process whose busy share
// follows a diurnal curve and bursts, and a p95 latency at busy samples. Samples
// lie every Step over (End − Duration, End]. Workload and pod draws use their own
// generators derived from Seed, so adding workloads or pods leaves earlier ones
// unchanged. Names follow the Deployment convention; Pod.ID is
// "synth/<seed>/<workload>/<replica>".
func Synthesize(opts SynthOptions) Trace {
	opts.defaults()
	m := opts.Model
	n := int(opts.Duration / opts.Step)
	if n < 1 {
		n = 1
	}
	start := opts.End.Add(-time.Duration(n-1) * opts.Step)
	stepMin := opts.Step.Minutes()
	var tr Trace
	for w := 0; w < opts.Workloads; w++ {
		name := deploymentName(opts.WorkloadPrefix, w)
		wr := rand.New(rand.NewPCG(opts.Seed, streamID("workload", w, 0)))
		wp := drawWorkload(wr, m)
		// Arrivals draw from their own stream, so every other draw stays the same.
		ar := rand.New(rand.NewPCG(opts.Seed, streamID("arrival", w, 0)))
		arrival := 0
		if ar.Float64() < m.ArrivingWorkloads {
			arrival = int(uniform(ar, 0.1, 0.75) * float64(n))
		}
		var ids []string
		for r := 0; r < opts.PodsPerWorkload; r++ {
			ids = append(ids, fmt.Sprintf("synth/%d/%s/%d", opts.Seed, name, r))
		}
		rs, pods := namePods(name, fmt.Sprintf("synth/%d/%s", opts.Seed, name), ids)
		for r := range ids {
			pr := rand.New(rand.NewPCG(opts.Seed, streamID("pod", w, r)))
			p := Pod{Namespace: opts.Namespace, Workload: name, ReplicaSet: rs, Pod: pods[r], Container: opts.Container, ID: ids[r]}
			synthPod(&p, pr, m, wp, start, opts.Step, stepMin, n)
			if arrival > 0 {
				p.cut(start.Add(time.Duration(arrival) * opts.Step))
			}
			tr.Pods = append(tr.Pods, p)
		}
	}
	return tr
}

func streamID(kind string, w, r int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d/%d", kind, w, r)
	return h.Sum64()
}

func drawWorkload(r *rand.Rand, m SynthModel) workloadParams {
	var wp workloadParams
	wp.peak = math.Min(m.PeakMemoryMedianBytes*math.Exp(m.PeakMemorySigma*r.NormFloat64()), m.PeakMemoryMaxBytes)
	wp.mean = wp.peak / uniform(r, m.PeakToMeanMin, m.PeakToMeanMax)
	wp.active = betaMean(r, m.ActiveFraction, m.ActiveFractionConcentration)
	wp.duty = betaMean(r, m.ActiveDutyMean, m.ActiveDutyConcentration)
	wp.amp = uniform(r, m.DiurnalAmplitudeMin, m.DiurnalAmplitudeMax)
	wp.peakHour = uniform(r, m.PeakHourMin, m.PeakHourMax)
	wp.growthPerDay = uniform(r, 0, m.CacheGrowthPerDayMax)
	wp.latencySeconds = m.LatencyMedianSeconds * math.Exp(m.LatencySigma*r.NormFloat64())
	return wp
}

// loadSteps is the number of samples of a model (re)load ramp after a restart.
const loadSteps = 3

func synthPod(p *Pod, r *rand.Rand, m SynthModel, wp workloadParams, start time.Time, step time.Duration, stepMin float64, n int) {
	g := &podGen{r: r, m: m, wp: wp, stepMin: stepMin,
		shape: make([]float64, n), duty: make([]float64, n), spike: make([]float64, n)}
	p.Compute = make([]Point, n)
	g.on = r.Float64() < wp.active
	g.level = 1.0
	g.lastStart = -r.Float64() * 1440 // the model was loaded up to a day before the trace
	g.leave = math.Min(1, stepMin/m.MeanBusyMinutes)
	for i := 0; i < n; i++ {
		t := start.Add(time.Duration(i) * step)
		g.sample(i, t)
		p.Compute[i] = Point{T: t, V: g.duty[i]}
		if g.duty[i] > 0 {
			lat := wp.latencySeconds * (1 + 0.5*g.duty[i]) * math.Exp(0.15*r.NormFloat64())
			p.LatencyP95 = append(p.LatencyP95, Point{T: t, V: lat})
		}
	}
	g.memory(p)
}

// podGen is synthPod's state while it walks one pod's samples: the random source, the
// model, and per sample the memory shape (relative to the plateau), the compute duty and
// spikes (> 0: a spike towards the peak, share of the gap). Its draws from r come in a
// fixed order, so a seed gives the same trace.
type podGen struct {
	r       *rand.Rand
	m       SynthModel
	wp      workloadParams
	stepMin float64

	shape, duty, spike []float64
	busy               []int // samples with compute activity

	on                          bool
	level, lastStart, burstLeft float64
	leave                       float64
	restartLeft                 int
}

// sample draws sample i at t: busy or idle (a two-state chain around the diurnal
// activity, raised in bursts), restarts with their load ramp, adapter switches moving
// the memory level, and the duty and spikes of a busy sample.
func (g *podGen) sample(i int, t time.Time) {
	r, m, wp, stepMin := g.r, g.m, g.wp, g.stepMin
	mins := float64(i) * stepMin
	hour := float64(t.Hour()) + float64(t.Minute())/60 + float64(t.Second())/3600
	pa := wp.active * (1 + wp.amp*math.Cos(2*math.Pi*(hour-wp.peakHour)/24))
	pa = math.Min(math.Max(pa, 0), 0.95)
	if g.burstLeft <= 0 && r.Float64() < m.BurstsPerDay*stepMin/1440 {
		g.burstLeft = r.ExpFloat64() * m.BurstMinutes / stepMin
	}
	dutyScale := 1.0
	if g.burstLeft > 0 {
		pa, dutyScale = math.Max(pa, 0.95), 1.5
		g.burstLeft--
	}
	enter := math.Min(1, g.leave*pa/(1-pa))
	if g.on {
		g.on = r.Float64() >= g.leave
	} else {
		g.on = r.Float64() < enter
	}
	if g.restartLeft == 0 && r.Float64() < m.RestartsPerDay*stepMin/1440 {
		g.restartLeft = 1 + loadSteps
		g.lastStart = mins
	}
	if r.Float64() < m.AdapterSwitchesPerHour*stepMin/60 {
		g.level = math.Min(math.Max(1+m.AdapterLevelSigma*r.NormFloat64(), 0.7), 1.3)
	}
	g.shape[i] = g.level * (1 + wp.growthPerDay*(mins-g.lastStart)/1440)
	if g.restartLeft > 0 {
		g.shape[i] *= float64(1+loadSteps-g.restartLeft) / float64(1+loadSteps)
		g.restartLeft--
	} else if g.on {
		noise := math.Exp(m.ActiveDutyNoise*r.NormFloat64() - m.ActiveDutyNoise*m.ActiveDutyNoise/2)
		g.duty[i] = math.Min(math.Max(wp.duty*noise*dutyScale, 0.001), 1)
		g.busy = append(g.busy, i)
		if r.Float64() < m.SpikeProbability {
			g.spike[i] = r.Float64()
		}
	}
}

// memory writes p's memory samples: the shape scaled so the mean memory is the
// workload's mean, then the spikes and one sample at the peak; nothing exceeds the peak.
func (g *podGen) memory(p *Pod) {
	n := len(g.shape)
	sum := 0.0
	for _, s := range g.shape {
		sum += s
	}
	k := 0.0
	if sum > 0 {
		k = g.wp.mean * float64(n) / sum
	}
	peakAt := g.r.IntN(n)
	if len(g.busy) > 0 {
		peakAt = g.busy[g.r.IntN(len(g.busy))]
	}
	p.Memory = make([]Point, n)
	for i := range g.shape {
		v := math.Min(k*g.shape[i], g.wp.peak)
		if g.spike[i] > 0 && g.shape[i] > 0 {
			v += g.spike[i] * (g.wp.peak - v)
		}
		if i == peakAt {
			v = g.wp.peak
		}
		p.Memory[i] = Point{T: p.Compute[i].T, V: math.Round(v)}
	}
}

// cut drops the pod's samples before t (a workload deployed at t).
func (p *Pod) cut(t time.Time) {
	keep := func(pts []Point) []Point {
		i := 0
		for i < len(pts) && pts[i].T.Before(t) {
			i++
		}
		return pts[i:]
	}
	p.Memory, p.Compute, p.LatencyP95 = keep(p.Memory), keep(p.Compute), keep(p.LatencyP95)
}

func uniform(r *rand.Rand, lo, hi float64) float64 { return lo + (hi-lo)*r.Float64() }

// betaMean draws from a Beta distribution with the given mean and concentration
// α+β.
func betaMean(r *rand.Rand, mean, conc float64) float64 {
	x := gamma(r, mean*conc)
	y := gamma(r, (1-mean)*conc)
	if x+y == 0 {
		return mean
	}
	return x / (x + y)
}

// gamma draws from Gamma(shape, 1) (Marsaglia and Tsang 2000).
func gamma(r *rand.Rand, shape float64) float64 {
	if shape < 1 {
		return gamma(r, shape+1) * math.Pow(r.Float64(), 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
