// Package fakenvml runs the node agent without a GPU: a fake NVML (go-nvml's
// nvml.Interface, built on its mock package) whose GPUs and processes replay a GPU
// usage trace against wall-clock time, and an Attributor that attributes each fake
// process to a live pod of the cluster. The agent's Sampler and collector run
// unchanged over it, so a local cluster of fake (KWOK) nodes shows per-pod GPU
// metrics for its real pod names.
//
// Mapping trace pods to live pods: trace pods and live pods are grouped by
// (namespace, Deployment), the Deployment of a live pod being parsed from its name
// ("<deployment>-<pod-template-hash>-<suffix>", trace.SplitDeploymentPodName). Each
// Running live pod is assigned one trace pod of its group, once, for its lifetime:
// the trace pod of the same name if there is one, else the trace pod of the group
// with the fewest live pods assigned (the first in trace order on ties). So with as
// many replicas as trace pods every trace pod plays exactly once; extra replicas
// replay a trace pod a second time; trace pods beyond the replicas, and live pods
// whose Deployment is not in the trace, get no process (both are counted in
// gpufrac_agent_simulate_* metrics). A replacement pod takes over the trace pod its
// predecessor freed.
//
// Each assigned (live pod, trace container) is one fake process with a stable PID on
// one fake GPU, GPUs being handed out round-robin so pods share them. Its memory
// (nvmlDeviceGetComputeRunningProcesses) and SM utilisation
// (nvmlDeviceGetProcessUtilization, one sample per cycle when the trace's compute is
// above 0) are the trace container's values at the replay time: the latest sample at
// or before it, held for at most Config.Hold; with no such sample the process is
// absent (memory) or idle (compute).
package fakenvml

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/agent"
	"github.com/gpufrac/gpufrac/trace"
)

// Defaults of Config.
const (
	// DefaultGPUs is the number of fake GPUs.
	DefaultGPUs = 8
	// DefaultGPUMemoryBytes is the memory of one fake GPU: an H100 80GB HBM3's 81559 MiB.
	DefaultGPUMemoryBytes = 81559 << 20
	// DefaultModel is the product name of the fake GPUs.
	DefaultModel = "NVIDIA H100 80GB HBM3"
	// DriverVersion is what the fake nvmlSystemGetDriverVersion returns.
	DriverVersion = "simulated"
	// FirstPID is the PID of the first fake process; later ones count up.
	FirstPID = 100000
)

// Config configures a Simulator.
type Config struct {
	// Trace is the trace to replay (from trace.ReadLongCSV); it must have a sample.
	Trace trace.Trace
	// Speed is trace seconds replayed per wall-clock second (default 1).
	Speed float64
	// Loop replays the trace from its start again after its end; otherwise the
	// replay stays at the trace's last sample time.
	Loop bool
	// Offset is where in the trace the replay starts (default 0: the first sample).
	Offset time.Duration
	// GPUs is the number of fake GPUs (default DefaultGPUs).
	GPUs int
	// GPUMemoryBytes is the memory of each fake GPU, bytes (default
	// DefaultGPUMemoryBytes).
	GPUMemoryBytes uint64
	// Model is the fake GPUs' product name (default DefaultModel).
	Model string
	// Hold is how long a trace sample stays valid at most (default 3 × the trace's
	// median sample step): past it, and before a pod's first sample, the pod has no
	// process.
	Hold time.Duration
	// Seed makes the fake GPU UUIDs differ between agents (e.g. the node name).
	Seed string
}

// PodLister lists the live pods (agent.PodIndex implements it).
type PodLister interface {
	List() []*corev1.Pod
}

// tracePod is one pod of the trace: the indexes of its containers in Trace.Pods.
type tracePod struct {
	namespace, name string
	entries         []int
	assigned        int // live pods assigned in the current frame
}

type procKey struct {
	uid       types.UID
	container string // trace container
}

type proc struct {
	pid uint32
	gpu int
}

// gpuFrame is what one fake GPU reports during one cycle.
type gpuFrame struct {
	procs   []nvml.ProcessInfo
	samples []nvml.ProcessUtilizationSample
	used    uint64
}

// Simulator is the fake GPU node. Advance moves it to a time; NVML returns the fake
// driver over it, and Attribute attributes its processes. It is safe for
// concurrent use.
type Simulator struct {
	cfg       Config
	pods      PodLister
	tracePods []*tracePod
	byName    map[[2]string]int   // (namespace, pod) → tracePods index
	byWL      map[[2]string][]int // (namespace, workload) → tracePods indexes, trace order
	start     time.Time           // first sample of the trace
	span      time.Duration       // replay period: last - first + step
	step      time.Duration
	uuids     []string

	mu          sync.Mutex
	wallStart   time.Time
	assign      map[types.UID]int
	procs       map[procKey]proc
	nextPID     uint32
	nextGPU     int
	frame       []gpuFrame
	frameTime   uint64 // µs, strictly increasing
	owners      map[uint32]agent.Owner
	replay      time.Time
	unmappedTP  int
	unmappedLP  int
	mappedTP    int
	activeProcs int
}

// New returns a Simulator replaying cfg.Trace onto the pods that pods lists, with
// zero Config fields set to their defaults. It fails when the trace has no sample or
// Speed is negative or not finite.
func New(cfg Config, pods PodLister) (*Simulator, error) {
	if cfg.Speed == 0 {
		cfg.Speed = 1
	}
	if cfg.Speed < 0 || math.IsNaN(cfg.Speed) || math.IsInf(cfg.Speed, 0) {
		return nil, fmt.Errorf("simulate: speed %v must be positive", cfg.Speed)
	}
	if cfg.GPUs <= 0 {
		cfg.GPUs = DefaultGPUs
	}
	if cfg.GPUMemoryBytes == 0 {
		cfg.GPUMemoryBytes = DefaultGPUMemoryBytes
	}
	if cfg.Model == "" {
		cfg.Model = DefaultModel
	}
	sum := cfg.Trace.Summarize()
	if sum.Start.IsZero() {
		return nil, fmt.Errorf("simulate: the trace has no samples")
	}
	s := &Simulator{
		cfg:     cfg,
		pods:    pods,
		byName:  map[[2]string]int{},
		byWL:    map[[2]string][]int{},
		start:   sum.Start,
		step:    medianStep(cfg.Trace),
		assign:  map[types.UID]int{},
		procs:   map[procKey]proc{},
		nextPID: FirstPID,
		owners:  map[uint32]agent.Owner{},
		frame:   make([]gpuFrame, cfg.GPUs),
	}
	s.span = sum.End.Sub(sum.Start) + s.step
	if s.cfg.Hold <= 0 {
		s.cfg.Hold = 3 * s.step
	}
	for i, p := range cfg.Trace.Pods {
		k := [2]string{p.Namespace, p.Pod}
		j, ok := s.byName[k]
		if !ok {
			j = len(s.tracePods)
			s.byName[k] = j
			s.tracePods = append(s.tracePods, &tracePod{namespace: p.Namespace, name: p.Pod})
			wk := [2]string{p.Namespace, p.Workload}
			s.byWL[wk] = append(s.byWL[wk], j)
		}
		s.tracePods[j].entries = append(s.tracePods[j].entries, i)
	}
	for i := 0; i < cfg.GPUs; i++ {
		s.uuids = append(s.uuids, fakeUUID(cfg.Seed, i))
	}
	return s, nil
}

// medianStep is the median interval between successive memory (else compute)
// samples over the trace's pods, 1 minute when no pod has two samples.
func medianStep(t trace.Trace) time.Duration {
	var d []time.Duration
	for _, p := range t.Pods {
		s := p.Memory
		if len(s) < 2 {
			s = p.Compute
		}
		for i := 1; i < len(s) && len(d) < 100000; i++ {
			d = append(d, s[i].T.Sub(s[i-1].T))
		}
	}
	if len(d) == 0 {
		return time.Minute
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

func fakeUUID(seed string, i int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("gpufrac-simulated-gpu/%s/%d", seed, i)))
	h := hex.EncodeToString(sum[:16])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// ReplayTime maps a wall-clock time to the trace time replayed then. The first call
// of ReplayTime or Advance fixes the wall-clock start of the replay.
func (s *Simulator) ReplayTime(now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replayTimeLocked(now)
}

func (s *Simulator) replayTimeLocked(now time.Time) time.Time {
	if s.wallStart.IsZero() {
		s.wallStart = now
	}
	el := time.Duration(float64(now.Sub(s.wallStart))*s.cfg.Speed) + s.cfg.Offset
	if el < 0 {
		el = 0
	}
	if s.cfg.Loop {
		el %= s.span
	} else if el > s.span-s.step {
		el = s.span - s.step
	}
	return s.start.Add(el)
}

// workloadOf returns the Deployment of a live pod: parsed from its name, else from
// its ReplicaSet owner's name minus the pod-template-hash label.
func workloadOf(p *corev1.Pod) (string, bool) {
	if d, _, ok := trace.SplitDeploymentPodName(p.Name); ok {
		return d, true
	}
	h := p.Labels["pod-template-hash"]
	for _, o := range p.OwnerReferences {
		if o.Kind == "ReplicaSet" && h != "" && strings.HasSuffix(o.Name, "-"+h) {
			return strings.TrimSuffix(o.Name, "-"+h), true
		}
	}
	return "", false
}

// Advance moves the simulation to wall-clock time now: it updates the assignment of
// live pods to trace pods from the pod lister and computes every fake GPU's
// processes and utilisation samples at the replay time. The agent's Sampler calls
// it at the start of each cycle (agent.Config.BeforeCycle).
func (s *Simulator) Advance(now time.Time) {
	live := s.pods.List()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replay = s.replayTimeLocked(now)
	running := runningPods(live)
	s.assignLocked(running)
	s.frameLocked(now, running)
}

// runningPods returns the running pods of live in a stable order for first
// assignments: by creation time, then namespace and name.
func runningPods(live []*corev1.Pod) []*corev1.Pod {
	var running []*corev1.Pod
	for _, p := range live {
		if p.Status.Phase == corev1.PodRunning {
			running = append(running, p)
		}
	}
	sort.Slice(running, func(i, j int) bool {
		a, b := running[i], running[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return running
}

// assignLocked keeps the assignment of the running pods that stay, forgets the others,
// assigns a trace pod to each new one (pick) and counts mapped and unmapped pods.
func (s *Simulator) assignLocked(running []*corev1.Pod) {
	present := make(map[types.UID]bool, len(running))
	for _, p := range running {
		present[p.UID] = true
	}
	for uid := range s.assign {
		if !present[uid] {
			delete(s.assign, uid)
		}
	}
	for _, tp := range s.tracePods {
		tp.assigned = 0
	}
	for _, j := range s.assign {
		s.tracePods[j].assigned++
	}
	s.unmappedLP = 0
	for _, p := range running {
		if _, ok := s.assign[p.UID]; ok {
			continue
		}
		j, ok := s.pick(p)
		if !ok {
			s.unmappedLP++
			continue
		}
		s.assign[p.UID] = j
		s.tracePods[j].assigned++
	}
	s.mappedTP, s.unmappedTP = 0, 0
	for _, tp := range s.tracePods {
		if tp.assigned > 0 {
			s.mappedTP++
		} else {
			s.unmappedTP++
		}
	}
}

// frameLocked computes every fake GPU's processes and utilisation samples at the replay
// time for the assigned running pods, stamped now (strictly after the last frame), and
// forgets the processes of containers no longer running.
func (s *Simulator) frameLocked(now time.Time, running []*corev1.Pod) {
	for g := range s.frame {
		s.frame[g].procs, s.frame[g].samples, s.frame[g].used = s.frame[g].procs[:0], s.frame[g].samples[:0], 0
	}
	ts := uint64(now.UnixMicro())
	if ts <= s.frameTime {
		ts = s.frameTime + 1
	}
	s.frameTime = ts
	clear(s.owners)
	alive := map[procKey]bool{}
	s.activeProcs = 0
	for _, p := range running {
		j, ok := s.assign[p.UID]
		if !ok {
			continue
		}
		for _, e := range s.tracePods[j].entries {
			tc := &s.cfg.Trace.Pods[e]
			k := procKey{p.UID, tc.Container}
			alive[k] = true
			s.addProcLocked(p, tc, k, ts)
		}
	}
	for k := range s.procs {
		if !alive[k] {
			delete(s.procs, k)
		}
	}
}

// addProcLocked puts the process of live pod p's container k (trace container tc) on
// its GPU of the frame stamped ts, with its memory and SM utilisation at the replay
// time; a process gets its PID and GPU (round robin) the first time it is seen. A
// container whose trace has no memory value then is not running: no process.
func (s *Simulator) addProcLocked(p *corev1.Pod, tc *trace.Pod, k procKey, ts uint64) {
	pr, ok := s.procs[k]
	if !ok {
		pr = proc{pid: s.nextPID, gpu: s.nextGPU}
		s.nextPID++
		s.nextGPU = (s.nextGPU + 1) % len(s.frame)
		s.procs[k] = pr
	}
	mem, ok := valueAt(tc.Memory, s.replay, s.cfg.Hold)
	if !ok {
		return // not running at this point of the trace
	}
	f := &s.frame[pr.gpu]
	b := uint64(math.Round(mem))
	f.procs = append(f.procs, nvml.ProcessInfo{Pid: pr.pid, UsedGpuMemory: b})
	f.used += b
	if c, ok := valueAt(tc.Compute, s.replay, s.cfg.Hold); ok {
		if pct := uint32(math.Round(c * 100)); pct > 0 {
			f.samples = append(f.samples, nvml.ProcessUtilizationSample{Pid: pr.pid, TimeStamp: ts, SmUtil: min(pct, 100)})
		}
	}
	s.owners[pr.pid] = agent.Owner{Namespace: p.Namespace, Pod: p.Name, Container: containerFor(p, tc.Container)}
	s.activeProcs++
}

// pick chooses the trace pod for a new live pod: the one of the same name, else the
// least-assigned of its Deployment (first in trace order on ties).
func (s *Simulator) pick(p *corev1.Pod) (int, bool) {
	if j, ok := s.byName[[2]string{p.Namespace, p.Name}]; ok {
		return j, true
	}
	wl, ok := workloadOf(p)
	if !ok {
		return 0, false
	}
	cands := s.byWL[[2]string{p.Namespace, wl}]
	if len(cands) == 0 {
		return 0, false
	}
	best := cands[0]
	for _, j := range cands[1:] {
		if s.tracePods[j].assigned < s.tracePods[best].assigned {
			best = j
		}
	}
	return best, true
}

// containerFor is the live pod's container that replays trace container c: the one
// of the same name, else the pod's first container.
func containerFor(p *corev1.Pod, c string) string {
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == c {
			return c
		}
	}
	if len(p.Spec.Containers) > 0 {
		return p.Spec.Containers[0].Name
	}
	return c
}

// valueAt returns the value of the latest point at or before t, if it is at most
// hold old.
func valueAt(pts []trace.Point, t time.Time, hold time.Duration) (float64, bool) {
	i := sort.Search(len(pts), func(i int) bool { return pts[i].T.After(t) })
	if i == 0 {
		return 0, false
	}
	p := pts[i-1]
	if t.Sub(p.T) > hold {
		return 0, false
	}
	return p.V, true
}

// Attribute implements agent.Attributor: the live pod's container a fake process
// replays for; a PID not in the current frame is agent.ReasonGone.
func (s *Simulator) Attribute(pid uint32) agent.Attribution {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.owners[pid]; ok {
		return agent.Attribution{Owner: o}
	}
	return agent.Attribution{Reason: agent.ReasonGone}
}

// NVML returns the fake NVML library over the simulator. Only the calls the agent
// makes are implemented; any other panics (go-nvml's mock behaviour).
func (s *Simulator) NVML() nvml.Interface {
	l := &fakeLib{Interface: &mock.Interface{}, s: s}
	for i := range s.frame {
		l.devs = append(l.devs, &fakeDevice{Device: &mock.Device{}, s: s, index: i})
	}
	return l
}

// The fake embeds go-nvml's mock types, which give it the rest of nvml.Interface and
// nvml.Device, and overrides the methods the agent calls as plain methods instead of
// the mocks' Func fields: the mocks record every call in a slice that would grow
// without bound in a long-running simulation.
type fakeLib struct {
	*mock.Interface
	s    *Simulator
	devs []*fakeDevice
}

func (l *fakeLib) Init() nvml.Return                             { return nvml.SUCCESS }
func (l *fakeLib) Shutdown() nvml.Return                         { return nvml.SUCCESS }
func (l *fakeLib) SystemGetDriverVersion() (string, nvml.Return) { return DriverVersion, nvml.SUCCESS }
func (l *fakeLib) DeviceGetCount() (int, nvml.Return)            { return len(l.devs), nvml.SUCCESS }
func (l *fakeLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if i < 0 || i >= len(l.devs) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return l.devs[i], nvml.SUCCESS
}

type fakeDevice struct {
	*mock.Device
	s     *Simulator
	index int
}

func (d *fakeDevice) GetUUID() (string, nvml.Return) { return d.s.uuids[d.index], nvml.SUCCESS }
func (d *fakeDevice) GetName() (string, nvml.Return) { return d.s.cfg.Model, nvml.SUCCESS }
func (d *fakeDevice) GetIndex() (int, nvml.Return)   { return d.index, nvml.SUCCESS }
func (d *fakeDevice) GetMigMode() (int, int, nvml.Return) {
	return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS
}

func (d *fakeDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	total := d.s.cfg.GPUMemoryBytes
	used := min(d.s.frame[d.index].used, total)
	return nvml.Memory{Total: total, Used: used, Free: total - used}, nvml.SUCCESS
}

func (d *fakeDevice) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	return append([]nvml.ProcessInfo(nil), d.s.frame[d.index].procs...), nvml.SUCCESS
}

func (d *fakeDevice) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return nil, nvml.SUCCESS
}

func (d *fakeDevice) GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return nil, nvml.SUCCESS
}

// GetProcessUtilization returns the frame's samples newer than lastSeen, or
// ERROR_NOT_FOUND when there are none, as NVML does.
func (d *fakeDevice) GetProcessUtilization(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	var out []nvml.ProcessUtilizationSample
	for _, smp := range d.s.frame[d.index].samples {
		if smp.TimeStamp > lastSeen {
			out = append(out, smp)
		}
	}
	if len(out) == 0 {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return out, nvml.SUCCESS
}

var (
	descTracePods = prometheus.NewDesc("gpufrac_agent_simulate_trace_pods",
		"Trace pods by state: mapped (replayed by at least one live pod) or unmapped (no Running pod of their Deployment left for them).", []string{"state"}, nil)
	descUnmappedLive = prometheus.NewDesc("gpufrac_agent_simulate_unmapped_live_pods",
		"Running pods whose Deployment has no pod in the trace; they get no simulated GPU process.", nil, nil)
	descProcesses = prometheus.NewDesc("gpufrac_agent_simulate_processes",
		"Simulated GPU processes in the current frame.", nil, nil)
	descReplay = prometheus.NewDesc("gpufrac_agent_simulate_replay_timestamp_seconds",
		"Trace time being replayed, Unix seconds.", nil, nil)
)

// Describe implements prometheus.Collector.
func (s *Simulator) Describe(ch chan<- *prometheus.Desc) {
	ch <- descTracePods
	ch <- descUnmappedLive
	ch <- descProcesses
	ch <- descReplay
}

// Collect implements prometheus.Collector: the simulation's mapping state.
func (s *Simulator) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descTracePods, prometheus.GaugeValue, float64(s.mappedTP), "mapped")
	ch <- prometheus.MustNewConstMetric(descTracePods, prometheus.GaugeValue, float64(s.unmappedTP), "unmapped")
	ch <- prometheus.MustNewConstMetric(descUnmappedLive, prometheus.GaugeValue, float64(s.unmappedLP))
	ch <- prometheus.MustNewConstMetric(descProcesses, prometheus.GaugeValue, float64(s.activeProcs))
	if !s.replay.IsZero() {
		ch <- prometheus.MustNewConstMetric(descReplay, prometheus.GaugeValue, float64(s.replay.UnixNano())/1e9)
	}
}
