package fakenvml

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/agent"
	"github.com/gpufrac/gpufrac/trace"
)

// The trace: Deployment "llm" with two pods (memory 1 GiB and 2 GiB, compute 0.25
// and 0.5 then 0.75 and 0), Deployment "img" with one pod that starts one step late;
// samples every minute for 3 minutes from traceStart.
var traceStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const traceCSV = `timestamp,namespace,pod,container,memory_bytes,compute_ratio
1767225600,ml,llm-7c9f5d4b8d-hhhhh,server,1073741824,0.25
1767225660,ml,llm-7c9f5d4b8d-hhhhh,server,1073741824,0.75
1767225720,ml,llm-7c9f5d4b8d-hhhhh,server,1073741824,0.25
1767225600,ml,llm-7c9f5d4b8d-jjjjj,server,2147483648,0.5
1767225660,ml,llm-7c9f5d4b8d-jjjjj,server,2147483648,0
1767225720,ml,llm-7c9f5d4b8d-jjjjj,server,2147483648,0.5
1767225660,ml,img-6b8c4f7d9c-mmmmm,gen,536870912,1
1767225720,ml,img-6b8c4f7d9c-mmmmm,gen,536870912,1
`

func readTrace(t *testing.T) trace.Trace {
	t.Helper()
	tr, _, err := trace.ReadLongCSV(strings.NewReader(traceCSV), "test.csv")
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// fakePods is a PodLister over a mutable list.
type fakePods struct {
	mu   sync.Mutex
	pods []*corev1.Pod
}

func (f *fakePods) List() []*corev1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*corev1.Pod(nil), f.pods...)
}

func (f *fakePods) set(p ...*corev1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = p
}

var created = metav1.NewTime(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))

func livePod(name, container string, age int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(created.Add(time.Duration(age) * time.Second))},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: container}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// frame runs one Advance and returns, per live pod name, its fake process's memory,
// SM percent (-1 without a sample) and GPU index.
type procView struct {
	mem uint64
	sm  int
	gpu int
	own agent.Owner
}

func frame(t *testing.T, s *Simulator, now time.Time) map[string]procView {
	t.Helper()
	s.Advance(now)
	lib := s.NVML()
	n, _ := lib.DeviceGetCount()
	out := map[string]procView{}
	for i := 0; i < n; i++ {
		d, _ := lib.DeviceGetHandleByIndex(i)
		ps, ret := d.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		smp, ret := d.GetProcessUtilization(0)
		if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_FOUND {
			t.Fatal(ret)
		}
		for _, p := range ps {
			a := s.Attribute(p.Pid)
			if a.Reason != "" {
				t.Fatalf("pid %d: %s", p.Pid, a.Reason)
			}
			v := procView{mem: p.UsedGpuMemory, sm: -1, gpu: i, own: a.Owner}
			for _, x := range smp {
				if x.Pid == p.Pid {
					v.sm = int(x.SmUtil)
				}
			}
			out[a.Owner.Pod] = v
		}
	}
	return out
}

func TestMappingAndReplay(t *testing.T) {
	pods := &fakePods{}
	// llm has 3 live replicas (one more than the trace), img has one whose name
	// matches nothing, and "other" is not in the trace; a Pending pod is ignored.
	pending := livePod("llm-5f6d7c8b9-ppppp", "server", 9)
	pending.Status.Phase = corev1.PodPending
	pods.set(
		livePod("llm-5f6d7c8b9-zzzzz", "server", 1),
		livePod("llm-5f6d7c8b9-xxxxx", "server", 2),
		livePod("llm-5f6d7c8b9-kkkkk", "server", 3),
		livePod("img-7d8f9b6c5-qqqqq", "main", 1),
		livePod("other-6c7d8f9b4-rrrrr", "main", 1),
		pending,
	)
	s, err := New(Config{Trace: readTrace(t), Loop: true, GPUs: 2}, pods)
	if err != nil {
		t.Fatal(err)
	}
	wall := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f := frame(t, s, wall)
	// Assignment by creation time: zzzzz → trace pod hhhhh, xxxxx → jjjjj, kkkkk →
	// hhhhh again (least assigned, first in trace order).
	want := map[string]uint64{"llm-5f6d7c8b9-zzzzz": 1 << 30, "llm-5f6d7c8b9-xxxxx": 2 << 30, "llm-5f6d7c8b9-kkkkk": 1 << 30}
	if len(f) != 3 {
		t.Fatalf("frame = %+v; want the 3 llm pods (img's trace pod starts one minute in)", f)
	}
	for pod, mem := range want {
		if f[pod].mem != mem {
			t.Errorf("%s memory %d, want %d", pod, f[pod].mem, mem)
		}
	}
	if f["llm-5f6d7c8b9-zzzzz"].sm != 25 || f["llm-5f6d7c8b9-xxxxx"].sm != 50 {
		t.Errorf("sm = %+v", f)
	}
	// GPUs round-robin: pods share the 2 GPUs.
	if f["llm-5f6d7c8b9-zzzzz"].gpu == f["llm-5f6d7c8b9-xxxxx"].gpu {
		t.Errorf("gpus = %+v", f)
	}

	// One minute in (at speed 1): img starts, on its live pod's container "main";
	// jjjjj's compute is 0, so no sample (idle).
	f = frame(t, s, wall.Add(time.Minute))
	if v := f["img-7d8f9b6c5-qqqqq"]; v.mem != 512<<20 || v.sm != 100 || v.own.Container != "main" {
		t.Errorf("img = %+v", v)
	}
	if v := f["llm-5f6d7c8b9-xxxxx"]; v.sm != -1 {
		t.Errorf("idle pod has a sample: %+v", v)
	}
	if f["llm-5f6d7c8b9-zzzzz"].sm != 75 {
		t.Errorf("zzzzz = %+v", f["llm-5f6d7c8b9-zzzzz"])
	}
	if err := testutil.CollectAndCompare(s, strings.NewReader(`# HELP gpufrac_agent_simulate_trace_pods Trace pods by state: mapped (replayed by at least one live pod) or unmapped (no Running pod of their Deployment left for them).
# TYPE gpufrac_agent_simulate_trace_pods gauge
gpufrac_agent_simulate_trace_pods{state="mapped"} 3
gpufrac_agent_simulate_trace_pods{state="unmapped"} 0
# HELP gpufrac_agent_simulate_unmapped_live_pods Running pods whose Deployment has no pod in the trace; they get no simulated GPU process.
# TYPE gpufrac_agent_simulate_unmapped_live_pods gauge
gpufrac_agent_simulate_unmapped_live_pods 1
# HELP gpufrac_agent_simulate_processes Simulated GPU processes in the current frame.
# TYPE gpufrac_agent_simulate_processes gauge
gpufrac_agent_simulate_processes 4
`), "gpufrac_agent_simulate_trace_pods", "gpufrac_agent_simulate_unmapped_live_pods", "gpufrac_agent_simulate_processes"); err != nil {
		t.Error(err)
	}

	// A replacement: xxxxx goes away, a new pod takes over its trace pod jjjjj; the
	// surviving pods keep theirs (and their PIDs).
	pidBefore := pidOf(t, s, "llm-5f6d7c8b9-zzzzz")
	pods.set(
		livePod("llm-5f6d7c8b9-zzzzz", "server", 1),
		livePod("llm-5f6d7c8b9-kkkkk", "server", 3),
		livePod("llm-5f6d7c8b9-wwwww", "server", 100),
		livePod("img-7d8f9b6c5-qqqqq", "main", 1),
	)
	f = frame(t, s, wall.Add(2*time.Minute))
	if f["llm-5f6d7c8b9-wwwww"].mem != 2<<30 || f["llm-5f6d7c8b9-kkkkk"].mem != 1<<30 {
		t.Errorf("after replacement: %+v", f)
	}
	if pidOf(t, s, "llm-5f6d7c8b9-zzzzz") != pidBefore {
		t.Error("a surviving pod's PID changed")
	}
	if a := s.Attribute(pidBefore + 1000); a.Reason != agent.ReasonGone {
		t.Errorf("unknown pid: %+v", a)
	}

	// Loop: the trace is 3 minutes long (span 3m incl. the last step); at 3m the
	// replay is back at the start, where img has no sample yet.
	f = frame(t, s, wall.Add(3*time.Minute))
	if _, ok := f["img-7d8f9b6c5-qqqqq"]; ok {
		t.Errorf("img present at the loop's start: %+v", f)
	}
	if got := s.ReplayTime(wall.Add(3*time.Minute + 30*time.Second)); !got.Equal(traceStart.Add(30 * time.Second)) {
		t.Errorf("replay time = %s", got)
	}
}

func pidOf(t *testing.T, s *Simulator, pod string) uint32 {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for pid, o := range s.owners {
		if o.Pod == pod {
			return pid
		}
	}
	t.Fatalf("no pid for %s", pod)
	return 0
}

// TestExactNameAndHold: a live pod with a trace pod's exact name replays it; without
// looping the replay stays at the end; Hold limits how long a sample is valid.
func TestExactNameAndHold(t *testing.T) {
	pods := &fakePods{}
	pods.set(livePod("llm-7c9f5d4b8d-jjjjj", "server", 1))
	s, err := New(Config{Trace: readTrace(t), Speed: 60, GPUs: 1}, pods)
	if err != nil {
		t.Fatal(err)
	}
	wall := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if f := frame(t, s, wall); f["llm-7c9f5d4b8d-jjjjj"].mem != 2<<30 {
		t.Errorf("exact name: %+v", f)
	}
	// Speed 60: one wall second is one trace minute; after 10 s the replay holds at
	// the last sample (2 minutes in), compute 0.5.
	if f := frame(t, s, wall.Add(10*time.Second)); f["llm-7c9f5d4b8d-jjjjj"].sm != 50 {
		t.Errorf("held end: %+v", f)
	}
	if got := s.ReplayTime(wall.Add(10 * time.Second)); !got.Equal(traceStart.Add(2 * time.Minute)) {
		t.Errorf("replay time = %s", got)
	}

	if _, ok := valueAt([]trace.Point{{T: traceStart, V: 1}}, traceStart.Add(3*time.Minute+time.Second), 3*time.Minute); ok {
		t.Error("value held past Hold")
	}
	if v, ok := valueAt([]trace.Point{{T: traceStart, V: 1}}, traceStart.Add(3*time.Minute), 3*time.Minute); !ok || v != 1 {
		t.Error("value not held within Hold")
	}
}

// TestAgentOverSimulator runs the agent's Sampler, unchanged, over the simulator and
// checks the per-pod metrics carry the live pod names.
func TestAgentOverSimulator(t *testing.T) {
	pods := &fakePods{}
	pods.set(livePod("llm-5f6d7c8b9-zzzzz", "server", 1), livePod("llm-5f6d7c8b9-xxxxx", "server", 2))
	s, err := New(Config{Trace: readTrace(t), Loop: true, GPUs: 1, Seed: "node-a"}, pods)
	if err != nil {
		t.Fatal(err)
	}
	wall := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := wall
	smp := agent.NewSampler(s.NVML(), s, agent.Config{Interval: 10 * time.Second, Mode: agent.ModeSimulate, BeforeCycle: s.Advance, Now: func() time.Time { return now }})
	if err := smp.Init(); err != nil {
		t.Fatal(err)
	}
	smp.SampleOnce(now)
	now = wall.Add(10 * time.Second)
	smp.SampleOnce(now)
	uuid := fakeUUID("node-a", 0)
	want := fmt.Sprintf(`# HELP gpufrac_pod_gpu_memory_used_bytes GPU memory used by the container's processes on this GPU or MIG instance (NVML per-process usedGpuMemory, summed), bytes.
# TYPE gpufrac_pod_gpu_memory_used_bytes gauge
gpufrac_pod_gpu_memory_used_bytes{GPU_I_ID="",UUID="%[1]s",container="server",gpu="0",namespace="ml",pod="llm-5f6d7c8b9-xxxxx"} 2.147483648e+09
gpufrac_pod_gpu_memory_used_bytes{GPU_I_ID="",UUID="%[1]s",container="server",gpu="0",namespace="ml",pod="llm-5f6d7c8b9-zzzzz"} 1.073741824e+09
# HELP gpufrac_pod_gpu_sm_utilization_ratio Share of the sampling interval the GPU's SMs ran the container's kernels (NVML per-process SmUtil / 100, summed, capped at 1), ratio 0-1. Absent for MIG instances.
# TYPE gpufrac_pod_gpu_sm_utilization_ratio gauge
gpufrac_pod_gpu_sm_utilization_ratio{GPU_I_ID="",UUID="%[1]s",container="server",gpu="0",namespace="ml",pod="llm-5f6d7c8b9-xxxxx"} 0.5
gpufrac_pod_gpu_sm_utilization_ratio{GPU_I_ID="",UUID="%[1]s",container="server",gpu="0",namespace="ml",pod="llm-5f6d7c8b9-zzzzz"} 0.25
# HELP gpufrac_gpu_memory_used_bytes Framebuffer memory in use on the GPU or MIG instance by any process (nvmlDeviceGetMemoryInfo used), bytes.
# TYPE gpufrac_gpu_memory_used_bytes gauge
gpufrac_gpu_memory_used_bytes{GPU_I_ID="",GPU_I_PROFILE="",UUID="%[1]s",gpu="0",modelName="NVIDIA H100 80GB HBM3"} 3.221225472e+09
# HELP gpufrac_agent_up 1 when NVML is initialised and the last sampling cycle (not stale) enumerated the GPUs, else 0.
# TYPE gpufrac_agent_up gauge
gpufrac_agent_up 1
# HELP gpufrac_agent_info Always 1: the agent's mode (nvml or simulate) and the NVIDIA driver version.
# TYPE gpufrac_agent_info gauge
gpufrac_agent_info{driver_version="simulated",mode="simulate"} 1
`, uuid)
	if err := testutil.CollectAndCompare(smp, strings.NewReader(want), agent.MetricPodMemoryUsed, agent.MetricPodSMUtilization, agent.MetricGPUMemoryUsed, agent.MetricUp, agent.MetricInfo); err != nil {
		t.Error(err)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Config{}, &fakePods{}); err == nil {
		t.Error("empty trace accepted")
	}
	if _, err := New(Config{Trace: readTrace(t), Speed: -1}, &fakePods{}); err == nil {
		t.Error("negative speed accepted")
	}
	if got := medianStep(readTrace(t)); got != time.Minute {
		t.Errorf("median step %s", got)
	}
	if wl, ok := workloadOf(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "odd_name",
		Labels:          map[string]string{"pod-template-hash": "abc"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-abc"}}}}); !ok || wl != "web" {
		t.Errorf("workloadOf = %q %v", wl, ok)
	}
}
