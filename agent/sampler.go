package agent

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// Defaults of Config.
const (
	// DefaultInterval is the default sampling period. Utilisation is averaged over
	// it; NVML's own sample period is 1/6 s to 1 s, so it must be at least 1 s.
	DefaultInterval = 10 * time.Second
	// DefaultInitRetry is how often a failed nvmlInit is retried when NVML is not
	// required.
	DefaultInitRetry = 30 * time.Second
)

// Modes of the agent, the "mode" label of gpufrac_agent_info.
const (
	// ModeNVML reads the real NVML library.
	ModeNVML = "nvml"
	// ModeSimulate reads the trace-driven fake of package agent/fakenvml.
	ModeSimulate = "simulate"
)

// Config configures a Sampler.
type Config struct {
	// Interval is the sampling period (default DefaultInterval, minimum 1s).
	Interval time.Duration
	// StaleAfter is the age past which the last snapshot is not exported and
	// gpufrac_agent_up is 0, so a hung NVML call shows as down instead of frozen
	// values (default 3 × Interval).
	StaleAfter time.Duration
	// NVMLRequired makes Run return an error when nvmlInit fails (the process then
	// exits); otherwise Run retries every InitRetry and the agent idles with
	// gpufrac_agent_up 0.
	NVMLRequired bool
	// InitRetry is the nvmlInit retry period when NVML is not required (default
	// DefaultInitRetry).
	InitRetry time.Duration
	// Mode is ModeNVML or ModeSimulate, for gpufrac_agent_info (default ModeNVML).
	Mode string
	// BeforeCycle, when set, runs at the start of each cycle with the cycle's time;
	// the simulator advances its trace replay there.
	BeforeCycle func(now time.Time)
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = 3 * c.Interval
	}
	if c.InitRetry <= 0 {
		c.InitRetry = DefaultInitRetry
	}
	if c.Mode == "" {
		c.Mode = ModeNVML
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Usage is the GPU use of one container on one device in one cycle: the sum over
// the container's processes on that device.
type Usage struct {
	Owner
	Device DeviceKey
	// MemoryBytes is the GPU memory the container's processes use on the device,
	// bytes; valid only when MemoryKnown (false when NVML could not tell the memory
	// of one of the processes).
	MemoryBytes uint64
	MemoryKnown bool
	// SMRatio is the share of the sample period the SMs ran the container's kernels,
	// 0–1 (the processes' SmUtil percent / 100, summed and capped at 1), averaged over
	// the cycle's window; valid only when SMKnown (false under MIG, where NVML has no
	// per-process utilisation, and when the read failed).
	SMRatio float64
	SMKnown bool
	// Processes is the number of the container's processes on the device.
	Processes int
}

// Snapshot is the outcome of one sampling cycle, what the collector exports.
type Snapshot struct {
	// Time is when the cycle started; Duration how long it took.
	Time     time.Time
	Duration time.Duration
	// OK is false when the cycle could not enumerate devices (or NVML is not
	// initialised); Devices and Usage are then empty.
	OK bool
	// Devices are the GPUs and MIG GPU instances, in NVML index order.
	Devices []Device
	// Usage is per container and device, sorted by namespace, pod, container, device.
	Usage []Usage
	// Unattributed counts the processes (distinct PIDs) of the cycle that belong to
	// no known container, by Reason* constant.
	Unattributed map[string]int
	// Vanished is the number of processes listed by NVML whose /proc entry was gone.
	Vanished int
}

// Sampler reads NVML every Interval, attributes processes to containers and keeps
// the latest Snapshot; it is the prometheus.Collector that exports it.
//
// Why a periodic sampler rather than reading NVML at scrape time:
// nvmlDeviceGetProcessUtilization returns the samples newer than the caller's
// last-seen timestamp, so with reads at scrape time the utilisation window would be
// whatever time passed since the previous scrape by any scraper (two Prometheus
// replicas would each see about half the samples). A fixed period gives every
// value a known window, bounds NVML and /proc work however often the agent is
// scraped, and keeps a slow or hung NVML call away from the scrape (a stale
// snapshot then shows as gpufrac_agent_up 0).
type Sampler struct {
	lib  nvml.Interface
	attr Attributor
	cfg  Config

	// Sampler goroutine state.
	devs          map[string]*devState
	logged        map[string]bool
	rd            reading
	allGoneCycles int

	mu          sync.Mutex
	snap        Snapshot
	initialized bool
	initErr     error
	driver      string

	nvmlErrors *prometheus.CounterVec
	vanished   prometheus.Counter
	duration   prometheus.Histogram
}

// NewSampler returns a Sampler reading lib (real NVML from nvml.New, or a fake) and
// attributing PIDs with attr.
func NewSampler(lib nvml.Interface, attr Attributor, cfg Config) *Sampler {
	return &Sampler{
		lib:    lib,
		attr:   attr,
		cfg:    cfg.WithDefaults(),
		devs:   map[string]*devState{},
		logged: map[string]bool{},
		nvmlErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpufrac_agent_nvml_errors_total",
			Help: "NVML calls that failed, by NVML function and return code (expected returns such as ERROR_NOT_SUPPORTED of optional calls are not counted).",
		}, []string{"call", "error"}),
		vanished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpufrac_agent_vanished_processes_total",
			Help: "GPU processes listed by NVML whose /proc/<pid> entry was gone when read (exited mid-cycle, or PIDs not visible: run with hostPID). They are skipped.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpufrac_agent_scrape_duration_seconds",
			Help:    "Seconds one sampling cycle took: reading NVML and /proc and attributing processes.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9),
		}),
	}
}

// Init initialises NVML and reads the driver version. A failure is returned with a
// hint, counted in gpufrac_agent_nvml_errors_total{call="nvmlInit"} and kept for
// gpufrac_agent_up.
func (s *Sampler) Init() error {
	if ret := s.lib.Init(); ret != nvml.SUCCESS {
		s.nvmlErrors.WithLabelValues(CallInit, returnName(ret)).Inc()
		err := fmt.Errorf("NVML initialisation failed (%s): %s", returnName(ret), initHint(ret))
		s.mu.Lock()
		s.initErr = err
		s.mu.Unlock()
		return err
	}
	driver, ret := s.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		s.nvmlError(CallSystemGetDriverVersion, "", ret)
	}
	s.mu.Lock()
	s.initialized, s.initErr, s.driver = true, nil, driver
	s.mu.Unlock()
	return nil
}

// Run initialises NVML unless Init already did (retrying every InitRetry unless
// NVMLRequired, in which case a failure is returned), then samples at once and every Interval until ctx ends,
// and shuts NVML down. It returns nil when ctx ends.
func (s *Sampler) Run(ctx context.Context) error {
	for {
		s.mu.Lock()
		done := s.initialized
		s.mu.Unlock()
		if done {
			break
		}
		err := s.Init()
		if err == nil {
			break
		}
		if s.cfg.NVMLRequired {
			return err
		}
		klog.ErrorS(err, "NVML unavailable; idling with gpufrac_agent_up 0", "retryIn", s.cfg.InitRetry)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.cfg.InitRetry):
		}
	}
	defer func() {
		if ret := s.lib.Shutdown(); ret != nvml.SUCCESS {
			klog.InfoS("nvmlShutdown failed", "error", returnName(ret))
		}
	}()
	klog.InfoS("NVML initialised", "driver", s.driverVersion(), "interval", s.cfg.Interval, "mode", s.cfg.Mode)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.SampleOnce(s.cfg.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *Sampler) driverVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.driver
}

// Sampled reports whether at least one cycle has succeeded (for readiness).
func (s *Sampler) Sampled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.OK
}

// Snapshot returns the latest snapshot (shared; do not modify it).
func (s *Sampler) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

type usageKey struct {
	owner Owner
	dev   int
}

// SampleOnce runs one cycle at time now: reads NVML, attributes each process once,
// aggregates per container and device, and publishes the snapshot. It must not run
// concurrently with itself (Run calls it from one goroutine); NVML must be
// initialised.
func (s *Sampler) SampleOnce(now time.Time) {
	start := time.Now()
	if s.cfg.BeforeCycle != nil {
		s.cfg.BeforeCycle(now)
	}
	snap := Snapshot{Time: now, Unattributed: map[string]int{}}
	if s.read(now, &s.rd) {
		snap.OK = true
		snap.Devices = append([]Device(nil), s.rd.devices...)
		procs := s.attribute(&snap)
		s.checkVanished(snap.Vanished, procs)
	}
	snap.Duration = time.Since(start)
	s.duration.Observe(snap.Duration.Seconds())
	s.publish(snap)
}

// attribute attributes each process read this cycle to its owner (each PID once: a
// process may use several GPUs), sums the attributed ones into snap.Usage per owner and
// device, sorted, and counts the others in snap.Vanished and snap.Unattributed. It
// returns the number of distinct PIDs.
func (s *Sampler) attribute(snap *Snapshot) int {
	attrs := make(map[uint32]Attribution, len(s.rd.procs))
	agg := make(map[usageKey]int, len(s.rd.procs))
	for i := range s.rd.procs {
		p := &s.rd.procs[i]
		a, seen := attrs[p.pid]
		if !seen {
			a = s.attr.Attribute(p.pid)
			attrs[p.pid] = a
			switch a.Reason {
			case "":
			case ReasonGone:
				snap.Vanished++
			default:
				snap.Unattributed[a.Reason]++
			}
		}
		if a.Reason != "" {
			continue
		}
		k := usageKey{a.Owner, p.dev}
		j, ok := agg[k]
		if !ok {
			j = len(snap.Usage)
			agg[k] = j
			snap.Usage = append(snap.Usage, Usage{Owner: a.Owner, Device: snap.Devices[p.dev].DeviceKey, MemoryKnown: true, SMKnown: true})
		}
		snap.Usage[j].add(p)
	}
	for i := range snap.Usage {
		snap.Usage[i].settle()
	}
	sort.Slice(snap.Usage, func(i, j int) bool { return usageLess(&snap.Usage[i], &snap.Usage[j]) })
	return len(attrs)
}

// add adds process p's memory and SM utilisation to u.
func (u *Usage) add(p *procSample) {
	u.Processes++
	u.MemoryBytes += p.mem
	u.MemoryKnown = u.MemoryKnown && p.memKnown
	if p.smN > 0 {
		u.SMRatio += p.smSum / float64(p.smN) / 100
	}
	u.SMKnown = u.SMKnown && p.smKnown
}

// settle caps u's SM ratio at 1 and zeroes what is not known for every process of u.
func (u *Usage) settle() {
	u.SMRatio = min(u.SMRatio, 1)
	if !u.MemoryKnown {
		u.MemoryBytes = 0
	}
	if !u.SMKnown {
		u.SMRatio = 0
	}
}

// checkVanished counts the processes whose PID was gone in
// gpufrac_agent_vanished_processes_total and logs an error once all procs processes of
// the node have been gone for 3 cycles in a row (the agent does not see the host's PIDs).
func (s *Sampler) checkVanished(vanished, procs int) {
	if vanished > 0 {
		s.vanished.Add(float64(vanished))
	}
	if procs > 0 && vanished == procs {
		s.allGoneCycles++
		if s.allGoneCycles == 3 {
			klog.ErrorS(nil, "no GPU process PID is visible under the proc root for 3 cycles: run the agent with hostPID: true and the host's /proc as --proc-root", "processes", procs)
		}
	} else {
		s.allGoneCycles = 0
	}
}

func usageLess(a, b *Usage) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	if a.Pod != b.Pod {
		return a.Pod < b.Pod
	}
	if a.Container != b.Container {
		return a.Container < b.Container
	}
	if a.Device.Index != b.Device.Index {
		return a.Device.Index < b.Device.Index
	}
	return a.Device.GPUInstanceID < b.Device.GPUInstanceID
}

func (s *Sampler) publish(snap Snapshot) {
	s.mu.Lock()
	s.snap = snap
	s.mu.Unlock()
}

// nvmlError counts a failed NVML call and logs it: at error level the first time a
// (call, device, return) combination fails, then at verbosity 4.
func (s *Sampler) nvmlError(call, device string, ret nvml.Return) {
	name := returnName(ret)
	s.nvmlErrors.WithLabelValues(call, name).Inc()
	key := call + "\x00" + device + "\x00" + name
	if !s.logged[key] {
		s.logged[key] = true
		klog.ErrorS(nil, "NVML call failed", "call", call, "device", device, "error", name)
		return
	}
	klog.V(4).InfoS("NVML call failed", "call", call, "device", device, "error", name)
}
