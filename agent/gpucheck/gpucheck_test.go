//go:build gpucheck

// Package gpucheck checks the agent against a real GPU: a CUDA process with a known
// footprint (testdata/cudaalloc.c) must be reported with its memory within 5% and a busy SM
// utilisation. Run it with run.sh on a machine with an NVIDIA GPU and driver; see
// README.md.
package gpucheck

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpufrac/gpufrac/agent"
)

// Owner the check attributes the CUDA process to (there is no pod).
var owner = agent.Owner{Namespace: "gpucheck", Pod: "cudaalloc", Container: "main"}

// childAttributor attributes the CUDA child to owner and reports every other PID
// through the real /proc reader (host processes on a bare machine).
type childAttributor struct {
	pid  uint32
	real agent.Attributor
	seen map[uint32]agent.Attribution
}

func (a *childAttributor) Attribute(pid uint32) agent.Attribution {
	r := a.real.Attribute(pid)
	a.seen[pid] = r
	if pid == a.pid {
		return agent.Attribution{Owner: owner}
	}
	return r
}

type noPods struct{}

func (noPods) LookupContainer(string) (agent.Owner, bool)        { return agent.Owner{}, false }
func (noPods) LookupPod(string) (string, string, []string, bool) { return "", "", nil, false }

func envInt(t *testing.T, name string, def uint64) uint64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

func TestAgentReportsCUDAProcess(t *testing.T) {
	bin := os.Getenv("GPUCHECK_BIN")
	if bin == "" {
		t.Skip("GPUCHECK_BIN (the built cudaalloc) not set; run run.sh")
	}
	bytes := envInt(t, "GPUCHECK_BYTES", 32<<30)
	device := envInt(t, "GPUCHECK_DEVICE", 0)

	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if os.Getenv("GPUCHECK_REQUIRE") != "" {
			t.Fatalf("nvmlInit: %v", ret)
		}
		t.Skipf("no NVML here: %v", ret)
	}
	defer lib.Shutdown()
	driver, _ := lib.SystemGetDriverVersion()
	t.Logf("driver %s", driver)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, strconv.FormatUint(bytes, 10), "60", strconv.FormatUint(device, 10))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "READY") {
				ready <- sc.Text()
			}
		}
		close(ready)
	}()
	select {
	case line, ok := <-ready:
		if !ok {
			t.Fatal("cudaalloc exited before READY")
		}
		t.Log(line)
	case <-time.After(60 * time.Second):
		t.Fatal("cudaalloc not READY after 60s")
	}
	pid := uint32(cmd.Process.Pid)

	attr := &childAttributor{pid: pid, real: &agent.ProcAttributor{ProcRoot: "/proc", Pods: noPods{}}, seen: map[uint32]agent.Attribution{}}
	s := agent.NewSampler(lib, attr, agent.Config{Interval: 2 * time.Second, NVMLRequired: true})
	// Let the driver accumulate utilisation samples, then sample twice: the first
	// cycle reads the last interval, the second exactly the samples since.
	time.Sleep(3 * time.Second)
	s.SampleOnce(time.Now())
	time.Sleep(2 * time.Second)
	s.SampleOnce(time.Now())
	snap := s.Snapshot()
	t.Logf("cycle took %s; %d devices, %d usages, unattributed %v, real attribution of the child: %+v",
		snap.Duration, len(snap.Devices), len(snap.Usage), snap.Unattributed, attr.seen[pid])
	for _, d := range snap.Devices {
		t.Logf("device %d %s %q MIG=%v GI=%d memory %d/%d util supported %v", d.Index, d.UUID, d.Model, d.MIG, d.GPUInstanceID, d.MemoryUsedBytes, d.MemoryTotalBytes, d.UtilizationSupported)
	}

	var u *agent.Usage
	for i := range snap.Usage {
		if snap.Usage[i].Owner == owner {
			u = &snap.Usage[i]
		}
	}
	if u == nil {
		t.Fatalf("the CUDA process (pid %d) is not reported; usage %+v", pid, snap.Usage)
	}
	if !u.MemoryKnown {
		t.Fatalf("memory of the CUDA process not available (MIG without privileges?)")
	}
	rel := (float64(u.MemoryBytes) - float64(bytes)) / float64(bytes)
	t.Logf("reported %d bytes for %d allocated: %+.2f%% (includes the CUDA context)", u.MemoryBytes, bytes, rel*100)
	if math.Abs(rel) > 0.05 {
		t.Errorf("reported memory %d is %.2f%% off the %d allocated; want within 5%%", u.MemoryBytes, rel*100, bytes)
	}
	if ref, ok := nvidiaSMIMemory(t, pid); ok {
		if d := math.Abs(float64(u.MemoryBytes)-float64(ref)) / float64(ref); d > 0.01 {
			t.Errorf("reported memory %d differs from nvidia-smi's %d by %.2f%%", u.MemoryBytes, ref, d*100)
		}
	}
	if u.SMKnown {
		t.Logf("SM utilisation %.2f", u.SMRatio)
		if u.SMRatio < 0.5 {
			t.Errorf("SM utilisation %.2f of a continuously running kernel; want >= 0.5", u.SMRatio)
		}
	} else if !u.Device.MIG {
		t.Errorf("no SM utilisation on a non-MIG GPU")
	}
	// And through the collector, as Prometheus sees it.
	if n := testutil.CollectAndCount(s, agent.MetricPodMemoryUsed); n < 1 {
		t.Errorf("%s not exported", agent.MetricPodMemoryUsed)
	}
}

// nvidiaSMIMemory is nvidia-smi's per-process used memory of pid (MiB → bytes).
func nvidiaSMIMemory(t *testing.T, pid uint32) (uint64, bool) {
	out, err := exec.Command("nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits").Output()
	if err != nil {
		t.Logf("nvidia-smi not usable: %v", err)
		return 0, false
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, ",")
		if len(f) != 2 || strings.TrimSpace(f[0]) != fmt.Sprint(pid) {
			continue
		}
		mib, err := strconv.ParseUint(strings.TrimSpace(f[1]), 10, 64)
		if err != nil {
			return 0, false
		}
		t.Logf("nvidia-smi: pid %d uses %d MiB", pid, mib)
		return mib << 20, true
	}
	t.Logf("nvidia-smi lists no pid %d:\n%s", pid, out)
	return 0, false
}
