package agent

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2"
)

const (
	gib   = 1 << 30
	uuid0 = "GPU-00000000-1111-2222-3333-444444444444"
	uuid1 = "GPU-11111111-1111-2222-3333-444444444444"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func us(t time.Time) uint64 { return uint64(t.UnixMicro()) }

// newSampler returns a sampler whose clock is *now.
func newSampler(lib nvml.Interface, attr Attributor, now *time.Time) *Sampler {
	return NewSampler(lib, attr, Config{Interval: 10 * time.Second, Now: func() time.Time { return *now }})
}

func compare(t *testing.T, s *Sampler, want string, names ...string) {
	t.Helper()
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

const (
	helpPodMem = `# HELP gpufrac_pod_gpu_memory_used_bytes GPU memory used by the container's processes on this GPU or MIG instance (NVML per-process usedGpuMemory, summed), bytes.
# TYPE gpufrac_pod_gpu_memory_used_bytes gauge
`
	helpPodSM = `# HELP gpufrac_pod_gpu_sm_utilization_ratio Share of the sampling interval the GPU's SMs ran the container's kernels (NVML per-process SmUtil / 100, summed, capped at 1), ratio 0-1. Absent for MIG instances.
# TYPE gpufrac_pod_gpu_sm_utilization_ratio gauge
`
	helpUnattributed = `# HELP gpufrac_agent_unattributed_processes GPU processes of the last cycle that belong to no known Kubernetes container, by reason (host, unknown_pod, unknown_container, unreadable).
# TYPE gpufrac_agent_unattributed_processes gauge
`
	helpErrors = `# HELP gpufrac_agent_nvml_errors_total NVML calls that failed, by NVML function and return code (expected returns such as ERROR_NOT_SUPPORTED of optional calls are not counted).
# TYPE gpufrac_agent_nvml_errors_total counter
`
	helpUp = `# HELP gpufrac_agent_up 1 when NVML is initialised and the last sampling cycle (not stale) enumerated the GPUs, else 0.
# TYPE gpufrac_agent_up gauge
`
	helpVanished = `# HELP gpufrac_agent_vanished_processes_total GPU processes listed by NVML whose /proc/<pid> entry was gone when read (exited mid-cycle, or PIDs not visible: run with hostPID). They are skipped.
# TYPE gpufrac_agent_vanished_processes_total counter
`
)

// TestTwoPodsShareOneGPU: two pods on one GPU each get their own memory and
// utilisation, and a second cycle reads only samples newer than the last seen.
func TestTwoPodsShareOneGPU(t *testing.T) {
	c := newCluster(t)
	c.proc(101, c.addContainer("ml", "alpha-5d8f7-abcde", "server", false))
	c.proc(102, c.addContainer("ml", "beta-6c9g8-fghjk", "worker", true))
	g := &fakeGPU{uuid: uuid0, name: "NVIDIA H100 80GB HBM3", total: 80 * gib, used: 5 * gib,
		compute: []nvml.ProcessInfo{{Pid: 101, UsedGpuMemory: 1 * gib}, {Pid: 102, UsedGpuMemory: 3 * gib}},
		samples: []nvml.ProcessUtilizationSample{
			{Pid: 101, TimeStamp: us(t0.Add(-2 * time.Second)), SmUtil: 20},
			{Pid: 102, TimeStamp: us(t0.Add(-1 * time.Second)), SmUtil: 50},
		}}
	dev := g.device()
	now := t0
	s := newSampler(fakeLib(dev), c.attributor(), &now)
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	s.SampleOnce(now)

	compare(t, s, helpPodMem+`
gpufrac_pod_gpu_memory_used_bytes{GPU_I_ID="",UUID="`+uuid0+`",container="server",gpu="0",namespace="ml",pod="alpha-5d8f7-abcde"} 1.073741824e+09
gpufrac_pod_gpu_memory_used_bytes{GPU_I_ID="",UUID="`+uuid0+`",container="worker",gpu="0",namespace="ml",pod="beta-6c9g8-fghjk"} 3.221225472e+09
`+helpPodSM+`
gpufrac_pod_gpu_sm_utilization_ratio{GPU_I_ID="",UUID="`+uuid0+`",container="server",gpu="0",namespace="ml",pod="alpha-5d8f7-abcde"} 0.2
gpufrac_pod_gpu_sm_utilization_ratio{GPU_I_ID="",UUID="`+uuid0+`",container="worker",gpu="0",namespace="ml",pod="beta-6c9g8-fghjk"} 0.5
`+helpUp+`gpufrac_agent_up 1
`, MetricPodMemoryUsed, MetricPodSMUtilization, MetricUp)
	compare(t, s, `# HELP gpufrac_gpu_memory_total_bytes Framebuffer memory of the GPU or MIG instance (nvmlDeviceGetMemoryInfo total), bytes.
# TYPE gpufrac_gpu_memory_total_bytes gauge
gpufrac_gpu_memory_total_bytes{GPU_I_ID="",GPU_I_PROFILE="",UUID="`+uuid0+`",gpu="0",modelName="NVIDIA H100 80GB HBM3"} 8.589934592e+10
# HELP gpufrac_gpu_memory_used_bytes Framebuffer memory in use on the GPU or MIG instance by any process (nvmlDeviceGetMemoryInfo used), bytes.
# TYPE gpufrac_gpu_memory_used_bytes gauge
gpufrac_gpu_memory_used_bytes{GPU_I_ID="",GPU_I_PROFILE="",UUID="`+uuid0+`",gpu="0",modelName="NVIDIA H100 80GB HBM3"} 5.36870912e+09
# HELP gpufrac_agent_process_utilization_supported 1 when NVML gives per-process SM utilisation on the device, 0 where it does not (MIG instances); then no utilisation series is exported for its pods.
# TYPE gpufrac_agent_process_utilization_supported gauge
gpufrac_agent_process_utilization_supported{GPU_I_ID="",UUID="`+uuid0+`",gpu="0"} 1
`, MetricGPUMemoryTotal, MetricGPUMemoryUsed, MetricUtilizationSupported)

	// First call: window one interval back. Second: from the newest sample seen.
	now = t0.Add(10 * time.Second)
	g.mu.Lock()
	g.samples = append(g.samples, nvml.ProcessUtilizationSample{Pid: 101, TimeStamp: us(t0.Add(5 * time.Second)), SmUtil: 40})
	g.mu.Unlock()
	s.SampleOnce(now)
	calls := dev.GetProcessUtilizationCalls()
	if len(calls) != 2 || calls[0].V != us(t0.Add(-10*time.Second)) || calls[1].V != us(t0.Add(-1*time.Second)) {
		t.Errorf("lastSeen arguments = %+v; want %d then %d", calls, us(t0.Add(-10*time.Second)), us(t0.Add(-time.Second)))
	}
	// The old samples are not counted again: alpha 0.4 from the new sample only,
	// beta idle (no new sample) is 0, not its old 0.5.
	compare(t, s, helpPodSM+`
gpufrac_pod_gpu_sm_utilization_ratio{GPU_I_ID="",UUID="`+uuid0+`",container="server",gpu="0",namespace="ml",pod="alpha-5d8f7-abcde"} 0.4
gpufrac_pod_gpu_sm_utilization_ratio{GPU_I_ID="",UUID="`+uuid0+`",container="worker",gpu="0",namespace="ml",pod="beta-6c9g8-fghjk"} 0
`, MetricPodSMUtilization)

	// Third cycle: NVML has no new sample at all (ERROR_NOT_FOUND): both idle, no error.
	now = t0.Add(20 * time.Second)
	s.SampleOnce(now)
	compare(t, s, helpPodSM+`
gpufrac_pod_gpu_sm_utilization_ratio{GPU_I_ID="",UUID="`+uuid0+`",container="server",gpu="0",namespace="ml",pod="alpha-5d8f7-abcde"} 0
gpufrac_pod_gpu_sm_utilization_ratio{GPU_I_ID="",UUID="`+uuid0+`",container="worker",gpu="0",namespace="ml",pod="beta-6c9g8-fghjk"} 0
`, MetricPodSMUtilization)
	if n := testutil.CollectAndCount(s, "gpufrac_agent_nvml_errors_total"); n != 0 {
		t.Errorf("%d error series, want none", n)
	}
}

// TestProcessesOfOneContainerAreSummed: two processes of one container, one of them
// in two process lists (compute and graphics) and on two GPUs.
func TestProcessesOfOneContainerAreSummed(t *testing.T) {
	c := newCluster(t)
	cg := c.addContainer("ml", "gamma-7d9h9-lmnpq", "main", false)
	c.proc(201, cg)
	c.proc(202, cg)
	g0 := &fakeGPU{uuid: uuid0, total: 80 * gib,
		compute:  []nvml.ProcessInfo{{Pid: 201, UsedGpuMemory: 2 * gib}, {Pid: 202, UsedGpuMemory: 1 * gib}},
		graphics: []nvml.ProcessInfo{{Pid: 201, UsedGpuMemory: 2 * gib}},
		samples: []nvml.ProcessUtilizationSample{
			{Pid: 201, TimeStamp: us(t0.Add(-3 * time.Second)), SmUtil: 70},
			{Pid: 201, TimeStamp: us(t0.Add(-2 * time.Second)), SmUtil: 50}, // averaged with the one above: 60
			{Pid: 202, TimeStamp: us(t0.Add(-1 * time.Second)), SmUtil: 60}, // 0.6 + 0.6 capped at 1
			{Pid: 0, TimeStamp: us(t0), SmUtil: 99},                         // driver garbage
			{Pid: 202, TimeStamp: us(t0), SmUtil: 3000},                     // impossible value
		}}
	g1 := &fakeGPU{uuid: uuid1, total: 80 * gib, compute: []nvml.ProcessInfo{{Pid: 201, UsedGpuMemory: 4 * gib}}}
	now := t0
	s := newSampler(fakeLib(g0.device(), g1.device()), c.attributor(), &now)
	s.SampleOnce(now)
	compare(t, s, helpPodMem+`
gpufrac_pod_gpu_memory_used_bytes{GPU_I_ID="",UUID="`+uuid0+`",container="main",gpu="0",namespace="ml",pod="gamma-7d9h9-lmnpq"} 3.221225472e+09
gpufrac_pod_gpu_memory_used_bytes{GPU_I_ID="",UUID="`+uuid1+`",container="main",gpu="1",namespace="ml",pod="gamma-7d9h9-lmnpq"} 4.294967296e+09
`+helpPodSM+`
gpufrac_pod_gpu_sm_utilization_ratio{GPU_I_ID="",UUID="`+uuid0+`",container="main",gpu="0",namespace="ml",pod="gamma-7d9h9-lmnpq"} 1
gpufrac_pod_gpu_sm_utilization_ratio{GPU_I_ID="",UUID="`+uuid1+`",container="main",gpu="1",namespace="ml",pod="gamma-7d9h9-lmnpq"} 0
`, MetricPodMemoryUsed, MetricPodSMUtilization)
	snap := s.Snapshot()
	if len(snap.Usage) != 2 || snap.Usage[0].Processes != 2 || snap.Usage[1].Processes != 1 {
		t.Errorf("usage = %+v", snap.Usage)
	}
}

// TestVanishedProcessIsSkipped: a process NVML lists whose /proc entry is gone, a
// utilisation sample of a PID no longer listed, and a MIG-less process list call
// returning ERROR_NOT_FOUND are all skipped without errors.
func TestVanishedProcessIsSkipped(t *testing.T) {
	c := newCluster(t)
	c.proc(301, c.addContainer("ml", "delta-8f2j2-rstvw", "main", false))
	c.proc(302, c.addContainer("ml", "eps-9g3k3-xzbcd", "main", false))
	g := &fakeGPU{uuid: uuid0, total: 80 * gib,
		compute: []nvml.ProcessInfo{{Pid: 301, UsedGpuMemory: gib}, {Pid: 302, UsedGpuMemory: gib}},
		mpsRet:  nvml.ERROR_NOT_FOUND,
		samples: []nvml.ProcessUtilizationSample{{Pid: 301, TimeStamp: us(t0), SmUtil: 10}, {Pid: 399, TimeStamp: us(t0), SmUtil: 90}},
	}
	now := t0
	s := newSampler(fakeLib(g.device()), c.attributor(), &now)
	s.SampleOnce(now)
	if got := len(s.Snapshot().Usage); got != 2 {
		t.Fatalf("%d usages, want 2", got)
	}
	// 302 exits between NVML's list and the /proc read.
	c.kill(302)
	now = t0.Add(10 * time.Second)
	s.SampleOnce(now)
	compare(t, s, helpPodMem+`
gpufrac_pod_gpu_memory_used_bytes{GPU_I_ID="",UUID="`+uuid0+`",container="main",gpu="0",namespace="ml",pod="delta-8f2j2-rstvw"} 1.073741824e+09
`+helpVanished+`gpufrac_agent_vanished_processes_total 1
`+helpUnattributed+`gpufrac_agent_unattributed_processes{reason="host"} 0
gpufrac_agent_unattributed_processes{reason="unknown_container"} 0
gpufrac_agent_unattributed_processes{reason="unknown_pod"} 0
gpufrac_agent_unattributed_processes{reason="unreadable"} 0
`, MetricPodMemoryUsed, "gpufrac_agent_vanished_processes_total", MetricUnattributed)
	if n := testutil.CollectAndCount(s, "gpufrac_agent_nvml_errors_total"); n != 0 {
		t.Errorf("%d error series, want none", n)
	}
	// NVML also stops listing it: nothing left of it.
	g.mu.Lock()
	g.compute = g.compute[:1]
	g.mu.Unlock()
	s.SampleOnce(t0.Add(20 * time.Second))
	if snap := s.Snapshot(); len(snap.Usage) != 1 || snap.Vanished != 0 {
		t.Errorf("snapshot = %+v", snap)
	}
}

// TestUnattributed: host processes, unknown pods and ambiguous containers are counted
// by reason and not exported per pod.
func TestUnattributed(t *testing.T) {
	c := newCluster(t)
	c.proc(401, "0::/system.slice/nvidia-persistenced.service\n")
	c.proc(402, "0::/kubepods/burstable/pod99999999-0000-4000-8000-000000000099/"+strings.Repeat("ab", 32)+"\n")
	// A known pod with two containers whose statuses lack this container ID.
	c.addContainer("ml", "zeta-2b4c5-ddddd", "a", false)
	cg := c.addContainer("ml", "zeta-2b4c5-ddddd", "b", false)
	uid := strings.SplitN(strings.TrimPrefix(cg, "0::/kubepods/burstable/pod"), "/", 2)[0]
	// Give both containers the same pod UID.
	c.pods.pods[uid] = fakePod{namespace: "ml", name: "zeta-2b4c5-ddddd", containers: []string{"a", "b"}}
	c.proc(403, "0::/kubepods/burstable/pod"+uid+"/"+strings.Repeat("cd", 32)+"\n")
	// A known pod with one container: attributed though its container ID is unknown.
	one := c.addContainer("ml", "eta-3c5d6-fffff", "only", false)
	uid1 := strings.SplitN(strings.TrimPrefix(one, "0::/kubepods/burstable/pod"), "/", 2)[0]
	c.proc(404, "0::/kubepods/burstable/pod"+uid1+"/"+strings.Repeat("ef", 32)+"\n")
	g := &fakeGPU{uuid: uuid0, total: 80 * gib, compute: []nvml.ProcessInfo{
		{Pid: 401, UsedGpuMemory: gib}, {Pid: 402, UsedGpuMemory: gib}, {Pid: 403, UsedGpuMemory: gib}, {Pid: 404, UsedGpuMemory: gib}}}
	now := t0
	s := newSampler(fakeLib(g.device()), c.attributor(), &now)
	s.SampleOnce(now)
	compare(t, s, helpUnattributed+`gpufrac_agent_unattributed_processes{reason="host"} 1
gpufrac_agent_unattributed_processes{reason="unknown_container"} 1
gpufrac_agent_unattributed_processes{reason="unknown_pod"} 1
gpufrac_agent_unattributed_processes{reason="unreadable"} 0
`+helpPodMem+`
gpufrac_pod_gpu_memory_used_bytes{GPU_I_ID="",UUID="`+uuid0+`",container="only",gpu="0",namespace="ml",pod="eta-3c5d6-fffff"} 1.073741824e+09
`, MetricUnattributed, MetricPodMemoryUsed)
}

// migGPU is a MIG-enabled GPU: slots map MIG device index → (GPU instance ID, processes);
// a missing slot returns ERROR_NOT_FOUND.
func migGPU(uuid string, maxSlots int, slots map[int]struct {
	gi    int
	procs []nvml.ProcessInfo
	mem   uint64
}) *mock.Device {
	parent := &mock.Device{
		GetUUIDFunc:              func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetNameFunc:              func() (string, nvml.Return) { return "NVIDIA A100-SXM4-40GB", nvml.SUCCESS },
		GetMemoryInfoFunc:        func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 40 * gib}, nvml.SUCCESS },
		GetMigModeFunc:           func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS },
		GetMaxMigDeviceCountFunc: func() (int, nvml.Return) { return maxSlots, nvml.SUCCESS },
		// GetProcessUtilizationFunc is deliberately nil: calling it under MIG panics.
	}
	parent.GetMigDeviceHandleByIndexFunc = func(j int) (nvml.Device, nvml.Return) {
		sl, ok := slots[j]
		if !ok {
			return nil, nvml.ERROR_NOT_FOUND
		}
		g := &fakeGPU{uuid: "MIG-" + uuid, name: "NVIDIA A100-SXM4-40GB MIG 1g.5gb", total: sl.mem, compute: sl.procs}
		m := &mock.Device{GetGpuInstanceIdFunc: func() (int, nvml.Return) { return sl.gi, nvml.SUCCESS }}
		g.setFuncs(m)
		return m, nvml.SUCCESS
	}
	return parent
}

// TestMIG: MIG instances are keyed by (UUID, GPU_I_ID); two compute instances of one
// GPU instance merge; empty slots are skipped; no utilisation series exist and the
// supported metric says 0.
func TestMIG(t *testing.T) {
	c := newCluster(t)
	c.proc(501, c.addContainer("ml", "mig-a-5d8f7-abcde", "main", false))
	c.proc(502, c.addContainer("ml", "mig-b-5d8f7-bcdef", "main", false))
	c.proc(503, c.addContainer("ml", "mig-c-5d8f7-cdefg", "main", false))
	type slot = struct {
		gi    int
		procs []nvml.ProcessInfo
		mem   uint64
	}
	dev := migGPU(uuid0, 7, map[int]slot{
		0: {gi: 1, mem: 5 * gib, procs: []nvml.ProcessInfo{{Pid: 501, UsedGpuMemory: 2 * gib}}},
		1: {gi: 2, mem: 10 * gib, procs: []nvml.ProcessInfo{{Pid: 502, UsedGpuMemory: 3 * gib}}},
		2: {gi: 2, mem: 10 * gib, procs: []nvml.ProcessInfo{{Pid: 503, UsedGpuMemory: memoryNotAvailable}}},
	})
	now := t0
	s := newSampler(fakeLib(dev), c.attributor(), &now)
	s.SampleOnce(now)
	compare(t, s, helpPodMem+`
gpufrac_pod_gpu_memory_used_bytes{GPU_I_ID="1",UUID="`+uuid0+`",container="main",gpu="0",namespace="ml",pod="mig-a-5d8f7-abcde"} 2.147483648e+09
gpufrac_pod_gpu_memory_used_bytes{GPU_I_ID="2",UUID="`+uuid0+`",container="main",gpu="0",namespace="ml",pod="mig-b-5d8f7-bcdef"} 3.221225472e+09
`+`# HELP gpufrac_gpu_memory_total_bytes Framebuffer memory of the GPU or MIG instance (nvmlDeviceGetMemoryInfo total), bytes.
# TYPE gpufrac_gpu_memory_total_bytes gauge
gpufrac_gpu_memory_total_bytes{GPU_I_ID="1",GPU_I_PROFILE="1g.5gb",UUID="`+uuid0+`",gpu="0",modelName="NVIDIA A100-SXM4-40GB"} 5.36870912e+09
gpufrac_gpu_memory_total_bytes{GPU_I_ID="2",GPU_I_PROFILE="1g.5gb",UUID="`+uuid0+`",gpu="0",modelName="NVIDIA A100-SXM4-40GB"} 1.073741824e+10
# HELP gpufrac_agent_process_utilization_supported 1 when NVML gives per-process SM utilisation on the device, 0 where it does not (MIG instances); then no utilisation series is exported for its pods.
# TYPE gpufrac_agent_process_utilization_supported gauge
gpufrac_agent_process_utilization_supported{GPU_I_ID="1",UUID="`+uuid0+`",gpu="0"} 0
gpufrac_agent_process_utilization_supported{GPU_I_ID="2",UUID="`+uuid0+`",gpu="0"} 0
`, MetricPodMemoryUsed, MetricGPUMemoryTotal, MetricUtilizationSupported)
	if n := testutil.CollectAndCount(s, MetricPodSMUtilization); n != 0 {
		t.Errorf("%d utilisation series under MIG, want none (never 0)", n)
	}
	// The process with memory "not available" is attributed but has no memory series.
	snap := s.Snapshot()
	if len(snap.Usage) != 3 || snap.Usage[2].Pod != "mig-c-5d8f7-cdefg" || snap.Usage[2].MemoryKnown || snap.Usage[2].Device.GPUInstanceID != 2 {
		t.Errorf("usage = %+v", snap.Usage)
	}
}

// TestMIGProcessInSeveralComputeInstances: NVML may list a process of a GPU instance
// under each of the instance's compute instances (MIG device handles), in whatever
// slot order; it is one process there, with its memory counted once, whichever
// compute instance lists it and however the GPU instances' slots interleave.
func TestMIGProcessInSeveralComputeInstances(t *testing.T) {
	type slot = struct {
		gi    int
		procs []nvml.ProcessInfo
		mem   uint64
	}
	c := newCluster(t)
	ca := c.addContainer("ml", "mig-a-5d8f7-abcde", "main", false)
	c.proc(701, ca)
	c.proc(702, ca)
	c.proc(703, c.addContainer("ml", "mig-b-5d8f7-bcdef", "main", false))
	p701 := nvml.ProcessInfo{Pid: 701, UsedGpuMemory: 2 * gib}
	p702 := nvml.ProcessInfo{Pid: 702, UsedGpuMemory: 1 * gib}
	p703 := nvml.ProcessInfo{Pid: 703, UsedGpuMemory: 3 * gib}
	for _, tc := range []struct {
		name  string
		slots map[int]slot
	}{
		{"adjacent compute instances", map[int]slot{
			0: {gi: 1, mem: 10 * gib, procs: []nvml.ProcessInfo{p701, p702}},
			1: {gi: 1, mem: 10 * gib, procs: []nvml.ProcessInfo{p701, p702}},
			2: {gi: 2, mem: 10 * gib, procs: []nvml.ProcessInfo{p703}},
		}},
		{"interleaved with another instance", map[int]slot{
			0: {gi: 1, mem: 10 * gib, procs: []nvml.ProcessInfo{p701}},
			1: {gi: 2, mem: 10 * gib, procs: []nvml.ProcessInfo{p703}},
			2: {gi: 1, mem: 10 * gib, procs: []nvml.ProcessInfo{p701, p702}},
			3: {gi: 2, mem: 10 * gib, procs: []nvml.ProcessInfo{p703}},
		}},
		{"three compute instances, memory unknown in one", map[int]slot{
			0: {gi: 1, mem: 10 * gib, procs: []nvml.ProcessInfo{{Pid: 701, UsedGpuMemory: memoryNotAvailable}, p702}},
			1: {gi: 1, mem: 10 * gib, procs: []nvml.ProcessInfo{p701}},
			2: {gi: 1, mem: 10 * gib, procs: []nvml.ProcessInfo{p701, p702}},
			3: {gi: 2, mem: 10 * gib, procs: []nvml.ProcessInfo{p703}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0
			s := newSampler(fakeLib(migGPU(uuid0, 7, tc.slots)), c.attributor(), &now)
			s.SampleOnce(now)
			compare(t, s, helpPodMem+`
gpufrac_pod_gpu_memory_used_bytes{GPU_I_ID="1",UUID="`+uuid0+`",container="main",gpu="0",namespace="ml",pod="mig-a-5d8f7-abcde"} 3.221225472e+09
gpufrac_pod_gpu_memory_used_bytes{GPU_I_ID="2",UUID="`+uuid0+`",container="main",gpu="0",namespace="ml",pod="mig-b-5d8f7-bcdef"} 3.221225472e+09
`, MetricPodMemoryUsed)
			if u := s.Snapshot().Usage; len(u) != 2 || u[0].Processes != 2 || u[1].Processes != 1 {
				t.Errorf("usage = %+v; want 2 processes in GPU instance 1, 1 in 2", u)
			}
		})
	}
}

// captureLogs routes klog to a buffer for the test's duration.
func captureLogs(t *testing.T) *syncBuffer {
	var buf syncBuffer
	klog.SetLogger(funcr.New(func(prefix, args string) { buf.WriteString(prefix + " " + args + "\n") }, funcr.Options{Verbosity: 0}))
	t.Cleanup(klog.ClearLogger)
	return &buf
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) WriteString(x string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(x)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestNVMLErrorsSurface: failing calls are counted by call and return code, logged
// once at error level, and drop only what they concern.
func TestNVMLErrorsSurface(t *testing.T) {
	logs := captureLogs(t)
	c := newCluster(t)
	c.proc(601, c.addContainer("ml", "theta-4d6f7-ggggg", "main", false))
	lost := &fakeGPU{uuid: uuid0, uuidRet: nvml.ERROR_GPU_IS_LOST}
	g := &fakeGPU{uuid: uuid1, total: 80 * gib, memRet: nvml.ERROR_UNKNOWN,
		compute: []nvml.ProcessInfo{{Pid: 601, UsedGpuMemory: gib}},
		mpsRet:  nvml.ERROR_NOT_SUPPORTED, // optional: disabled, not an error
		utilRet: nvml.ERROR_TIMEOUT,
	}
	gdev := g.device()
	now := t0
	s := newSampler(fakeLib(lost.device(), gdev), c.attributor(), &now)
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	s.SampleOnce(now)
	now = now.Add(10 * time.Second)
	s.SampleOnce(now)
	compare(t, s, helpErrors+`gpufrac_agent_nvml_errors_total{call="nvmlDeviceGetMemoryInfo",error="ERROR_UNKNOWN"} 2
gpufrac_agent_nvml_errors_total{call="nvmlDeviceGetProcessUtilization",error="ERROR_TIMEOUT"} 2
gpufrac_agent_nvml_errors_total{call="nvmlDeviceGetUUID",error="ERROR_GPU_IS_LOST"} 2
`+helpPodMem+`
gpufrac_pod_gpu_memory_used_bytes{GPU_I_ID="",UUID="`+uuid1+`",container="main",gpu="1",namespace="ml",pod="theta-4d6f7-ggggg"} 1.073741824e+09
`+helpUp+`gpufrac_agent_up 1
`, "gpufrac_agent_nvml_errors_total", MetricPodMemoryUsed, MetricUp)
	// Utilisation failed: no series rather than 0; no device memory series.
	if n := testutil.CollectAndCount(s, MetricPodSMUtilization, MetricGPUMemoryTotal); n != 0 {
		t.Errorf("%d utilisation/memory-total series, want none", n)
	}
	if n := len(gdev.GetMPSComputeRunningProcessesCalls()); n != 1 {
		t.Errorf("MPS list called %d times after ERROR_NOT_SUPPORTED, want once", n)
	}
	out := logs.String()
	for _, want := range []string{`"call"="nvmlDeviceGetUUID"`, `"error"="ERROR_GPU_IS_LOST"`, `"call"="nvmlDeviceGetProcessUtilization"`, `"error"="ERROR_TIMEOUT"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "ERROR_GPU_IS_LOST"); n != 1 {
		t.Errorf("ERROR_GPU_IS_LOST logged %d times at error level, want once:\n%s", n, out)
	}
}

// TestDeviceCountFailureIsDown: when NVML cannot even count devices the agent is down
// and exports no device or pod series.
func TestDeviceCountFailureIsDown(t *testing.T) {
	captureLogs(t)
	lib := fakeLib()
	lib.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_DRIVER_NOT_LOADED }
	now := t0
	s := newSampler(lib, newCluster(t).attributor(), &now)
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	s.SampleOnce(now)
	compare(t, s, helpUp+"gpufrac_agent_up 0\n"+helpErrors+`gpufrac_agent_nvml_errors_total{call="nvmlDeviceGetCount",error="ERROR_DRIVER_NOT_LOADED"} 1
`, MetricUp, "gpufrac_agent_nvml_errors_total")
	if s.Sampled() {
		t.Error("Sampled after a failed cycle")
	}
}

// TestStaleSnapshot: a snapshot older than StaleAfter is not exported and up is 0.
func TestStaleSnapshot(t *testing.T) {
	c := newCluster(t)
	c.proc(701, c.addContainer("ml", "iota-5e7g8-hhhhh", "main", false))
	g := &fakeGPU{uuid: uuid0, total: 80 * gib, compute: []nvml.ProcessInfo{{Pid: 701, UsedGpuMemory: gib}}}
	now := t0
	s := newSampler(fakeLib(g.device()), c.attributor(), &now)
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	s.SampleOnce(now)
	now = t0.Add(31 * time.Second) // StaleAfter = 3 × 10s
	compare(t, s, helpUp+"gpufrac_agent_up 0\n", MetricUp)
	if n := testutil.CollectAndCount(s, MetricPodMemoryUsed, MetricGPUMemoryUsed, MetricUnattributed); n != 0 {
		t.Errorf("%d series from a stale snapshot", n)
	}
}

// TestInitFailure: a missing NVML library fails Run with a hint when NVML is required,
// and idles with up 0 and a counted error otherwise.
func TestInitFailure(t *testing.T) {
	captureLogs(t)
	lib := fakeLib()
	lib.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	s := NewSampler(lib, newCluster(t).attributor(), Config{NVMLRequired: true})
	err := s.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "ERROR_LIBRARY_NOT_FOUND") || !strings.Contains(err.Error(), "libnvidia-ml.so.1") {
		t.Fatalf("Run = %v, want a library-not-found error with a hint", err)
	}

	s = NewSampler(lib, newCluster(t).attributor(), Config{InitRetry: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run with NVML optional = %v, want nil at context end", err)
	}
	compare(t, s, helpUp+"gpufrac_agent_up 0\n", MetricUp)
	if v := testutil.ToFloat64(s.nvmlErrors.WithLabelValues(CallInit, "ERROR_LIBRARY_NOT_FOUND")); v < 2 {
		t.Errorf("nvmlInit errors = %v, want retries counted", v)
	}
}

// TestRunSamplesAndShutsDown: Run initialises, samples at once and every interval,
// and shuts NVML down when the context ends.
func TestRunSamplesAndShutsDown(t *testing.T) {
	c := newCluster(t)
	g := &fakeGPU{uuid: uuid0, total: 80 * gib}
	lib := fakeLib(g.device())
	var cycles int
	var mu sync.Mutex
	s := NewSampler(lib, c.attributor(), Config{Interval: 20 * time.Millisecond, NVMLRequired: true,
		BeforeCycle: func(time.Time) { mu.Lock(); cycles++; mu.Unlock() }})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if cycles < 3 {
		t.Errorf("%d cycles in 150ms at 20ms, want several", cycles)
	}
	if len(lib.ShutdownCalls()) != 1 || !s.Sampled() {
		t.Errorf("shutdown calls %d, sampled %v", len(lib.ShutdownCalls()), s.Sampled())
	}
	compare(t, s, `# HELP gpufrac_agent_info Always 1: the agent's mode (nvml or simulate) and the NVIDIA driver version.
# TYPE gpufrac_agent_info gauge
gpufrac_agent_info{driver_version="580.65.06",mode="nvml"} 1
`, MetricInfo)
}

// TestAllPIDsInvisibleWarns: when no PID is visible for 3 cycles (no hostPID) the
// agent says so.
func TestAllPIDsInvisibleWarns(t *testing.T) {
	logs := captureLogs(t)
	g := &fakeGPU{uuid: uuid0, total: 80 * gib, compute: []nvml.ProcessInfo{{Pid: 801, UsedGpuMemory: gib}}}
	now := t0
	s := newSampler(fakeLib(g.device()), newCluster(t).attributor(), &now)
	for i := 0; i < 3; i++ {
		s.SampleOnce(now.Add(time.Duration(i) * 10 * time.Second))
	}
	if !strings.Contains(logs.String(), "hostPID") {
		t.Errorf("no hostPID hint in logs:\n%s", logs.String())
	}
}

func TestReturnNameAndProfile(t *testing.T) {
	if got := returnName(nvml.Return(12345)); got != "ERROR_12345" {
		t.Errorf("returnName = %q", got)
	}
	if got := returnName(nvml.ERROR_GPU_IS_LOST); got != "ERROR_GPU_IS_LOST" {
		t.Errorf("returnName = %q", got)
	}
	if got := migProfile("NVIDIA H100 80GB HBM3 MIG 3g.40gb"); got != "3g.40gb" {
		t.Errorf("migProfile = %q", got)
	}
	if got := migProfile("NVIDIA H100 80GB HBM3"); got != "" {
		t.Errorf("migProfile = %q", got)
	}
}

// TestUtilizationAfterTheClockMoves: NVML returns the utilisation samples newer than the
// timestamp the agent passes, the newest it has seen. A sample stamped in the future (a
// driver's, or the clock stepped back after it: NTP, a VM restored) would make every
// later sample look old, and each process of the GPU read idle (0) until the clock
// caught up, while its kernels ran. A sample more than an interval ahead of the cycle is
// not counted, and a last-seen time ahead of the cycle starts the window one interval
// back again.
func TestUtilizationAfterTheClockMoves(t *testing.T) {
	c := newCluster(t)
	c.proc(101, c.addContainer("ml", "alpha-5d8f7-abcde", "server", false))
	g := &fakeGPU{uuid: uuid0, name: "NVIDIA H100 80GB HBM3", total: 80 * gib, used: 5 * gib,
		compute: []nvml.ProcessInfo{{Pid: 101, UsedGpuMemory: 1 * gib}},
		samples: []nvml.ProcessUtilizationSample{
			{Pid: 101, TimeStamp: us(t0.Add(-time.Second)), SmUtil: 50},
			{Pid: 101, TimeStamp: us(t0.Add(time.Hour)), SmUtil: 90}, // from the future
		}}
	now := t0
	s := newSampler(fakeLib(g.device()), c.attributor(), &now)
	s.SampleOnce(now)
	want := func(v string) {
		t.Helper()
		compare(t, s, helpPodSM+`gpufrac_pod_gpu_sm_utilization_ratio{GPU_I_ID="",UUID="`+uuid0+`",container="server",gpu="0",namespace="ml",pod="alpha-5d8f7-abcde"} `+v+"\n", MetricPodSMUtilization)
	}
	want("0.5")
	// Ten seconds on, the process ran at 40 %.
	now = t0.Add(10 * time.Second)
	g.mu.Lock()
	g.samples = []nvml.ProcessUtilizationSample{{Pid: 101, TimeStamp: us(t0.Add(5 * time.Second)), SmUtil: 40}}
	g.mu.Unlock()
	s.SampleOnce(now)
	want("0.4")
	// The clock steps back an hour; the process runs at 30 %.
	now = t0.Add(-time.Hour)
	g.mu.Lock()
	g.samples = []nvml.ProcessUtilizationSample{
		{Pid: 101, TimeStamp: us(t0.Add(5 * time.Second)), SmUtil: 40}, // before the step: counted already
		{Pid: 101, TimeStamp: us(now.Add(-2 * time.Second)), SmUtil: 30},
	}
	g.mu.Unlock()
	s.SampleOnce(now)
	want("0.3")
}
